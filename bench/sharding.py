"""The OpenReg integration suite, whole and in N shards: what sharding buys.

    .venv/bin/python bench/sharding.py                   # 3 shards, torch 2.13.0
    .venv/bin/python bench/sharding.py --shards 4 --keep out/bench-sharding
    .venv/bin/python bench/sharding.py --from out/bench-sharding   # figures of runs made before

Runs `ootci run openreg --torch 2.13.0 --suites integration` once whole and once per
shard (`--shard K/N`, one shard group), merges the shards (`ootci shards merge`), and
prints the integration stage's duration (the records' `duration_s`) of each: on N
machines the suite takes as long as the slowest shard, so `max` against the unsharded
time is the figure that matters; `sum` against it is what sharding costs in machine
time (every shard collects the whole suite). The shards run one after the other here,
on one machine. The build, install and autoload stages are cached after the first run
and run in every shard; their times are printed too. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ootci.runner.models import Outcome  # noqa: E402
from ootci.runner.records import record_files  # noqa: E402

OOTCI = Path(sys.executable).with_name("ootci")


def ootci(*args: str) -> float:
    t0 = time.monotonic()
    done = subprocess.run([str(OOTCI), *args], capture_output=True, text=True)
    if done.returncode not in (0, 1):
        sys.exit(f"ootci {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return time.monotonic() - t0


def records(directory: Path):
    return [record_files.read(p) for p in sorted(directory.glob("*/record.json"))]


def stage_s(record, name: str) -> float:
    stage = record.stage(name)
    return stage.duration_s if stage else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=3)
    parser.add_argument("--torch", default="2.13.0")
    parser.add_argument("--keep", type=Path, help="write the runs here (default: a temporary directory)")
    parser.add_argument("--from", dest="source", type=Path, help="only print the figures of runs made before")
    args = parser.parse_args()
    os.environ.setdefault("OOTCI_CACHE", str(REPO / ".cache" / "ootci"))
    root = args.source or args.keep or Path(tempfile.mkdtemp(prefix="ootci-bench-sharding-"))
    walls: dict[str, float] = {}
    if args.source is None:
        base = ["run", "openreg", "--torch", args.torch, "--suites", "integration"]
        print(f"runs under {root}; load average {os.getloadavg()[0]:.1f}", flush=True)
        walls["whole"] = ootci(*base, "--out", str(root / "whole"))
        for k in range(1, args.shards + 1):
            walls[f"{k}/{args.shards}"] = ootci(*base, "--shard", f"{k}/{args.shards}", "--shard-group", "bench",
                                                "--out", str(root / "shards"))
        ootci("shards", "merge", str(root / "shards"), "--out", str(root / "merged"))
    [whole] = records(root / "whole")
    parts = sorted(records(root / "shards"), key=lambda r: int(r.shard.split("/")[0]))
    [merged] = records(root / "merged")

    print(f"\n{'run':<10} {'tests':>6} {'integration s':>14} {'torch+build+install+autoload s':>31} "
          f"{'ootci run wall s':>17}")
    setup = ("torch", "build", "install", "autoload")
    rows = [("whole", whole), *((p.shard, p) for p in parts)]
    for name, record in rows:
        wall = f"{walls[name]:.1f}" if name in walls else "-"
        print(f"{name:<10} {len(record.tests):>6} {stage_s(record, 'integration'):>14.1f} "
              f"{sum(stage_s(record, s) for s in setup):>31.1f} {wall:>17}")
    shard_s = [stage_s(p, "integration") for p in parts]
    whole_s = stage_s(whole, "integration")
    print(f"\nintegration stage, unsharded:           {whole_s:7.1f} s")
    print(f"integration stage, slowest of {len(parts)} shards: {max(shard_s):7.1f} s "
          f"({max(shard_s) / whole_s:.2f} of unsharded: the wall time on {len(parts)} machines)")
    print(f"integration stage, sum of {len(parts)} shards:     {sum(shard_s):7.1f} s "
          f"({sum(shard_s) / whole_s:.2f} of unsharded: the machine time)")
    same = lambda o: "passed" if o in (Outcome.passed, Outcome.flaky) else o.value  # noqa: E731
    equal = {(t.suite, t.id, same(t.outcome)) for t in merged.tests} == \
            {(t.suite, t.id, same(t.outcome)) for t in whole.tests}
    print(f"merged record {merged.run_id}: {len(merged.tests)} tests, {merged.status.value}; "
          f"same tests and outcomes as the unsharded run: {'yes' if equal else 'NO'}")


if __name__ == "__main__":
    main()
