"""A matrix planned from recorded times: 100,000 upstream tests over 5 files, for 4 jobs.

    .venv/bin/python bench/shard_plan.py                          # 100,000 tests, 4 jobs
    .venv/bin/python bench/shard_plan.py --tests 2000 --nights 1  # small, while developing

Writes the backend's latest nights into a history as `ootci history merge` keeps them (packed
results against one shared test set), with synthetic but realistic times: per test a
log-normal time (most tests a few milliseconds, a long tail of slow ones), and one file,
like test_unary_ufuncs.py, much longer than the others. Then runs `ootci shards plan NAME
--jobs 4` on it, as the nightly's plan job would, and prints each job's expected time, the
slowest against the mean (goal: at most 1.25), where each file went, the plan's and the
matrix's sizes, and how long planning took. Checks that every recorded test is in exactly
one job. Prints figures; asserts only that the plan holds every test once.

bench/sharding.py measures the older split by hash (`--shard K/N`) on OpenReg's integration
suite; this one measures the planned split of the upstream suite, by recorded times.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ootci.runner.history.history_store import add_run  # noqa: E402
from ootci.runner.models import Outcome, RunRecord, StageResult, Status, TestResult, TorchInfo  # noqa: E402
from ootci.runner.records import record_files  # noqa: E402
from ootci.runner.suite_runs import shard_plan  # noqa: E402

OOTCI = Path(sys.executable).with_name("ootci")
# Shares of the tests, and each file's typical test (the log-normal's median, seconds): the first
# is the long one.
FILES = {"test_unary_ufuncs.py": (0.45, 0.030), "test_reductions.py": (0.20, 0.015), "test_indexing.py": (0.15, 0.012),
         "test_view_ops.py": (0.12, 0.008), "nn/test_pooling.py": (0.08, 0.020)}
# The plan reads only the name and [suites.upstream]; the rest is what every manifest must have.
MANIFEST = """\
name = "bench-plan"
device = "openreg"
distribution = "torch_openreg"
import_name = "torch_openreg"
entry_point = "torch_openreg = torch_openreg:_autoload"
source = {{ requirement = "torch_openreg" }}
build = {{ recipe = "prebuilt" }}
suites = {{ upstream = {{ files = {files}, timeout = {timeout} }} }}
"""


def nights(history: Path, scratch: Path, tests: int, count: int, seed: int) -> None:
    rng = random.Random(seed)
    ids = [(file, f"{file}::Test{file.split('/')[-1][5:-3].title()}::test_{i:06d}_openreg_float32", median)
           for file, (share, median) in FILES.items() for i in range(int(tests * share))]
    base = {test_id: rng.lognormvariate(0, 1.1) * median for _, test_id, median in ids}
    for night in range(count):
        started = dt.datetime(2026, 12, 1, 3, 17, tzinfo=dt.UTC) + dt.timedelta(days=night)
        results = [TestResult(id=test_id, suite="upstream", outcome=Outcome.passed,
                              duration_s=round(base[test_id] * rng.uniform(0.9, 1.1), 4)) for _, test_id, _ in ids]
        stages = [StageResult(name="torch", status=Status.passed, duration_s=35.0),
                  StageResult(name="build", status=Status.passed, duration_s=60.0),
                  StageResult(name="autoload", status=Status.passed, duration_s=6.0),
                  StageResult(name="smoke", status=Status.passed, duration_s=30.0),
                  StageResult(name="upstream", status=Status.passed, duration_s=sum(r.duration_s for r in results),
                              counts={"passed": len(results)})]
        record = RunRecord(run_id=f"bench-plan-{started:%Y%m%dT%H%M%SZ}-{night:06x}", backend="bench-plan",
                           device="openreg", torch=TorchInfo(spec="nightly"), trigger="nightly", started_at=started,
                           status=Status.passed, stages=stages, tests=results)
        run_dir = scratch / record.run_id
        record_files.write(run_dir, record)
        add_run(run_dir, history / record.run_id)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=100_000)
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--nights", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=3600,
                        help="[suites.upstream] timeout: the most one file may take (default 3600)")
    parser.add_argument("--seed", type=int, default=51)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ootci-bench-plan-"))
    history = root / "history" / "runs"
    history.mkdir(parents=True)
    t0 = time.monotonic()
    nights(history, root / "scratch", args.tests, args.nights, args.seed)
    made = time.monotonic() - t0
    manifest = root / "backend.toml"
    manifest.write_text(MANIFEST.format(files=json.dumps(list(FILES)), timeout=args.timeout))
    plan = root / "plan.json"
    t0 = time.monotonic()
    done = subprocess.run([str(OOTCI), "shards", "plan", str(manifest), "--minutes", "600", "--jobs", str(args.jobs),
                           "--nights", str(args.nights), "--history", str(history), "--out", str(plan)],
                          capture_output=True, text=True)
    planning = time.monotonic() - t0
    if done.returncode:
        sys.exit(f"ootci shards plan failed ({done.returncode}):\n{done.stderr}")
    planned = shard_plan.read(plan)

    print(f"{args.tests:,} tests over {len(FILES)} files, {args.nights} recorded nights (written in {made:.1f} s), "
          f"planned for {args.jobs} jobs under {root}\n")
    print(done.stderr.rstrip())
    recorded = {f: sum(1 for j in planned.jobs for p in j.pieces if p.file == f for _ in p.tests) for f in FILES}
    print(f"\n{'job':<5} {'expected min':>12} {'upstream min':>13} {'tests':>8}  pieces")
    for job in planned.jobs:
        pieces = ", ".join(f"{p.file}{'' if p.whole else ' (range)'}" for p in job.pieces)
        print(f"{job.index:<5} {job.expected_s / 60:>12.1f} {job.files_s / 60:>13.1f} "
              f"{sum(len(p.tests) for p in job.pieces):>8}  {pieces}")
    loads = [job.expected_s for job in planned.jobs]
    mean = sum(loads) / len(loads)
    print(f"\nslowest job / mean, by recorded times: {max(loads) / mean:.3f} (goal: at most 1.25)")
    print(f"slowest job / mean, upstream files only: "
          f"{max(j.files_s for j in planned.jobs) / (sum(j.files_s for j in planned.jobs) / len(loads)):.3f}")
    print(f"files split: {sum(1 for f in FILES if sum(p.file == f for j in planned.jobs for p in j.pieces) > 1)}; "
          f"tests per file: {recorded}")
    print(f"`ootci shards plan` wall time: {planning:.2f} s; plan file {plan.stat().st_size / 1e6:.2f} MB; "
          f"matrix {len(done.stdout.strip())} bytes (GitHub: 1 MB of outputs, 256 jobs)")
    placed = [i for j in planned.jobs for p in j.pieces for i in p.tests]
    assert len(placed) == len(set(placed)) == sum(int(args.tests * s) for s, _ in FILES.values()), \
        "every recorded test in exactly one job"


if __name__ == "__main__":
    main()
