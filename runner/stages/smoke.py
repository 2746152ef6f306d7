"""Stage `smoke`: ootci's fast device-generic suite (runner/suites/smoke) on the backend."""

from __future__ import annotations

from ootci.runner.models import StageResult
from ootci.runner.stages.base import RunContext
from ootci.runner.suite_runs import suite_runner

NAME = "smoke"


def run(ctx: RunContext) -> StageResult:
    return suite_runner.run_stage(ctx, NAME)
