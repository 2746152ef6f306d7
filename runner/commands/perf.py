"""`ootci perf --runs DIR`: the open performance regressions of the backends with runs there."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ootci.runner.core.errors import UsageError
from ootci.runner.performance import regressions


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("perf", help="performance regressions over the runs' bench stages (device time needs "
                                    "ootci[perf])")
    p.add_argument("--runs", type=Path, required=True, metavar="DIR",
                   help="a directory of runs: a history's runs/ or an --out directory")
    p.add_argument("--backend", action="append", metavar="NAME", help="only these backends (repeatable)")
    p.add_argument("--json", action="store_true", help="one JSON list of the regressions")
    p.set_defaults(func=cmd_perf)


def cmd_perf(args: argparse.Namespace) -> int:
    if not args.runs.is_dir():
        raise UsageError(f"--runs: {args.runs} is not a directory")
    found = regressions.find(args.runs, set(args.backend or ()) or None)
    if found.not_judged:
        print(f"ootci perf: {found.not_judged}", file=sys.stderr)
    if args.json:
        print(json.dumps([r.to_json() for r in found.regressions], indent=1))
    else:
        for regression in found.regressions:
            print(regression.line())
        print(f"{len(found.regressions)} open performance regression(s)")
    return 0
