"""Stage `install`: the environment under test, with torch and the backend in it.

A fresh venv layered over the torch layer, reused while torch and the wheels are
unchanged. With --python the user's own environment is used as it is.
"""

from __future__ import annotations

import hashlib

from .. import envs, procs
from ..models import Status, StageResult
from .base import RunContext, config_failure, proc_failure

NAME = "install"

_VERSION_PROBE = (
    "import importlib.metadata as m, json, sys\n"
    "try:\n    v = m.version(sys.argv[1])\nexcept m.PackageNotFoundError:\n    v = None\n"
    f"print({envs.JSON_MARKER!r} + json.dumps({{'version': v}}))"
)


def _wheel_digest(ctx: RunContext) -> list[str]:
    return [hashlib.sha256(w.read_bytes()).hexdigest()[:16] for w in ctx.wheels]


def _installed_version(python, distribution: str) -> str | None:
    found, _ = envs.json_probe(python, _VERSION_PROBE, distribution, timeout=60)
    return found["version"] if found else None


def run(ctx: RunContext) -> StageResult:
    m = ctx.manifest
    reused = False
    if ctx.options.python is None:
        assert ctx.torch_env is not None
        env, reused = envs.env_under_test(
            ctx.torch_env, (m.name, _wheel_digest(ctx), m.build.extra_requirements, m.build.no_deps),
            cache=ctx.cache)
        ctx.env = env
        target = env
    else:
        target = None
    python = ctx.python
    if not reused:
        pip = procs.python_argv(python, "-m", "pip", "--disable-pip-version-check", "--no-input", "install")
        if m.build.extra_requirements:
            result = ctx.run([*pip, *m.build.extra_requirements], timeout=m.timeouts.install)
            if not result.ok:
                return proc_failure(NAME, result, "installing the backend's requirements")
        flags = ["--no-deps"] if m.build.no_deps else []
        result = ctx.run([*pip, "--no-build-isolation", *flags, *map(str, ctx.wheels)], timeout=m.timeouts.install)
        if not result.ok:
            return proc_failure(NAME, result, "installing the backend")
        if target is not None:
            envs.mark_ready(target, {"backend": m.name, "wheels": [w.name for w in ctx.wheels]})
    version = _installed_version(python, m.distribution)
    if version is None:
        message = f"{m.distribution} is not installed in {python} after the install (check 'distribution' in the manifest)"
        return config_failure(NAME, message)
    how = "reused environment" if reused else "installed"
    return StageResult(name=NAME, status=Status.passed,
                       summary=f"{m.distribution} {version} {how} in {python.parent.parent}",
                       data={"python": str(python), "version": version, "reused": reused})
