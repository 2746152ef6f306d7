"""How long the autoload verification of one healthy backend takes, import cost included.

    .venv/bin/python bench/verify_speed.py [--repeat N] [--runs N] [--jobs N]

Builds the `pyd` fixture backend (tests/fixtures/backends/pyd: a PrivateUse1 device
with tensors) into a fresh venv over the cached torch 2.13.0 layer, then times
`ootci verify --backend <its manifest>` N times and prints the wall time of each and
every check's own duration. Goal: ≤ 15 s on 2 cores with the default 5 timed imports.
The machine's load average is printed too: on a shared machine it moves the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]
os.environ.setdefault("OOTCI_CACHE", str(REPO / ".cache" / "ootci"))

from support.fixture_backends import build_wheels, manifest_path  # noqa: E402

from ootci.runner.core import procs  # noqa: E402
from ootci.runner.torch_supply import envs  # noqa: E402

OOTCI = Path(sys.executable).with_name("ootci")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--runs", type=int, default=5, help="timed imports of the import-cost check")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()

    started = time.monotonic()
    layer, _ = envs.torch_layer(["torch==2.13.0"], "torch==2.13.0")
    wheel = build_wheels(layer)["pyd"]
    with tempfile.TemporaryDirectory() as tmp:
        env = envs.layered_env(layer, Path(tmp) / "venv")
        result = procs.run(envs.pip_argv(env, "install", "-q", "--no-deps", str(wheel)), timeout=600)
        assert result.ok, result.output_tail
        print(f"environment ready in {time.monotonic() - started:.1f} s; cores: {os.cpu_count()}; "
              f"load average: {os.getloadavg()[0]:.1f}")
        walls, cpus = [], []
        for i in range(args.repeat):
            start = time.monotonic()
            cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
            out = subprocess.run([str(OOTCI), "verify", "--python", str(env.python), "--backend",
                                  str(manifest_path("pyd")), "--json", "--runs", str(args.runs),
                                  "--jobs", str(args.jobs)], capture_output=True, text=True)
            wall = time.monotonic() - start
            cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
            walls.append(wall)
            cpus.append(cpu)
            report = json.loads(out.stdout)
            checks = ", ".join(f"{c['name']} {c.get('duration_s', 0):.1f}" for c in report["checks"])
            cost = next(c["data"] for c in report["checks"] if c["name"] == "import_cost")
            print(f"run {i + 1}: {report['status']} in {wall:.1f} s (load {os.getloadavg()[0]:.1f}) | {checks}")
            print(f"        import torch: {cost['autoload_ms']:.0f} ms with autoload, "
                  f"{cost['no_autoload_ms']:.0f} ms without, overhead {cost['overhead_ms']:+.0f} ms")
        cores = os.cpu_count() or 1
        print(f"CPU time of ootci verify and its probes: median {statistics.median(cpus):.1f} s, which "
              f"{cores} idle cores take at least {statistics.median(cpus) / cores:.1f} s to do")
        print(f"verify wall time: median {statistics.median(walls):.1f} s, min {min(walls):.1f} s "
              f"over {args.repeat} (goal ≤ 15 s on 2 cores)")


if __name__ == "__main__":
    main()
