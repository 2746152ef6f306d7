"""`ootci verify` as a user runs it: the installed console script in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.fixture_backends import manifest_path, npu_wheel

REPO = Path(__file__).resolve().parents[2]
OOTCI = Path(sys.executable).parent / "ootci"


def ootci(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(OOTCI), "verify", *args], capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, OOTCI_REGISTRY=str(REPO / "backends")))



@pytest.fixture(scope="session")
def npu_env(make_env):
    wheel = npu_wheel()
    if wheel is None:
        pytest.skip("torch-npu==2.13.0 could not be downloaded from PyPI")
    return make_env(str(wheel), name="npu")


def one_line_error(result: subprocess.CompletedProcess, code: int, text: str) -> None:
    assert result.returncode == code, result
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ootci: ") and text in lines[0], result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_torch_npu_breaks_plain_import_and_ootci_says_libhccl(npu_env):
    result = ootci("--python", str(npu_env.python), "--backend", "ascend-npu", "--json", "--runs", "1")
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert report["status"] == "failed"
    cause = report["root_cause"]
    assert cause["exception_type"] == "ImportError"
    assert cause["summary"] == "ImportError: libhccl.so: cannot open shared object file: No such file or directory"
    assert cause["culprit"] == "torch_npu"
    assert cause["hint"] == "a shared library is missing: the vendor runtime is not installed on this machine"
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["entry_point"]["status"] == "passed"
    assert checks["entry_point"]["detail"] == "'torch_npu = torch_npu:_autoload' declared by torch_npu 2.13.0"
    assert checks["plain_import"]["status"] == "failed"
    assert "libhccl.so" in checks["plain_import"]["root_cause"]["message"]
    assert checks["device"]["status"] == "blocked"
    for check in report["checks"]:
        assert set(check) >= {"name", "status", "detail"}


@pytest.mark.slow
def test_human_output_is_a_compact_table(backend_env):
    env = backend_env("foo")
    result = ootci("--python", str(env.root), "--backend", str(manifest_path("foo")), "--runs", "1")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"ootci verify: {env.python} (torch 2.13.0")
    rows = [line.split()[:2] for line in lines[1:10]]
    assert rows == [["ok", "entry_point"], ["ok", "plain_import"], ["skip", "build_torch"], ["ok", "device"],
                    ["skip", "tensor"], ["ok", "opt_out"], ["ok", "circular_import"], ["ok", "neighbours"],
                    ["ok", "import_cost"]]
    assert lines[10].startswith("PASSED in ")
    assert all(len(line) < 180 for line in lines)


def test_python_that_does_not_exist(tmp_path):
    one_line_error(ootci("--python", str(tmp_path / "nothing")), 7, "no such file")


def test_python_that_is_not_an_interpreter(tmp_path):
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'not python'\n")
    fake.chmod(0o755)
    one_line_error(ootci("--python", str(fake)), 7, "not a usable Python interpreter")
    fake.chmod(0o644)
    one_line_error(ootci("--python", str(fake)), 7, "not an executable Python interpreter")


def test_environment_without_torch():
    # The orchestrator's own venv: never has torch.
    one_line_error(ootci("--python", sys.executable), 7, "torch is not installed in this environment")


def test_unknown_backend():
    one_line_error(ootci("--python", sys.executable, "--backend", "no-such-backend"), 4,
                   "unknown backend 'no-such-backend'")


def test_bad_runs():
    one_line_error(ootci("--python", sys.executable, "--runs", "0"), 2, "--runs 0: must be at least 1")
