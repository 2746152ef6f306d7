"""The bench stage's own cost and steadiness: the stage run N times on OpenReg, as `ootci run` runs it.

Each run is the whole stage (runner/stages/bench.py `measure`): the timing process and, where the
machine has no hardware counter, the counting process under Callgrind. Prints each run's wall
time and the machine's load, then, between consecutive runs, how far each measurement's device
instruction count and device/CPU count ratio moved (the worst of every pair), and how noisy
the device times were (their relative standard deviation). With --out, every run's
measurements are written as JSON: "nights" for bench/perf_detection.py's replay of counts.

Goals (issue #44): every measurement's device count and count ratio within 1 % between two
runs with the test suite running beside them; the stage with counts within 4 minutes.

Usage (orchestrator venv; PYTHON is an environment with torch and torch_openreg, such as the
one `ootci run openreg --torch 2.13.0` makes: its install stage names it):
    .venv/bin/python bench/bench_stage.py --python PYTHON [--runs 2] [--only add_tiny,matmul] [--out FILE]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

from ootci.runner.manifests import registry
from ootci.runner.stages import bench

COUNTED = ("device", "ratio")


def moves(runs: list[dict]) -> dict[str, dict[str, float]]:
    """measurement -> {device, ratio}: the largest relative move of each between consecutive runs."""
    worst: dict[str, dict[str, float]] = {}
    for a, b in zip(runs, runs[1:], strict=False):
        for name in set(a["counts"]) & set(b["counts"]):
            for key in COUNTED:
                move = abs(b["counts"][name][key] / a["counts"][name][key] - 1)
                worst.setdefault(name, {}).setdefault(key, 0.0)
                worst[name][key] = max(worst[name][key], move)
    return worst


def one_run(python: Path, only: tuple[str, ...], log: Path) -> dict:
    manifest = registry.resolve("openreg")
    load = os.getloadavg()[0]
    started = time.monotonic()
    result = bench.measure(python, manifest, only, log=log)
    wall = time.monotonic() - started
    if result.status.value != "passed":
        raise SystemExit(f"the stage {result.status.value}: {result.summary}")
    measured = result.data["measurements"]
    return {
        "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "wall_s": round(wall, 1),
        "load_before": round(load, 2), "load_after": round(os.getloadavg()[0], 2),
        "counter": result.data.get("counter"), "timing": result.data.get("timing"),
        "counter_note": result.data.get("counter_note"), "summary": result.summary,
        "counts": {name: {"device": m["counts"]["device"]["per_call"], "cpu": m["counts"]["cpu"]["per_call"],
                          "ratio": m["counts"]["ratio"]} for name, m in measured.items() if "counts" in m},
        "time": {name: {"device": m["device"]["median"], "cpu": m["cpu"]["median"], "ratio": m["ratio"],
                        "rsd": m["device"]["rsd"], "noisy": m["noisy"]}
                 for name, m in measured.items() if "device" in m},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--only", default="", help="comma-separated measurements (default: every one)")
    parser.add_argument("--out", type=Path, help="write every run's measurements here (JSON), after each run")
    args = parser.parse_args()
    only = tuple(n for n in args.only.split(",") if n)
    python = args.python.absolute()  # not resolved: a venv's python is a link to its base interpreter
    runs: list[dict] = []
    with tempfile.TemporaryDirectory() as scratch:
        for i in range(args.runs):
            runs.append(one_run(python, only, Path(scratch) / f"bench-{i}.log"))
            r = runs[-1]
            print(f"run {i + 1}/{args.runs}: {r['wall_s']:.0f} s, load {r['load_before']:.1f} -> "
                  f"{r['load_after']:.1f}: {r['summary']}", flush=True)
            if args.out:
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps({
                    "machine": platform.node(), "cpus": os.cpu_count(),
                    "how": "runs of the bench stage on OpenReg (runner/stages/bench.py measure), back to back, "
                           "as `ootci run openreg --suites bench` runs it; load: 1-minute load average",
                    "runs": runs}, indent=1) + "\n")
    walls = [r["wall_s"] for r in runs]
    print(f"\nstage wall time: {min(walls):.0f}-{max(walls):.0f} s (median {statistics.median(walls):.0f} s; "
          f"goal: within 240 s); load {min(r['load_before'] for r in runs):.1f}-"
          f"{max(r['load_after'] for r in runs):.1f}")
    worst = moves(runs)
    if worst:
        print(f"\n{'measurement':<32}{'device count':>14}{'count ratio':>14}   (largest move between consecutive runs)")
        for name, w in sorted(worst.items()):
            print(f"{name:<32}{w['device']:>14.3%}{w['ratio']:>14.3%}")
        for key, label in (("device", "device count"), ("ratio", "device/CPU count ratio")):
            name = max(worst, key=lambda n: worst[n][key])
            print(f"worst {label}: {name} {worst[name][key]:.3%} (goal: within 1 %)")
    else:
        print(f"no counts: {runs[0]['counter_note']}")
    rsd = {name: [r["time"][name]["rsd"] for r in runs if name in r["time"]] for name in runs[0]["time"]}
    if rsd:
        print("\ndevice time, relative standard deviation over each run's blocks (median of runs; "
              f"{runs[0]['timing']}): " + ", ".join(f"{n} {statistics.median(v):.1%}" for n, v in sorted(rsd.items())))


if __name__ == "__main__":
    main()
