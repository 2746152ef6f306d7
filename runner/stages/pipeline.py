"""Run every stage for one backend and keep the RunRecord on disk at every step.

The record is rewritten atomically after each stage, so a run that is killed, times
out or is interrupted still leaves a valid record saying how far it got. A failed
stage blocks the ones after it unless it says its failure leaves them meaningful
(`blocks_later_stages: false` in its data: a failed autoload check that leaves the
device usable, failing smoke tests on a device that passes others); a stage that runs
after such failures lists them in its `ran_despite`; a bug in a stage becomes a `crashed` result with
its traceback in the stage log, never a crash of the runner.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import signal
import socket
import sys
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ootci.runner import __version__
from ootci.runner.core import causes, procs
from ootci.runner.core.errors import OotciError
from ootci.runner.manifests import registry
from ootci.runner.manifests.manifest import Manifest
from ootci.runner.models import RootCause, RunRecord, StageResult, Status, TorchInfo, overall_status
from ootci.runner.records import record_files
from ootci.runner.records.run_identity import ci_run_url, new_run_id
from ootci.runner.stages import STAGES, SUITE_STAGES, RunContext, RunOptions
from ootci.runner.torch_supply.envs import cache_root


class Interrupted(BaseException):
    """The runner got SIGTERM (SIGINT arrives as KeyboardInterrupt)."""

    def __init__(self, signame: str):
        super().__init__(signame)
        self.signame = signame


@contextmanager
def interrupt_handlers() -> Iterator[None]:
    """Turn SIGTERM into an exception so the record is written before we exit."""
    def on_term(signum, frame):
        raise Interrupted(signal.Signals(signum).name)

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def wanted(stage: str, manifest: Manifest, options: RunOptions) -> bool:
    """False for an optional stage (one with `wanted`, as bench) that is switched off."""
    optional = getattr(STAGES[stage], "wanted", None)
    return optional is None or optional(manifest, options)


def blocks_the_rest(result: StageResult, despite: list[str]) -> bool:
    """After a stage ran: its data names the failures it ran despite; True when it leaves the
    device unusable, so the stages after it are blocked. A failure that does not block joins
    `despite`, for the stages after it."""
    if despite:
        result.data["ran_despite"] = list(despite)
    if result.status.ok:
        return False
    if result.data.get("blocks_later_stages", True):
        return True
    despite.append(f"{result.name}: {result.root_cause.summary if result.root_cause else result.summary}")
    return False


def skip_reason(manifest: Manifest, options: RunOptions, stage: str) -> str | None:
    names = list(STAGES)
    if options.last_stage and names.index(stage) > names.index(options.last_stage):
        return f"not needed: only the stages up to {options.last_stage} run"
    if stage not in SUITE_STAGES:
        return None
    if stage not in options.suites:
        return "not selected (--suites)"
    if stage == "upstream":
        return None  # wanted only where the manifest names its files, or --upstream-files does
    if not getattr(manifest.suites, stage) and not (stage == "integration" and manifest.suites.vendor):
        return "switched off in the manifest ([suites])"  # vendor suites run in the integration stage
    return None


class RecordWriter:
    def __init__(self, run_dir: Path):
        self.run_dir = run_dir
        self.path = run_dir / record_files.RECORD_NAME

    def write(self, record: RunRecord) -> None:
        record_files.write(self.run_dir, record)


def run_stage(name: str, ctx: RunContext) -> StageResult:
    """One stage, timed, with its log; an OotciError or a bug of the stage becomes its result."""
    stage = STAGES[name]
    ctx.stage_name = name
    started = now()
    t0 = time.monotonic()
    tests_before = len(ctx.record.tests)
    try:
        result = stage.run(ctx)
    except OotciError as exc:
        result = StageResult(name=name, status=Status.failed, summary=exc.message,
                             root_cause=RootCause(kind="error", summary=exc.message))
    except (KeyboardInterrupt, Interrupted):
        raise
    except Exception as exc:  # a bug in ootci itself must not lose the run
        with open(ctx.log_path(name), "a", encoding="utf-8") as log:
            log.write(f"\n[ootci] internal error in stage {name}\n")
            log.write(traceback.format_exc())
        summary = f"ootci internal error: {type(exc).__name__}: {exc}"
        result = StageResult(name=name, status=Status.crashed, summary=summary,
                             root_cause=RootCause(kind="error", summary=summary, exception_type=type(exc).__name__,
                                                  message=str(exc),
                                                  hint="a bug in ootci: please report it with the stage log"))
    result.name = name
    if name in SUITE_STAGES and len(ctx.record.tests) > tests_before:
        causes.attach(result, ctx.record.tests[tests_before:], ctx.record.device)
    result.started_at = started
    result.duration_s = round(time.monotonic() - t0, 3)
    log_path = ctx.run_dir / "logs" / f"{name}.log"
    if log_path.exists():
        result.log = os.fspath(log_path.relative_to(ctx.run_dir))
    return result


def run_backend(manifest: Manifest, options: RunOptions, reporter) -> RunRecord:
    started = now()
    run_id = new_run_id(manifest.name, started)
    run_dir = options.out / run_id
    torch = TorchInfo(spec=options.torch, source=str(options.python) if options.python else None)
    ref = registry.reference(manifest)  # how the reproduce command names the backend
    record = RunRecord(
        run_id=run_id, backend=manifest.name, device=manifest.device, trigger=options.trigger, pr=options.pr,
        pr_head_sha=options.pr_head_sha, relay_delivery_id=options.relay_delivery_id,
        torch=torch, python=platform.python_version(),
        platform=f"{sys.platform}-{platform.machine()}", host=socket.gethostname(),
        ootci_version=__version__, started_at=started,
        command=options.reproduce(ref, torch),
        shard=options.shard, shard_group=options.shard_group if options.shard else None,
        ci_run_url=ci_run_url(),
    )
    writer = RecordWriter(run_dir)
    writer.write(record)
    ctx = RunContext(manifest=manifest, options=options, record=record, run_dir=run_dir,
                     cache=options.cache or cache_root(), reporter=reporter)
    reporter.run_started(record, run_dir)
    blocker: str | None = None
    skipper: str | None = None  # a stage found nothing to test (a prebuilt backend pinned to another torch)
    # Stages that failed without blocking the rest, as "<stage>: <summary>": each later stage says it ran despite them.
    despite: list[str] = []
    names = list(STAGES)
    try:
        for i, name in enumerate(names):
            if not wanted(name, manifest, options):
                continue  # an optional stage that is off leaves the record as if it did not exist
            if blocker:
                result = StageResult(name=name, status=Status.blocked,
                                     summary=f"blocked: stage '{blocker}' did not pass")
            elif skipper:
                result = StageResult(name=name, status=Status.skipped, summary=skipper)
            elif reason := skip_reason(manifest, options, name):
                result = StageResult(name=name, status=Status.skipped, summary=reason)
            else:
                reporter.stage_started(manifest.name, name)
                try:
                    result = run_stage(name, ctx)
                except (KeyboardInterrupt, Interrupted) as exc:
                    signame = exc.signame if isinstance(exc, Interrupted) else "SIGINT"
                    procs.kill_all()
                    record.interrupted = signame
                    summary = f"interrupted by {signame}"
                    record.stages.append(StageResult(name=name, status=Status.failed, summary=summary,
                                                     root_cause=RootCause(kind="interrupted", summary=summary)))
                    for rest in names[i + 1:]:
                        if wanted(rest, manifest, options):
                            record.stages.append(StageResult(name=rest, status=Status.blocked, summary=summary))
                    raise
                blocks = blocks_the_rest(result, despite)
                reporter.stage_finished(manifest.name, result)
                if blocks:
                    blocker = name
                elif result.status is Status.skipped and result.data.get("skip_rest"):
                    skipper = result.summary
                if name == "torch":
                    # From here on the record names the torch as resolved, not as asked for.
                    record.command = options.reproduce(ref, record.torch)
            record.stages.append(result)
            writer.write(record)
    finally:
        record.finished_at = now()
        record.status = Status.skipped if skipper and not blocker else overall_status(record.stages)
        writer.write(record)
    reporter.run_finished(record, writer.path)
    return record
