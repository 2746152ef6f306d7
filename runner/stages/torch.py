"""Stage `torch`: get the torch under test into a cached torch layer, or use --python's.

It also fixes what the rest of the run may not change: the torch under test as its
interpreter reports it (version, commit, directory), and the pip constraint that
pins it (runner/torch_supply/torch_pin.py).
"""

from __future__ import annotations

from ootci.runner.core.errors import TorchBuildError
from ootci.runner.models import StageResult, Status, TorchInfo
from ootci.runner.stages.base import RunContext, config_failure
from ootci.runner.torch_supply import envs, torch_acquire, torch_pin, torchspec

NAME = "torch"


def run(ctx: RunContext) -> StageResult:
    spec = torchspec.parse(ctx.options.torch)
    installed = spec.kind == "installed"
    try:
        plan = torch_acquire.plan(spec, index_url=ctx.options.index_url,
                                  python=ctx.options.python if installed else None, cache=ctx.cache,
                                  jobs=ctx.options.jobs, torch_repo=ctx.options.torch_repo, log=ctx.log_path())
    except TorchBuildError as exc:
        return StageResult(name=NAME, status=Status.failed, summary=exc.message, root_cause=exc.cause)
    if not plan.needs_install:
        python = ctx.python
        # Read, not imported: whether this torch imports is the autoload stage's to say.
        info = _under_test(ctx, envs.torch_found(python))
        ctx.record.torch = TorchInfo(spec=spec.raw, source=str(python), **info)
        return StageResult(name=NAME, status=Status.passed, summary=f"torch {info['version']} already in {python}",
                           data={"location": info["location"]})
    ctx.torch_install_args = plan.install_args
    layer, reused = envs.torch_layer(plan.install_args, plan.key, log=ctx.log_path(),
                                     timeout=ctx.manifest.timeouts.torch, cache=ctx.cache)
    ctx.torch_env = layer
    info = _under_test(ctx, envs.layer_torch_info(layer))
    ctx.record.torch = TorchInfo(spec=spec.raw, source=plan.source, index_url=plan.index_url, **info)
    if plan.commit and info.get("git_version") != plan.commit:
        return config_failure(NAME, f"the torch installed reports commit {info.get('git_version')}, "
                                    f"but {spec.raw} is {plan.commit}")
    how = "reused cached layer" if reused else "installed"
    commit = (info.get("git_version") or "")[:12]
    return StageResult(name=NAME, status=Status.passed, summary=f"torch {info['version']} ({commit}) {how}",
                       data={"layer": str(layer.root), "reused": reused, "key": plan.key,
                             "location": info["location"]})


def _under_test(ctx: RunContext, info: dict) -> dict:
    ctx.torch_under_test = torch_pin.TorchUnderTest.from_info(info)
    ctx.constraint = torch_pin.write_constraint(ctx.run_dir, ctx.torch_under_test)
    return info
