"""What a Python project declares about itself, asked of its own build backend (PEP 517).

`ootci init` needs a repository's distribution name and its `torch.backends` entry
point wherever they are written: pyproject.toml, setup.cfg or a setup.py that computes
them. Only the project's build backend knows, so it is asked, through the standard
hook `prepare_metadata_for_build_wheel` (run by pyproject_hooks), never by reading
setup.py as text.

A setup.py that builds a C++ extension imports torch, so the hooks run in a throwaway
venv layered over a torch layer (runner/torch_supply/envs.py), with the project's build requirements
installed over it as `pip install --no-build-isolation` would need them, torch pinned
to the layer's. Which of them the torch layer lacked is part of the answer: the build
stage has to install the same ones (`build.extra_requirements`).
"""

from __future__ import annotations

import configparser
import json
import os
import shutil
import tempfile
import tomllib
import warnings
from dataclasses import dataclass, field
from email.parser import HeaderParser
from pathlib import Path

import pyproject_hooks
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from ootci.runner.core import procs, rootcause
from ootci.runner.core.errors import ProjectError
from ootci.runner.torch_supply import envs

GROUP = "torch.backends"
PROJECT_FILES = ("pyproject.toml", "setup.py", "setup.cfg")
# PEP 517: a project without [build-system] is built by setuptools' legacy backend.
DEFAULT_BACKEND = "setuptools.build_meta:__legacy__"
DEFAULT_REQUIRES = ["setuptools>=40.8.0"]


@dataclass
class BuildSystem:
    requires: list[str]
    backend: str
    backend_path: list[str] | None = None
    declared: bool = True
    """False when pyproject.toml has no [build-system] and PEP 517's default applies"""


@dataclass
class Declared:
    """The project's metadata, as its build backend prepared it."""

    name: str
    version: str
    summary: str
    entry_points: dict[str, str]
    """the `torch.backends` group: entry point name -> `module:attr`"""
    build_system: BuildSystem
    extra_build_requirements: list[str] = field(default_factory=list)
    """build requirements (torch excepted) that the torch layer did not already satisfy"""


def project_files(repo: Path) -> list[str]:
    return [name for name in PROJECT_FILES if (repo / name).is_file()]


def build_system(repo: Path) -> BuildSystem:
    path = repo / "pyproject.toml"
    if not path.is_file():
        return BuildSystem(list(DEFAULT_REQUIRES), DEFAULT_BACKEND, declared=False)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ProjectError(f"{path}: not valid TOML: {exc}") from None
    table = data.get("build-system")
    if not isinstance(table, dict):
        return BuildSystem(list(DEFAULT_REQUIRES), DEFAULT_BACKEND, declared=False)
    requires = table.get("requires", [])
    if not isinstance(requires, list) or not all(isinstance(r, str) for r in requires):
        raise ProjectError(f"{path}: field 'build-system.requires': expected a list of requirement strings")
    backend = table.get("build-backend") or DEFAULT_BACKEND
    backend_path = table.get("backend-path")
    return BuildSystem(list(requires), str(backend), list(backend_path) if backend_path else None)


def without_torch(requirements: list[str]) -> list[str]:
    """The requirements other than torch itself: torch is the layer's, never another."""
    kept = []
    for text in requirements:
        try:
            if canonicalize_name(Requirement(text).name) == "torch":
                continue
        except InvalidRequirement:
            raise ProjectError(f"build requirement {text!r} is not a valid requirement") from None
        kept.append(text)
    return kept


class _Hooks:
    """Runs the backend's hooks with `python`, each through procs.run with a time limit and a log."""

    def __init__(self, repo: Path, system: BuildSystem, python: Path, *, log: Path, timeout: float):
        self.log = log
        self.timeout = timeout
        self.caller = pyproject_hooks.BuildBackendHookCaller(
            os.fspath(repo), system.backend, backend_path=system.backend_path, runner=self._run,
            python_executable=os.fspath(python))
        self.backend = system.backend

    def _run(self, cmd, cwd=None, extra_environ=None) -> None:
        env = dict(os.environ, **(extra_environ or {}))
        # Whatever backends the environment has must not load while the build imports torch.
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
        result = procs.run(cmd, timeout=self.timeout, log=self.log, env=env, cwd=Path(cwd) if cwd else None)
        if not result.ok:
            cause = rootcause.from_proc(result, what=f"the build backend {self.backend}")
            raise ProjectError(f"{self.backend} could not prepare the project's metadata: "
                               f"{cause.summary if cause else 'no output'} (log: {self.log})")

    def call(self, hook: str, *args):
        try:
            with warnings.catch_warnings():
                # The backend's warnings are in the log already; they are not ootci's to print.
                warnings.simplefilter("ignore", pyproject_hooks.BuildBackendWarning)
                return getattr(self.caller, hook)(*args)
        except pyproject_hooks.BackendUnavailable as exc:
            last = next((line for line in reversed(exc.traceback.strip().splitlines()) if line.strip()),
                        "not importable")
            raise ProjectError(f"the build backend {self.backend} cannot be imported: {last.strip()} "
                               f"(is it in [build-system] requires?)") from None
        except pyproject_hooks.HookMissing as exc:
            raise ProjectError(f"the build backend {self.backend} has no hook {exc.hook_name}") from None


def _pip_install(env: envs.Env, requirements: list[str], constraint: list[str], *, log: Path,
                 timeout: float) -> set[str]:
    """Install requirements into env; the canonical names pip had to install (not already satisfied)."""
    if not requirements:
        return set()
    with tempfile.TemporaryDirectory(prefix="ootci-pip-report-") as tmp:
        report = Path(tmp) / "report.json"
        result = procs.run(envs.pip_argv(env, "install", "--report", os.fspath(report), *constraint, *requirements),
                           timeout=timeout, log=log)
        if not result.ok:
            cause = rootcause.from_proc(result, what="pip")
            raise ProjectError(f"cannot install the build requirements {', '.join(requirements)}: "
                               f"{cause.summary if cause else 'pip failed'} (log: {log})")
        try:
            data = json.loads(report.read_text())
            return {canonicalize_name(item["metadata"]["name"]) for item in data.get("install", [])}
        except (OSError, ValueError, KeyError, TypeError):
            return set()


def _newly_needed(requirements: list[str], installed: set[str]) -> list[str]:
    return [r for r in requirements if canonicalize_name(Requirement(r).name) in installed]


def read(repo: Path, layer: envs.Env, work: Path, *, constraint: list[str], log: Path,
         timeout: float = 900) -> Declared:
    """Ask the project's build backend for its metadata, in a venv layered over `layer`.

    constraint: pip arguments pinning torch (`-c FILE`); work: a scratch directory, emptied.
    """
    system = build_system(repo)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    env = envs.layered_env(layer, work / "venv")
    requires = without_torch(system.requires)
    installed = _pip_install(env, requires, constraint, log=log, timeout=timeout)
    # Only the static requirements, as `pip wheel --no-build-isolation` (the build stage) knows
    # them: it never asks get_requires_for_build_wheel, which for setuptools also writes an
    # *.egg-info into the source tree.
    hooks = _Hooks(repo, system, env.python, log=log, timeout=timeout)
    metadata_dir = work / "metadata"
    metadata_dir.mkdir()
    dist_info = metadata_dir / hooks.call("prepare_metadata_for_build_wheel", os.fspath(metadata_dir))
    declared = _parse(dist_info, system)
    declared.extra_build_requirements = _newly_needed(requires, installed)
    shutil.rmtree(work / "venv", ignore_errors=True)
    return declared


def _parse(dist_info: Path, system: BuildSystem) -> Declared:
    try:
        headers = HeaderParser().parsestr((dist_info / "METADATA").read_text(encoding="utf-8", errors="replace"))
    except OSError as exc:
        raise ProjectError(f"the build backend {system.backend} wrote no METADATA: {exc.strerror}") from None
    parser = configparser.ConfigParser(delimiters=("=",), interpolation=None)
    # Entry point names are case-sensitive; configparser documents this assignment for it.
    parser.optionxform = str  # type: ignore[assignment, method-assign]
    entry_points: dict[str, str] = {}
    path = dist_info / "entry_points.txt"
    if path.is_file():
        try:
            parser.read_string(path.read_text(encoding="utf-8"))
        except configparser.Error as exc:
            raise ProjectError(f"{path.name} of the prepared metadata is unreadable: {exc}") from None
        if parser.has_section(GROUP):
            entry_points = {name: value.strip() for name, value in parser.items(GROUP)}
    return Declared(name=headers.get("Name", ""), version=headers.get("Version", ""),
                    summary=(headers.get("Summary") or "").strip(), entry_points=entry_points, build_system=system)
