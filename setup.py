"""Packaging that pyproject.toml alone cannot say.

The repository keeps `runner/`, `dashboard/` and `backends/` at its top level, but the
wheel installs them as `ootci.runner`, `ootci.dashboard` and `ootci.backends`: two
top-level packages named `runner` and `dashboard` would clash with anything else in
site-packages. `backends/` (the registry and the bundled OpenReg sources) is data.

The build also records the commit it was built from, so that `ootci init` can pin a
vendor's workflow to the exact ootci it runs (a version tag alone is not a SHA).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from setuptools import find_namespace_packages, setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

ROOT = Path(__file__).resolve().parent
CODE = ("runner", "dashboard")
BUILD_INFO = "runner/_build.json"


def packages() -> list[str]:
    found = [*CODE, *find_namespace_packages(include=[f"{name}.*" for name in CODE], exclude=["*__pycache__*"])]
    return ["ootci." + name for name in found] + ["ootci.backends"]


def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def write_build_info(target: Path) -> None:
    commit = git_commit()
    if commit is None:  # building from an sdist: it carries the file the sdist's build wrote
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps({"commit": commit}) + "\n")


class BuildPyWithCommit(build_py):
    def run(self) -> None:
        super().run()
        write_build_info(Path(self.build_lib) / "ootci" / BUILD_INFO)


class SdistWithCommit(sdist):
    def make_release_tree(self, base_dir, files) -> None:
        super().make_release_tree(base_dir, files)
        write_build_info(Path(base_dir) / BUILD_INFO)


setup(
    packages=packages(),
    package_dir={"ootci." + name: name for name in (*CODE, "backends")},
    cmdclass={"build_py": BuildPyWithCommit, "sdist": SdistWithCommit},
)
