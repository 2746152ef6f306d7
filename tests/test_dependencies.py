"""Every third-party module the orchestrator imports is a declared dependency, and the
code that runs in the environment under test imports only torch, pytest and the stdlib."""

from __future__ import annotations

import ast
import importlib.metadata
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
TARGET_SIDE = [REPO / "runner" / "suites", REPO / "runner" / "probes"]
OWN = {"ootci", "runner", "dashboard"}


def top_level_imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def third_party(names: set[str]) -> set[str]:
    return {n for n in names if n not in sys.stdlib_module_names and n not in OWN and n != "__future__"}


def is_target_side(path: Path) -> bool:
    return any(path.is_relative_to(d) for d in TARGET_SIDE)


def module_level_imports(path: Path) -> set[str]:
    """Top-level names imported when the module itself is imported (not inside a function)."""
    names = set()
    for node in ast.parse(path.read_text(), filename=str(path)).body:
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def orchestrator_files() -> list[Path]:
    return [p for p in sorted((REPO / "runner").rglob("*.py")) + sorted((REPO / "dashboard").rglob("*.py"))
            if not is_target_side(p)]


def test_orchestrator_imports_are_declared_dependencies():
    """Declared in [project].dependencies, or in the perf extra and then imported only where it is used
    (inside a function), so that an ootci without the extra still starts."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = {canonicalize_name(Requirement(r).name) for r in project["dependencies"]}
    optional = {canonicalize_name(Requirement(r).name) for r in project["optional-dependencies"]["perf"]}
    optional_modules = {"numpy"}  # signal-processing-algorithms' own dependency, imported beside it
    providers = importlib.metadata.packages_distributions()
    missing, eager = {}, {}
    for path in orchestrator_files():
        at_import = module_level_imports(path)
        for module in third_party(top_level_imports(path)):
            dists = {canonicalize_name(d) for d in providers.get(module, [module])}
            if dists & declared:
                continue
            if dists & optional or module in optional_modules:
                if module in at_import:
                    eager.setdefault(module, []).append(str(path.relative_to(REPO)))
                continue
            missing.setdefault(module, []).append(str(path.relative_to(REPO)))
    assert missing == {}, f"imported but not in [project].dependencies: {missing}"
    assert eager == {}, f"an optional dependency imported with the module: {eager}"


def test_target_side_code_needs_only_torch_pytest_and_the_stdlib():
    allowed = {"torch", "pytest", "_pytest", "ootci_plugin", "_probe", "_counters", "device_type_ids"}
    found = {}
    for root in TARGET_SIDE:
        for path in sorted(root.rglob("*.py")):
            extra = third_party(top_level_imports(path)) - allowed
            if extra:
                found[str(path.relative_to(REPO))] = sorted(extra)
    assert found == {}
