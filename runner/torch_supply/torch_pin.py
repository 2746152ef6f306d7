"""The torch under test is untouchable.

A run tests exactly one torch: the torch layer's, or with `--python` the one
already in that environment. Three things keep it so:

- every pip call in the environment under test runs with a constraint file that
  pins torch to the exact version it has (`-c` on ootci's own pip calls,
  `PIP_CONSTRAINT` for the commands of a build recipe or a vendor suite), so pip
  fails instead of installing a second torch in front of it;
- a backend whose requirements exclude that torch is refused with its own root
  cause, read from its wheel's metadata (`wheel_conflict`) or from pip's resolver
  report for a dependency further down (`pip_conflict`);
- after the install, `resolution_problem` compares what `import torch` resolves
  to in the environment with the torch under test: directory, version and commit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement

from ootci.runner.core import atomic
from ootci.runner.torch_supply.wheel_metadata import WheelMetadata, exact_pin

CONSTRAINT_NAME = "torch-constraint.txt"

PIN_HINT = ("the backend requires another torch than the one under test: relax its torch requirement "
            "(for example torch>=2.13, recording the build torch in its metadata instead) "
            "or run it against the torch it requires")
SHADOW_HINT = ("something installed a second torch into the environment under test: find the package that "
               "requires it (pip's log in this stage) and relax its torch requirement")


@dataclass(frozen=True)
class TorchUnderTest:
    """The torch a run tests, as the environment's own interpreter reports it."""

    version: str
    """torch.__version__, e.g. 2.14.0+cu130"""
    dist_version: str
    """the version pip sees (the distribution's metadata), e.g. 2.14.0"""
    git_version: str | None
    location: str
    """the directory of the torch package that `import torch` loads (a real path: envs.torch_info resolves it)"""

    @classmethod
    def from_info(cls, info: dict) -> TorchUnderTest:
        return cls(version=info["version"], dist_version=info.get("dist_version") or info["version"],
                   git_version=info.get("git_version"), location=info.get("location") or "")

    @property
    def constraint(self) -> str:
        return f"torch=={self.dist_version}"

    def describe(self) -> str:
        commit = f", commit {self.git_version[:12]}" if self.git_version else ""
        return f"torch {self.version}{commit} at {self.location}"


def write_constraint(directory: Path, under_test: TorchUnderTest) -> Path:
    """The constraint file for pip, written atomically into directory."""
    path = directory / CONSTRAINT_NAME
    atomic.write_text(path, f"# the torch under test: {under_test.describe()}\n{under_test.constraint}\n")
    return path


def _excluding(meta: WheelMetadata, under_test: TorchUnderTest) -> Requirement | None:
    """The wheel's first requirement on torch that the torch under test does not meet."""
    return next((req for req in meta.torch_requirements()
                 if not req.specifier.contains(under_test.dist_version, prereleases=True)), None)


def wheel_conflict(meta: WheelMetadata, under_test: TorchUnderTest) -> str | None:
    """'torch_openreg 0.1.0 requires torch==2.13.0; the torch under test is 2.14.0+cu130', or None."""
    req = _excluding(meta, under_test)
    return f"{meta.name} {meta.version} requires {req}; the torch under test is {under_test.version}" if req else None


def pinned_elsewhere(meta: WheelMetadata, under_test: TorchUnderTest) -> str | None:
    """For a prebuilt backend: 'pinned to torch 2.13.0, torch under test is 2.14.0+cu130', or None."""
    req = _excluding(meta, under_test)
    if req is None:
        return None
    return f"pinned to torch {exact_pin(req) or req.specifier}, torch under test is {under_test.version}"


# pip's resolver, when a requirement and the constraint cannot both hold:
#   The conflict is caused by:
#       torch-openreg 0.1.0 depends on torch==2.13.0
#       The user requested (constraint) torch==2.14.0
_DEPENDS_ON_TORCH = re.compile(r"^\s*(\S+) (\S+) depends on (torch(?![\w.-])[^\n]*?)\s*$", re.M)


def pip_conflict(output: str, under_test: TorchUnderTest) -> str | None:
    """The requirement that made pip refuse the pinned torch, in the words of wheel_conflict."""
    if "(constraint) torch" not in output and "conflicting dependencies" not in output:
        return None
    m = _DEPENDS_ON_TORCH.search(output)
    if not m:
        return None
    name, version, requirement = m.groups()
    return f"{name} {version} requires {requirement}; the torch under test is {under_test.version}"


def resolution_problem(expected: TorchUnderTest, actual: TorchUnderTest) -> str | None:
    """Why the environment's `import torch` is not the torch under test, or None."""
    if (actual.location, actual.version, actual.git_version) == (
            expected.location, expected.version, expected.git_version):
        return None
    return (f"import torch in the environment under test loads {actual.describe()}, "
            f"not the torch under test, {expected.describe()}")
