"""Wall time of ootci's device-generic suites, as `ootci test` runs them.

    .venv/bin/python bench/suites_speed.py                 # openreg and cpu, smoke and integration
    .venv/bin/python bench/suites_speed.py --only openreg --suite smoke

Builds (or reuses) the torch 2.13.0 layer and an OpenReg wheel in $OOTCI_CACHE, makes
fresh environments over them, then times each suite: wall seconds, CPU seconds of
all its processes, and the tests by outcome. Goals (docs/suites.md): smoke <= 30 s
and the whole op_db integration suite <= 120 s on OpenReg with 2 cores (-n 2).
The machine's load average is printed with the figures: on a shared machine the wall
time grows with it while the CPU time does not. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ootci.runner.core import procs  # noqa: E402
from ootci.runner.torch_supply import envs  # noqa: E402

TORCH = "torch==2.13.0"
BACKENDS = {
    "openreg": "openreg",
    "cpu": str(REPO / "tests" / "fixtures" / "backends" / "cpu-partial" / "backend.toml"),
}


def openreg_wheel(layer: envs.Env) -> Path:
    root = REPO / "backends" / "openreg"
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).parts
        if (path.is_file() and "build" not in rel and "__pycache__" not in rel
                and not any(p.endswith(".egg-info") for p in rel)):
            h.update("/".join(rel).encode() + b"\0" + path.read_bytes())
    wheels = envs.cache_root() / "wheels" / f"openreg-{h.hexdigest()[:16]}"
    wheels.mkdir(parents=True, exist_ok=True)
    if not list(wheels.glob("*.whl")):
        print("building the OpenReg wheel ...", flush=True)
        built = procs.run(envs.pip_argv(layer, "wheel", "--no-build-isolation", "--no-deps", str(root), "-w",
                                        str(wheels)),
                          timeout=3600, env=dict(os.environ, MAX_JOBS="2"))
        if not built.ok:
            sys.exit(f"OpenReg wheel build failed:\n{built.output_tail[-2000:]}")
    return next(wheels.glob("*.whl"))


def environment(layer: envs.Env, backend: str, where: Path) -> Path:
    if backend == "cpu":
        return layer.python
    env = envs.layered_env(layer, where / backend)
    installed = procs.run(envs.pip_argv(env, "install", "--no-deps", str(openreg_wheel(layer))), timeout=600)
    if not installed.ok:
        sys.exit(f"installing OpenReg failed:\n{installed.output_tail[-2000:]}")
    return env.python


def time_suite(python: Path, backend: str, suite: str, out: Path, jobs: int) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "ootci.runner", "test", "--python", str(python), "--backend",
                           BACKENDS[backend], "--suite", suite, "--out", str(out), "--jobs", str(jobs)],
                          cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    record = json.loads((out / "record.json").read_text())
    stage = record["stages"][0]
    return {"backend": backend, "suite": suite, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
            "suite_s": round(sum(s["duration_s"] for s in stage["data"].get("suites", {}).values()), 1),
            "status": stage["status"], "tests": sum(stage["counts"].values()), "counts": stage["counts"],
            "exit": done.returncode}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(BACKENDS), action="append", help="backend(s) to time (default: all)")
    parser.add_argument("--suite", choices=["smoke", "integration"], action="append", help="suite(s) (default: both)")
    parser.add_argument("--jobs", type=int, default=2, help="xdist workers for integration (default 2)")
    args = parser.parse_args()
    layer, _ = envs.torch_layer([TORCH], TORCH)
    rows = []
    with tempfile.TemporaryDirectory(prefix="ootci-bench-") as tmp:
        for backend in args.only or ["openreg", "cpu"]:
            python = environment(layer, backend, Path(tmp))
            for suite in args.suite or ["smoke", "integration"]:
                row = time_suite(python, backend, suite, Path(tmp) / f"{backend}-{suite}", args.jobs)
                row["load_avg_1m"] = round(os.getloadavg()[0], 1)
                rows.append(row)
                print(json.dumps(row), flush=True)
    print(f"\n{'backend':8} {'suite':12} {'wall s':>7} {'suite s':>8} {'cpu s':>7} {'tests':>6} {'load':>5}  status")
    for r in rows:
        print(f"{r['backend']:8} {r['suite']:12} {r['wall_s']:7.1f} {r['suite_s']:8.1f} {r['cpu_s']:7.1f} "
              f"{r['tests']:6d} {r['load_avg_1m']:5.1f}  {r['status']} {r['counts']}")
    print(f"(cpu count {os.cpu_count()}; integration with -n {args.jobs})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
