"""scripts/setup.sh: `make demo` installs only what a run needs; `make test` adds the tools only the
tests use (chromium, shellcheck). Run in a copy of the script, with stand-ins for apt-get, sudo and
the venv's python that record how they were called (nothing is installed)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
RECORDING = '#!/bin/sh\necho "$(basename "$0") $*" >> "$CALLS"\n'
COMPILE = "python -m compileall -q -j 0 runner dashboard"


@pytest.fixture
def checkout(tmp_path):
    root = tmp_path / "checkout"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "setup.sh", root / "scripts" / "setup.sh")
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    python = root / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(RECORDING)
    python.chmod(0o755)
    # A PATH of stand-ins: git, ccache and ninja are there; chromium and shellcheck are not.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("apt-get", "sudo", "git", "ccache", "ninja"):
        (bin_dir / name).write_text(RECORDING if name in ("apt-get", "sudo") else "#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)
    for name in ("dirname", "id", "basename", "touch"):
        os.symlink(shutil.which(name), bin_dir / name)
    os.symlink(sys.executable, bin_dir / "python3")
    return root, bin_dir, tmp_path / "calls"


def setup(checkout, purpose: str) -> tuple[subprocess.CompletedProcess, str]:
    root, bin_dir, calls = checkout
    result = subprocess.run(["/bin/bash", str(root / "scripts" / "setup.sh"), purpose], capture_output=True,
                            text=True, timeout=60, env={"PATH": str(bin_dir), "CALLS": str(calls)})
    return result, calls.read_text() if calls.exists() else ""


def test_demo_installs_no_browser_or_linter_and_says_what_pip_does(checkout):
    result, calls = setup(checkout, "demo")
    assert result.returncode == 0, result.stderr
    assert "chromium" not in calls and "shellcheck" not in calls and "apt-get" not in calls
    assert "python -m pip install -q --disable-pip-version-check -e ." in calls.splitlines()
    assert "setup: pip installing ootci and its dependencies into .venv" in result.stdout
    # ootci's own sources are byte-compiled after the install, and on every setup after it: an
    # edited module gets its byte-code there too, wherever Python itself may not write it.
    assert calls.splitlines()[-1] == COMPILE
    again, calls_again = setup(checkout, "demo")  # set up already: nothing else runs
    assert again.returncode == 0 and calls_again == calls + COMPILE + "\n" and again.stdout == ""


def test_test_setup_adds_chromium_shellcheck_and_the_test_tools(checkout):
    result, calls = setup(checkout, "test")
    assert result.returncode == 0, result.stderr
    assert "setup: installing chromium shellcheck with apt-get (system-wide)" in result.stdout
    assert any(line.endswith("install -y -qq --no-install-recommends chromium shellcheck")
               for line in calls.splitlines()), calls
    assert "python -m pip install -q --disable-pip-version-check -e .[test]" in calls.splitlines()
    assert "pip installing ootci and its test tools" in result.stdout
    demo, calls_after = setup(checkout, "demo")  # the tests' venv has all the demo needs
    assert demo.returncode == 0 and "pip install" not in calls_after.replace(calls, "")
