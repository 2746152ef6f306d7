"""The run history on the data branch: what is kept of a run, for how long, and where.

`ootci run` leaves a run directory: record.json, tests.json, logs and JUnit files. The
history keeps less of it, so that a year of a hundred backends fits a git branch:

- `<run_id>/record.json`: the run's header (counts, notable tests, stages, root causes),
  kept forever;
- `<run_id>/results.json.gz`: its tests packed against a shared test set
  (`.testsets/<fingerprint>.json.gz`, see packed_tests), kept for the results retention
  (`ootci history prune`);
- logs and JUnit files are not kept: they stay in the workflow run's artifacts, which the
  header links to (`ci_run_url`) and GitHub expires after the artifact retention.

Runs enter with `add_run`, which fills the directory beside its place and renames it in
(atomic.directory), so the history never holds half a run.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from ootci.runner.core import atomic
from ootci.runner.models import RunRecord
from ootci.runner.records import packed_tests, record_files

RESULTS_RETENTION_DAYS = 400
"""days a run's test list stays in the history (`ootci history prune`): a year and a release cycle"""
ARTIFACT_RETENTION_DAYS = 30
"""days GitHub keeps a run's artifact (actions/publish-results' retention-days): its logs and JUnit files"""


def add_run(run_dir: Path, target: Path) -> None:
    """The run in run_dir, in the history's form, at target (replacing whatever is there)."""
    record = record_files.read(run_dir / record_files.RECORD_NAME)
    header = record_files.header(record)
    with atomic.directory(target) as staging:
        if record.tests:
            header.tests_file = _store_tests(record, header, staging, target)
        atomic.write_text(staging / record_files.RECORD_NAME, header.model_dump_json(indent=2) + "\n")


def _store_tests(record: RunRecord, header: RunRecord, staging: Path, target: Path) -> str:
    """Write the run's tests into staging; returns the file name the header points to."""
    try:
        rows = packed_tests.testset_rows(record.tests)
        shared = packed_tests.testset_path(target, header.test_ids_hash or "")
        if not _same_set(shared, rows):
            shared.parent.mkdir(exist_ok=True)
            atomic.write_bytes(shared, packed_tests.dumps(rows))
        results = packed_tests.pack(record.run_id, header.test_ids_hash or "", rows, record.tests)
    except packed_tests.PackError:
        # Ids that occur twice, or a set whose suites or ops differ from the stored set of the
        # same ids: such a run keeps its whole test list, as the runner wrote it.
        return record_files.write_tests(staging, record)
    (staging / packed_tests.RESULTS_NAME).write_bytes(packed_tests.dumps(results))
    return packed_tests.RESULTS_NAME


def _same_set(path: Path, rows: list[list]) -> bool:
    """True when path holds exactly these rows; PackError when it holds others under the same name."""
    try:
        held = packed_tests.loads(path.read_bytes())
    except FileNotFoundError:
        return False
    except packed_tests.PackError:
        return False  # a damaged set is written again
    if held != rows:
        raise packed_tests.PackError(f"{path} holds another test set under the same fingerprint")
    return True


# -- what a nightly fetches ---------------------------------------------------------------

PAGED_RUNS = 14
"""runs per backend whose whole directory a nightly fetches: the ones the dashboard gives a page"""
# <backend>-<UTC start>-<random hex>, as runner.records.run_identity.new_run_id names runs
_RUN_DIR = re.compile(r"^(?P<backend>.+)-(?P<stamp>\d{8}T\d{6}Z)-[0-9a-f]+$")


def runs_with_pages(runs: Path, per_backend: int) -> list[str]:
    """The run directories in `runs` whose page the dashboard builds, as it picks them: each
    backend's newest per_backend main-line and PR runs, and, when its newest main-line run is
    red, the last green run and the first red one after it. Told from the directory names
    and the headers (only the headers the choice needs are read)."""
    by_backend: dict[str, list[tuple[str, str]]] = {}
    for entry in runs.iterdir():
        parsed = _RUN_DIR.match(entry.name)
        if parsed:
            by_backend.setdefault(parsed["backend"], []).append((parsed["stamp"], entry.name))
    chosen: list[str] = []
    for named in by_backend.values():
        main: list[str] = []
        prs: list[str] = []
        red: str | None = None  # the oldest red main-line run seen so far, newest first
        settled = False  # the red stretch's start (and the green run before it) is known
        for _, name in sorted(named, reverse=True):
            trigger, status = _trigger_and_status(runs / name)
            if trigger == "pr":
                if len(prs) < per_backend:
                    prs.append(name)
            elif status is not None and status != "missing" and not settled:
                if status in ("passed", "skipped"):
                    if red is not None:
                        chosen += [red, name]
                    settled = True
                else:
                    red = name
            if trigger != "pr" and len(main) < per_backend:
                main.append(name)
            if settled and len(main) == per_backend and len(prs) == per_backend:
                break
        else:
            if red is not None and not settled:
                chosen.append(red)  # red since its first run: that run starts the stretch
        chosen += main + prs
    return sorted(set(chosen))


def _trigger_and_status(run_dir: Path) -> tuple[str | None, str | None]:
    try:
        header = json.loads((run_dir / record_files.RECORD_NAME).read_bytes())
        return header.get("trigger", "manual"), header.get("status")
    except (OSError, ValueError, AttributeError):
        return None, None


def sparse_patterns(runs_dir: str, fetched: list[str]) -> list[str]:
    """git sparse-checkout patterns (non-cone) for a history: every header and bisection, the
    test sets, and the whole directories of the `fetched` runs."""
    base = "/" + runs_dir.strip("/")
    # `<dir>/*`, not `<dir>/`: a pattern for directories only makes git stat every path once per
    # pattern (43 s instead of 2 s for a year of 100 backends, see docs/history.md).
    return [f"{base}/*/{record_files.RECORD_NAME}", f"{base}/*/{record_files.BISECT_NAME}",
            f"{base}/{packed_tests.TESTSETS_DIR}/", *(f"{base}/{name}/*" for name in fetched)]


# -- retention ------------------------------------------------------------------------

@dataclass
class Pruned:
    """What `prune` removed."""

    results: list[str] = field(default_factory=list)  # run ids whose test lists went
    testsets: list[str] = field(default_factory=list)  # fingerprints no run refers to any more
    leftovers: int = 0  # files of older layouts (logs, JUnit, raw retries) removed
    repacked: list[str] = field(default_factory=list)  # run ids whose tests.json was packed
    bytes: int = 0


def prune(runs: Path, *, keep_results_days: int, now: dt.datetime) -> Pruned:
    """Apply the retention policy to the history in `runs`.

    Headers stay forever. The test lists of runs that started more than keep_results_days
    before `now` go (the header keeps the counts and notable tests, and says when its list
    went); so do test sets no remaining list uses, and any logs, JUnit or retry files an
    older history kept in run directories. A kept run whose tests are still a tests.json (an
    older history) is packed.
    """
    pruned = Pruned()
    cutoff = now - dt.timedelta(days=keep_results_days)
    in_use: set[str] = set()
    for record_path in sorted(runs.glob(f"*/{record_files.RECORD_NAME}")):
        run_dir = record_path.parent
        try:
            record = record_files.read(record_path, with_tests=False)
        except (OSError, ValueError):
            continue  # not ours to judge: `ootci dashboard build` names what is wrong with it
        for extra in sorted(run_dir.iterdir()):
            if extra.name not in (record_files.RECORD_NAME, packed_tests.RESULTS_NAME, record_files.TESTS_NAME,
                                  record_files.TESTS_GZ_NAME):
                pruned.bytes += _remove(extra)
                pruned.leftovers += 1
        if record.tests_file is None:
            continue
        if _aware(record.started_at) >= cutoff:
            if record.tests_file in (record_files.TESTS_NAME, record_files.TESTS_GZ_NAME) and \
                    (run_dir / record.tests_file).is_file():
                # Written before the packed form: packed now, so an old history shrinks too.
                before = _size(run_dir)
                try:
                    add_run(run_dir, run_dir)
                    record = record_files.read(record_path, with_tests=False)
                except (OSError, ValueError):
                    continue  # its tests do not load: left as it is, the dashboard says why
                pruned.bytes += max(before - _size(run_dir), 0)
                pruned.repacked.append(record.run_id)
            if record.test_ids_hash and record.tests_file == packed_tests.RESULTS_NAME:
                in_use.add(record.test_ids_hash)
            continue
        tests_file = record.tests_file
        if tests_file is None or not (run_dir / tests_file).is_file():
            # Not checked out (a partial pull): the header must go on naming the list it has.
            continue
        pruned.bytes += _remove(run_dir / tests_file)
        record.tests_file, record.tests_pruned_at = None, now
        atomic.write_text(record_path, record.model_dump_json(indent=2) + "\n")
        pruned.results.append(record.run_id)
    for held in sorted((runs / packed_tests.TESTSETS_DIR).glob("*.json.gz")):
        if held.name.removesuffix(".json.gz") not in in_use:
            pruned.bytes += _remove(held)
            pruned.testsets.append(held.name.removesuffix(".json.gz"))
    return pruned


def _aware(moment: dt.datetime) -> dt.datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.UTC)


def _size(directory: Path) -> int:
    return sum(f.stat().st_size for f in directory.iterdir() if f.is_file())


def _remove(path: Path) -> int:
    if path.is_dir() and not path.is_symlink():
        size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
        shutil.rmtree(path)
        return size
    try:
        size = path.lstat().st_size
        os.unlink(path)
        return size
    except FileNotFoundError:
        return 0
