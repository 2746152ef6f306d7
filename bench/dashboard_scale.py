"""Scale benchmark of `ootci dashboard build` (run by hand; prints figures, asserts nothing).

    python bench/dashboard_scale.py                      # 100 backends x 365 nights x 2,000 tests
    python bench/dashboard_scale.py --runs 30 --keep     # smaller, keep the data for another go
    python bench/dashboard_scale.py --bench-backends 100 # every backend with a bench stage
    python bench/dashboard_scale.py --tests 100000 --runs 14 --failures 5000 --backends 10

Goals: full build <= 20 s, index.html <= 300 KB, adding one night <= 3 s (2,000 tests a run);
at 100,000 tests a run (issue 51): the largest page at most 1 MB, and the site of 100
backends x 14 run pages under 1 GB (GitHub Pages' limit). Phases: generate the records (not
timed against a goal), a cold full build (parse every record into a fresh index, render
everything), a no-change rebuild, adding one night to one backend, and a full re-render from
the warm index (--rebuild). Then the site's size: in all, its run pages, the runs' JSON test
lists and the test sets they share, the largest page, and with fewer than 100 backends the
site scaled to 100 (a backend's pages do not depend on the others').
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ootci.dashboard import site, synthetic  # noqa: E402


def du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def sizes(out: Path, backends: int) -> tuple[int, int]:
    """Print the site's size by kind of file and its largest page; (largest page, site) in bytes."""
    kinds = {"run pages": "runs/*/*.html", "runs' JSON test lists": "runs/*/*.tests.json.gz",
             "run logs": "runs/*/*.log.txt", "shared test sets": "api/testsets/*.json.gz"}
    for kind, pattern in kinds.items():
        found = list(out.glob(pattern))
        total = sum(f.stat().st_size for f in found)
        print(f"{kind:<34} {total / 1e6:8.1f} MB in {len(found)} files"
              + (f" (largest {max(f.stat().st_size for f in found) / 1e3:.0f} KB)" if found else ""))
    pages = sorted(out.rglob("*.html"), key=lambda f: f.stat().st_size)
    site_bytes = du(out)
    print(f"largest page                       {pages[-1].stat().st_size / 1e6:8.2f} MB "
          f"({pages[-1].relative_to(out)})")
    print(f"site size                          {site_bytes / 1e6:8.1f} MB for {backends} backends; "
          f"for 100: {site_bytes * 100 / backends / 1e9:.2f} GB")
    return pages[-1].stat().st_size, site_bytes


def timed(label: str, fn):
    start = time.perf_counter()
    result = fn()
    seconds = time.perf_counter() - start
    print(f"{label:<34} {seconds:8.2f} s", flush=True)
    return result, seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", type=int, default=100)
    ap.add_argument("--runs", type=int, default=365)
    ap.add_argument("--tests", type=int, default=2000)
    ap.add_argument("--run-pages", type=int, default=site.DEFAULT_RUN_PAGES)
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--workdir", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "ootci-dashboard-bench")
    ap.add_argument("--keep", action="store_true", help="keep (and reuse) the generated records")
    ap.add_argument("--bench-backends", type=int, default=0,
                    help="backends with a bench stage every night (their pages judge 16 series each)")
    ap.add_argument("--failures", type=int, default=10,
                    help="tests a red night fails, each with a 2 KB log tail (a third of the backends turn red)")
    args = ap.parse_args()

    data, out = args.workdir / "runs", args.workdir / "site"
    stamp = args.workdir / f"data-{args.backends}x{args.runs}x{args.tests}-bench{args.bench_backends}" \
                           f"-failures{args.failures}"
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(site.default_state(out), ignore_errors=True)
    if not stamp.exists():
        shutil.rmtree(args.workdir, ignore_errors=True)
        data.mkdir(parents=True)
        step = max(1, args.backends // 10)
        written, _ = timed(f"generate {args.backends * args.runs} records", lambda: synthetic.write_fast(
            data, args.backends, args.runs, args.tests, bench=args.bench_backends, failures=args.failures,
            progress=lambda b: b % step == 0 and print(f"  {b}/{args.backends} backends", flush=True)))
        print(f"  {written / 1e9:.2f} GB of record JSON")
        stamp.touch()
    # As the CLI does: the replaced site is deleted by a detached process after the swap.
    quiet = {"warn": lambda line: None, "run_pages": args.run_pages, "jobs": args.jobs, "background_cleanup": True}

    added: list[Path] = []  # the night the benchmark adds; removed again when the data is kept
    try:
        report, full = timed("full build (cold index)", lambda: site.build(data, out, **quiet))
        print(f"  {report.line()}\n  phases: {report.seconds}")
        index_kb = (out / "index.html").stat().st_size / 1024
        print(f"index.html                         {index_kb:8.1f} KB")
        print(f"site size                          {du(out) / 1e6:8.1f} MB"
              f" (index {site.default_state(out).joinpath('index.sqlite').stat().st_size / 1e6:.0f} MB)")

        report, _ = timed("rebuild, nothing changed", lambda: site.build(data, out, **quiet))
        print(f"  phases: {report.seconds}")

        first = data / "vendor000"
        before = set(os.listdir(first))
        synthetic.write_fast(data, args.backends, 1, args.tests, start_night=args.runs, only=0,
                             bench=args.bench_backends, failures=args.failures)
        added = [first / name for name in set(os.listdir(first)) - before]
        report, add = timed("add one night to one backend", lambda: site.build(data, out, **quiet))
        print(f"  {report.line()}\n  phases: {report.seconds}")

        report, warm = timed("full re-render (warm index)", lambda: site.build(data, out, rebuild=True, **quiet))
        print(f"  phases: {report.seconds}")
        largest, site_bytes = sizes(out, args.backends)
    finally:
        # The replaced sites are deleted by detached processes: let them finish, so that
        # the next run of this benchmark does not share the disk and CPU with them.
        deadline = time.monotonic() + 120
        while list(args.workdir.glob(f".{out.name}.old-*")) and time.monotonic() < deadline:
            time.sleep(0.2)
        if not args.keep:
            shutil.rmtree(args.workdir, ignore_errors=True)
        else:  # the kept data stays the generated size for the next go
            for run_dir in added:
                shutil.rmtree(run_dir, ignore_errors=True)

    print(f"\ngoals: full build {full:.1f} s (<= 20; warm re-render {warm:.1f} s), "
          f"index.html {index_kb:.0f} KB (<= 300), add one night {add:.2f} s (<= 3), "
          f"largest page {largest / 1e6:.2f} MB (<= 1), "
          f"site for 100 backends {site_bytes * 100 / args.backends / 1e9:.2f} GB (< 1)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
