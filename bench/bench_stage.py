"""The bench stage's own cost and steadiness: its probe run twice on OpenReg, as the stage runs it.

Prints, for each measurement, the device/CPU ratio of each run and how far apart they are,
and the wall time of each run (the stage's time less the interpreter start). Goals
(issue #25): the stage under 2 minutes, and ratios within 5 % between two runs on a quiet machine.

Usage (orchestrator venv; PYTHON is an environment with torch and torch_openreg, such as the
one tests/backends/test_openreg.py builds):
    .venv/bin/python bench/bench_stage.py [--python .cache/openreg-env/bin/python] [--runs 2]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from ootci.runner.manifests import registry
from ootci.runner.stages import bench
from ootci.runner.verification.verify import Runner

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", type=Path, default=REPO / ".cache" / "openreg-env" / "bin" / "python")
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    manifest = registry.resolve("openreg")
    ratios: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as scratch:
        for i in range(args.runs):
            runner = Runner(args.python, timeout=manifest.timeouts.bench, log=Path(scratch) / f"bench-{i}.log")
            started = time.monotonic()
            result = bench.result_of(runner.probe("bench.py", *bench.probe_args(manifest)))
            wall = time.monotonic() - started
            print(f"run {i + 1}: {result.status.value} in {wall:.1f} s: {result.summary}")
            ratios.append({name: m["ratio"] for name, m in result.data["measurements"].items()})
    names = sorted(set.intersection(*(set(r) for r in ratios)))
    print(f"\n{'measurement':<32}" + "".join(f"{'run ' + str(i + 1):>10}" for i in range(args.runs)) + f"{'spread':>10}")
    worst = 0.0
    for name in names:
        values = [r[name] for r in ratios]
        spread = (max(values) - min(values)) / min(values)
        worst = max(worst, spread)
        print(f"{name:<32}" + "".join(f"{v:>10.3f}" for v in values) + f"{spread:>10.1%}")
    print(f"\nlargest spread of a ratio between runs: {worst:.1%} (goal: within 5 %)")


if __name__ == "__main__":
    main()
