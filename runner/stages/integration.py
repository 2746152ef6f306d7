"""Stage `integration`: op_db compared with CPU, model parity, then the vendor's suites."""

from __future__ import annotations

from .. import suite_runner
from ..models import StageResult
from .base import RunContext

NAME = "integration"


def run(ctx: RunContext) -> StageResult:
    return suite_runner.run_stage(ctx, NAME)
