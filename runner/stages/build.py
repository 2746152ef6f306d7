"""Stage `build`: backend wheels built against the torch under test, cached.

The cache key is the torch (version and commit) plus a hash of the backend's
sources and build recipe: an unchanged backend is not rebuilt.

The stage also says which torch the wheel was compiled against (`build_torch` in
its data): what the wheel's metadata records, or else, for a wheel ootci built,
the torch under test. A prebuilt wheel that requires another torch than the one
under test is not installed at all: the run is skipped, saying which torch it is
pinned to.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from filelock import FileLock
from packaging.utils import canonicalize_name

from ootci.runner.core import procs
from ootci.runner.models import StageResult, Status
from ootci.runner.stages import sources
from ootci.runner.stages.base import RunContext, config_failure, proc_failure
from ootci.runner.torch_supply import envs, torch_pin, wheel_metadata

NAME = "build"

CCACHE_MASQUERADE_DIRS = ("/usr/lib/ccache", "/usr/lib64/ccache", "/usr/local/opt/ccache/libexec")


def with_ccache(env: dict[str, str], cache: Path, source_dir: Path | None = None) -> dict[str, str]:
    """Put ccache's compiler-named links first on PATH, when ccache is installed.

    Every build system (setuptools, ninja, cmake) then compiles through ccache while
    still seeing plain `g++`, which torch.utils.cpp_extension's compiler check
    insists on. A build that chose its own CC/CXX is left alone. Paths below the
    source directory count relative to it (CCACHE_BASEDIR), so the same sources in
    another directory (a bisection step's export, a copy in the cache, a fork) hit.
    """
    masquerade = next((d for d in CCACHE_MASQUERADE_DIRS if Path(d, "g++").exists()), None)
    if masquerade and "CC" not in env and "CXX" not in env:
        env["PATH"] = masquerade + os.pathsep + env.get("PATH", "")
        env.setdefault("CCACHE_DIR", str(cache / "ccache"))
        if source_dir is not None:
            env.setdefault("CCACHE_BASEDIR", str(Path(source_dir).resolve()))
            env.setdefault("CCACHE_NOHASHDIR", "1")
    return env


def _builder_python(ctx: RunContext) -> Path:
    if ctx.torch_env is not None:
        return ctx.torch_env.python
    return ctx.python


def _build_env(ctx: RunContext, python: Path, wheel_dir: Path, source_dir: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    # A build that imports torch must not autoload backends: the one being built may be
    # half there (an *.egg-info in its source tree, which is the build's working directory).
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    env.update(ctx.manifest.build.env)
    bindir = str(python.parent)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    env["OOTCI_WHEEL_DIR"] = str(wheel_dir)
    env["OOTCI_PYTHON"] = str(python)
    env.setdefault("MAX_JOBS", str(ctx.options.jobs or os.cpu_count() or 2))
    with_ccache(env, ctx.cache, source_dir)
    return ctx.pip_env(env)


def run(ctx: RunContext) -> StageResult:
    m = ctx.manifest
    log = ctx.log_path()
    # The backend commit that ran, for the record (the page, and a bisection from two runs): a git
    # source's, or the HEAD of the work tree a path source is in, with whether the tree was dirty.
    built_from: dict[str, object] = {}
    if m.source.kind == "path":
        source_dir = m.source_dir()
        assert source_dir is not None
        if not source_dir.is_dir():
            return config_failure(NAME, f"{m.path}: field 'source.path': {source_dir} is not a directory")
        source_id = sources.tree_hash(source_dir)
        if state := sources.work_tree_commit(source_dir):
            built_from = {"commit": state[0], "dirty": state[1]}
        source_dir = sources.buildable(source_dir, ctx.cache)
    elif m.source.kind == "git":
        source_dir, commit = sources.checkout(m, ctx.cache, log=log, timeout=m.timeouts.build)
        source_id = f"{commit}:{m.source.subdir}"
        built_from = {"commit": commit, "dirty": False}
    else:
        source_dir, source_id = None, m.source.requirement or ""
    ctx.source_dir = source_dir

    torch = ctx.record.torch
    key = envs.digest("wheels", m.name, torch.version, torch.git_version, source_id,
                      m.build.model_dump(mode="json"))
    wheel_dir = ctx.cache / "wheels" / key
    wheel_dir.parent.mkdir(parents=True, exist_ok=True)
    # Runs building the same backend at once (a matrix on one machine) take turns:
    # the second finds the first one's wheels.
    with FileLock(os.fspath(wheel_dir) + ".lock"):
        cached = sorted(wheel_dir.glob("*.whl"))
        if not cached:
            failure = _build_into(ctx, wheel_dir, source_dir)
            if failure is not None:
                failure.data.update({"source": source_id, **built_from})  # a bisection starts from a red build too
                return failure
    ctx.wheels = sorted(wheel_dir.glob("*.whl"))
    data = {"cache_hit": bool(cached), "wheels": [str(w) for w in ctx.wheels], "source": source_id, **built_from}
    main = _main_wheel(ctx)
    meta = _metadata(main)
    if m.build.recipe == "prebuilt" and meta is not None and ctx.torch_under_test is not None:
        pinned = torch_pin.pinned_elsewhere(meta, ctx.torch_under_test)
        if pinned:
            # Installing it would need a second torch: nothing to learn about the torch under test.
            return StageResult(name=NAME, status=Status.skipped, summary=pinned, data={**data, "skip_rest": True})
    ctx.build_torch = _build_torch(ctx, meta)
    if ctx.build_torch is not None:
        data["build_torch"] = ctx.build_torch.to_json()
    how = "cached" if cached else "built"
    return StageResult(name=NAME, status=Status.passed, summary=f"{how} {', '.join(w.name for w in ctx.wheels)}",
                       data=data)


def _main_wheel(ctx: RunContext) -> Path | None:
    """The wheel of the manifest's distribution (a build may leave helper wheels beside it)."""
    want = canonicalize_name(ctx.manifest.distribution)
    for wheel in ctx.wheels:
        if canonicalize_name(wheel.name.split("-", 1)[0]) == want:
            return wheel
    return ctx.wheels[0] if ctx.wheels else None


def _metadata(wheel: Path | None) -> wheel_metadata.WheelMetadata | None:
    if wheel is None:
        return None
    try:
        return wheel_metadata.read(wheel)
    except wheel_metadata.BadWheel:
        return None  # the install stage says what is wrong with it


def _build_torch(ctx: RunContext, meta: wheel_metadata.WheelMetadata | None) -> wheel_metadata.BuildTorch | None:
    recorded = meta.build_torch() if meta is not None else None
    if recorded is not None or ctx.manifest.build.recipe == "prebuilt":
        return recorded
    torch = ctx.record.torch
    if not torch.version:
        return None
    # ootci compiled it in the torch layer: against the torch under test, by construction.
    return wheel_metadata.BuildTorch(torch.version, torch.git_version, "built by ootci against the torch under test")


def _builder_with_requirements(ctx: RunContext, env: dict[str, str]) -> tuple[envs.Env, StageResult | None]:
    m = ctx.manifest
    assert ctx.torch_env is not None
    root = ctx.cache / "build-envs" / envs.digest(str(ctx.torch_env.root), m.build.extra_requirements)
    builder = envs.Env(root)
    with FileLock(os.fspath(root) + ".lock"):
        if builder.is_ready():
            return builder, None
        envs.layered_env(ctx.torch_env, root)
        result = procs.run(envs.pip_argv(builder, "install", *ctx.constraint_args(), *m.build.extra_requirements),
                           timeout=m.timeouts.install, log=ctx.log_path(), env=env)
        if not result.ok:
            return builder, proc_failure(NAME, result, "installing build requirements")
        envs.mark_ready(builder, {"requirements": m.build.extra_requirements})
    return builder, None


def _build_into(ctx: RunContext, wheel_dir: Path, source_dir: Path | None) -> StageResult | None:
    """Build the backend's wheels into wheel_dir; a StageResult when that failed."""
    m = ctx.manifest
    log = ctx.log_path()
    python = _builder_python(ctx)
    staging = Path(tempfile.mkdtemp(prefix=f".{wheel_dir.name}.", dir=wheel_dir.parent))
    try:
        env = _build_env(ctx, python, staging, source_dir)
        if m.build.extra_requirements and m.build.recipe != "prebuilt" and ctx.torch_env is not None:
            # Build requirements go into a venv of their own over the torch layer,
            # never into the layer itself, which every backend shares.
            builder, failure = _builder_with_requirements(ctx, env)
            if failure is not None:
                return failure
            python = builder.python
            env["PATH"] = f"{python.parent}{os.pathsep}{env['PATH']}"
            env["OOTCI_PYTHON"] = str(python)
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
        shutil.rmtree(wheel_dir, ignore_errors=True)  # an empty leftover of a killed build
        os.replace(staging, wheel_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return None
