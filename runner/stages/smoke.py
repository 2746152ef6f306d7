"""Stage `smoke`: ootci's fast device-generic suite (runner/suites/smoke) on the backend."""

from __future__ import annotations

from .. import suite_runner
from ..models import StageResult
from .base import RunContext

NAME = "smoke"


def run(ctx: RunContext) -> StageResult:
    return suite_runner.run_stage(ctx, NAME)
