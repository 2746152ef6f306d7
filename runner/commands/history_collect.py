"""`ootci history collect`: the run records of a workflow's recent runs, taken from their artifacts.

A nightly's `publish` job waits for every backend job, and a job whose runner label has
no online runner stays queued for up to a day, holding every other backend's results with
it. The collector does not wait: on its own schedule (collect.yml) it lists the runs of the
workflow created in the last --since hours, finished or not, downloads each `ootci-run-*`
artifact that was not collected before, and unpacks it into DIR/<artifact id>/ for
`ootci history merge` to add to the history.

What has been collected is kept with the history (--history), one marker file per artifact,
`<history>/collected/<day the run was created>/<artifact id>.json`, committed together with the
records it brought: each collect downloads only what is new, a collect whose push failed
downloads it again, and markers are new files, so concurrent pushes replay onto each other
cleanly. A partial pull (`ootci history pull`) checks out only the runs, so the markers are
read from git's trees (names only, no file is fetched), and only the days of the window.
Without --history, the directories already in DIR are what has been collected.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from ootci.runner.core import atomic
from ootci.runner.core.errors import GitError, GitHubError, OutputError, UsageError
from ootci.runner.core.git import git
from ootci.runner.history.github_artifacts import REPOSITORY_ENV, Artifact, GitHub, RefusedArchive, WorkflowRun, extract
from ootci.runner.core.http import Retry

LEDGER = "collected"
"""directory of the history checkout holding a marker per collected artifact"""
DEFAULT_PREFIX = "ootci-run-"
DEFAULT_SINCE_HOURS = 36.0
GIT_TIMEOUT_S = 120


def register(hsub: argparse._SubParsersAction) -> None:
    c = hsub.add_parser("collect", help="download the run records that a workflow's recent runs uploaded, "
                                        "as soon as each job has finished")
    c.add_argument("--workflow", required=True, help="the workflow's file name (nightly.yml) or id")
    c.add_argument("--since", type=float, default=DEFAULT_SINCE_HOURS, metavar="HOURS",
                   help=f"runs created in the last HOURS hours (default {DEFAULT_SINCE_HOURS:g})")
    c.add_argument("--into", type=Path, required=True, metavar="DIR",
                   help="each artifact is unpacked into DIR/<artifact id>/")
    c.add_argument("--history", type=Path, metavar="CHECKOUT",
                   help=f"the data branch checkout: artifacts marked in CHECKOUT/{LEDGER}/<day>/ are not "
                        "downloaded again, and those collected now are marked there")
    c.add_argument("--repo", metavar="OWNER/NAME", help=f"the repository (default: ${REPOSITORY_ENV})")
    c.add_argument("--prefix", default=DEFAULT_PREFIX, help=f"artifact names to take (default {DEFAULT_PREFIX})")
    c.add_argument("--attempts", type=int, default=5, help="tries of each request in all (default 5)")
    c.add_argument("--backoff", type=float, default=2.0,
                   help="seconds before the first retry, doubled after each (default 2)")
    c.add_argument("--timeout", type=float, default=60.0, help="seconds one try may take (default 60)")
    c.add_argument("--now", metavar="ISO", help=argparse.SUPPRESS)  # tests: the moment the window ends
    c.set_defaults(func=cmd_collect)


@dataclass
class Collected:
    """What one collect did, artifact by artifact (`name (id)`)."""

    runs: int = 0
    collected: list[str] = field(default_factory=list)
    already: int = 0
    expired: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


def _day(moment: dt.datetime) -> str:
    return moment.astimezone(dt.timezone.utc).strftime("%Y-%m-%d")


def window_days(cutoff: dt.datetime, now: dt.datetime) -> list[str]:
    """The days whose markers can name an artifact of the runs listed: those created since cutoff."""
    first, last = cutoff.astimezone(dt.timezone.utc).date(), now.astimezone(dt.timezone.utc).date()
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


def collect(github: GitHub, workflow: str, *, since_hours: float, into: Path, history: Path | None,
            prefix: str = DEFAULT_PREFIX, now: dt.datetime) -> Collected:
    """Unpack into `into` every artifact named `prefix...` of the runs of `workflow` created in the
    last `since_hours` that was not collected before. An artifact whose listing or download failed
    is left for the next collect (it is in `failed`), the others are still collected."""
    cutoff = now - dt.timedelta(hours=since_hours)
    known = known_ids(into, history, window_days(cutoff, now))
    into.mkdir(parents=True, exist_ok=True)
    outcome = Collected()
    runs = github.workflow_runs(workflow, cutoff)
    outcome.runs = len(runs)
    for run in runs:
        try:
            artifacts = github.artifacts(run.id)
        except GitHubError as exc:
            outcome.failed.append(exc.message)
            continue
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
            try:
                github.download(artifact, archive)
                extract(archive, into / str(artifact.id))
            except GitHubError as exc:
                outcome.failed.append(exc.message)
                continue
            except RefusedArchive as exc:
                # An artifact never changes: marked, so that it is not downloaded again to be refused again.
                outcome.refused.append(f"{shown}: {exc}")
                if history is not None:
                    mark(history, artifact, run, f"refused: {exc}")
                continue
            finally:
                archive.unlink(missing_ok=True)
            known.add(artifact.id)
            if history is not None:
                mark(history, artifact, run, "collected")
            outcome.collected.append(shown)
    return outcome


def _now(given: str | None) -> dt.datetime:
    if not given:
        return dt.datetime.now(dt.timezone.utc)
    try:
        moment = dt.datetime.fromisoformat(given)
    except ValueError:
        raise UsageError(f"--now: expected an ISO time, got {given!r}") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=dt.timezone.utc)


def cmd_collect(args: argparse.Namespace) -> int:
    if not args.since > 0:
        raise UsageError(f"--since: expected a number of hours above 0, got {args.since:g}")
    if args.into.exists() and not args.into.is_dir():
        raise OutputError(f"--into: {args.into} exists and is not a directory")
    if args.history is not None and not args.history.is_dir():
        raise UsageError(f"--history: {args.history} is not a directory (`ootci history pull` it first)")
    repository = args.repo or os.environ.get(REPOSITORY_ENV)
    if not repository:
        raise UsageError(f"history collect: no --repo and no ${REPOSITORY_ENV}")
    github = GitHub(repository, retry=Retry(attempts=args.attempts, backoff_s=args.backoff,
                                            timeout_s=args.timeout))
    now = _now(args.now)
    outcome = collect(github, args.workflow, since_hours=args.since, into=args.into, history=args.history,
                      prefix=args.prefix, now=now)
    for shown in outcome.collected:
        print(f"ootci: history collect: {shown}")
    for shown in outcome.refused:
        print(f"ootci: history collect: refused {shown}")
    for shown in outcome.expired:
        print(f"ootci: history collect: expired before it was collected: {shown}")
    for message in outcome.failed:
        print(f"ootci: history collect: failed: {message}")
    print(f"ootci: history collect: {args.workflow}: {outcome.runs} run(s) in the last {args.since:g} h; "
          f"{len(outcome.collected)} artifact(s) collected into {args.into}, {outcome.already} collected before, "
          f"{len(outcome.expired)} expired, {len(outcome.refused)} refused, {len(outcome.failed)} failed")
    output = os.environ.get("GITHUB_OUTPUT")
    if output:
        with open(output, "a", encoding="utf-8") as f:
            f.write(f"collected={len(outcome.collected)}\n")
    if outcome.failed:
        raise GitHubError(f"history collect: {len(outcome.failed)} listing(s) or download(s) failed, the next "
                          f"collect tries them again; first: {outcome.failed[0]}")
    return 0
