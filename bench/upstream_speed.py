"""The upstream stage against plain pytest on the same PyTorch test files, on OpenReg: CPU first.

    .venv/bin/python bench/upstream_speed.py --upstream-tests DIR [--files a.py,b.py] [--rounds 3]
    .venv/bin/python bench/upstream_speed.py --generated 20000 [--rounds 3] [--workdir DIR]

DIR is a folder of PyTorch's test/ (public copies, or a checkout); the files default to
those OpenReg's [suites.upstream] takes from it (its list, or what its discovery finds there).
`--generated N` writes one device-generic file of N tests instead (tests/support/generated_upstream.py:
a real op per test, 4 dtypes, 340 of 20,000 failing in four ways, 40 of those on CPU too).
Builds (or reuses) the torch 2.13.0 layer and an OpenReg wheel in $OOTCI_CACHE, makes one
environment over them with the suite's requirements (kept in --workdir for the next
go), then runs, alternately, `rounds` times each:

- plain pytest: `python -m pytest FILES` with PYTORCH_TESTING_DEVICE_ONLY_FOR=openreg, one
  process, as a vendor would run them by hand;
- the upstream stage: `ootci test --suite upstream --upstream-tests DIR`, the second opinion
  (the re-run on the device and the CPU run) included;
- ootci without the stage: the same command naming a file that is not there, so that no pytest
  runs. Its CPU (ootci's start, the environment's torch probe, the record) is taken from the
  stage's: the stage's CPU is the difference, as the issue measured it.

Goal (issue 51): the stage's CPU at most 1.10x plain pytest's at 20,000 tests in one file. CPU
moves by about 10 % from try to try on a shared machine: compare the rounds, not one figure. Wall
time is printed too (it grows with the machine's load, and the stage forks one child per core).
Prints each round's figures, the medians and the ratios, and the run directory's size. Asserts
nothing.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ootci.runner.core import procs  # noqa: E402
from ootci.runner.manifests import manifest  # noqa: E402
from ootci.runner.manifests.manifest import UPSTREAM_REQUIREMENTS  # noqa: E402
from ootci.runner.torch_supply import envs, upstream_discovery  # noqa: E402
from tests.support import generated_upstream  # noqa: E402
from tests.support.fixture_backends import openreg_wheels  # noqa: E402

TORCH = "torch==2.13.0"
OPENREG_MANIFEST = REPO / "backends" / "openreg" / "backend.toml"
GENERATED = "test_generated_ops.py"


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, int]:
    """(wall s, CPU s of the command and all its children, exit code)"""
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


def du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def environment(work: Path):
    layer, _ = envs.torch_layer([TORCH], TORCH)
    env = envs.layered_env(layer, work / "env")
    stamp = work / "env" / ".ootci-bench-installed"
    if not stamp.exists():
        installed = procs.run(envs.pip_argv(env, "install", *map(str, openreg_wheels(layer)), *UPSTREAM_REQUIREMENTS),
                              timeout=900)
        if not installed.ok:
            sys.exit(f"making the environment failed:\n{installed.output_tail[-2000:]}")
        stamp.touch()
    return env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream-tests", type=Path, help="PyTorch's test/ folder (or a checkout)")
    parser.add_argument("--generated", type=int, metavar="N", help="one generated file of N tests instead")
    parser.add_argument("--files", help="comma-separated files under test/ (default: OpenReg's manifest's)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "ootci-bench-upstream",
                        help="the environment and the runs (the environment is kept for the next go)")
    args = parser.parse_args()
    work = args.workdir
    if args.generated:
        test_dir = generated_upstream.write(work / "test" / GENERATED, args.generated).parent
        files = [GENERATED]
    elif args.upstream_tests:
        test_dir = args.upstream_tests / "test" if (args.upstream_tests / "test").is_dir() else args.upstream_tests
        files = args.files.split(",") if args.files else _openreg_files(test_dir)
    else:
        parser.error("give --upstream-tests DIR or --generated N")
    env = environment(work)
    plain_env = dict(os.environ, PYTORCH_TESTING_DEVICE_ONLY_FOR="openreg", PYTHONSAFEPATH="1")
    plain = [str(env.python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "--noconftest",
             "--rootdir", str(test_dir), *(str(test_dir / f) for f in files)]
    ootci = [sys.executable, "-m", "ootci.runner", "test", "--python", str(env.python), "--backend", "openreg",
             "--suite", "upstream", "--upstream-tests", str(test_dir)]
    stage = ootci + ["--upstream-files", ",".join(files)]
    without = ootci + ["--upstream-files", "test_not_there.py"]
    rows: dict[str, list[tuple[float, float, int]]] = {"plain pytest": [], "ootci test": [], "ootci, no stage": []}
    sizes = {}
    for round_no in range(args.rounds):
        out = work / f"out{round_no}"
        for folder in (out, work / f"plain{round_no}", work / f"none{round_no}"):
            shutil.rmtree(folder, ignore_errors=True)
        (work / f"plain{round_no}").mkdir(parents=True)
        rows["plain pytest"].append(timed(plain, plain_env, work / f"plain{round_no}"))
        rows["ootci test"].append(timed(stage + ["--out", str(out)], dict(os.environ), REPO))
        rows["ootci, no stage"].append(timed(without + ["--out", str(work / f"none{round_no}")], dict(os.environ),
                                             REPO))
        sizes = {"run directory": du(out), "junit/": du(out / "junit"),
                 **{p.name: p.stat().st_size for p in out.glob("tests.json*")}}
        stage_cpu = rows["ootci test"][-1][1] - rows["ootci, no stage"][-1][1]
        print(f"round {round_no + 1}: CPU plain {rows['plain pytest'][-1][1]:.1f} s, stage {stage_cpu:.1f} s "
              f"({stage_cpu / rows['plain pytest'][-1][1]:.2f}x); wall plain {rows['plain pytest'][-1][0]:.1f} s, "
              f"ootci test {rows['ootci test'][-1][0]:.1f} s; load {os.getloadavg()[0]:.2f}", flush=True)
    print(f"\nfiles: {', '.join(files)} from {test_dir}")
    for name, runs in rows.items():
        walls, cpus = [w for w, _, _ in runs], [c for _, c, _ in runs]
        print(f"{name:16} CPU median {statistics.median(cpus):6.1f} s (min {min(cpus):.1f}, max {max(cpus):.1f})"
              f"   wall median {statistics.median(walls):6.1f} s   exit {runs[-1][2]}")
    ratios = [(s[1] - n[1]) / p[1] for p, s, n in zip(rows["plain pytest"], rows["ootci test"], rows["ootci, no stage"],
                                                      strict=True)]
    print(f"stage CPU / plain pytest CPU, round by round: {', '.join(f'{r:.2f}' for r in ratios)}; "
          f"median {statistics.median(ratios):.2f} (goal <= 1.10)")
    print("last run: " + ", ".join(f"{k} {v / 1e6:.2f} MB" for k, v in sizes.items()))


if __name__ == "__main__":
    main()
