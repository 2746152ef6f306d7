"""`ootci dashboard build|publish`: a static status site from RunRecords, and a workflow's
results published (to the data branch, and the site from its tip: dashboard/publish.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ootci.runner.core.errors import OutputError, UsageError
from ootci.runner.history.merging import BISECTIONS_ONLY, TRIGGERS, Accepted
from ootci.runner.stages.report import append_to_github_file


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("dashboard", help="build the static status dashboard")
    dsub = p.add_subparsers(dest="dashboard_command", metavar="ACTION")
    b = dsub.add_parser("build", help="turn every RunRecord under --data into a static site at --out")
    b.add_argument("--data", type=Path, required=True, help="directory searched for **/record.json")
    b.add_argument("--out", type=Path, required=True, help="site directory (replaced atomically)")
    b.add_argument("--state", type=Path, help="where the SQLite index lives (default: OUT.state next to OUT)")
    b.add_argument("--run-pages", metavar="N",
                   help="run pages kept per backend: the latest N runs (and the culprit pair), default 14; "
                        "'all' for every run")
    b.add_argument("--rebuild", action="store_true", help="re-render every page, not only what changed")
    b.add_argument("--jobs", type=int, help="worker processes for parsing records (default: CPU count)")
    b.set_defaults(func=cmd_build)
    pub = dsub.add_parser("publish", help="add new records to the data branch's history, push it, and build the "
                                          "site from the branch's tip")
    pub.add_argument("records", type=Path, metavar="RECORDS",
                     help="directory of new run directories and bisections (e.g. downloaded artifacts); "
                          "a missing one adds nothing")
    pub.add_argument("--history", type=Path, required=True, metavar="DIR",
                     help="where the data branch is checked out (must not exist or be empty); its tip goes "
                          "to DIR-tip")
    pub.add_argument("--site", type=Path, required=True, metavar="DIR", help="site directory (replaced atomically)")
    pub.add_argument("--branch", default="ootci-data", help="the data branch (default ootci-data)")
    pub.add_argument("--remote", help="its repository, a URL or a path (default: $OOTCI_DATA_REMOTE, else "
                                      "$GITHUB_SERVER_URL/$GITHUB_REPOSITORY)")
    pub.add_argument("--no-push", dest="push", action="store_false",
                     help="neither pull nor push: merge into DIR and build the site from it alone")
    add_accepted(pub)
    pub.set_defaults(func=cmd_publish)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def add_accepted(p: argparse.ArgumentParser) -> None:
    """--accept-trigger and --accept-pr: what the publishing workflow run can have made."""
    p.add_argument("--accept-trigger", action="append", default=[], metavar="TRIGGER[,TRIGGER]",
                   help=f"publish only records of these triggers ({', '.join(TRIGGERS)}; repeatable; default "
                        f"any): the workflow run's own; any other record is refused. {BISECTIONS_ONLY}: only "
                        "bisections, every run record is refused")
    p.add_argument("--accept-pr", type=int, metavar="N",
                   help="publish only records of PyTorch PR N, and no bisection (a PR run's publish)")


def accepted_from(args: argparse.Namespace) -> Accepted:
    triggers = {t for given in args.accept_trigger for t in given.split(",") if t}
    if BISECTIONS_ONLY in triggers:
        if triggers != {BISECTIONS_ONLY} or args.accept_pr is not None:
            raise UsageError(f"--accept-trigger {BISECTIONS_ONLY}: publishes no run, so no trigger or PR goes with it")
        return Accepted(runs=False)
    if unknown := sorted(triggers - set(TRIGGERS)):
        raise UsageError(f"--accept-trigger: unknown trigger {unknown[0]!r} (one of {', '.join(TRIGGERS)})")
    if args.accept_pr is not None and args.accept_pr <= 0:
        raise UsageError(f"--accept-pr: expected a PR number, got {args.accept_pr}")
    return Accepted(triggers=frozenset(triggers), pr=args.accept_pr)


def cmd_build(args: argparse.Namespace) -> int:
    from ootci.dashboard import site

    if args.run_pages is None:
        run_pages = site.DEFAULT_RUN_PAGES
    elif args.run_pages == "all":
        run_pages = None
    else:
        try:
            run_pages = int(args.run_pages)
        except ValueError:
            raise UsageError(f"--run-pages: expected a number or 'all', got {args.run_pages!r}") from None
        if run_pages < 0:
            raise UsageError(f"--run-pages: must not be negative, got {run_pages}")
    out = args.out
    if not args.data.is_dir():
        raise UsageError(f"--data {args.data}: no such directory")
    if out.exists() and not out.is_dir():
        raise OutputError(f"--out {out}: exists and is not a directory")
    if out.resolve() == args.data.resolve():
        raise UsageError(f"--out {out}: must not be the --data directory")
    try:
        report = site.build(args.data, out, state=args.state, run_pages=run_pages, jobs=args.jobs,
                            rebuild=args.rebuild, background_cleanup=True)
    except OSError as exc:
        raise OutputError(f"{exc.filename or out}: {exc.strerror or exc}") from None
    print(report.line())
    print(f"dashboard: {out / 'index.html'}")
    return 0


def cmd_publish(args: argparse.Namespace) -> int:
    from ootci.dashboard.publish import publish

    if args.site.exists() and not args.site.is_dir():
        raise OutputError(f"--site {args.site}: exists and is not a directory")
    try:
        outcome = publish(args.records, args.history, args.site, branch=args.branch, remote=args.remote,
                          push=args.push, accepted=accepted_from(args))
    except OSError as exc:
        raise OutputError(f"{exc.filename or args.site}: {exc.strerror or exc}") from None
    print("\n".join(outcome.lines()))
    print(f"dashboard: {args.site / 'index.html'}")
    # The data branch commit the site was built from: a deploy skips the site when the branch moved since.
    append_to_github_file("GITHUB_OUTPUT", f"data-tip={outcome.data_tip}\n")
    return 0
