"""A 3 % host-cost regression planted in OpenReg's C++ fallback behind a commit: found by the
nightly's detector on its first night, and bisected to that commit by `ootci bisect --perf`.

    .venv/bin/python bench/perf_planted.py [--nights-before 3] [--only NAME,...] [--watch add_tiny] [--keep DIR]

The fixture repository holds OpenReg's sources in four commits: as bundled; a README line; the
plant (the boxed fallback looks its own operator up in the dispatcher again, by name, on every
call: one more dispatcher call per op, about 550 instructions, 3 % of `add_tiny` on the device);
a comment. The nights are real nightlies: `ootci run <fixture> --suites bench --trigger nightly`
(every measurement, unless --only), --nights-before at commit 1 and then one at commit 4, each
followed by the nightly's plan (`ootci bisect --turned-red`, nightly.yml's bisect-plan). Then
the bisection the plan asks for the watched measurement, as bisect.yml runs it. Prints each
night's count of the watched measurement and the plan's entries, the bisection's steps and
verdict, and the wall times. Commits 1 and 2 build from ccache (OpenReg as bundled); 3 and 4
compile the fallback's translation unit once.
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

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO)]

from tests.support.bisect_repo import OPENREG, commit, openreg_manifest  # noqa: E402

OOTCI = Path(sys.executable).with_name("ootci")
NAME = "openreg-planted"
FALLBACK = Path("csrc") / "aten" / "Fallback.cpp"
REDISPATCH = "  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);\n"
PLANT = (REDISPATCH
         + "  // One more dispatcher call per op: the operator looked up again by name.\n"
         + "  (void)c10::Dispatcher::singleton().findSchemaOrThrow(\n"
         + "      schema.name().c_str(), schema.overload_name().c_str());\n")


def make(root: Path) -> tuple[Path, list[str]]:
    repo = root / NAME
    shutil.copytree(OPENREG, repo, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "*.so"))
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    fallback = repo / FALLBACK
    commits = [commit(repo, "Import OpenReg")]
    (repo / "README.md").write_text((repo / "README.md").read_text() + "\nMirrored for ootci.\n")
    commits.append(commit(repo, "README: say where the sources come from"))
    text = fallback.read_text()
    assert REDISPATCH in text, f"{FALLBACK} has no redispatch line to plant after"
    fallback.write_text(text.replace(REDISPATCH, PLANT))
    commits.append(commit(repo, "Fallback: look the operator up again after the CPU kernel"))
    fallback.write_text(fallback.read_text() + "\n// The kernels above run on host memory.\n")
    commits.append(commit(repo, "Fallback: comment the kernels"))
    return repo, commits


def ootci(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(OOTCI), *args], capture_output=True, text=True, env={**os.environ, **(env or {})})


def watched_count(runs: Path, name: str) -> str:
    newest = max(runs.iterdir(), key=lambda p: p.name)
    record = json.loads((newest / "record.json").read_text())
    bench = next(s for s in record["stages"] if s["name"] == "bench")
    counts = bench["data"]["measurements"].get(name, {}).get("counts")
    if not counts:
        return f"{name} not counted ({bench['data'].get('counter_note')})"
    return (f"{name}: {counts['device']['per_call']:.0f} instructions on the device, {counts['cpu']['per_call']:.0f} "
            f"on the CPU, ratio {counts['ratio']:.4f}; stage {bench['duration_s']:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nights-before", type=int, default=3)
    parser.add_argument("--only", default="", help="the nights' --bench-only (default: every measurement)")
    parser.add_argument("--watch", default="add_tiny", help="the measurement whose bisection is run")
    parser.add_argument("--keep", type=Path, help="work here and keep it (default: a temporary directory)")
    args = parser.parse_args()
    scratch = args.keep or Path(tempfile.mkdtemp(prefix="ootci-perf-planted-"))
    repo, commits = make(scratch)
    registry, runs = scratch / "registry", scratch / "runs"
    openreg_manifest(registry / NAME / "backend.toml", repo, NAME)
    env = {"OOTCI_REGISTRY": str(registry)}
    print(f"fixture {repo}: {len(commits)} commits, the plant at 3 ({commits[2][:10]})")

    def night(k: int, ref: str) -> list[dict]:
        pinned = openreg_manifest(scratch / "pinned" / ref[:10] / "backend.toml", repo, NAME, ref)
        started = time.monotonic()
        run = ootci("run", str(pinned), "--torch", "2.13.0", "--suites", "bench", "--trigger", "nightly",
                    "--out", str(runs), *(["--bench-only", args.only] if args.only else []))
        if run.returncode != 0:
            raise SystemExit(f"night {k} failed:\n{run.stdout[-3000:]}\n{run.stderr[-2000:]}")
        plan = ootci("bisect", "--turned-red", "--runs", str(runs), env=env)
        entries = json.loads(plan.stdout)
        print(f"night {k} at {ref[:10]} ({time.monotonic() - started:.0f} s, load {os.getloadavg()[0]:.1f}): "
              f"{watched_count(runs, args.watch)}; plan: "
              f"{[(e['perf'], e['good'][-6:], e['bad'][-6:]) for e in entries] or 'nothing'}", flush=True)
        return entries

    for k in range(args.nights_before):
        night(k + 1, commits[0])
    entries = night(args.nights_before + 1, commits[-1])
    wanted = [e for e in entries if e["perf"] == args.watch]
    if not wanted:
        raise SystemExit(f"the nightly's plan did not list {args.watch} on the first slow night")
    [entry] = wanted
    started = time.monotonic()
    bisected = ootci("bisect", NAME, "--good", entry["good"], "--bad", entry["bad"], "--perf", entry["perf"],
                     "--runs", str(runs), "--out", str(scratch / "bisect"), env=env)
    print(f"\nootci bisect --perf {args.watch}: exit {bisected.returncode} in {time.monotonic() - started:.0f} s")
    [path] = (scratch / "bisect").glob("*/bisect.json")
    record = json.loads(path.read_text())
    print(f"predicate: {record['predicate']['cause']}")
    for walk in record["rounds"]:
        for step in walk["steps"]:
            print(f"  {walk['candidates'][step['candidate']]['label']}: {step['verdict']} ({step['reason']}, "
                  f"{step['duration_s']:.0f} s)")
        result = walk["result"]
        named = walk["candidates"][result["first_bad"]]["commit"] if result.get("first_bad") is not None else None
        print(f"result: {result['kind']}: {result['summary']}")
        print(f"named commit {named and named[:10]}: {'the plant' if named == commits[2] else 'NOT the plant'}")


if __name__ == "__main__":
    main()
