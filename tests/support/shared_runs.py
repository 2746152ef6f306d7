"""Expensive `ootci run`s that several test files check, made once per test session.

pytest-xdist gives each worker a session of its own, so a session fixture alone would make
the same run once per worker. A shared run goes under the base temporary directory that all
workers of one session share, behind a file lock: the first test to ask for it runs it, the
others wait for that and read the same records. Tests read these records; none may change
them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from filelock import FileLock

from tests.support.cli import ootci

OUTPUT_TAIL = 6000
"""characters of the run's stdout and stderr kept for a failing test's message"""


@dataclass(frozen=True)
class SharedRun:
    returncode: int
    stdout: str
    stderr: str
    out: Path
    """the run's --out directory: one record directory per backend"""


def session_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The one directory this test session's workers share (the session's own without xdist)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def shared_run(tmp_path_factory: pytest.TempPathFactory, *args: str, timeout: float = 3000) -> SharedRun:
    """`ootci <args> --out DIR`, run once per session, whichever worker asks first: the same
    arguments are the same run."""
    root = session_root(tmp_path_factory) / "shared-runs"
    root.mkdir(parents=True, exist_ok=True)
    place = root / re.sub(r"[^\w.]+", "-", " ".join(args)).strip("-")
    summary = place / "result.json"
    with FileLock(os.fspath(place) + ".lock"):
        if not summary.is_file():
            shutil.rmtree(place, ignore_errors=True)  # a run killed half-way is made again
            place.mkdir()
            result = ootci(*args, "--out", str(place / "out"), timeout=timeout)
            part = place / "result.json.part"
            part.write_text(json.dumps({"returncode": result.returncode, "stdout": result.stdout[-OUTPUT_TAIL:],
                                        "stderr": result.stderr[-OUTPUT_TAIL:]}))
            part.replace(summary)
    done = json.loads(summary.read_text())
    return SharedRun(done["returncode"], done["stdout"], done["stderr"], place / "out")


OPENREG_ON_2_13 = ("run", "openreg", "--torch", "2.13.0")
"""OpenReg's whole pipeline (smoke and integration) on the local 2.13.0 wheel: the release
matrix checks it is green, the shard test compares three shards with it"""


def openreg_on_2_13(tmp_path_factory: pytest.TempPathFactory) -> SharedRun:
    return shared_run(tmp_path_factory, *OPENREG_ON_2_13)


OPENREG_BUILT_ON_2_13 = ("run", "openreg", "--torch", "2.13.0", "--suites", "none")
"""OpenReg built against the local 2.13.0 wheel, installed and verified, no suites (fixture
`openreg_compiled`). Files that compile OpenReg's csrc/ against 2.13.0 in copies of their own
(the bisection's history, a vendor's repository, the init fixtures) ask for it before they
build, so the units are compiled once and their builds are ccache hits; handed out side by
side at the start of the session, each compiled the same units (about 25 s of CPU each). The
shared run above then finds OpenReg's wheel in ootci's cache."""


def openreg_built_on_2_13(tmp_path_factory: pytest.TempPathFactory) -> SharedRun:
    return shared_run(tmp_path_factory, *OPENREG_BUILT_ON_2_13)
