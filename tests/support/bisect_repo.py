"""A git repository of OpenReg's sources with eight commits and two planted faults.

    1  OpenReg as bundled                      (the good end)
    2  a README line
    3  a C++ include of a header that does not exist: the build breaks   (unrelated: skipped)
    4  the include taken out
    5  a Python `mul.Tensor` kernel that is wrong on float32   (the first bad commit)
    6  a comment
    7  a README line
    8  a comment                               (the bad end)

The kernel is registered the way backends register Python kernels
(torch.library), and only float32 products are off, so only the tests that
multiply float32 tensors on the device fail.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tests.support.fixture_backends import write_openreg_manifest

REPO = Path(__file__).resolve().parents[2]
OPENREG = REPO / "backends" / "openreg"
FIRST_BAD = 5
BUILD_BROKEN = 3

_WRONG_MUL = '''

# Commit 5 of the bisection fixture: a device kernel for mul.Tensor, off by one on float32.
_mul_lib = torch.library.Library("aten", "IMPL")


def _mul(a, b):
    device = a.device if isinstance(a, torch.Tensor) and a.device.type != "cpu" else b.device
    host = torch.mul(a.cpu() if isinstance(a, torch.Tensor) else a, b.cpu() if isinstance(b, torch.Tensor) else b)
    if host.dtype == torch.float32:
        host = host + 1
    return host.to(device)


_mul_lib.impl("mul.Tensor", _mul, "PrivateUse1")
'''


def git(repo: Path, *args: str, env: dict[str, str] | None = None) -> str:
    """git in repo as a vendor's author, its output stripped."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "Vendor", "GIT_AUTHOR_EMAIL": "vendor@example.com",
           "GIT_COMMITTER_NAME": "Vendor", "GIT_COMMITTER_EMAIL": "vendor@example.com", **(env or {})}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def commit(repo: Path, message: str) -> str:
    """Commit everything in repo; the new commit's id.

    The dates are fixed (a minute per commit), so the same edits make the same commits in every
    test that builds this history: the backend's wheels, cached by commit, are built once a session."""
    git(repo, "add", "-A")
    n = int(git(repo, "rev-list", "--all", "--count"))
    date = f"2026-11-01T00:{n:02d}:00+00:00"
    git(repo, "commit", "-q", "-m", message, env={"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date})
    return git(repo, "rev-parse", "HEAD")


def _append(path: Path, text: str) -> None:
    path.write_text(path.read_text() + text)


def make(root: Path) -> tuple[Path, list[str]]:
    """The repository under root/openreg-history, and its eight commits, oldest first."""
    repo = root / "openreg-history"
    shutil.copytree(OPENREG, repo, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "*.so"))
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    # The first file of its unity unit (setup.py includes a folder's files in sorted order): a missing
    # include there stops the compiler before it parses any of torch's headers, so the broken step
    # costs a failed build of seconds, not a minute of compiling up to the error.
    first_unit = repo / "csrc" / "aten" / "Autocast.cpp"
    good_first_unit = first_unit.read_text()
    register = repo / "torch_openreg" / "__init__.py"
    edits = [
        ("Import OpenReg", lambda: None),
        ("README: say where the sources come from", lambda: _append(repo / "README.md", "\nMirrored for ootci.\n")),
        ("Autocast: tidy includes", lambda: first_unit.write_text('#include "openreg_autocast_policy.h"\n'
                                                                  + good_first_unit)),
        ("Autocast: fix the build", lambda: first_unit.write_text(good_first_unit)),
        ("Add a device kernel for mul", lambda: _append(register, _WRONG_MUL)),
        ("Comment the kernel", lambda: _append(register, "\n# The kernel above runs on host memory.\n")),
        ("README: build notes", lambda: _append(repo / "README.md", "\nBuilt with ccache when present.\n")),
        ("Comment the module", lambda: _append(register, "# End of torch_openreg.\n")),
    ]
    commits = []
    for message, edit in edits:
        edit()
        commits.append(commit(repo, message))
    return repo, commits


def manifest(root: Path, repo: Path) -> Path:
    """OpenReg's manifest, building from the repository's git history (source.git)."""
    return openreg_manifest(root / "manifest" / "backend.toml", repo, "openreg-history")


def openreg_manifest(path: Path, repo: Path, name: str, ref: str = "main") -> Path:
    """OpenReg's manifest written at `path` as backend `name`, building `repo` (source.git) at `ref`."""
    text = (OPENREG / "backend.toml").read_text()
    text = text.replace('[source]\npath = "."', f'[source]\ngit = "{repo}"\nref = "{ref}"')
    text = text.replace('name = "openreg"', f'name = "{name}"')
    return write_openreg_manifest(path, text)
