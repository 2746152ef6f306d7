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

With --run, only that run is read (a nightly's publish reads its own run, `--run $GITHUB_RUN_ID`, where
download-artifact would take any artifact any job uploaded), with the same checks of each artifact.

Only what this repository's own workflow made on its default branch is read: a run started by any
event but schedule or workflow_dispatch, of another branch, of a fork's code or of another workflow
file is named and skipped, and an artifact holding a record of another backend than its name says is
refused (runner/history/collect.py; docs/workflows.md, "The trust boundary").
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ootci.runner.core.errors import GitHubError, OutputError, UsageError
from ootci.runner.core.http import Retry
from ootci.runner.history.collect import DEFAULT_PREFIX, DEFAULT_SINCE_HOURS, LEDGER, collect, collect_run, parse_now
from ootci.runner.history.github_artifacts import REPOSITORY_ENV, GitHub
from ootci.runner.stages.report import append_to_github_file


def register(hsub: argparse._SubParsersAction) -> None:
    c = hsub.add_parser("collect", help="download the run records that a workflow's recent runs uploaded, "
                                        "as soon as each job has finished")
    which = c.add_mutually_exclusive_group(required=True)
    which.add_argument("--workflow", help="the workflow's file name (nightly.yml) or id")
    which.add_argument("--run", type=int, metavar="RUN_ID",
                       help="only this run, of every attempt: the job's own ($GITHUB_RUN_ID, a nightly's publish); "
                            "its artifacts are taken as attested, the run itself is not questioned")
    c.add_argument("--since", type=float, metavar="HOURS",
                   help=f"runs created in the last HOURS hours (default {DEFAULT_SINCE_HOURS:g}; not with --run)")
    c.add_argument("--into", type=Path, required=True, metavar="DIR",
                   help="each artifact is unpacked into DIR/<artifact id>/")
    c.add_argument("--history", type=Path, metavar="CHECKOUT",
                   help=f"the data branch checkout: artifacts marked in CHECKOUT/{LEDGER}/<day>/ are not "
                        "downloaded again, and those collected now are marked there")
    c.add_argument("--repo", metavar="OWNER/NAME", help=f"the repository (default: ${REPOSITORY_ENV})")
    c.add_argument("--branch", metavar="NAME",
                   help="the only branch whose runs are read (default: the repository's default branch)")
    c.add_argument("--prefix", default=DEFAULT_PREFIX, help=f"artifact names to take (default {DEFAULT_PREFIX})")
    c.add_argument("--attempts", type=int, default=5, help="tries of each request in all (default 5)")
    c.add_argument("--backoff", type=float, default=2.0,
                   help="seconds before the first retry, doubled after each (default 2)")
    c.add_argument("--timeout", type=float, default=60.0, help="seconds one try may take (default 60)")
    c.add_argument("--now", metavar="ISO", help=argparse.SUPPRESS)  # tests: the moment the window ends
    c.set_defaults(func=cmd_collect)


def cmd_collect(args: argparse.Namespace) -> int:
    if args.run is not None and (args.since is not None or args.history is not None):
        raise UsageError("history collect: --run takes one run, not a window (--since) or a ledger (--history)")
    if args.run is not None and args.run <= 0:
        raise UsageError(f"--run: expected a workflow run's id, got {args.run}")
    args.since = DEFAULT_SINCE_HOURS if args.since is None else args.since
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
    if args.run is not None:
        outcome = collect_run(github, args.run, into=args.into, prefix=args.prefix)
    else:
        outcome = collect(github, args.workflow, since_hours=args.since, into=args.into, history=args.history,
                          prefix=args.prefix, now=parse_now(args.now), branch=args.branch)
    for shown in outcome.untrusted:
        print(f"ootci: history collect: not read: {shown}")
    for shown in outcome.collected:
        print(f"ootci: history collect: {shown}")
    for shown in outcome.refused:
        print(f"ootci: history collect: refused {shown}")
    for shown in outcome.expired:
        print(f"ootci: history collect: expired before it was collected: {shown}")
    for message in outcome.failed:
        print(f"ootci: history collect: failed: {message}")
    read = (f"run {args.run}" if args.run is not None else
            f"{args.workflow}: {outcome.runs} run(s) in the last {args.since:g} h; {len(outcome.untrusted)} not read")
    print(f"ootci: history collect: {read}; {len(outcome.collected)} artifact(s) collected into {args.into}, "
          f"{outcome.already} collected before, "
          f"{len(outcome.expired)} expired, {len(outcome.refused)} refused, {len(outcome.failed)} failed")
    append_to_github_file("GITHUB_OUTPUT", f"collected={len(outcome.collected)}\n")
    if outcome.failed:
        raise GitHubError(f"history collect: {len(outcome.failed)} listing(s) or download(s) failed, the next "
                          f"collect tries them again; first: {outcome.failed[0]}")
    return 0
