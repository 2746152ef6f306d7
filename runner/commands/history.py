"""`ootci history pull|merge|push|fill-missing|prune|collect`: the run history kept on a data branch.

Each action parses its arguments and calls runner/history/: `data_branch` (pull, push),
`merging` (records into the history), `missing_runs` (fill-missing), `history_store`
(prune) and `collect`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
from pathlib import Path

from ootci.runner.commands import history_collect
from ootci.runner.commands.dashboard import accepted_from, add_accepted
from ootci.runner.core.errors import OutputError, UsageError
from ootci.runner.history import history_store
from ootci.runner.history.data_branch import commit_of, pull, push, remote_tip
from ootci.runner.history.github_artifacts import ATTEST_TITLE
from ootci.runner.history.merging import merge, merge_bisections
from ootci.runner.history.missing_runs import MISSING_WHY, fill_missing, read_matrix
from ootci.runner.stages.report import append_to_github_file, escape_workflow_command


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("history", help="merge run records into a history directory and push it to a branch")
    hsub = p.add_subparsers(dest="history_command", metavar="ACTION", required=True)

    m = hsub.add_parser("merge", help="copy run directories that the history does not have yet")
    m.add_argument("sources", nargs="+", type=Path, metavar="SOURCE",
                   help="directories searched for <run_id>/record.json (e.g. downloaded artifacts)")
    m.add_argument("--into", type=Path, required=True, metavar="DIR", help="the history directory")
    m.add_argument("--missing-ok", action="store_true",
                   help="a SOURCE that does not exist holds no runs (e.g. no job uploaded an artifact)")
    add_accepted(m)
    m.set_defaults(func=cmd_merge)

    f = hsub.add_parser("fill-missing", help="write a `missing` record for each matrix entry whose job left none")
    f.add_argument("--matrix", required=True, metavar="MATRIX",
                   help="the JSON `ootci matrix` printed ({\"include\": [...]}), or a file holding it")
    f.add_argument("--runs", type=Path, required=True, metavar="DIR",
                   help="the run directories of this workflow run (e.g. downloaded artifacts); "
                        "the missing records are written here")
    f.add_argument("--reason", metavar="TEXT",
                   help=f"why there is no record (default: {MISSING_WHY})")
    f.add_argument("--trigger", default="nightly", help="trigger of the records written (default nightly)")
    f.add_argument("--pr", type=int, metavar="N", help="PyTorch PR number, for --trigger pr")
    f.set_defaults(func=cmd_fill_missing)

    pr = hsub.add_parser("prune", help="apply the retention policy: headers stay, old test lists go")
    pr.add_argument("runs", type=Path, metavar="DIR", help="the history's runs directory (e.g. history/runs)")
    pr.add_argument("--keep-results-days", type=int, default=history_store.RESULTS_RETENTION_DAYS, metavar="N",
                    help="keep the test lists of runs started in the last N days "
                         f"(default {history_store.RESULTS_RETENTION_DAYS})")
    pr.add_argument("--now", metavar="ISO", help=argparse.SUPPRESS)  # tests: the moment retention counts from
    pr.set_defaults(func=cmd_prune)

    pl = hsub.add_parser("pull", help="clone the data branch, or start an empty history if it does not exist yet")
    pl.add_argument("checkout", type=Path, help="directory to clone into (must not exist or be empty)")
    pl.add_argument("--branch", default="ootci-data", help="branch to clone (default ootci-data)")
    pl.add_argument("--remote", help="remote URL (default: $GITHUB_SERVER_URL/$GITHUB_REPOSITORY)")
    fetch = pl.add_mutually_exclusive_group()
    fetch.add_argument("--latest", type=int, default=history_store.PAGED_RUNS, metavar="N",
                       help="fetch every header but only the newest N run directories of each backend "
                            f"(default {history_store.PAGED_RUNS}: the runs the dashboard gives a page)")
    fetch.add_argument("--full", action="store_true", help="fetch the whole tip (e.g. to prune it)")
    pl.set_defaults(func=cmd_pull)

    at = hsub.add_parser("attest", help="say, in this job's own annotations, the artifact it uploaded and its "
                                        "digest (the collector takes only what the job of its backend said)")
    at.add_argument("artifact", help="the artifact's name")
    at.add_argument("digest", help="its SHA-256, as upload-artifact's artifact-digest output gives it")
    at.add_argument("--instead-of", metavar="NAME",
                    help="the name the job meant to upload under, which another job of the run took first")
    at.set_defaults(func=cmd_attest)

    tp = hsub.add_parser("tip", help="whether the data branch is still at the commit a site was built from "
                                     "(a deploy skips a site the branch has moved past)")
    tp.add_argument("--built", required=True, metavar="SHA",
                    help="the data branch commit the site was built from (`history pull` and `dashboard publish` "
                         "give it as the step output commit / data-tip)")
    tp.add_argument("--branch", default="ootci-data", help="the data branch (default ootci-data)")
    tp.add_argument("--remote", help="remote URL (default: $GITHUB_SERVER_URL/$GITHUB_REPOSITORY)")
    tp.set_defaults(func=cmd_tip)

    pu = hsub.add_parser("push", help="commit a history checkout and push it to a branch")
    pu.add_argument("checkout", type=Path, help="git checkout of the data branch (created if it is not one)")
    pu.add_argument("--branch", default="ootci-data", help="branch to push to (default ootci-data)")
    pu.add_argument("--remote", help="remote URL or name (default: origin, else "
                                     "$GITHUB_SERVER_URL/$GITHUB_REPOSITORY)")
    pu.add_argument("--message", default="ootci: add run records", help="commit message")
    pu.set_defaults(func=cmd_push)

    # `collect` (its own module): the records of a workflow's runs, from their artifacts.
    history_collect.register(hsub)


# -- merge -------------------------------------------------------------------------


def cmd_merge(args: argparse.Namespace) -> int:
    if args.into.exists() and not args.into.is_dir():
        raise OutputError(f"--into: {args.into} exists and is not a directory")
    accepted = accepted_from(args)
    outcome = merge(args.sources, args.into, missing_ok=args.missing_ok, accepted=accepted)
    for run_dir in outcome["rejected"]:
        print(f"ootci: history: skipped {run_dir}: record.json does not load, names another run, "
              "or its tests do not load")
    for why in outcome["refused"]:
        print(f"ootci: history: refused {why}")
    print(f"ootci: history {args.into}: {len(outcome['added'])} added, "
          f"{len(outcome['present'])} already present, {len(outcome['rejected'])} skipped"
          + (f", {len(outcome['refused'])} refused" if outcome["refused"] else ""))
    if outcome["shards"]:
        print(f"ootci: history: {len(outcome['shards'])} shard record(s) not added: "
              "`ootci shards merge` makes one record of the shards of a run, and that one is added")
    bisections = merge_bisections(args.sources, args.into, accepted=accepted)
    for directory in bisections["rejected"]:
        print(f"ootci: history: skipped {directory}: bisect.json does not load or names another bisection")
    for why in bisections["refused"]:
        print(f"ootci: history: refused {why}")
    if any(bisections.values()):
        print(f"ootci: history {args.into}: bisections: {len(bisections['added'])} added, "
              f"{len(bisections['updated'])} updated, {len(bisections['present'])} already present")
    return 0


def cmd_prune(args: argparse.Namespace) -> int:
    if not args.runs.is_dir():
        raise UsageError(f"history prune: {args.runs} is not a directory")
    if args.keep_results_days < 1:
        raise UsageError(f"--keep-results-days: must be at least 1, not {args.keep_results_days}")
    now = dt.datetime.fromisoformat(args.now) if args.now else dt.datetime.now(dt.UTC)
    if now.tzinfo is None:
        now = now.replace(tzinfo=dt.UTC)
    pruned = history_store.prune(args.runs, keep_results_days=args.keep_results_days, now=now)
    print(f"ootci: history {args.runs}: test lists of {len(pruned.results)} run(s) older than "
          f"{args.keep_results_days} days removed, {len(pruned.testsets)} unused test set(s), "
          f"{pruned.leftovers} log or JUnit file(s) of an older layout, {len(pruned.repacked)} test list(s) "
          f"packed; {pruned.bytes / 1e6:.1f} MB freed")
    return 0


# -- fill-missing --------------------------------------------------------------------


def cmd_fill_missing(args: argparse.Namespace) -> int:
    if args.runs.exists() and not args.runs.is_dir():
        raise OutputError(f"--runs: {args.runs} exists and is not a directory")
    if args.pr is not None and args.pr <= 0:
        raise UsageError(f"--pr: expected a PR number, got {args.pr}")
    reason = " ".join((args.reason or "").split()) or MISSING_WHY
    where, entries = read_matrix(args.matrix)
    written, unreadable = fill_missing(entries, args.runs, reason, trigger=args.trigger, pr=args.pr, where=where)
    for record in written:
        print(f"ootci: history: {record.backend}: no record; wrote {record.run_id} (missing: {reason})")
    if unreadable:
        print(f"ootci: history: {unreadable} record file(s) under {args.runs} did not load")
    print(f"ootci: history {args.runs}: {len(entries)} matrix entries, {len(written)} without a record")
    return 0


# -- pull and push -----------------------------------------------------------------


def cmd_pull(args: argparse.Namespace) -> int:
    if args.latest < 1:
        raise UsageError(f"--latest: must be at least 1, not {args.latest}")
    latest = None if args.full else args.latest
    print(f"ootci: history {args.checkout}: {pull(args.checkout, args.branch, args.remote, latest)}")
    append_to_github_file("GITHUB_OUTPUT", f"commit={commit_of(args.checkout)}\n")
    return 0


def cmd_attest(args: argparse.Namespace) -> int:
    """A notice in this job's annotations, which no other job can write: `ootci history collect` takes an
    `ootci-run-*` artifact only when a job of the backend its name says named it here, with this digest."""
    digest = args.digest.removeprefix("sha256:")
    if not re.fullmatch(r"[0-9a-f]{64}", digest):
        raise UsageError(f"digest: expected the 64 hexadecimal digits of a SHA-256, got {args.digest[:80]!r}")
    if not re.fullmatch(r"[A-Za-z0-9._-]{1,200}", args.artifact):
        raise UsageError(f"artifact: expected an artifact name (letters, digits, '.', '_', '-'), "
                         f"got {args.artifact[:80]!r}")
    if args.instead_of:
        print(f"::warning title=ootci artifact name taken::{escape_workflow_command(args.instead_of[:200])} was "
              f"uploaded by another job of this run before this one: this job's records are {args.artifact}, and "
              f"that one is refused by every reader")
    print(f"::notice title={ATTEST_TITLE}::{args.artifact} sha256:{digest}")
    return 0


def cmd_tip(args: argparse.Namespace) -> int:
    """Deploys are served one at a time, in order (the Pages group's `queue: max`); a site built before
    the branch moved would put an older history on the page after a newer one, or over it: it is
    skipped, and the deploy of whoever moved the branch carries the newer one."""
    if not re.fullmatch(r"[0-9a-f]{40}", args.built):
        raise UsageError(f"--built: expected the 40 hexadecimal digits of a commit, got {args.built[:60]!r}")
    tip = remote_tip(args.branch, args.remote)
    current = tip == args.built
    if current:
        print(f"ootci: history tip: {args.branch} is still at {tip[:12]}, which the site was built from")
    else:
        print(f"ootci: history tip: {args.branch} moved from {args.built[:12]} to {tip[:12] or '(none)'} after this "
              "site was built: this deploy is skipped, the deploy of whoever moved it carries the newer history")
    append_to_github_file("GITHUB_OUTPUT", f"current={str(current).lower()}\ntip={tip}\n")
    return 0


def cmd_push(args: argparse.Namespace) -> int:
    print(f"ootci: history {args.checkout}: {push(args.checkout, args.branch, args.remote, args.message)}")
    return 0
