"""`ootci dashboard build`: a static status site from RunRecords."""

from __future__ import annotations

import argparse
from pathlib import Path

from ootci.runner.core.errors import OutputError, UsageError


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
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


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
