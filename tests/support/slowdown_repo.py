"""A git repository of OpenReg's sources with four commits, the third of which makes one op slower.

    1  OpenReg as bundled                                 (the nights before)
    2  a README line
    3  `+` on the device does its work eight times        (the first slow commit)
    4  a comment                                          (the nights after)

The slowdown is a multiple of the op's own work, so a loaded machine slows both sides of the
device/CPU ratio alike and the step is about eightfold on every night and every bisection step.
Eight, not four: `add_large` streams tens of megabytes through memory, and on a loaded 2-core
machine the other core shares that bandwidth, which the priority slot's nice value cannot stop.
In one clean run of the whole suite the nights at the good commit had round ratios from 0.54 to
2.11, and the first fourfold night's rounds were 1.84, 2.31, 5.33, 5.65 and 6.37: two of five
nearer the good end's median than the bad one's, so the bisection refused its ends as too noisy
(it needs four of five). Eightfold puts the same spread well clear of the middle.
The plants the issue suggests were not: a constant 5 ms wait shrinks against an add that the
load has made slower, and its wake-up comes late by however long the scheduler takes (the
nightly's detector missed it on CI's machine); an extra copy of 16 MB through the host cost
anything from 5 to 35 times the CPU's add, and three extra copies of the result on the
device 4.8 to 26 times, from one process to the next. The test watches `add_large` (4M
floats, a few ms on the CPU), whose ratio moves by a few per cent from night to night, where
the per-call `add_tiny` moves by 20 % on a loaded machine. No C++ changes, so every commit
builds from ccache.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.support.bisect_repo import OPENREG, commit, openreg_manifest

NAME = "openreg-slowdown"

FIRST_SLOW = 3
SLOWED = "add_large"
"""the bench measurement the slow commit slows"""

SLOWDOWN = 8
"""how many times the slow commit's `+` on the device does its work"""

_SLOW_ADD = f'''

# Commit 3 of the slowdown fixture: every `+` on the device does its work {SLOWDOWN} times.
_plain_add = torch.Tensor.__add__


def _add_repeated(self, other):
    if self.device.type != "openreg":
        return _plain_add(self, other)
    for _ in range({SLOWDOWN - 1}):
        _plain_add(self, other)
    return _plain_add(self, other)


torch.Tensor.__add__ = _add_repeated
'''


def make(root: Path) -> tuple[Path, list[str]]:
    """The repository under root/openreg-slowdown, and its four commits, oldest first."""
    repo = root / "openreg-slowdown"
    shutil.copytree(OPENREG, repo, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "*.so"))
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    register = repo / "torch_openreg" / "__init__.py"
    edits = [
        ("Import OpenReg", None),
        ("README: say where the sources come from", (repo / "README.md", "\nMirrored for ootci.\n")),
        ("Repeat every add on the device", (register, _SLOW_ADD)),
        ("Comment the kernel", (register, "\n# The kernel above runs on host memory.\n")),
    ]
    commits = []
    for message, edit in edits:
        if edit is not None:
            path, text = edit
            path.write_text(path.read_text() + text)
        commits.append(commit(repo, message))
    return repo, commits


def register(registry: Path, repo: Path, ref: str = "main") -> Path:
    """OpenReg's manifest as backend `openreg-slowdown`, building the repository at `ref`, in a
    registry directory of its own (a nightly runs what is registered)."""
    return openreg_manifest(registry / NAME / "backend.toml", repo, NAME, ref)
