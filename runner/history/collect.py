"""Collecting the run records of a workflow's recent runs from their artifacts (`ootci history collect`).

The collector does not wait for a nightly's slowest backend: it lists the runs created in
the last hours, finished or not, downloads each `ootci-run-*` artifact not collected before
and unpacks it for `ootci history merge`. What has been collected is kept with the history,
one marker file per artifact (`<history>/collected/<day>/<artifact id>.json`), committed with
the records it brought.

A record proves where it came from before it is taken (docs/workflows.md, "The trust boundary"):
anyone can open a pull request that edits the workflow file, and GitHub then runs the PR's copy,
which can upload artifacts with any name and any record in them. So only runs of the workflow file
itself, started by a trusted event (`schedule`, `workflow_dispatch`), of this repository's default
branch and of this repository (not a fork) are read, and an artifact is taken only when every record
in it is of the backend its name says, and a job of that backend said, in its own annotations (which
no other job can write), that it uploaded exactly this artifact: its name and its digest (`ootci
history attest`, after the upload). Vendor A's code runs in the same workflow run as vendor B's and
can upload an artifact of any name; it cannot speak for B's job.

A sharded backend's record is made by its merge job from its shards' artifacts (`ootci-shard-*`),
which that job downloads by name: it cannot read annotations (that needs `checks: read`, which
every vendor calling backend.yml would have to grant). So a merged record is taken only when every
shard artifact of the run that may be its backend's was attested by a job of the backend its name
says: where A uploaded a shard of B under B's name first, B's shard went up under a name of its own,
the merge took A's, and the collector refuses B's merged record instead of publishing A's results.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ootci.runner.core import atomic
from ootci.runner.core.errors import GitError, GitHubError, UsageError
from ootci.runner.core.git import git
from ootci.runner.history.github_artifacts import Artifact, Claim, GitHub, RefusedArchive, WorkflowRun, extract
from ootci.runner.models import RunRecord
from ootci.runner.records import record_files

LEDGER = "collected"
"""directory of the history checkout holding a marker per collected artifact"""
DEFAULT_PREFIX = "ootci-run-"
SHARD_PREFIX = "ootci-shard-"
"""the artifacts of a sharded backend's shard jobs, which its merge job makes one record of (backend.yml)"""
DEFAULT_SINCE_HOURS = 36.0
GIT_TIMEOUT_S = 120
TRUSTED_EVENTS = ("schedule", "workflow_dispatch")
"""what starts a nightly: nobody outside the repository can start either"""


@dataclass
class Collected:
    """What one collect did, artifact by artifact (`name (id)`)."""

    runs: int = 0
    untrusted: list[str] = field(default_factory=list)
    """runs not read, each with why (`run 123: its event is pull_request`)"""
    collected: list[str] = field(default_factory=list)
    already: int = 0
    expired: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


def _day(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%d")


def window_days(cutoff: dt.datetime, now: dt.datetime) -> list[str]:
    """The days whose markers can name an artifact of the runs listed: those created since cutoff."""
    first, last = cutoff.astimezone(dt.UTC).date(), now.astimezone(dt.UTC).date()
    return [(first + dt.timedelta(days=i)).isoformat() for i in range((last - first).days + 1)]


def _ids(names: list[str]) -> set[int]:
    return {int(Path(name).stem) for name in names if name.endswith(".json") and Path(name).stem.isdigit()}


def committed_markers(history: Path, days: list[str]) -> set[int]:
    """The artifact ids marked in the checkout's commit, from git's trees: a partial pull leaves
    the markers out of the working tree. Nothing when it is no git checkout or has no commit yet
    (then what is new is downloaded once more, and `ootci history merge` finds its runs present)."""
    paths = [f"{LEDGER}/{day}" for day in days]
    try:
        listed = git(history, "ls-tree", "-r", "--name-only", "HEAD", "--", *paths, timeout=GIT_TIMEOUT_S)
    except GitError:
        return set()  # no checkout, no commit yet, or no git: nothing is known to be collected
    return _ids(listed.splitlines())


def known_ids(into: Path, history: Path | None, days: list[str]) -> set[int]:
    """Artifacts collected before: marked in the history (committed or written since), or already
    unpacked in `into`."""
    found = {int(p.name) for p in into.iterdir() if p.is_dir() and p.name.isdigit()} if into.is_dir() else set()
    if history is not None:
        found |= committed_markers(history, days)
        found |= _ids([str(p) for day in days for p in (history / LEDGER / day).glob("*.json")])
    return found


def mark(history: Path, artifact: Artifact, run: WorkflowRun, outcome: str) -> None:
    atomic.write_text(history / LEDGER / _day(run.created_at) / f"{artifact.id}.json", json.dumps({
        "artifact": artifact.name, "workflow_run": run.id,
        "run_created_at": run.created_at.strftime("%Y-%m-%dT%H:%M:%SZ"), "outcome": outcome,
    }, indent=2) + "\n")


def untrusted(run: WorkflowRun, *, workflow: str, repository: str, branch: str) -> str | None:
    """Why `run` cannot have been made by this repository's own `workflow` on its default branch, or None."""
    if run.event not in TRUSTED_EVENTS:
        return f"its event is {run.event or 'not given'} (only {' and '.join(TRUSTED_EVENTS)} runs are read)"
    if run.head_repository != repository:
        return f"its code came from {run.head_repository or 'an unnamed repository'}, not {repository}"
    if run.head_branch != branch:
        return f"it ran branch {run.head_branch or '(none)'}, not the default branch {branch}"
    # A file name is checked against the path the run ran; a workflow's numeric id names that file already.
    if not workflow.isdigit() and run.path.split("@", 1)[0] != f".github/workflows/{workflow}":
        return f"it ran {run.path or 'no workflow file'}, not .github/workflows/{workflow}"
    return None


def backend_of_name(name: str, prefix: str, backend: str) -> bool:
    """Whether an artifact named `name` is one a job of `backend` uploads: `<prefix><backend>-<rest>`."""
    return name.startswith(f"{prefix}{backend}-")


def job_backend(job_name: str) -> str:
    """The backend a job is for, from its name: `backend (...) / <backend>[ (merge of N shards)]` in the
    nightly (a called workflow's job is named `<caller job> / <job>`), the backend alone when called directly."""
    return job_name.rsplit(" / ", 1)[-1].split(" (", 1)[0]


def unattested(artifact: Artifact, claims: dict[str, list[Claim]], prefix: str) -> str | None:
    """Why no job of the artifact's backend can have uploaded `artifact`, or None."""
    said = claims.get(artifact.name, [])
    own = [c for c in said if backend_of_name(artifact.name, prefix, job_backend(c.job))]
    if not own:
        others = ", ".join(sorted({c.job for c in said}))
        by = f" (only {others} did, and its name is not that backend's)" if said else ""
        return f"no job of its backend said it uploaded it{by}"
    if not artifact.digest or all(c.digest != artifact.digest for c in own):
        return (f"its digest {artifact.digest or '(none listed)'} is not the one job {own[0].job!r} said it "
                f"uploaded ({own[0].digest})")
    return None


def foreign_records(unpacked: Path, runs: list[tuple[Path, RunRecord | None]], name: str, prefix: str) -> str | None:
    """Why the records unpacked from the artifact `name` (`runs`, found under `unpacked`) are not all of the
    backend its name says, or None."""
    if not runs:
        return "it holds no run record"
    for run_dir, record in runs:
        if record is None:
            return f"{run_dir.relative_to(unpacked)}/{record_files.RECORD_NAME} does not load"
        if not backend_of_name(name, prefix, record.backend):
            return f"it holds a record of backend {record.backend!r}, and its name is not that backend's"
    return None


def unattested_shards(runs: list[tuple[Path, RunRecord | None]], artifacts: list[Artifact],
                      claims: dict[str, list[Claim]]) -> str | None:
    """Why a merged record among `runs` may hold a shard no job of its backend made, or None: a shard
    artifact of the run, named as its backend's shards are, that no job of the backend its name says
    attested. An unmerged record (no shard group, or one shard) is not asked."""
    merged = {record.backend for _, record in runs if record is not None and record.shard_group and not record.shard}
    for artifact in artifacts:
        if not any(backend_of_name(artifact.name, SHARD_PREFIX, backend) for backend in merged):
            continue
        if (why := unattested(artifact, claims, SHARD_PREFIX)) is not None:
            return (f"it is merged from shards, and the run's shard artifact {artifact.name} ({artifact.id}) "
                    f"is none of its backend's: {why}")
    return None


def collect(github: GitHub, workflow: str, *, since_hours: float, into: Path, history: Path | None,
            prefix: str = DEFAULT_PREFIX, now: dt.datetime, branch: str | None = None) -> Collected:
    """Unpack into `into` every artifact named `prefix...` of the trusted runs of `workflow` (see
    `untrusted`; `branch` defaults to the repository's default branch) created in the last
    `since_hours` that was not collected before. An artifact whose listing or download failed is
    left for the next collect (it is in `failed`), the others are still collected."""
    cutoff = now - dt.timedelta(hours=since_hours)
    known = known_ids(into, history, window_days(cutoff, now))
    into.mkdir(parents=True, exist_ok=True)
    outcome = Collected()
    branch = branch or github.default_branch()
    runs = github.workflow_runs(workflow, cutoff)
    outcome.runs = len(runs)
    for run in runs:
        why = untrusted(run, workflow=workflow, repository=github.repository, branch=branch)
        if why:
            outcome.untrusted.append(f"run {run.id}: {why}")
            continue

        def marker(artifact: Artifact, said: str, run: WorkflowRun = run) -> None:
            if history is not None:
                mark(history, artifact, run, said)

        take_run(github, run.id, into=into, prefix=prefix, known=known, outcome=outcome, marker=marker)
    return outcome


def collect_run(github: GitHub, run_id: int, *, into: Path, prefix: str = DEFAULT_PREFIX) -> Collected:
    """Unpack into `into` every artifact named `prefix...` of one run, of every attempt, that a job of
    its backend attested: a nightly's own publish, whose run is the job's own (no event, branch or
    repository to prove), but whose backend jobs ran vendors' code that can upload under any name.
    What `into` holds already (an earlier attempt's publish on the same runner) is not downloaded again."""
    into.mkdir(parents=True, exist_ok=True)
    known = {int(p.name) for p in into.iterdir() if p.is_dir() and p.name.isdigit()}
    outcome = Collected(runs=1)
    take_run(github, run_id, into=into, prefix=prefix, known=known, outcome=outcome)
    return outcome


def take_run(github: GitHub, run_id: int, *, into: Path, prefix: str, known: set[int], outcome: Collected,
             marker: Callable[[Artifact, str], None] = lambda artifact, said: None) -> None:
    """The attested, new `prefix...` artifacts of run `run_id`, each unpacked into `into/<id>/` and told to
    `marker` (`collected` or `refused: <why>`); what failed is left unmarked for the next try."""
    try:
        artifacts = github.artifacts(run_id)
        claims = github.claims(run_id) if any(a.name.startswith(prefix) for a in artifacts) else {}
    except GitHubError as exc:
        outcome.failed.append(exc.message)
        return
    for artifact in artifacts:
        shown = f"{artifact.name} ({artifact.id})"
        if not artifact.name.startswith(prefix):
            continue
        if artifact.id in known:
            outcome.already += 1
            continue
        if artifact.expired:
            outcome.expired.append(shown)
            continue
        archive = into / f".{artifact.id}.zip"
        unpacked = into / str(artifact.id)
        if (why := unattested(artifact, claims, prefix)) is not None:
            # Listed, never downloaded: an artifact never changes, so it is marked and not asked again.
            outcome.refused.append(f"{shown}: {why}")
            marker(artifact, f"refused: {why}")
            continue
        try:
            github.download(artifact, archive)
            extract(archive, unpacked)
            runs = record_files.find_runs(unpacked)
            if (why := foreign_records(unpacked, runs, artifact.name, prefix)
                    or unattested_shards(runs, artifacts, claims)) is not None:
                shutil.rmtree(unpacked)
                raise RefusedArchive(why)
        except GitHubError as exc:
            outcome.failed.append(exc.message)
            continue
        except RefusedArchive as exc:
            # An artifact never changes: marked, so that it is not downloaded again to be refused again.
            outcome.refused.append(f"{shown}: {exc}")
            marker(artifact, f"refused: {exc}")
            continue
        finally:
            archive.unlink(missing_ok=True)
        known.add(artifact.id)
        marker(artifact, "collected")
        outcome.collected.append(shown)


def parse_now(given: str | None) -> dt.datetime:
    if not given:
        return dt.datetime.now(dt.UTC)
    try:
        moment = dt.datetime.fromisoformat(given)
    except ValueError:
        raise UsageError(f"--now: expected an ISO time, got {given!r}") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)
