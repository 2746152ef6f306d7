"""The pipeline's stages, in order. Adding a stage: one module, one line here."""

from __future__ import annotations

from . import autoload, build, install, integration, smoke
from . import torch as torch_stage
from ..models import SUITES
from .base import RunContext, RunOptions, Stage

STAGES: dict[str, Stage] = {
    torch_stage.NAME: torch_stage,
    build.NAME: build,
    install.NAME: install,
    autoload.NAME: autoload,
    smoke.NAME: smoke,
    integration.NAME: integration,
}

# Stages that run test suites: `--suites` and the manifest's [suites] switch them off.
SUITE_STAGES = SUITES

__all__ = ["STAGES", "SUITE_STAGES", "RunContext", "RunOptions", "Stage"]
