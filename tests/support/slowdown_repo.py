"""A git repository of OpenReg's sources with four commits, the third of which adds host cost to the device.

    1  OpenReg as bundled                                          (the nights before)
    2  a README line
    3  OpenReg switches to PyTorch's stock copying fallback         (the first slow commit)
    4  a comment                                                   (the nights after)

The slowdown is host cost on the device only: the stock `cpu_fallback` copies every argument
of an operator without an openreg kernel to the CPU and every result back (OpenReg's own fallback
aliases them: its memory is host memory), so an `add_tiny` on the device costs more instructions
and the CPU's add the same. The bench stage counts instructions, which the machine's load does
not move: the step is the same on every night and every bisection step whatever runs beside them,
and needs no priority slot. (Timed, as the test once did, a fourfold slowdown of `add_large` was
needed to stand clear of a loaded 2-core machine's noise, and the test ran with every other worker
at nice 19.) No C++ changes (the switch is OpenReg's TORCH_OPENREG_COPYING_FALLBACK, read when
its library loads), so every commit builds from ccache; bench/perf_planted.py plants a 3 % host
cost in OpenReg's C++ fallback instead, for the benchmark of the whole path.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.support.bisect_repo import OPENREG, commit, openreg_manifest

NAME = "openreg-slowdown"

FIRST_SLOW = 3
SLOWED = "add_tiny"
"""the bench measurement the slow commit slows"""

_COPYING = '''# Commit 3 of the slowdown fixture: PyTorch's stock copying fallback, which copies every
# argument to the CPU and back (read when the library loads, below).
import os

os.environ.setdefault("TORCH_OPENREG_COPYING_FALLBACK", "1")

'''


def make(root: Path) -> tuple[Path, list[str]]:
    """The repository under root/openreg-slowdown, and its four commits, oldest first."""
    repo = root / "openreg-slowdown"
    shutil.copytree(OPENREG, repo, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "*.so"))
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    register = repo / "torch_openreg" / "__init__.py"
    edits = [
        ("Import OpenReg", None),
        ("README: say where the sources come from", (repo / "README.md", "\nMirrored for ootci.\n", False)),
        ("Use the stock copying fallback", (register, _COPYING, True)),
        ("Comment the kernel", (register, "\n# The kernel above runs on host memory.\n", False)),
    ]
    commits = []
    for message, edit in edits:
        if edit is not None:
            path, text, first = edit
            path.write_text(text + path.read_text() if first else path.read_text() + text)
        commits.append(commit(repo, message))
    return repo, commits


def register(registry: Path, repo: Path, ref: str = "main") -> Path:
    """OpenReg's manifest as backend `openreg-slowdown`, building the repository at `ref`, in a
    registry directory of its own (a nightly runs what is registered)."""
    return openreg_manifest(registry / NAME / "backend.toml", repo, NAME, ref)
