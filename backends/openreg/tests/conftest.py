"""Shared helpers for the openreg target-side tests.

These tests run in an environment where torch and torch_openreg are
installed (see tests/backends/test_openreg.py at the repository root for the bridge
that builds one). They need only torch, pytest and the standard library.
"""

import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest

# Without torch (e.g. a plain `pytest` in the orchestrator's environment)
# these tests cannot even be imported: leave them to tests/backends/test_openreg.py,
# which runs them in an environment built for them.
if importlib.util.find_spec("torch") is None:
    collect_ignore_glob = ["test_*.py"]


def run_python(code: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter: the only honest way to test what
    `import torch` does, since this process has imported torch already."""
    full_env = dict(os.environ)
    full_env.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        cwd=os.path.dirname(__file__),
    )


@pytest.fixture
def python():
    return run_python


@pytest.fixture(scope="session")
def torch():
    import torch

    import torch_openreg  # noqa: F401  (explicit, in case autoload is disabled)

    return torch


@pytest.fixture(autouse=True)
def _restore_current_device():
    yield
    import torch

    if hasattr(torch, "openreg"):
        torch.openreg.set_device(0)
