"""Stage `bench`: op and model timings on the device and on CPU (runner/probes/bench.py).

Off unless the manifest turns it on (`[suites] bench = true`) or `--suites` names it, and off
with `--suites none`; when off, the record has no `bench` stage at all, exactly as before the
stage existed. Every measurement that finished is kept, with its median, interquartile range,
number of timed blocks and its device/CPU ratio, the median of the rounds' own (what
regressions are judged on). A
measurement that raised fails the stage and is named; a crash or a hang names the
measurement it happened in, and the ones before it are still recorded.
"""

from __future__ import annotations

from ootci.runner.models import RootCause, StageResult, Status
from ootci.runner.stages.base import RunContext, RunOptions, proc_failure
from ootci.runner.manifests.manifest import Manifest
from ootci.runner.verification.verify import Probe, Runner

NAME = "bench"
ROUNDS = 5
"""device and CPU alternately, this many times each, per measurement"""
MIN_RUN_TIME_S = 0.05
"""seconds of timing per side and round, at least (blocked_autorange)"""


def wanted(manifest: Manifest, options: RunOptions) -> bool:
    """On where the manifest turns it on or `--suites` names it; off with `--suites none`."""
    return options.bench if options.bench is not None else manifest.suites.bench


def run(ctx: RunContext) -> StageResult:
    runner = Runner(ctx.python, timeout=ctx.manifest.timeouts.bench, log=ctx.log_path())
    return result_of(runner.probe("bench.py", *probe_args(ctx.manifest, ctx.options.bench_only)))


def probe_args(manifest: Manifest, only: tuple[str, ...] = ()) -> list[str]:
    return ["--device", manifest.device, "--package", manifest.import_name, "--rounds", str(ROUNDS),
            "--min-run-time", str(MIN_RUN_TIME_S), *(["--only", ",".join(only)] if only else [])]


def result_of(probe: Probe) -> StageResult:
    """The stage's result from what the bench probe reported and how its process ended."""
    measurements, failed = {}, {}
    started = None  # the measurement begun and not finished: where a crash or a hang happened
    for phase, result in probe.phases.items():
        if phase.startswith("start:"):
            started = phase.removeprefix("start:")
        elif phase.startswith(("measure:", "setup:")):
            name = phase.split(":", 1)[1]
            started = None
            if result.get("ok"):
                measurements[name] = result["value"]
            else:
                failed[name] = first_message(result)
    device = (probe.get("device") or {}).get("value") or {}
    data = {"measurements": measurements, "rounds": ROUNDS, "min_run_time_s": MIN_RUN_TIME_S,
            "synchronized": device.get("synchronized")}
    if failed:
        data["failed"] = failed

    def failure(status: Status, summary: str) -> StageResult:
        return StageResult(name=NAME, status=status, summary=summary, data=data,
                           root_cause=RootCause(kind="error", summary=summary))

    if not probe.proc.ok:
        # The shared classification (timeout, crashed, failed, with its root cause), told where it happened.
        result = proc_failure(NAME, probe.proc, "the bench probe")
        where = f" in measurement {started!r}" if started else ""
        result.summary = f"{result.summary}{where} ({len(measurements)} measured before it)"
        if result.root_cause is not None:
            result.root_cause.summary = result.summary
        result.data = data
        return result
    imported = probe.get("import")
    if imported is None or not imported.get("ok"):
        return failure(Status.failed, f"import failed: {first_message(imported or {})}")
    if failed:
        name, message = next(iter(failed.items()))
        return failure(Status.failed, f"{len(failed)} of {len(failed) + len(measurements)} measurements failed: "
                                      f"{name}: {message}")
    return StageResult(name=NAME, status=Status.passed, data=data,
                       summary=f"{len(measurements)} measurements, device/CPU ratio "
                               f"{min_max(m['ratio'] for m in measurements.values())}")


def first_message(result: dict) -> str:
    chain = result.get("chain") or [{}]
    innermost = chain[-1]
    return f"{innermost.get('type', 'error')}: {innermost.get('message', '')}"[:300]


def min_max(values) -> str:
    values = sorted(values)
    return f"{values[0]:.2f} to {values[-1]:.2f}" if values else "-"
