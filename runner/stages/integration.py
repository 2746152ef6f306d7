"""Stage `integration`: op_db compared with CPU, model parity, then the vendor's suites."""

from __future__ import annotations

from ootci.runner.models import StageResult
from ootci.runner.stages.base import RunContext
from ootci.runner.suite_runs import suite_runner

NAME = "integration"


def run(ctx: RunContext) -> StageResult:
    return suite_runner.run_stage(ctx, NAME)
