"""From `ootci init` to a first green `ootci run`, on a fresh copy of a C++ fixture repository.

    .venv/bin/python bench/onboarding.py [--fixture setup-py|pyproject|scikit-build] [--only cold|warm]

cold: an empty cache directory (OOTCI_CACHE): the torch layer is installed (torch 2.13.0
from pip), the compiler cache is empty. warm: the test suite's cache (.cache/ootci), whose
torch layer is already there. Either way the repository is a copy ootci has never seen (a
file with a random token makes its source hash new), so its C++ sources are compiled.
Prints the wall time of `ootci init`, of the first `ootci run ci/backend.toml --torch
2.13.0 --suites smoke`, their sum, and the stages of each.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests")]

from support.init_fixtures import BACKENDS, materialize  # noqa: E402

OOTCI = Path(sys.executable).with_name("ootci")
STAGE = re.compile(r"^\s+\S+\s+(\w+)\s+(\w+)\s+([\d.]+)s")


def timed(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess]:
    start = time.monotonic()
    result = subprocess.run([str(OOTCI), *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=3600)
    return time.monotonic() - start, result


def stages(output: str) -> str:
    found = [m.groups() for m in map(STAGE.match, output.splitlines()) if m]
    return ", ".join(f"{name} {seconds}s" for name, status, seconds in found)


def onboard(fixture: str, cache: Path, label: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY")}
    env["OOTCI_CACHE"] = str(cache)
    with tempfile.TemporaryDirectory(prefix="ootci-onboarding-") as tmp:
        repo = materialize(fixture, Path(tmp) / "repo")
        (repo / "BENCH_TOKEN").write_text(secrets.token_hex(8) + "\n")  # no build cache hit
        init_s, init = timed(["init", "--torch", "2.13.0"], repo, env)
        if init.returncode != 0:
            sys.exit(f"{label}: ootci init failed:\n{init.stdout}{init.stderr}")
        run_s, run = timed(["run", "ci/backend.toml", "--torch", "2.13.0", "--suites", "smoke",
                            "--out", str(Path(tmp) / "runs")], repo, env)
        if run.returncode != 0:
            sys.exit(f"{label}: the first run is not green:\n{run.stdout}{run.stderr}")
        record = json.loads(next((Path(tmp) / "runs").glob("*/record.json")).read_text())
    print(f"{label}: init {init_s:.1f} s + first green run {run_s:.1f} s = {init_s + run_s:.1f} s "
          f"(smoke: {record['test_counts']})")
    print(f"  init: {stages(init.stderr)}")
    print(f"  run:  {stages(run.stderr)}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fixture", default="setup-py", choices=sorted(BACKENDS))
    parser.add_argument("--only", choices=["cold", "warm"])
    args = parser.parse_args()
    print(f"fixture {args.fixture} ({BACKENDS[args.fixture][0]}, device {BACKENDS[args.fixture][2]}), "
          f"{os.cpu_count()} CPUs")
    if args.only in (None, "cold"):
        cache = Path(tempfile.mkdtemp(prefix="ootci-cold-cache-"))
        try:
            onboard(args.fixture, cache, "cold cache (torch installed, compiler cache empty)")
        finally:
            shutil.rmtree(cache, ignore_errors=True)
    if args.only in (None, "warm"):
        cache = Path(os.environ.get("OOTCI_CACHE", REPO / ".cache" / "ootci"))
        onboard(args.fixture, cache, f"warm cache ({cache}: torch layer reused)")


if __name__ == "__main__":
    main()
