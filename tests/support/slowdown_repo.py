"""A git repository of OpenReg's sources with four commits, the third of which makes one op slower.

    1  OpenReg as bundled                                 (the nights before)
    2  a README line
    3  add.Tensor through the host: a copy each way       (the first slow commit)
    4  a comment                                          (the nights after)

The slow kernel is correct: only `add` on the device pays for it (the bench stage's `add_tiny`
measurement), as a real regression in one op would. No C++ changes, so every commit builds
from ccache.
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
UNTOUCHED = "empty"
"""a measurement it leaves alone"""

_ADD_THROUGH_HOST = '''

# Commit 3 of the slowdown fixture: add.Tensor computed on the host, with a copy each way.
_add_lib = torch.library.Library("aten", "IMPL")


def _add_through_host(a, b, *, alpha=1):
    device = a.device if isinstance(a, torch.Tensor) and a.device.type != "cpu" else b.device
    host = torch.add(a.cpu() if isinstance(a, torch.Tensor) else a, b.cpu() if isinstance(b, torch.Tensor) else b,
                     alpha=alpha)
    return host.to(device)


_add_lib.impl("add.Tensor", _add_through_host, "PrivateUse1")
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
        ("Add a device kernel for add", (register, _ADD_THROUGH_HOST)),
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
