"""Stage `autoload`: the autoload verification of the manifest's backend in the environment under test.

The checks and their root causes are those of `ootci verify` (runner/verification/verify.py);
this stage only records them. Each probe's bounded output goes to the stage log.

A failed verification fails the run, but it blocks the suites only when their
results would mean nothing: the device is unusable (plain_import, device or tensor
did not pass) or the backend was built against another torch (build_torch). A
backend whose only failures are circular_import, opt_out, neighbours or import_cost
still gets its test signal.
"""

from __future__ import annotations

from ootci.runner.core.errors import TargetEnvironmentError
from ootci.runner.models import RootCause, StageResult, Status
from ootci.runner.stages.base import RunContext
from ootci.runner.verification.verify import BLOCKING_CHECKS, DEFAULT_TIMEOUT, import_cost_runs, verify

NAME = "autoload"


def judges_a_later_stage(ctx: RunContext) -> bool:
    """Whether this run stops at a later stage than this one (a bisection step judging a suite or
    the bench): it then needs only the checks that would block that stage. The others never
    block a later stage (see above), and they cost two more interpreters importing torch and the
    backend in every step. A step judging autoload itself, and every ordinary run, verify all."""
    return ctx.options.last_stage is not None and ctx.options.last_stage != NAME


def run(ctx: RunContext) -> StageResult:
    # One probe may take at most the whole stage's budget, and never more than the default.
    timeout = min(DEFAULT_TIMEOUT, ctx.manifest.timeouts.autoload)
    try:
        under_test = ctx.torch_under_test
        result = verify(ctx.python, ctx.manifest, timeout=timeout, runs=import_cost_runs(),
                        jobs=max(1, min(ctx.options.jobs or 2, 4)), log=ctx.log_path(NAME),
                        build_torch=ctx.build_torch,
                        torch_under_test=(under_test.version, under_test.git_version) if under_test else None,
                        blocking_only=judges_a_later_stage(ctx))
    except TargetEnvironmentError as exc:  # no interpreter or no torch: nothing to probe
        cause = RootCause(kind="error", summary=exc.message, hint="the environment under test is not usable")
        return StageResult(name=NAME, status=Status.failed, summary=exc.message, root_cause=cause)
    cost = next((c.data for c in result.checks if c.name == "import_cost" and c.data), {})
    blocking = [c.name for c in result.checks if c.name.split(":", 1)[0] in BLOCKING_CHECKS
                and c.status in (Status.failed, Status.crashed, Status.timeout, Status.blocked)]
    return StageResult(
        name=NAME,
        status=result.status,
        summary=result.summary(),
        root_cause=result.root_cause,
        checks=result.checks,
        counts={s: sum(1 for c in result.checks if c.status.value == s)
                for s in sorted({c.status.value for c in result.checks})},
        data={"backends": result.backends, "torch_version": result.torch_version,
              **({"import_cost": cost} if cost else {}),
              **({} if result.status.ok else {"blocks_later_stages": bool(blocking), "blocking_checks": blocking})},
    )
