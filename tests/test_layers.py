"""runner/'s packages import only downwards, as each package's docstring says (docs/architecture.md)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RUNNER = REPO / "runner"
TARGET_SIDE = ("suites", "probes")  # run inside the environment under test: tests/test_dependencies.py

BELOW_STAGES = {"suite_runs", "verification", "torch_supply", "history", "relay", "performance", "records",
                "manifests", "core", "models"}
MAY_IMPORT = {
    "models": set(),
    "core": {"models"},
    "manifests": {"core", "models"},
    "records": {"core", "models"},
    "torch_supply": {"core", "manifests", "models"},
    "suite_runs": {"core", "manifests", "records", "models"},
    "verification": {"core", "manifests", "torch_supply", "records", "models"},
    "history": {"core", "manifests", "records", "models"},
    "relay": {"core", "manifests", "performance", "records", "models"},
    "performance": {"core", "records", "models"},
    "stages": {"suite_runs", "verification", "torch_supply", "records", "manifests", "core", "models"},
    "bisection": {"stages"} | BELOW_STAGES,
    "onboarding": {"stages"} | BELOW_STAGES,
    "dashboard": {"history", "performance", "records", "core", "models"},
    "commands": {"bisection", "onboarding", "stages", "dashboard", "cli"} | BELOW_STAGES,
    "cli": {"commands", "core", "manifests", "models"},
    "__main__": {"cli"},
}


def unit_of(path: Path) -> str:
    if path.is_relative_to(REPO / "dashboard"):
        return "dashboard"
    return path.relative_to(RUNNER).parts[0].removesuffix(".py")


def imported_units(path: Path) -> set[str]:
    """The runner units (and the dashboard) a file imports, leaving out imports for type hints only."""
    tree = ast.parse(path.read_text(), filename=str(path))
    hints_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                  and getattr(node.test, "id", getattr(node.test, "attr", "")) == "TYPE_CHECKING"
                  for n in ast.walk(node)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in hints_only or not isinstance(node, ast.ImportFrom) or not node.module:
            continue
        parts = node.module.split(".")
        if parts[0] != "ootci" or len(parts) < 2:
            continue
        if parts[1] == "dashboard":
            found.add("dashboard")
        elif parts[1] == "runner" and len(parts) > 2:
            found.add(parts[2])
        elif parts[1] == "runner":  # from ootci.runner import <unit> (or __version__)
            found.update(a.name for a in node.names if a.name != "__version__")
    return found


def code_files() -> list[Path]:
    """The orchestrator's files: runner/ (but its package marker and the target side) and the dashboard."""
    runner = [p for p in RUNNER.rglob("*.py") if p != RUNNER / "__init__.py" and unit_of(p) not in TARGET_SIDE]
    return sorted(runner + list((REPO / "dashboard").rglob("*.py")))


def test_every_unit_imports_only_what_its_layer_may():
    upward = []
    for path in code_files():
        unit = unit_of(path)
        assert unit in MAY_IMPORT, f"{path.relative_to(REPO)}: a new package needs its place in MAY_IMPORT"
        for other in imported_units(path) - {unit}:
            if other not in MAY_IMPORT[unit]:
                upward.append(f"{path.relative_to(REPO)} imports {other}")
    assert upward == []


def test_runner_keeps_few_top_level_modules_and_every_package_says_what_it_owns():
    modules = sorted(p.stem for p in RUNNER.glob("*.py") if p.stem != "__init__")
    assert len(modules) <= 12, modules
    for package in sorted(p.parent for p in RUNNER.glob("*/__init__.py")):
        if package.name in TARGET_SIDE:
            continue
        doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
        assert "Owns" in doc and "import" in doc, f"runner/{package.name}/__init__.py: say what it owns and may import"


# What the tests' folders stand for besides runner/'s units: the bundled backends, the workflows
# (beside the caller workflows act runs) and the dashboard.
TEST_FOLDERS_BEYOND_RUNNER = {"backends", "workflows", "dashboard"}


def test_the_tests_mirror_the_packages():
    """A test file sits in the folder of the unit it tests; only project-wide checks stay at the top."""
    tests = REPO / "tests"
    units = {unit_of(p) for p in RUNNER.glob("*") if p.suffix == ".py" or (p / "__init__.py").is_file()}
    folders = {p.parent.name for p in tests.glob("*/test_*.py")} - {"fixtures"}
    assert folders <= units | TEST_FOLDERS_BEYOND_RUNNER, folders - units - TEST_FOLDERS_BEYOND_RUNNER
    top = {p.name for p in tests.glob("test_*.py")}
    # test_cpu_report.py: the test suite's own CPU budget (tests/support/cpu_report.py), no unit of runner/.
    assert top == {"test_readme.py", "test_layers.py", "test_dependencies.py", "test_packaging.py",
                   "test_setup_script.py", "test_cpu_report.py"}, top
    deeper = [p for p in tests.glob("*/*/test_*.py") if p.relative_to(tests).parts[0] != "fixtures"]
    assert not deeper, f"one level of folders, as runner/ has: {deeper}"
