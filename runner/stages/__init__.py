"""The pipeline: one backend's run, stage by stage, and the stages in order.

Owns running the stages and keeping the RunRecord on disk at every step (`pipeline`), the
stages themselves (one module each: torch, build, install, autoload, smoke, integration, upstream, bench;
adding a stage is one module and one line below; a stage with `wanted(manifest, options)` is
optional, and left out of the record when it says no), where a backend's sources are and their
hash (`sources`), and what a run shows while it works (`report`). May import `suite_runs`,
`verification`, `torch_supply`, `records`, `manifests`, `core` and `models`.
"""

from __future__ import annotations

from ootci.runner.models import SUITES
from ootci.runner.stages import autoload, bench, build, install, integration, smoke, upstream
from ootci.runner.stages import torch as torch_stage
from ootci.runner.stages.base import RunContext, RunOptions, Stage

STAGES: dict[str, Stage] = {
    torch_stage.NAME: torch_stage,
    build.NAME: build,
    install.NAME: install,
    autoload.NAME: autoload,
    smoke.NAME: smoke,
    integration.NAME: integration,
    upstream.NAME: upstream,
    bench.NAME: bench,
}

# Stages that run test suites: `--suites` and the manifest's [suites] switch them off.
SUITE_STAGES = SUITES

__all__ = ["STAGES", "SUITE_STAGES", "RunContext", "RunOptions", "Stage"]
