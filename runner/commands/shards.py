"""`ootci shards plan`: a matrix of jobs from recorded times (runner/suite_runs/shard_plan.py);
`ootci shards merge`: one run record from the records of a sharded run (runner/suite_runs/shards.py)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from ootci.runner.core.errors import OutputError, UsageError
from ootci.runner.history.recorded_times import RecordedTimes, recorded_times
from ootci.runner.manifests import registry
from ootci.runner.stages.report import append_to_github_file, artifact_name
from ootci.runner.suite_runs import shard_plan
from ootci.runner.suite_runs.shards import merge


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("shards", help="plan a sharded run from recorded times, and merge its records into one")
    ssub = p.add_subparsers(dest="shards_command", metavar="ACTION", required=True)
    pl = ssub.add_parser("plan", help="print a GitHub matrix of jobs that each fit --minutes, from the latest nights")
    pl.add_argument("backend", metavar="NAME", help="registered backend name or path of a backend.toml")
    pl.add_argument("--minutes", type=float, required=True, metavar="M", help="what one job may take, in minutes")
    pl.add_argument("--history", type=Path, metavar="DIR",
                    help="run records to take the times from (a pulled history's runs/, or `ootci run --out`); "
                         "none: every file at its time limit")
    pl.add_argument("--nights", type=int, default=3, metavar="K",
                    help="the latest K runs' times are averaged (default 3)")
    pl.add_argument("--jobs", type=int, metavar="N", help="exactly N jobs, balanced (default: as few as fit --minutes)")
    pl.add_argument("--out", type=Path, default=Path("shard-plan.json"), metavar="PLAN",
                    help="the plan the jobs run from (`ootci run --shard-plan PLAN --shard K`) and the merge reads "
                         "(default: shard-plan.json)")
    pl.add_argument("--github-output", metavar="ARTIFACT",
                    help="also append matrix=, shards= (the job numbers as a JSON list), jobs= and artifact= (ARTIFACT "
                         "made a name upload-artifact takes, for the plan file) to $GITHUB_OUTPUT: a plan job's "
                         "outputs, which feed the matrix")
    pl.set_defaults(func=cmd_plan)
    m = ssub.add_parser("merge", help="write one record per backend and shard group from its shard records")
    m.add_argument("sources", nargs="+", type=Path, metavar="DIR",
                   help="directories searched for <run_id>/record.json (e.g. the shard jobs' artifacts)")
    m.add_argument("--out", type=Path, required=True, metavar="OUT", help="directory for the merged run directories")
    m.add_argument("--expect", type=int, metavar="N",
                   help="the number of shards (default: N of the records' K/N); fewer records fail the merge's suites")
    m.add_argument("--plan", type=Path, metavar="PLAN",
                   help="the plan the shards ran (`ootci shards plan --out`): a shard that left no record is named "
                        "with the tests it should have run; implies --expect")
    m.set_defaults(func=cmd_merge)


def cmd_merge(args: argparse.Namespace) -> int:
    if args.expect is not None and args.expect < 1:
        raise UsageError(f"--expect {args.expect}: must be at least 1")
    if args.out.exists() and not args.out.is_dir():
        raise OutputError(f"--out: {args.out} exists and is not a directory")
    planned = shard_plan.read(args.plan, where="--plan") if args.plan else None
    if planned is not None:
        if args.expect is not None and args.expect != planned.n:
            raise UsageError(f"--expect {args.expect}: the plan {args.plan} has {planned.n} jobs")
        args.expect = planned.n
    written, notes = merge(args.sources, args.out, args.expect, planned)
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


def cmd_plan(args: argparse.Namespace) -> int:
    if args.minutes <= 0:
        raise UsageError(f"--minutes {args.minutes:g}: must be more than 0")
    if args.jobs is not None and not 1 <= args.jobs <= shard_plan.MAX_JOBS:
        raise UsageError(f"--jobs {args.jobs}: must be 1 to {shard_plan.MAX_JOBS} (GitHub's matrix limit)")
    if args.nights < 1:
        raise UsageError(f"--nights {args.nights}: must be at least 1")
    if args.history is not None and args.history.exists() and not args.history.is_dir():
        raise UsageError(f"--history {args.history}: not a directory")
    if args.github_output is not None and not os.environ.get("GITHUB_OUTPUT"):
        raise UsageError("--github-output: $GITHUB_OUTPUT is not set (it is, in a step of a GitHub Actions job)")
    manifest = registry.resolve(args.backend)
    suite = manifest.suites.upstream
    if suite is None:
        raise UsageError(f"{manifest.path}: no [suites.upstream]: there is nothing to plan by file "
                         "(`ootci run --shard K/N` splits the other suites)")
    # A history that does not exist yet (a data branch's first night) has no times: the plan says so.
    recorded = (recorded_times(args.history, manifest.name, args.nights) if args.history and args.history.is_dir()
                else RecordedTimes())
    planned = shard_plan.plan_suite(manifest.name, suite, recorded.tests, budget_s=args.minutes * 60, jobs=args.jobs,
                                    runs=recorded.runs, every_job_s=recorded.every_job_s, split_s=recorded.split_s,
                                    unreached=recorded.unreached)
    shard_plan.write(args.out, planned)
    for line in shard_plan.describe(planned):
        print(f"ootci: shards plan: {line}", file=sys.stderr)
    matrix = json.dumps(planned.matrix(), separators=(",", ":"))
    print(matrix)
    if args.github_output is not None:
        append_to_github_file("GITHUB_OUTPUT", f"matrix={matrix}\nshards={json.dumps(list(range(1, planned.n + 1)))}\n"
                                               f"jobs={planned.n}\nartifact={artifact_name(args.github_output)}\n")
    return 0
