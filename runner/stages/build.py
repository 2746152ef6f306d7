"""Stage `build`: backend wheels built against the torch under test, cached.

The cache key is the torch (version and commit) plus a hash of the backend's
sources and build recipe: an unchanged backend is not rebuilt.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from .. import envs, procs, sources
from ..models import Status, StageResult
from .base import RunContext, config_failure, proc_failure

NAME = "build"

CCACHE_MASQUERADE_DIRS = ("/usr/lib/ccache", "/usr/lib64/ccache", "/usr/local/opt/ccache/libexec")


def _builder_python(ctx: RunContext) -> Path:
    if ctx.torch_env is not None:
        return ctx.torch_env.python
    return ctx.python


def _build_env(ctx: RunContext, python: Path, wheel_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(ctx.manifest.build.env)
    bindir = str(python.parent)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    env["OOTCI_WHEEL_DIR"] = str(wheel_dir)
    env["OOTCI_PYTHON"] = str(python)
    env.setdefault("MAX_JOBS", str(ctx.options.jobs or os.cpu_count() or 2))
    masquerade = next((d for d in CCACHE_MASQUERADE_DIRS if Path(d, "g++").exists()), None)
    if masquerade and "CC" not in env and "CXX" not in env:
        # ccache's compiler-named links first on PATH: every build system (setuptools,
        # ninja, cmake) then compiles through ccache while still seeing plain `g++`,
        # which torch.utils.cpp_extension's compiler check insists on.
        env["PATH"] = masquerade + os.pathsep + env["PATH"]
        env.setdefault("CCACHE_DIR", str(ctx.cache / "ccache"))
    return env


def run(ctx: RunContext) -> StageResult:
    m = ctx.manifest
    log = ctx.log_path()
    if m.source.kind == "path":
        source_dir = m.source_dir()
        assert source_dir is not None
        if not source_dir.is_dir():
            return config_failure(NAME, f"{m.path}: field 'source.path': {source_dir} is not a directory")
        source_id = sources.tree_hash(source_dir)
    elif m.source.kind == "git":
        source_dir, commit = sources.checkout(m, ctx.cache, log=log, timeout=m.timeouts.build)
        source_id = f"{commit}:{m.source.subdir}"
    else:
        source_dir, source_id = None, m.source.requirement
    ctx.source_dir = source_dir

    torch = ctx.record.torch
    key = envs.digest("wheels", m.name, torch.version, torch.git_version, source_id,
                      m.build.model_dump(mode="json"))
    wheel_dir = ctx.cache / "wheels" / key
    cached = sorted(wheel_dir.glob("*.whl"))
    if cached:
        ctx.wheels = cached
        return StageResult(name=NAME, status=Status.passed,
                           summary=f"cached: {', '.join(w.name for w in cached)}",
                           data={"cache_hit": True, "wheels": [str(w) for w in cached], "source": source_id})

    python = _builder_python(ctx)
    wheel_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=wheel_dir.parent))
    try:
        env = _build_env(ctx, python, staging)
        if m.build.extra_requirements:
            extra = procs.run(procs.python_argv(python, "-m", "pip", "install", *m.build.extra_requirements),
                              timeout=m.timeouts.install, log=log, env=env)
            if not extra.ok:
                return proc_failure(NAME, extra, "installing build requirements")
        if m.build.recipe == "prebuilt":
            argv = procs.python_argv(python, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                                     "-d", str(staging), m.source.requirement or "")
            cwd = None
        elif m.build.recipe == "command":
            argv, cwd = list(m.build.command), source_dir
        else:
            argv = procs.python_argv(python, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                                     "-w", str(staging), str(source_dir))
            cwd = source_dir
        result = procs.run(argv, timeout=m.timeouts.build, log=log, env=env, cwd=cwd,
                           on_line=getattr(ctx.reporter, "line", None))
        if not result.ok:
            return proc_failure(NAME, result, "build")
        built = sorted(staging.glob("*.whl"))
        if not built:
            return config_failure(NAME, f"the build finished but left no wheel in $OOTCI_WHEEL_DIR ({m.build.recipe})")
        os.replace(staging, wheel_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    ctx.wheels = sorted(wheel_dir.glob("*.whl"))
    return StageResult(name=NAME, status=Status.passed,
                       summary=f"built {', '.join(w.name for w in ctx.wheels)}",
                       data={"cache_hit": False, "wheels": [str(w) for w in ctx.wheels], "source": source_id})

