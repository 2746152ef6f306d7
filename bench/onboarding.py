"""From `ootci init` to a first green `ootci run`, on a fresh copy of a C++ fixture repository.

    .venv/bin/python bench/onboarding.py [--fixture setup-py|pyproject|scikit-build] [--only cold|warm]
                                         [--init-args "ARGS"]

cold: an empty cache directory (OOTCI_CACHE): the torch layer is installed (torch 2.13.0
from pip), the compiler cache is empty. warm: the test suite's cache (.cache/ootci), whose
torch layer is already there. Either way the repository is a copy ootci has never seen (a
file with a random token makes its source hash new), so its C++ sources are compiled.
`ootci init --torch 2.13.0` (with --init-args, e.g. "--suites smoke") builds, probes, runs the
suites once and records their failures as the baseline; then the run it names (its "Next:"
line, `ootci run ci/backend.toml --torch 2.13.0 ...`) must be green on that baseline. Prints
the wall time of each, their sum, and the stages of each.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shlex
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


def named_run(stdout: str) -> list[str]:
    """The arguments of the `ootci run` init's "Next:" says to make."""
    line = next(text for text in stdout.splitlines() if text.startswith("  ootci run ci/backend.toml"))
    return shlex.split(line.split("#", 1)[0])[1:]


def onboard(fixture: str, cache: Path, label: str, init_args: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY")}
    env["OOTCI_CACHE"] = str(cache)
    with tempfile.TemporaryDirectory(prefix="ootci-onboarding-") as tmp:
        repo = materialize(fixture, Path(tmp) / "repo")
        (repo / "BENCH_TOKEN").write_text(secrets.token_hex(8) + "\n")  # no build cache hit
        init_s, init = timed(["init", "--torch", "2.13.0", *init_args], repo, env)
        if init.returncode != 0:
            sys.exit(f"{label}: ootci init failed:\n{init.stdout}{init.stderr}")
        next_run = named_run(init.stdout)
        run_s, run = timed([*next_run, "--out", str(Path(tmp) / "runs")], repo, env)
        if run.returncode != 0:
            sys.exit(f"{label}: the first run is not green:\n{run.stdout}{run.stderr}")
        record = json.loads(next((Path(tmp) / "runs").glob("*/record.json")).read_text())
        known = [text.strip() for text in init.stdout.splitlines() if text.startswith("  known failures:")]
    print(f"{label}: init {init_s:.1f} s + first green run {run_s:.1f} s = {init_s + run_s:.1f} s "
          f"(`ootci {' '.join(next_run)}`: {record['test_counts']}{''.join(f'; {k}' for k in known)})")
    print(f"  init: {stages(init.stderr)}")
    print(f"  run:  {stages(run.stderr)}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fixture", default="setup-py", choices=sorted(BACKENDS))
    parser.add_argument("--only", choices=["cold", "warm"])
    parser.add_argument("--init-args", default="", help="more arguments of `ootci init` (e.g. \"--suites smoke\")")
    args = parser.parse_args()
    init_args = shlex.split(args.init_args)
    print(f"fixture {args.fixture} ({BACKENDS[args.fixture][0]}, device {BACKENDS[args.fixture][2]}), "
          f"{os.cpu_count()} CPUs")
    if args.only in (None, "cold"):
        cache = Path(tempfile.mkdtemp(prefix="ootci-cold-cache-"))
        try:
            onboard(args.fixture, cache, "cold cache (torch installed, compiler cache empty)", init_args)
        finally:
            shutil.rmtree(cache, ignore_errors=True)
    if args.only in (None, "warm"):
        cache = Path(os.environ.get("OOTCI_CACHE", REPO / ".cache" / "ootci"))
        onboard(args.fixture, cache, f"warm cache ({cache}: torch layer reused)", init_args)


if __name__ == "__main__":
    main()
