"""Stage `autoload`: the autoload verification of the manifest's backend in the environment under test.

The checks and their root causes are those of `ootci verify` (runner/verify.py);
this stage only records them. Each probe's bounded output goes to the stage log.
"""

from __future__ import annotations

from ..errors import EnvironmentError_
from ..models import RootCause, StageResult, Status
from ..verify import DEFAULT_RUNS, DEFAULT_TIMEOUT, verify
from .base import RunContext

NAME = "autoload"


def run(ctx: RunContext) -> StageResult:
    # One probe may take at most the whole stage's budget, and never more than the default.
    timeout = min(DEFAULT_TIMEOUT, ctx.manifest.timeouts.autoload)
    try:
        under_test = ctx.torch_under_test
        result = verify(ctx.python, ctx.manifest, timeout=timeout, runs=DEFAULT_RUNS,
                        jobs=max(1, min(ctx.options.jobs or 2, 4)), log=ctx.log_path(NAME),
                        build_torch=ctx.build_torch,
                        torch_under_test=(under_test.version, under_test.git_version) if under_test else None)
    except EnvironmentError_ as exc:  # no interpreter or no torch: nothing to probe
        cause = RootCause(kind="error", summary=exc.message, hint="the environment under test is not usable")
        return StageResult(name=NAME, status=Status.failed, summary=exc.message, root_cause=cause)
    cost = next((c.data for c in result.checks if c.name == "import_cost" and c.data), {})
    return StageResult(
        name=NAME,
        status=result.status,
        summary=result.summary(),
        root_cause=result.root_cause,
        checks=result.checks,
        counts={s: sum(1 for c in result.checks if c.status.value == s)
                for s in sorted({c.status.value for c in result.checks})},
        data={"backends": result.backends, "torch_version": result.torch_version,
              **({"import_cost": cost} if cost else {})},
    )
