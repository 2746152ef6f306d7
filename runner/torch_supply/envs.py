"""Environments under test: fresh venvs, layered over a cached torch.

Installing torch takes half a minute and almost a gigabyte, so it is done once per
torch spec into a *torch layer* venv. Each environment under test is a fresh venv of
its own whose site-packages holds a `.pth` line pointing at that layer: torch is
importable and visible to `importlib.metadata` (so pip sees it as installed and
entry points are found), while everything the backend installs stays in the
environment's own site-packages. Environments are keyed, and reused while the key
(torch, backend sources, Python) is unchanged.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from ootci.runner.core import procs
from ootci.runner.core.errors import TargetEnvironmentError

# What every torch layer carries besides torch: the suites need pytest, op_db needs
# expecttest and numpy, the builds need setuptools/wheel/ninja.
LAYER_PACKAGES = [
    "numpy",
    "pytest",
    "pytest-xdist",
    "expecttest",
    "setuptools",
    "wheel",
    "ninja",
]
PTH_NAME = "_ootci_torch_layer.pth"


READY_MARKER = ".ootci-ready"
"""written last into a finished environment (JSON: how it was made); without it the environment is rebuilt"""


UNTRUSTED_ROOT = "ootci-pr"
"""The default cache root of untrusted runs on a machine that keeps its files (see cache_root)."""


def cache_root() -> Path:
    """$OOTCI_CACHE, else `~/.cache/ootci` (under $XDG_CACHE_HOME when set).

    A run of a pull request's code (the workflows set OOTCI_TRUST=pr for it) on a self-hosted runner,
    whose files outlive the job, defaults to a root of its own, `~/.cache/ootci-pr`: what it builds or
    installs is never where a trusted run (the nightly, a bisection) looks. On a GitHub-hosted runner
    nothing outlives the job, and both use the same root, so a PR run can restore what a trusted run
    saved with actions/cache (which keys entries by path)."""
    explicit = os.environ.get("OOTCI_CACHE")
    if explicit:
        return Path(explicit)
    untrusted = os.environ.get("OOTCI_TRUST") == "pr" and os.environ.get("RUNNER_ENVIRONMENT") == "self-hosted"
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / (UNTRUSTED_ROOT if untrusted else "ootci")


def digest(*parts: object, length: int = 16) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(json.dumps(part, sort_keys=True, default=str).encode())
        h.update(b"\0")
    return h.hexdigest()[:length]


@dataclass(frozen=True)
class Env:
    root: Path

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    @property
    def site_packages(self) -> Path:
        found = sorted((self.root / "lib").glob("python3*/site-packages"))
        if not found:
            raise TargetEnvironmentError(f"{self.root}: not a virtual environment (no site-packages)")
        return found[0]

    @property
    def ready_marker(self) -> Path:
        return self.root / READY_MARKER

    def is_ready(self) -> bool:
        return self.ready_marker.is_file() and self.python.exists()


def python_tag(python: str | Path | None = None) -> str:
    """'3.11' for the interpreter that builds the venvs."""
    if python is None:
        return f"{sys.version_info.major}.{sys.version_info.minor}"
    out = procs.run([os.fspath(python), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], timeout=60,
                    separate_stderr=True)
    return out.output_tail.strip()


def pip_argv(env: Env, *args: str) -> list[str]:
    return procs.python_argv(env.python, "-m", "pip", "--disable-pip-version-check", "--no-input", *args)


def create_venv(root: Path, *, base_python: str | None = None, log: Path | None = None, timeout: float = 600,
                with_pip: bool = True) -> Env:
    """A fresh venv at root (anything already there is removed)."""
    if root.exists():
        shutil.rmtree(root)
    root.parent.mkdir(parents=True, exist_ok=True)
    argv = [base_python or sys.executable, "-m", "venv", os.fspath(root)] + ([] if with_pip else ["--without-pip"])
    result = procs.run(argv, timeout=timeout, log=log)
    if not result.ok:
        raise TargetEnvironmentError(f"could not create a virtual environment at {root}: "
                                     f"{result.output_tail.strip()[-300:]}")
    return Env(root)


def _finish(env: Env, meta: dict) -> None:
    tmp = env.ready_marker.with_suffix(f".{os.getpid()}.tmp")  # two runs may record a layer's torch at once
    tmp.write_text(json.dumps(meta, indent=2, default=str))
    os.replace(tmp, env.ready_marker)


def layer_key(key_parts: object, extra_packages: list[str] | None = None) -> str:
    """The directory name of the torch layer for a torch plan's key, under $OOTCI_CACHE/torch.

    Also what `ootci cache-key` names a workflow's cache after, so that the cache restored
    is exactly the layer this interpreter would build."""
    return digest("torch-layer", key_parts, LAYER_PACKAGES + list(extra_packages or []), python_tag())


def layer_env(key_parts: object, extra_packages: list[str] | None = None, *, cache: Path | None = None) -> Env:
    """Where the torch layer for a torch plan's key lives (made or not: see Env.is_ready)."""
    return Env((cache or cache_root()) / "torch" / layer_key(key_parts, extra_packages))


def torch_layer(
    install_args: list[str],
    key_parts: object,
    *,
    log: Path | None = None,
    timeout: float = 3600,
    cache: Path | None = None,
    extra_packages: list[str] | None = None,
) -> tuple[Env, bool]:
    """The cached venv holding torch (installed from install_args); returns (env, reused)."""
    packages = LAYER_PACKAGES + list(extra_packages or [])
    env = layer_env(key_parts, extra_packages, cache=cache)
    env.root.parent.mkdir(parents=True, exist_ok=True)
    # Parallel runs (and pytest-xdist workers) share the cache: one builds, the rest wait.
    with FileLock(os.fspath(env.root) + ".lock"):
        if env.is_ready():
            return env, True
        _build_layer(env, install_args, packages, log=log, timeout=timeout)
    return env, False


SHIPPED_TESTS = r"(?:.+[/\\])?tests?[/\\]"
"""Directories of the test suites that packages ship (sympy's, networkx's, numpy's: a fifth of a
torch layer's .py files and a third of their bytes), which nothing under test imports: the
layer's byte-code leaves them out. A pattern for paths under site-packages (`shipped_tests`)."""


def shipped_tests(site_packages: Path) -> str:
    """The `compileall -x` pattern, searched in each full path, for SHIPPED_TESTS under site_packages
    only: a cache that itself lives under a directory named tests still gets its byte-code."""
    return re.escape(os.fspath(site_packages)) + r"[/\\]" + SHIPPED_TESTS


def byte_compile(env: Env, *, log: Path | None, timeout: float) -> procs.ProcResult:
    """Byte-code for everything in env's site-packages but SHIPPED_TESTS, on every core. A file
    that does not compile (a package's Python 2 leftovers) is left as it is, as pip leaves it.

    The result is logged and not judged: where the system cannot run a process pool, compileall
    itself falls back to one process, and byte-code that is missing costs imports time, not
    correctness."""
    return procs.run(procs.python_argv(env.python, "-m", "compileall", "-q", "-j", "0", "-x",
                                       shipped_tests(env.site_packages), os.fspath(env.site_packages)),
                     timeout=timeout, log=log)


def _build_layer(env: Env, install_args: list[str], packages: list[str], *, log: Path | None, timeout: float) -> None:
    # Built in place (console scripts hard-code the venv path); the ready marker,
    # written last, is what makes it count, so a half-built layer is rebuilt.
    create_venv(env.root, log=log)
    # pip would byte-compile every file it installed, one at a time: compileall does it after,
    # on every core and without the shipped test suites. Byte-code is written either way, so
    # no import ever compiles (where PYTHONDONTWRITEBYTECODE is set, one could not write it).
    result = procs.run(pip_argv(env, "install", "--no-compile", *install_args, *packages), timeout=timeout, log=log)
    if not result.ok:
        raise TargetEnvironmentError(_pip_failure("install torch", result))
    byte_compile(env, log=log, timeout=timeout)
    # What `import torch` there says of itself, probed once: a ready layer is never installed
    # into again, and every run over it would otherwise start one more interpreter to ask. (A
    # torch that cannot be imported is recorded as nothing: the torch stage probes it and says why.)
    try:
        said = {"torch": torch_info(env.python)}
    except TargetEnvironmentError:
        said = {}
    _finish(env, {"install_args": install_args, "packages": packages, **said})


def _pip_failure(what: str, result: procs.ProcResult) -> str:
    lines = [line for line in result.output_tail.splitlines() if line.strip()]
    errors = [line for line in lines if "ERROR" in line or "error:" in line]
    # pip's last error line for a conflict only says ResolutionImpossible; the line that names
    # a constraint (a machine-wide cap, or PIP_CONSTRAINT) is the cause a person can act on.
    capped = [line for line in lines if "(constraint)" in line]
    detail = (capped or errors or lines or ["no output"])[-1].strip()
    if result.timed_out:
        detail = f"timed out after {result.timeout_s:g} s"
    return f"pip could not {what}: {detail[:400]}"


def layered_env(layer: Env, root: Path) -> Env:
    """A fresh venv at root that sees the torch layer's packages through a .pth file."""
    # No pip of its own (ensurepip is most of a venv's creation time): `python -m pip`
    # finds the layer's pip through the .pth file and installs into this venv.
    env = create_venv(root, with_pip=False)
    (env.site_packages / PTH_NAME).write_text(os.fspath(layer.site_packages) + "\n")
    return env


@contextlib.contextmanager
def env_under_test(layer: Env, key_parts: object, *, cache: Path | None = None) -> Iterator[tuple[Env, bool]]:
    """(env, reused): the cached environment for key_parts over the layer, made fresh unless a
    finished one is there. A fresh one stays locked for the whole block, in which the caller
    installs into it and marks it ready: parallel runs of the same backend on the same torch (a
    shared cache on one host, pytest-xdist workers) would otherwise make the same venv at once,
    and one would find the other's half-made directory. A finished one is never written to
    again, so it is handed out unlocked."""
    key = digest("env", key_parts, os.fspath(layer.root))
    env = Env((cache or cache_root()) / "envs" / key)
    env.root.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(os.fspath(env.root) + ".lock"):
        if not env.is_ready():
            yield layered_env(layer, env.root), False
            return
    yield env, True


def mark_ready(env: Env, meta: dict) -> None:
    _finish(env, meta)


JSON_MARKER = "OOTCI-JSON"


def json_probe(python: Path | str, code: str, *args: str, timeout: float = 120,
               env: dict[str, str] | None = None) -> tuple[dict | None, procs.ProcResult]:
    """Run `code` in `python`; it reports by printing JSON_MARKER + a JSON object.

    Returns that object (None when the probe printed none) and the process, so a
    caller can say why it failed.
    """
    result = procs.run(procs.python_argv(python, "-c", code, *args), timeout=timeout, env=env)
    for line in result.output_tail.splitlines():
        if line.startswith(JSON_MARKER):
            return json.loads(line[len(JSON_MARKER):]), result
    return None, result


_DIST_VERSION = "try:\n    dist = md.version('torch')\nexcept md.PackageNotFoundError:\n    dist = None\n"
"""probe code: `dist`, the torch version pip sees (None without its metadata)"""

_TORCH_INFO = (
    "import importlib.metadata as md, json, os, torch\n"
    + _DIST_VERSION +
    f"print({JSON_MARKER!r} + json.dumps({{'version': torch.__version__, "
    "'git_version': getattr(torch.version, 'git_version', None), 'dist_version': dist, "
    "'location': os.path.dirname(os.path.realpath(torch.__file__))}))"
)


TORCH_INFO_FIELDS = {"version", "git_version", "dist_version", "location"}
"""what torch_info says, and a layer's ready marker must hold to stand in for asking"""


def layer_torch_info(layer: Env) -> dict:
    """torch_info of a ready torch layer, as its ready marker records it. A layer built by an
    older ootci (a cache restored in CI) is asked once, and its marker then records the answer."""
    try:
        meta = json.loads(layer.ready_marker.read_text())
    except (OSError, ValueError):
        meta = None
    recorded = meta.get("torch") if isinstance(meta, dict) else None
    if isinstance(recorded, dict) and set(recorded) >= TORCH_INFO_FIELDS:
        return recorded
    info = torch_info(layer.python)
    if isinstance(meta, dict):
        try:
            _finish(layer, {**meta, "torch": info})
        except OSError:
            pass  # a read-only cache: asked again next time
    return info


_TORCH_FOUND = (
    "import importlib.metadata as md, importlib.util, json, os, runpy\n"
    "spec = importlib.util.find_spec('torch')\n"
    "where = os.path.dirname(os.path.realpath(spec.origin)) if spec and spec.origin else None\n"
    "said = runpy.run_path(os.path.join(where, 'version.py')) if where else {}\n"
    + _DIST_VERSION +
    f"print({JSON_MARKER!r} + json.dumps({{'version': said.get('__version__'), "
    "'git_version': said.get('git_version'), 'dist_version': dist, 'location': where}))"
)


def torch_found(python: Path | str, *, timeout: float = 60) -> dict:
    """What torch_info says, read without importing torch: the package `import torch` would load
    (the import system's own search, .pth files included) and its torch/version.py.

    Wherever ootci only needs to name a torch (the interpreter of `ootci test`, of `run --python`,
    of `verify` and of `ootci torch installed`, and the check that an install left the torch under test in place): an
    interpreter without torch's second and a half of imports. Whether that torch imports is for
    the autoload stage or the suite to say. Where it cannot be read so (no version.py, one that
    fails), torch is imported after all.
    """
    # Without autoload, as torch_info: a .pth file that imports a backend (and so torch) at startup
    # must not load the backends here either.
    info, _ = json_probe(python, _TORCH_FOUND, timeout=timeout,
                         env=dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0"))
    if info is not None and info.get("location") and info.get("version"):
        return info
    return torch_info(python, timeout=max(timeout, 120))


def torch_info(python: Path | str, *, timeout: float = 120) -> dict:
    """The torch that `import torch` loads at `python`, without autoload.

    version and git_version are torch's own (torch.__version__, torch.version.git_version);
    dist_version is what pip sees (2.14.0 where torch says 2.14.0+cu130); location is
    the directory of the package, so a caller can tell which of two torches it is.
    """
    info, result = json_probe(python, _TORCH_INFO, timeout=timeout,
                              env=dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0"))
    if info is not None:
        return info
    from ootci.runner.core.rootcause import from_proc

    cause = from_proc(result, what="import torch")
    raise TargetEnvironmentError(f"{python}: cannot import torch: {cause.summary if cause else 'no output'}")
