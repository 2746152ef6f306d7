"""Stage `torch`: get the torch under test into a cached torch layer, or use --python's."""

from __future__ import annotations

from pathlib import Path

from .. import envs
from ..models import Status, StageResult, TorchInfo
from .base import RunContext

NAME = "torch"


def _install_plan(spec: str) -> tuple[list[str], object, str]:
    # Replaced by runner.torch_acquire once spec resolution lands.
    if spec.endswith(".whl"):
        return [str(Path(spec).resolve())], ("wheel", str(Path(spec).resolve())), spec
    return [f"torch=={spec}"], ("version", spec), f"torch=={spec}"


def run(ctx: RunContext) -> StageResult:
    spec = ctx.options.torch
    if ctx.options.python is not None:
        info = envs.torch_info(ctx.options.python)
        ctx.record.torch = TorchInfo(spec=spec, source=str(ctx.options.python), **info)
        return StageResult(name=NAME, status=Status.passed,
                           summary=f"torch {info['version']} already in {ctx.options.python}")
    install_args, key, source = _install_plan(spec)
    ctx.torch_install_args = install_args
    layer, reused = envs.torch_layer(install_args, key, log=ctx.log_path(),
                                     timeout=ctx.manifest.timeouts.torch, cache=ctx.cache)
    ctx.torch_env = layer
    info = envs.torch_info(layer.python)
    ctx.record.torch = TorchInfo(spec=spec, source=source, **info)
    how = "reused cached layer" if reused else "installed"
    commit = (info.get("git_version") or "")[:12]
    return StageResult(name=NAME, status=Status.passed,
                       summary=f"torch {info['version']} ({commit}) {how}",
                       data={"layer": str(layer.root), "reused": reused})
