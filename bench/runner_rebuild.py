"""How long `ootci run` takes when nothing changed: the build and install caches.

    .venv/bin/python bench/runner_rebuild.py [BACKEND] [--runs N]

Runs the pipeline without suites once to warm the caches, then N more times, and
prints the build stage's duration and the whole command's wall time for each.
Goal: an unchanged rebuild (build stage) takes ≤ 3 s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OOTCI = Path(sys.executable).with_name("ootci")


def one_run(backend: str, torch: str) -> tuple[float, dict]:
    with tempfile.TemporaryDirectory() as out:
        start = time.monotonic()
        subprocess.run([str(OOTCI), "run", backend, "--torch", torch, "--suites", "none", "--out", out],
                       check=False, capture_output=True)
        wall = time.monotonic() - start
        record = json.loads(next(Path(out).glob("*/record.json")).read_text())
    return wall, {s["name"]: s for s in record["stages"]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("backend", nargs="?", default="openreg")
    parser.add_argument("--torch", default="2.13.0")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    wall, stages = one_run(args.backend, args.torch)
    print(f"warm-up: {wall:.1f} s (build {stages['build']['duration_s']:.1f} s, "
          f"cache hit: {stages['build']['data'].get('cache_hit')})")
    walls, builds, prep = [], [], []
    for _ in range(args.runs):
        wall, stages = one_run(args.backend, args.torch)
        assert stages["build"]["data"].get("cache_hit"), "the rebuild was not a cache hit"
        walls.append(wall)
        builds.append(stages["build"]["duration_s"])
        prep.append(sum(stages[name]["duration_s"] for name in ("torch", "build", "install")))
    print(f"unchanged rebuild, {args.runs} runs: build stage median {statistics.median(builds):.2f} s "
          f"(max {max(builds):.2f}); torch+build+install median {statistics.median(prep):.2f} s; "
          f"whole `ootci run --suites none` (autoload checks included) median {statistics.median(walls):.2f} s")


if __name__ == "__main__":
    main()
