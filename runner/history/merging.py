"""Merging run records into the history: copying the run directories it does not have yet.

A run record never changes once written, so merging is copying. The records of the shards
of a sharded run (`shard` set) are not copied: `ootci shards merge` makes the one record of
that run, which is. Bisections are merged with the runs of their steps.

A publisher names what its own workflow run can have made (`Accepted`): the code a pull request
runs in its jobs can upload artifacts into that run, so a record whose trigger or PR is not the
run's own was not made by the run's ootci and is refused, never merged.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from ootci.runner.core import atomic
from ootci.runner.core.errors import UsageError
from ootci.runner.history import history_store
from ootci.runner.models import BisectRecord, RunRecord
from ootci.runner.records import record_files

TRIGGERS = ("manual", "nightly", "pr")
"""What `ootci run --trigger` records: a run by hand, a night, a PyTorch PR."""
BISECTIONS_ONLY = "bisections"
"""--accept-trigger of a publisher that makes bisections and no run (nightly.yml's publish-bisections):
a run record among its artifacts, beside a bisection's directory, is someone else's"""


@dataclass(frozen=True)
class Accepted:
    """The records a publishing workflow run can have made. `triggers`: theirs (empty: any); `pr`: the
    PR a PR run tested, whose records alone it publishes, and no bisection (a PR run makes none)."""

    triggers: frozenset[str] = frozenset()
    pr: int | None = None
    runs: bool = True

    def refusal(self, record: RunRecord) -> str | None:
        """Why `record` cannot be this run's, or None."""
        if not self.runs:
            return "it is a run, and this run publishes only bisections"
        if self.triggers and record.trigger not in self.triggers:
            return f"its trigger is {record.trigger!r}, and this run publishes {', '.join(sorted(self.triggers))} runs"
        if self.pr is not None and record.pr != self.pr:
            tested = f"PR #{record.pr}" if record.pr else "no PR"
            return f"it is a run of {tested}, and this run publishes PR #{self.pr}'s"
        return None

    @property
    def bisections(self) -> bool:
        return self.pr is None


ANY = Accepted()


def merge(sources: list[Path], into: Path, missing_ok: bool = False,
          accepted: Accepted = ANY) -> dict[str, list[str]]:
    """Add new run directories to the history `into` (see history_store: the header and packed
    tests, no logs); returns run ids by what happened to them (`refused`: "<directory>: <why>")."""
    outcome: dict[str, list[str]] = {"added": [], "present": [], "rejected": [], "shards": [], "refused": []}
    into.mkdir(parents=True, exist_ok=True)
    for source in sources:
        if missing_ok and not source.exists():
            continue
        if not source.is_dir():
            raise UsageError(f"history merge: {source} is not a directory")
        for run_dir, record in record_files.find_runs(source):
            if run_dir.resolve().is_relative_to(into.resolve()):
                continue
            if record is None or record.run_id != run_dir.name:
                # A directory named otherwise would shadow or collide with another run.
                outcome["rejected"].append(str(run_dir))
                continue
            if record.shard:
                # One shard of a sharded run: `ootci shards merge` makes the run's record of them.
                outcome["shards"].append(str(run_dir))
                continue
            if why := accepted.refusal(record):
                outcome["refused"].append(f"{run_dir}: {why}")
                continue
            target = into / record.run_id
            if target.exists():
                outcome["present"].append(record.run_id)
                continue
            try:
                history_store.add_run(run_dir, target)
            except (OSError, ValueError) as exc:
                # Its tests.json does not load: the run cannot be kept as the history keeps runs.
                outcome["rejected"].append(f"{run_dir} ({str(exc).splitlines()[0][:200]})")
                continue
            outcome["added"].append(record.run_id)
    return outcome


def copy_in(source: Path, target: Path) -> None:
    """`source` copied to `target` (replacing it) beside it first, then renamed into place:
    the history never holds half a run or half a bisection."""
    with atomic.directory(target) as staging:
        shutil.copytree(source, staging, dirs_exist_ok=True)


def merge_bisections(sources: list[Path], into: Path, accepted: Accepted = ANY) -> dict[str, list[str]]:
    """Copy bisection directories (`<bisect_id>/bisect.json` and its steps) into `into`. A bisection
    is rewritten while it runs: a copy that has more steps, or has finished, replaces the one held."""
    outcome: dict[str, list[str]] = {"added": [], "updated": [], "present": [], "rejected": [], "refused": []}
    for source in sources:
        if not source.is_dir():
            continue
        for path in sorted(source.rglob(record_files.BISECT_NAME)):
            if path.parent.resolve().is_relative_to(into.resolve()):
                continue
            if not accepted.bisections:
                outcome["refused"].append(f"{path.parent}: a bisection, and this run publishes runs of PR "
                                          f"#{accepted.pr} only")
                continue
            try:
                new = BisectRecord.model_validate_json(path.read_bytes())
            except (OSError, ValueError, ValidationError):
                new = None
            if new is None or new.bisect_id != path.parent.name:
                outcome["rejected"].append(str(path.parent))
                continue
            target = into / new.bisect_id
            held = None
            if (target / record_files.BISECT_NAME).is_file():
                try:
                    held = BisectRecord.model_validate_json((target / record_files.BISECT_NAME).read_bytes())
                except (OSError, ValueError, ValidationError):
                    held = None
                if held is not None and (held.state == "finished" or held.steps_taken() >= new.steps_taken()):
                    outcome["present"].append(new.bisect_id)
                    continue
            copy_in(path.parent, target)
            outcome["updated" if held is not None else "added"].append(new.bisect_id)
    return outcome
