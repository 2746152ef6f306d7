"""The fixture backends of tests/fixtures/backends, built as real wheels and installed in real venvs.

Wheels are built once for all fixtures (`pip wheel --no-deps --no-build-isolation`
with the torch layer's interpreter) and cached under the repository's .cache,
keyed by the fixtures' content; environments are built once per test session.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from filelock import FileLock

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "backends"
CACHE = REPO / ".cache"
OPENREG = REPO / "backends" / "openreg"


def write_openreg_manifest(path: Path, text: str) -> Path:
    """A changed copy of OpenReg's manifest written at `path`, with the known-failures file it names
    beside it: the manifest refuses to load without it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    shutil.copy2(OPENREG / "known-failures.toml", path.parent / "known-failures.toml")
    return path


def manifest_path(name: str) -> Path:
    return FIXTURES / name / "backend.toml"


def _digest() -> str:
    h = hashlib.sha256()
    for path in sorted(FIXTURES.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and not path.name.endswith(".egg-info"):
            h.update(str(path.relative_to(FIXTURES)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def build_wheels(torch_layer) -> dict[str, Path]:
    """fixture directory name -> its wheel."""
    from ootci.runner.core import procs
    from ootci.runner.torch_supply import envs

    out = CACHE / "fixture-wheels" / _digest()
    names = sorted(p.parent.name for p in FIXTURES.glob("*/pyproject.toml"))
    out.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(os.fspath(out) + ".lock"):
        if not (out / ".complete").is_file():
            out.mkdir(exist_ok=True)
            build = out / "build"
            # Build from copies: setuptools writes build/ and *.egg-info next to the sources.
            shutil.rmtree(build, ignore_errors=True)
            shutil.copytree(FIXTURES, build, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
            result = procs.run(envs.pip_argv(torch_layer, "wheel", "--no-deps", "--no-build-isolation", "-q",
                                             "-w", os.fspath(out), *[os.fspath(build / n) for n in names]),
                               timeout=600)
            assert result.ok, result.output_tail[-3000:]
            shutil.rmtree(build, ignore_errors=True)
            (out / ".complete").write_text("ok\n")
    wheels = {}
    for name in names:
        dist = _dist_name(FIXTURES / name / "pyproject.toml")
        found = sorted(out.glob(f"{dist}-*.whl"))
        assert found, f"no wheel for fixture {name} ({dist}) in {out}"
        wheels[name] = found[0]
    return wheels


def _dist_name(pyproject: Path) -> str:
    import tomllib

    return tomllib.loads(pyproject.read_text())["project"]["name"].replace("-", "_")


def npu_wheel() -> Path | None:
    """torch-npu 2.13.0 from PyPI, cached under .cache/wheels; None when it cannot be fetched."""
    import sys

    from ootci.runner.core import procs

    target = CACHE / "wheels"
    target.mkdir(parents=True, exist_ok=True)
    with FileLock(os.fspath(target / "torch-npu.lock")):
        found = sorted(target.glob("torch_npu-2.13.0-*.whl"))
        if not found:
            procs.run([sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
                       "-q", "-d", os.fspath(target), "torch-npu==2.13.0"], timeout=600)
            found = sorted(target.glob("torch_npu-2.13.0-*.whl"))
    return found[0] if found else None


_ENVS: dict[tuple[str, ...], object] = {}


def backend_env_factory(make_env, wheels: dict[str, Path]):
    """get(*fixture_names) -> Env with those fixture backends installed, built once per session."""

    def get(*names: str):
        if names not in _ENVS:
            _ENVS[names] = make_env(*[str(wheels[n]) for n in names], name="-".join(names))
        return _ENVS[names]

    return get


def _sources_hash(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        parts = set(path.relative_to(root).parts)
        if path.is_file() and not parts & {"build", "__pycache__"} and not any(p.endswith(".egg-info") for p in parts):
            h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def openreg_wheels(torch_layer) -> list[Path]:
    """The bundled OpenReg built against the torch layer, once per source state (the in-tree build
    directory keeps rebuilds short), through ccache as ootci's build stage compiles: the session's
    OpenReg runs on 2.13.0 compiled these units already (about 30 s of CPU each time otherwise)."""
    from ootci.runner.core import procs
    from ootci.runner.stages.build import with_ccache
    from ootci.runner.torch_supply import envs

    wheels = envs.cache_root() / "wheels" / f"openreg-{_sources_hash(OPENREG)}"
    wheels.mkdir(parents=True, exist_ok=True)
    with FileLock(str(wheels) + ".lock"):
        if not list(wheels.glob("*.whl")):
            build_env = with_ccache(dict(os.environ, MAX_JOBS="2"), envs.cache_root(), OPENREG)
            built = procs.run(envs.pip_argv(torch_layer, "wheel", "--no-build-isolation", "--no-deps", str(OPENREG),
                                            "-w", str(wheels)), timeout=1800, env=build_env)
            assert built.ok, built.output_tail[-3000:]
    return sorted(wheels.glob("*.whl"))
