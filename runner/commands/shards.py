"""`ootci shards merge`: one run record from the records of a sharded run (runner/suite_runs/shards.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ootci.runner.core.errors import OutputError, UsageError
from ootci.runner.suite_runs.shards import merge


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("shards", help="merge the records of a sharded run (ootci run --shard K/N) into one")
    ssub = p.add_subparsers(dest="shards_command", metavar="ACTION", required=True)
    m = ssub.add_parser("merge", help="write one record per backend and shard group from its shard records")
    m.add_argument("sources", nargs="+", type=Path, metavar="DIR",
                   help="directories searched for <run_id>/record.json (e.g. the shard jobs' artifacts)")
    m.add_argument("--out", type=Path, required=True, metavar="OUT", help="directory for the merged run directories")
    m.add_argument("--expect", type=int, metavar="N",
                   help="the number of shards (default: N of the records' K/N); fewer records fail the merge's suites")
    m.set_defaults(func=cmd_merge)


def cmd_merge(args: argparse.Namespace) -> int:
    if args.expect is not None and args.expect < 1:
        raise UsageError(f"--expect {args.expect}: must be at least 1")
    if args.out.exists() and not args.out.is_dir():
        raise OutputError(f"--out: {args.out} exists and is not a directory")
    written, notes = merge(args.sources, args.out, args.expect)
    for note in notes:
        print(f"ootci: shards: {note}")
    if not written:
        print("ootci: shards: no shard records (records of `ootci run --shard K/N`) under "
              + ", ".join(map(str, args.sources)))
        return 0
    for record in written:
        shards = record.stages[0].data.get("shards", []) if record.stages else []
        got = sum(1 for s in shards if s["run_id"])
        print(f"ootci: shards: {record.backend} group {record.shard_group or '(none)'}: {got}/{len(shards)} shards, "
              f"{len(record.tests)} tests -> {args.out / record.run_id} ({record.status.value})")
        for problem in record.problems:
            if "left no record" in problem:
                print(f"ootci: shards: {record.backend}: {problem}")
    return 0
