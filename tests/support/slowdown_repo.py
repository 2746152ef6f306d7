"""A git repository of OpenReg's sources with four commits, the third of which makes one op slower.

    1  OpenReg as bundled                                 (the nights before)
    2  a README line
    3  `+` on the device waits 5 ms                       (the first slow commit)
    4  a comment                                          (the nights after)

A constant wait, so the slowdown is as large on every night and every bisection step (an extra
copy of 16 MB cost anything from 5 to 35 times the CPU's add, too uneven to bisect). The test
watches `add_large` (4M floats, a few ms on the CPU: about three times slower with the wait),
whose device/CPU ratio moves by a few per cent from night to night, where the per-call
`add_tiny` moves by 20 % on a loaded machine. No C++ changes, so every commit builds from ccache.
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
UNTOUCHED = "empty"
"""a measurement it leaves alone"""

_SLOW_ADD = '''

# Commit 3 of the slowdown fixture: every `+` on the device waits 5 ms first.
import time as _time  # noqa: E402

_plain_add = torch.Tensor.__add__


def _add_after_a_wait(self, other):
    if self.device.type == "openreg":
        _time.sleep(0.005)
    return _plain_add(self, other)


torch.Tensor.__add__ = _add_after_a_wait
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
        ("Wait before every add on the device", (register, _SLOW_ADD)),
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
