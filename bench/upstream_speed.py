"""The upstream stage against plain pytest on the same PyTorch test files, on OpenReg.

    .venv/bin/python bench/upstream_speed.py --upstream-tests DIR [--files a.py,b.py] [--rounds 3]

DIR is a folder of PyTorch's test/ (public copies, or a checkout); the files default to those
OpenReg's [suites.upstream] takes from it (its list, or what its discovery finds there). Builds
(or reuses) the torch 2.13.0 layer and an OpenReg wheel in $OOTCI_CACHE, makes one environment
over them with the suite's requirements, then times, alternately, `rounds` times each:

- plain pytest: `python -m pytest FILES` with PYTORCH_TESTING_DEVICE_ONLY_FOR=openreg, one
  process, as a vendor would run them by hand;
- the upstream stage: `ootci test --suite upstream --upstream-tests DIR`, its CPU re-runs
  and retries included (the fetch is not part of it: the files are given).

Goal (issue 42): the stage's wall time at most 1.5x plain pytest's. Prints each round's wall
and CPU seconds, the medians and their ratio, and the machine's load average (wall time grows
with load; the ratio of alternated runs much less). Asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ootci.runner.core import procs  # noqa: E402
from ootci.runner.manifests import manifest  # noqa: E402
from ootci.runner.manifests.manifest import UPSTREAM_REQUIREMENTS  # noqa: E402
from ootci.runner.torch_supply import envs, upstream_discovery  # noqa: E402
from tests.support.fixture_backends import openreg_wheels  # noqa: E402

TORCH = "torch==2.13.0"
OPENREG_MANIFEST = REPO / "backends" / "openreg" / "backend.toml"


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, int]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), done.returncode


def _openreg_files(test_dir: Path) -> list[str]:
    suite = manifest.load(OPENREG_MANIFEST).suites.upstream
    assert suite is not None, f"{OPENREG_MANIFEST} has no [suites.upstream]"
    return upstream_discovery.discover(test_dir, suite.exclude).files if suite.discovers else list(suite.files)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream-tests", type=Path, required=True, help="PyTorch's test/ folder (or a checkout)")
    parser.add_argument("--files", help="comma-separated files under test/ (default: OpenReg's manifest's)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    test_dir = args.upstream_tests / "test" if (args.upstream_tests / "test").is_dir() else args.upstream_tests
    files = args.files.split(",") if args.files else _openreg_files(test_dir)
    layer, _ = envs.torch_layer([TORCH], TORCH)
    work = Path(tempfile.mkdtemp(prefix="ootci-bench-upstream-"))
    env = envs.layered_env(layer, work / "env")
    installed = procs.run(envs.pip_argv(env, "install", *map(str, openreg_wheels(layer)), *UPSTREAM_REQUIREMENTS),
                          timeout=900)
    if not installed.ok:
        sys.exit(f"making the environment failed:\n{installed.output_tail[-2000:]}")
    plain_env = dict(os.environ, PYTORCH_TESTING_DEVICE_ONLY_FOR="openreg", PYTHONSAFEPATH="1")
    plain = [str(env.python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "--noconftest",
             "--rootdir", str(test_dir), *(str(test_dir / f) for f in files)]
    stage = [sys.executable, "-m", "ootci.runner", "test", "--python", str(env.python), "--backend", "openreg",
             "--suite", "upstream", "--upstream-tests", str(test_dir), "--upstream-files", ",".join(files)]
    rows = {"plain pytest": [], "upstream stage": []}
    for round_no in range(args.rounds):
        (work / f"run{round_no}").mkdir()
        rows["plain pytest"].append(timed(plain, plain_env, work / f"run{round_no}"))
        rows["upstream stage"].append(timed(stage + ["--out", str(work / f"out{round_no}")], dict(os.environ), REPO))
        print(f"round {round_no + 1}: plain {rows['plain pytest'][-1][0]:.1f} s, "
              f"stage {rows['upstream stage'][-1][0]:.1f} s, load {os.getloadavg()[0]:.2f}", flush=True)
    print(f"\nfiles: {', '.join(files)} from {test_dir}")
    for name, runs in rows.items():
        walls, cpus = [w for w, _, _ in runs], [c for _, c, _ in runs]
        print(f"{name:15} wall median {statistics.median(walls):6.1f} s (min {min(walls):.1f}, max {max(walls):.1f})"
              f"   CPU median {statistics.median(cpus):6.1f} s   exit {runs[-1][2]}")
    ratios = [s[0] / p[0] for p, s in zip(rows["plain pytest"], rows["upstream stage"], strict=True)]
    print(f"stage / plain wall, round by round: {', '.join(f'{r:.2f}' for r in ratios)}; "
          f"median {statistics.median(ratios):.2f} (goal <= 1.5)")


if __name__ == "__main__":
    main()
