"""Stage `install`: the environment under test, with torch and the backend in it.

A fresh venv layered over the torch layer, reused while torch and the wheels are
unchanged. With --python the user's own environment is used, and its torch is
left as it is. Either way pip runs with the torch under test pinned, the stage
says what it installed, and it ends by proving that `import torch` there would still
load the torch under test (runner/torch_supply/torch_pin.py), found without importing it:
whether that torch imports is the autoload stage's question, asked right after.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path

from ootci.runner.core import procs
from ootci.runner.core.errors import OotciError
from ootci.runner.models import RootCause, StageResult, Status
from ootci.runner.stages.base import RunContext, config_failure, proc_failure
from ootci.runner.torch_supply import envs, torch_pin, wheel_metadata

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
    if ctx.options.python is not None:
        return _install(ctx, None, reused=False)
    assert ctx.torch_env is not None
    # A fresh cached environment stays locked until it is marked ready (or left unfinished).
    with envs.env_under_test(ctx.torch_env, (m.name, _wheel_digest(ctx), m.build.extra_requirements,
                                             m.build.no_deps), cache=ctx.cache) as (env, reused):
        ctx.env = env
        return _install(ctx, env, reused=reused)


def _install(ctx: RunContext, target: envs.Env | None, *, reused: bool) -> StageResult:
    """Install into ctx.python (a fresh cached environment `target`, or the user's --python);
    a reused environment gets nothing installed."""
    m = ctx.manifest
    under_test = ctx.torch_under_test
    python = ctx.python
    installed: list[str] = []
    if not reused:
        if under_test is not None:
            for wheel in ctx.wheels:
                failure = _wheel_refused(wheel, under_test)
                if failure is not None:
                    return failure
        pip = [*procs.python_argv(python, "-m", "pip", "--disable-pip-version-check", "--no-input", "install"),
               *ctx.constraint_args()]
        if m.build.extra_requirements:
            result = _pip(ctx, pip, m.build.extra_requirements, installed)
            if not result.ok:
                return _pip_failure(result, under_test, "installing the backend's requirements")
        flags = ["--no-deps"] if m.build.no_deps else []
        result = _pip(ctx, pip, ["--no-build-isolation", *flags, *map(str, ctx.wheels)], installed)
        if not result.ok:
            return _pip_failure(result, under_test, "installing the backend")
    # A reused environment passed this check before it was marked ready, and nothing is ever
    # installed into a ready one: asking its torch again would cost an interpreter per run.
    if under_test is not None and not reused:
        failure = _check_torch(python, under_test)
        if failure is not None:
            return failure
    if target is not None and not reused:
        envs.mark_ready(target, {"backend": m.name, "wheels": [w.name for w in ctx.wheels], "installed": installed})
    version = _installed_version(python, m.distribution)
    if version is None:
        message = (f"{m.distribution} is not installed in {python} after the install "
                   "(check 'distribution' in the manifest)")
        return config_failure(NAME, message)
    where = python.parent.parent
    if reused:
        summary = f"{m.distribution} {version} reused environment {where}"
    else:
        summary = f"installed {', '.join(installed) or m.distribution + ' ' + version} in {where}"
    return StageResult(name=NAME, status=Status.passed, summary=summary,
                       data={"python": str(python), "version": version, "reused": reused, "installed": installed,
                             **({"torch_location": under_test.location} if under_test else {})})


def _wheel_refused(wheel, under_test: torch_pin.TorchUnderTest) -> StageResult | None:
    """A wheel whose own requirements exclude the torch under test is not handed to pip."""
    try:
        meta = wheel_metadata.read(wheel)
    except wheel_metadata.BadWheel as exc:
        return config_failure(NAME, f"not a readable wheel: {exc}")
    conflict = torch_pin.wheel_conflict(meta, under_test)
    return _pin_failure(conflict, meta.name) if conflict else None


def _pin_failure(message: str, culprit: str | None) -> StageResult:
    return StageResult(name=NAME, status=Status.failed, summary=message,
                       root_cause=RootCause(kind="error", summary=message, hint=torch_pin.PIN_HINT, culprit=culprit))


def _pip(ctx: RunContext, pip: list[str], args: list[str], installed: list[str]) -> procs.ProcResult:
    """One pip install; what it installed ('name version') is added to `installed`."""
    with tempfile.TemporaryDirectory(prefix="ootci-pip-report-") as tmp:
        report = Path(tmp) / "report.json"
        result = ctx.run([*pip, "--report", str(report), *args], timeout=ctx.manifest.timeouts.install,
                         env=ctx.pip_env())
        if not result.ok and "no such option: --report" in result.output_tail:  # pip older than 22.2
            return ctx.run([*pip, *args], timeout=ctx.manifest.timeouts.install, env=ctx.pip_env())
        if result.ok and report.is_file():
            installed.extend(_report_items(report))
    return result


def _report_items(report: Path) -> list[str]:
    try:
        data = json.loads(report.read_text())
        return [f"{item['metadata']['name']} {item['metadata']['version']}" for item in data.get("install", [])]
    except (OSError, ValueError, KeyError, TypeError):
        return []


def _pip_failure(result: procs.ProcResult, under_test: torch_pin.TorchUnderTest | None, what: str) -> StageResult:
    conflict = torch_pin.pip_conflict(result.output_tail, under_test) if under_test is not None else None
    if conflict:
        return _pin_failure(conflict, conflict.split(" ", 1)[0])
    return proc_failure(NAME, result, what)


def _check_torch(python, under_test: torch_pin.TorchUnderTest) -> StageResult | None:
    """After the install: `import torch` in the environment must still load the torch under test."""
    try:
        actual = torch_pin.TorchUnderTest.from_info(envs.torch_found(python))
    except OotciError as exc:
        return StageResult(name=NAME, status=Status.failed, summary=exc.message,
                           root_cause=RootCause(kind="error", summary=exc.message, hint=torch_pin.SHADOW_HINT))
    problem = torch_pin.resolution_problem(under_test, actual)
    if problem is None:
        return None
    return StageResult(name=NAME, status=Status.failed, summary=problem,
                       root_cause=RootCause(kind="error", summary=problem, hint=torch_pin.SHADOW_HINT, culprit="torch"),
                       data={"expected_torch": under_test.location, "actual_torch": actual.location})
