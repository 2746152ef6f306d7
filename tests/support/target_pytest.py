"""Run a pytest suite inside another Python environment and report per test.

The orchestrator's own environment has no torch; suites that need one (a
backend's target-side tests) run in a venv built for them. This module is the
generic bridge: discover the target test ids statically (ast, no import), run
the target suite once with JUnit XML output, and look up each id's outcome.
Only the standard library is used.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import os
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

from filelock import FileLock


@dataclasses.dataclass(frozen=True)
class Outcome:
    status: str  # "passed" | "failed" | "error" | "skipped" | "missing"
    message: str = ""


def discover(tests_dir: Path) -> list[str]:
    """'file.py::test_name' for every top-level test function and every
    test method of a Test* class, without importing anything."""
    ids = []
    for path in sorted(tests_dir.glob("test_*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
                ids.append(f"{path.name}::{node.name}")
            elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef) and item.name.startswith("test"):
                        ids.append(f"{path.name}::{node.name}::{item.name}")
    return ids


def sources_hash(*paths: Path, suffixes=(".py", ".cpp", ".h", ".toml")) -> str:
    """Hash of the given files and of the source files under given folders."""
    h = hashlib.sha256()
    for root in paths:
        files = [root] if root.is_file() else sorted(root.rglob("*"))
        for path in files:
            if path.is_file() and path.suffix in suffixes and "build" not in path.parts:
                h.update(path.name.encode())
                h.update(path.read_bytes())
    return h.hexdigest()[:16]


def venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def ensure_layered_env(root: Path, layer, installs: list[list[str]], stamp: str, env: dict | None = None) -> Path:
    """A venv at `root` over the shared torch layer (runner/torch_supply/envs.py), with each
    `pip install` argument list of `installs` applied; rebuilt only when `stamp`
    (e.g. a hash of the sources being installed) differs from the last success."""
    from ootci.runner.torch_supply import envs

    marker = root / ".ootci-stamp"
    python = venv_python(root)
    with FileLock(str(root) + ".lock"):
        if python.exists() and marker.exists() and marker.read_text() == stamp:
            return python
        target = envs.layered_env(layer, root)
        for args in installs:
            subprocess.run(envs.pip_argv(target, "install", "-q", *args), check=True, env=env)
        marker.write_text(stamp)
    return python


def run(python: Path, tests_dir: Path, junit: Path, cwd: Path, extra: list[str] = ()) -> subprocess.CompletedProcess:
    cmd = [str(python), "-m", "pytest", str(tests_dir), "-p", "no:cacheprovider",
           f"--junitxml={junit}", "-q", *extra]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)


def parse_junit(junit: Path) -> dict[str, Outcome]:
    """Outcome per test id; parametrized cases fold into their function:
    any failure wins, then passes, then skips."""
    rank = {"failed": 3, "error": 3, "passed": 2, "skipped": 1}
    results: dict[str, Outcome] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        module = case.get("classname", "").split(".")
        name = case.get("name", "").split("[", 1)[0]
        # classname is "pkg.test_file" or "pkg.test_file.TestClass"
        file_idx = max(i for i, part in enumerate(module) if part.startswith("test_")) if any(
            p.startswith("test_") for p in module) else len(module) - 1
        test_id = f"{module[file_idx]}.py::" + "::".join(module[file_idx + 1:] + [name])
        status, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                status = "failed" if child.tag == "failure" else "error"
                message = (child.get("message") or "") + "\n" + (child.text or "")
            elif child.tag == "skipped" and status == "passed":
                status, message = "skipped", child.get("message") or ""
        prev = results.get(test_id)
        if prev is None or rank[status] > rank[prev.status]:
            results[test_id] = Outcome(status, message.strip())
    return results
