"""Stage `bench`: each measurement's host instructions and time, on the device and on CPU
(runner/probes/bench.py).

Off unless the manifest turns it on (`[suites] bench = true`) or `--suites` names it, and off
with `--suites none`; when off, the record has no `bench` stage at all, exactly as before the
stage existed.

Two processes at most. The first times every measurement (the device by its timing events
where the manifest claims `events` and they work, else by synchronised wall time) and counts
its instructions where the machine has a hardware counter. Where it has none, a second
process counts them under Valgrind's Callgrind (one process for every measurement; only the
counts are instrumented). Without either, the stage is time only and says why in one line.
Counting never fails the stage: a counter that cannot count is a note. A measurement that
raised fails the stage and is named; a crash or a hang names the measurement it happened in,
and the ones before it are still recorded.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from ootci.runner.manifests.manifest import Manifest
from ootci.runner.models import RootCause, StageResult, Status
from ootci.runner.stages.base import RunContext, RunOptions, proc_failure
from ootci.runner.verification.verify import Probe, Runner

NAME = "bench"
ROUNDS = 5
"""device and CPU alternately, this many times each, per measurement"""
MIN_RUN_TIME_S = 0.05
"""seconds of timing per side and round, at least"""
COUNT_REPEATS = 5
"""counts per side and measurement after the dropped first one; the median is recorded"""
CALLGRIND_ENV = {
    # The same hash seed every night: what a dict or set of strings costs does not vary.
    "PYTHONHASHSEED": "0",
    # Valgrind runs AVX code (MKL's and oneDNN's matrix kernels) 20 to 50 times slower than SSE
    # code: a 512 x 512 matmul took 8 s a call. Capped, it takes 0.2 s; the counts are of those
    # code paths every night.
    "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
    "ONEDNN_MAX_CPU_ISA": "SSE41",
}
MIN_COUNT_TIME_S = 60.0
"""seconds the counting process needs at least: with less of the time limit left it is not started"""


def wanted(manifest: Manifest, options: RunOptions) -> bool:
    """On where the manifest turns it on or `--suites` names it; off with `--suites none`."""
    return options.bench if options.bench is not None else manifest.suites.bench


def run(ctx: RunContext) -> StageResult:
    return measure(ctx.python, ctx.manifest, ctx.options.bench_only, timed=ctx.options.bench_time,
                   log=ctx.log_path())


def measure(python: Path, manifest: Manifest, only: tuple[str, ...] = (), *, timed: bool = True,
            log: Path | None = None) -> StageResult:
    """The stage's measurements with the interpreter under test: time (unless not `timed`) and
    instructions, by the hardware counter or under Callgrind."""
    limit = manifest.timeouts.bench
    began = time.monotonic()
    runner = Runner(python, timeout=limit, log=log)
    first = runner.probe("bench.py", *probe_args(manifest, only, timed=timed, counter="auto"))
    counted, note = None, None
    said = (first.get("counter") or {}).get("value") or {}
    if first.proc.ok and said.get("counter") is None:
        tools = callgrind_tools()
        left = limit - (time.monotonic() - began)
        if isinstance(tools, str):
            why_no_hardware = said.get("why") or "no hardware counter"
            note = f"time only: {why_no_hardware}; {tools}" if timed else f"nothing counted: {tools}"
        elif left < MIN_COUNT_TIME_S:
            note = f"not counted: {left:.0f} s of the {limit:.0f} s limit left (timeouts.bench)"
        else:
            with tempfile.TemporaryDirectory(prefix="ootci-callgrind-") as dumps:
                counted = count_under_callgrind(runner, manifest, only, tools, Path(dumps), left)
    return result_of(first, counted, note=note, time_gated=manifest.suites.bench_time == "gated")


def callgrind_tools() -> tuple[str, str] | str:
    """(valgrind, callgrind_control) from PATH, or why they cannot count."""
    valgrind, control = shutil.which("valgrind"), shutil.which("callgrind_control")
    if valgrind is None:
        return "valgrind is not on PATH (install it for instruction counts: apt-get install valgrind)"
    if control is None:
        return f"callgrind_control is not on PATH beside {valgrind} (it comes with valgrind)"
    return valgrind, control


def count_under_callgrind(runner: Runner, manifest: Manifest, only: tuple[str, ...], tools: tuple[str, str],
                          dumps: Path, timeout: float) -> Probe:
    valgrind, control = tools
    out = dumps / "callgrind.out"
    prefix = (valgrind, "--tool=callgrind", "--instr-atstart=no", "--collect-atstart=no", "--dump-line=no",
              "--dump-instr=no", f"--callgrind-out-file={out}", "-q")
    return runner.probe("bench.py", *probe_args(manifest, only, timed=False, counter="callgrind"),
                        "--callgrind-out", str(out), "--callgrind-control", control,
                        prefix=prefix, env=CALLGRIND_ENV, timeout=timeout)


def probe_args(manifest: Manifest, only: tuple[str, ...] = (), *, timed: bool = True,
               counter: str = "auto") -> list[str]:
    timing = ["--rounds", str(ROUNDS), "--min-run-time", str(MIN_RUN_TIME_S),
              *(["--events"] if "events" in manifest.capabilities else [])] if timed else ["--no-time"]
    return ["--device", manifest.device, "--package", manifest.import_name, *timing, "--counter", counter,
            "--count-repeats", str(COUNT_REPEATS), *(["--only", ",".join(only)] if only else [])]


def result_of(probe: Probe, counted: Probe | None = None, *, note: str | None = None,
              time_gated: bool = True) -> StageResult:
    """The stage's result from what the bench probes reported and how their processes ended:
    `probe` timed (and counted, with a hardware counter), `counted` counted under Callgrind."""
    measurements: dict[str, dict] = {}
    failed: dict[str, str] = {}
    started = None  # the measurement begun and not finished: where a crash or a hang happened
    for phase, result in probe.phases.items():
        if phase.startswith("start:"):
            started = phase.removeprefix("start:")
        elif phase.startswith(("measure:", "setup:")):
            name = phase.split(":", 1)[1]
            started = None
            if result.get("ok"):
                measurements.setdefault(name, {}).update(result["value"])
            else:
                failed[name] = first_message(result)
    device = (probe.get("device") or {}).get("value") or {}
    counter_of, counts, count_note = counts_of(probe, counted)
    for name, found in counts.items():
        measurements.setdefault(name, {})["counts"] = found
    note = note or count_note
    data: dict = {"measurements": measurements, "rounds": ROUNDS, "min_run_time_s": MIN_RUN_TIME_S,
                  "synchronized": device.get("synchronized"), "timing": device.get("timing"),
                  "time_gated": time_gated, "counter": counter_of, "count_repeats": COUNT_REPEATS}
    if device.get("events_unusable"):
        data["events_unusable"] = device["events_unusable"]
    if note:
        data["counter_note"] = note
    if failed:
        data["failed"] = failed

    def failure(status: Status, summary: str) -> StageResult:
        return StageResult(name=NAME, status=status, summary=summary, data=data,
                           root_cause=RootCause(kind="error", summary=summary))

    if not probe.proc.ok:
        # The shared classification (timeout, crashed, failed, with its root cause), told where it happened.
        stage = proc_failure(NAME, probe.proc, "the bench probe")
        where = f" in measurement {started!r}" if started else ""
        stage.summary = f"{stage.summary}{where} ({len(measurements)} measured before it)"
        if stage.root_cause is not None:
            stage.root_cause.summary = stage.summary
        stage.data = data
        return stage
    imported = probe.get("import")
    if imported is None or not imported.get("ok"):
        return failure(Status.failed, f"import failed: {first_message(imported or {})}")
    if failed:
        name, message = next(iter(failed.items()))
        return failure(Status.failed, f"{len(failed)} of {len(failed) + len(measurements)} measurements failed: "
                                      f"{name}: {message}")
    return StageResult(name=NAME, status=Status.passed, data=data, summary=summary_of(data))


def counts_of(probe: Probe, counted: Probe | None) -> tuple[str | None, dict[str, dict], str | None]:
    """(the counter, each measurement's counts, why some or all are missing) from whichever
    process counted: the first with a hardware counter, else the one under Callgrind."""
    source = counted if counted is not None else probe
    chosen = ((source.get("counter") or {}).get("value") or {}).get("counter")
    counts = {phase.removeprefix("count:"): result["value"] for phase, result in source.phases.items()
              if phase.startswith("count:") and result.get("ok")}
    missing = {phase.removeprefix("count:"): first_message(result) for phase, result in source.phases.items()
               if phase.startswith("count:") and not result.get("ok")}
    if counted is None:
        return (chosen if counts else None), counts, None
    for phase in ("counter", "counting"):  # Callgrind could not be set up, or not started
        said = counted.get(phase)
        if said is not None and not said.get("ok"):
            return None, {}, f"time only: Callgrind could not count: {first_message(said)}"
    if not counted.proc.ok:
        end = ("timed out" if counted.proc.timed_out else f"killed by {counted.proc.signal_name}"
               if counted.proc.signal_name else f"exit {counted.proc.returncode}")
        in_progress = [p.removeprefix("start:") for p in counted.phases if p.startswith("start:")]
        where = f" in measurement {in_progress[-1]!r}" if in_progress and in_progress[-1] not in counts else ""
        return (chosen if counts else None), counts, f"counting under Callgrind stopped ({end}){where}"
    if missing:
        name, message = next(iter(missing.items()))
        return chosen, counts, f"{len(missing)} measurement(s) not counted: {name}: {message}"
    return chosen, counts, None


def summary_of(data: dict) -> str:
    measured = data["measurements"]
    parts = [f"{len(measured)} measurements"]
    counted = [m["counts"]["ratio"] for m in measured.values() if "counts" in m]
    if counted:
        parts.append(f"instructions by {data['counter']}, device/CPU {min_max(counted)}")
    timed = [m for m in measured.values() if "ratio" in m]
    if timed:
        noisy = sum(1 for m in timed if m.get("noisy"))
        how = "device events" if data.get("timing") == "events" else "synchronised wall time"
        parts.append(f"time by {how} ({'gated' if data.get('time_gated') else 'shown, not gated'}"
                     f"{f', {noisy} too noisy to judge' if noisy else ''}), device/CPU "
                     f"{min_max(m['ratio'] for m in timed)}")
    if data.get("counter_note"):
        parts.append(data["counter_note"])
    return "; ".join(parts)


def first_message(result: dict) -> str:
    chain = result.get("chain") or [{}]
    innermost = chain[-1]
    return f"{innermost.get('type', 'error')}: {innermost.get('message', '')}"[:300]


def min_max(values) -> str:
    values = sorted(values)
    return f"{values[0]:.2f} to {values[-1]:.2f}" if values else "-"
