"""The pipeline on every real torch release: the three-release table of docs/torch-releases.md.

    .venv/bin/python bench/torch_releases.py [--torch 2.13.0,2.14.0,2.15.0] [--cold] [--suites smoke,integration]

Runs `ootci run openreg --torch V` for each release and prints one Markdown table:
each stage's status and duration, the test counts, and the whole command's wall time.
With --cold, the runs use an empty OOTCI_CACHE (a temporary directory, removed
afterwards), so the torch stage includes installing the layer and the build stage
compiles without the cache's wheels (ccache is in the cache too, so it starts cold).
Without it, the runs use $OOTCI_CACHE as it is: what a second night costs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OOTCI = Path(sys.executable).with_name("ootci")
STAGES = ("torch", "build", "install", "autoload", "smoke", "integration")


def one_release(version: str, suites: str, cache: str | None) -> tuple[float, dict]:
    env = dict(os.environ, **({"OOTCI_CACHE": cache} if cache else {}))
    with tempfile.TemporaryDirectory() as out:
        start = time.monotonic()
        subprocess.run([str(OOTCI), "run", "openreg", "--torch", version, "--suites", suites, "--out", out],
                       check=False, capture_output=True, env=env)
        wall = time.monotonic() - start
        record = json.loads(next(Path(out).glob("*/record.json")).read_text())
    return wall, record


def counts(stage: dict | None) -> str:
    if not stage or not stage.get("counts"):
        return "-"
    return ", ".join(f"{n} {k}" for k, n in sorted(stage["counts"].items(), key=lambda kv: -kv[1]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--torch", default="2.13.0,2.14.0,2.15.0")
    parser.add_argument("--suites", default="smoke,integration")
    parser.add_argument("--cold", action="store_true", help="start from an empty OOTCI_CACHE")
    args = parser.parse_args()
    cache = tempfile.mkdtemp(prefix="ootci-cold-cache-") if args.cold else None
    rows = []
    try:
        for version in args.torch.split(","):
            wall, record = one_release(version, args.suites, cache)
            stages = {s["name"]: s for s in record["stages"]}
            cells = [f"{stages[n]['status']} {stages[n]['duration_s']:.1f} s" if n in stages else "-" for n in STAGES]
            torch = record["torch"]
            rows.append([version, f"{torch.get('version')} ({(torch.get('git_version') or '')[:12]})", *cells,
                         counts(stages.get("smoke")), counts(stages.get("integration")), f"{wall:.0f} s"])
            print(f"{version}: {record['status']} in {wall:.0f} s", file=sys.stderr)
    finally:
        if cache:
            shutil.rmtree(cache, ignore_errors=True)
    header = ["--torch", "torch that ran", *STAGES, "smoke tests", "integration tests", "wall"]
    print(f"cache: {'empty (--cold)' if args.cold else os.environ.get('OOTCI_CACHE', '~/.cache/ootci')}")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
