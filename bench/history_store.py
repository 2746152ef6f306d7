"""Scale benchmark of the history store (run by hand; prints figures, asserts nothing).

    python bench/history_store.py                      # 100 backends x 365 nights x 2,000 tests
    python bench/history_store.py --backends 10 --keep # smaller, keep the data for another go
    python bench/history_store.py --backends 2 --runs 20 --tests 100000 # a year of 100 such, projected

The history as the data branch keeps it (runner/history/history_store.py): headers, results packed
against shared test sets, no logs. Phases:
  1. generate the store with the synthetic generator (durations vary per night, as real ones);
  2. its size on disk, and in git once pushed to a bare repository (packed, as GitHub holds it);
  3. a nightly's fetch: `ootci history pull` (partial: every header, each backend's newest
     runs) and, for comparison, `--full`, both over git's file:// transport;
  4. a cold `ootci dashboard build` of the partial checkout, with the time from nothing to a site.
With fewer than 100 backends or 365 nights, the size in git is projected to a year of 100
backends: each run's packed results and header as measured, one test set per backend (the
generator keeps a backend's tests the same every night; a set that changes costs its size again).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ootci.dashboard import synthetic  # noqa: E402

OOTCI = Path(sys.executable).with_name("ootci")


def du(path: Path) -> tuple[int, int, int]:
    """(apparent bytes, bytes on disk in blocks, files) under path."""
    apparent = blocks = files = 0
    for f in path.rglob("*"):
        if f.is_file():
            st = f.stat()
            apparent += st.st_size
            blocks += st.st_blocks * 512
            files += 1
    return apparent, blocks, files


def timed(label: str, fn):
    start = time.perf_counter()
    result = fn()
    seconds = time.perf_counter() - start
    print(f"{label:<44} {seconds:8.2f} s", flush=True)
    return result, seconds


def run(*argv: str, cwd: Path | None = None) -> str:
    result = subprocess.run([str(a) for a in argv], capture_output=True, text=True, cwd=cwd)
    if result.returncode != 0:
        sys.exit(f"{' '.join(map(str, argv))} failed:\n{result.stdout}{result.stderr}")
    return result.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", type=int, default=100)
    ap.add_argument("--runs", type=int, default=365)
    ap.add_argument("--tests", type=int, default=2000)
    ap.add_argument("--workdir", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "ootci-history-bench")
    ap.add_argument("--keep", action="store_true", help="keep (and reuse) the generated store and its remote")
    ap.add_argument("--failures", type=int, default=10, help="tests a red night fails, each with a 2 KB log tail")
    args = ap.parse_args()

    seed, remote = args.workdir / "seed", args.workdir / "remote.git"
    stamp = args.workdir / f"data-{args.backends}x{args.runs}x{args.tests}-failures{args.failures}"
    if not stamp.exists():
        shutil.rmtree(args.workdir, ignore_errors=True)
        step = max(1, args.backends // 10)
        written, _ = timed(f"generate {args.backends * args.runs} runs", lambda: synthetic.write_store_fast(
            seed / "runs", args.backends, args.runs, args.tests, failures=args.failures,
            progress=lambda b: b % step == 0 and print(f"  {b}/{args.backends} backends", flush=True)))
        apparent, blocks, files = du(seed / "runs")
        headers = sum(p.stat().st_size for p in (seed / "runs").glob("*/record.json"))
        print(f"  store on disk: {apparent / 1e6:.0f} MB in {files} files ({blocks / 1e6:.0f} MB in blocks); "
              f"headers {headers / 1e6:.0f} MB, packed results {(apparent - headers) / 1e6:.0f} MB")
        run("git", "init", "-q", "--bare", remote)
        run("git", "-C", remote, "config", "uploadpack.allowFilter", "true")
        timed("commit and push the whole store", lambda: run(
            OOTCI, "history", "push", seed, "--branch", "ootci-data", "--remote", f"file://{remote}"))
        timed("git gc of the remote", lambda: run("git", "-C", remote, "gc", "-q"))
        stamp.write_text("")
    packed, _, _ = du(remote)
    print(f"  in git (the bare remote, packed): {packed / 1e6:.0f} MB")
    testsets = sum(p.stat().st_size for p in (seed / "runs" / ".testsets").glob("*.json.gz"))
    per_run = (packed - testsets) / (args.backends * args.runs)
    year = 100 * 365 * per_run + 100 * testsets / args.backends
    print(f"  per run {per_run / 1e3:.0f} KB, test sets {testsets / args.backends / 1e3:.0f} KB a backend: "
          f"a year of 100 backends {year / 1e9:.2f} GB (GitHub recommends at most 5 GB)")

    for label, extra in (("nightly fetch: pull --latest 14 (partial)", []), ("full fetch: pull --full", ["--full"])):
        checkout = args.workdir / ("partial" if not extra else "full")
        shutil.rmtree(checkout, ignore_errors=True)
        out, seconds = timed(label, partial(run, OOTCI, "history", "pull", checkout, "--branch", "ootci-data",
                                                "--remote", f"file://{remote}", *extra))
        git_bytes, _, _ = du(checkout / ".git")
        work, _, files = du(checkout / "runs")
        print(f"  {out.strip().split(': ', 2)[-1]}")
        print(f"  fetched into .git: {git_bytes / 1e6:.0f} MB; checked out: {work / 1e6:.0f} MB in {files} files")

    site, state = args.workdir / "site", args.workdir / "site-state"
    shutil.rmtree(site, ignore_errors=True)
    shutil.rmtree(state, ignore_errors=True)
    out, build = timed("cold dashboard build of the partial checkout", lambda: run(
        OOTCI, "dashboard", "build", "--data", args.workdir / "partial" / "runs", "--out", site, "--state", state))
    print("  " + out.strip().splitlines()[0])
    if not args.keep:
        shutil.rmtree(args.workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
