"""The eight-commit bisection of tests/support/bisect_repo.py, timed.

    .venv/bin/python bench/bisect_backend.py [--cache DIR]

A fresh copy of the fixture (commit 3 breaks the build, commit 5 breaks float32 `mul`)
is made; the good end (commit 1) and the bad end (commit 8) are run as nightlies would
(`ootci run ... --suites smoke`), then `ootci bisect` walks the commits between them.
Every commit is new to the cache (the fixture's git source is new), so each candidate is
really built; only the torch layer and ccache are warm (.cache/ootci by default).
Prints the wall time of the end runs and of the bisection, its steps and verdict.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO)]

from tests.support import bisect_repo  # noqa: E402

OOTCI = Path(sys.executable).with_name("ootci")


def ootci(*argv: str, env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess]:
    start = time.monotonic()
    result = subprocess.run([str(OOTCI), *argv], env=env, capture_output=True, text=True, timeout=7200)
    return time.monotonic() - start, result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=REPO / ".cache" / "ootci")
    args = parser.parse_args()
    env = {**os.environ, "OOTCI_CACHE": str(args.cache)}
    from ootci.runner.models import BisectRecord
    from ootci.runner.records import record_files

    with tempfile.TemporaryDirectory(prefix="ootci-bisect-bench-") as tmp:
        root = Path(tmp)
        repo, commits = bisect_repo.make(root)
        runs = root / "runs"
        ends = 0.0
        for commit in (commits[0], commits[-1]):
            manifest = bisect_repo.manifest(root / commit[:10], repo)
            manifest.write_text(manifest.read_text().replace('ref = "main"', f'ref = "{commit}"'))
            took, _ = ootci("run", str(manifest), "--torch", "2.13.0", "--suites", "smoke", "--trigger", "nightly",
                            "--out", str(runs), env=env)
            ends += took
        good, bad = sorted((record_files.read(p, with_tests=False) for p in runs.glob("*/record.json")),
                           key=lambda r: r.started_at)
        took, result = ootci("bisect", str(bisect_repo.manifest(root, repo)), "--good", good.run_id, "--bad",
                             bad.run_id, "--runs", str(runs), "--out", str(root / "bisect"), env=env)
        (path,) = (root / "bisect").glob("*/bisect.json")
        record = BisectRecord.model_validate_json(path.read_text())
        steps = [s for r in record.rounds for s in r.steps]
        print(f"end runs (commits 1 and 8, smoke):  {ends:7.1f} s")
        print(f"bisection:                          {took:7.1f} s  (exit {result.returncode})")
        print(f"steps: {len(steps)} ({sum(s.verdict.value != 'skip' for s in steps)} judged, "
              f"{sum(s.verdict.value == 'skip' for s in steps)} skipped)")
        for r in record.rounds:
            for s in r.steps:
                print(f"  {r.candidates[s.candidate].label:<28} {s.verdict.value:<5} {s.duration_s:6.1f} s"
                      f"{'  re-run' if s.rerun else ''}")
        print(f"verdict: {record.result.summary if record.result else record.error}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
