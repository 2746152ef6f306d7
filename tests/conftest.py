"""Shared fixtures: real environments under test, built once per session and cached.

The test suite runs in the orchestrator venv, which has no torch. Everything that
needs torch runs in a real venv built here, layered over one cached torch install
(see runner/torch_supply/envs.py), exactly as `ootci run` does it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TORCH_SPEC = "torch==2.13.0"

# Every test, and every `ootci` subprocess a test starts, shares one cache in the
# repository (ignored by git), so a second run of the suite reuses the torch layer.
os.environ.setdefault("OOTCI_CACHE", str(REPO / ".cache" / "ootci"))
# The autoload stage's import cost is timed from the pair of probes it starts anyway: the
# suite runs a few hundred pipelines, and the default median of 5 costs each of them eight
# more interpreter starts with `import torch`. Tests of the check itself pass their runs.
os.environ.setdefault("OOTCI_IMPORT_COST_RUNS", "1")

# Fixture repositories carry test suites of their own: they run inside environments
# under test (as a vendor's suite does), never in this one.
collect_ignore_glob = ["fixtures/*"]


@pytest.fixture(scope="session")
def httpserver_listen_address():
    """pytest-httpserver's one server of the session, on an IP address, not "localhost": nothing
    in the tests resolves names, and every test sees the same URLs whichever module starts it."""
    return ("127.0.0.1", 0)


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def torch_layer():
    """The cached venv with torch 2.13.0, numpy, pytest (never unpinned torch here)."""
    from ootci.runner.torch_supply import envs

    env, _ = envs.torch_layer([TORCH_SPEC], TORCH_SPEC)
    return env


@pytest.fixture(scope="session")
def openreg_compiled(torch_layer, tmp_path_factory) -> None:
    """OpenReg's units compiled against the 2.13.0 layer, once per session, whichever worker asks
    first (tests/support/shared_runs.py: OPENREG_BUILT_ON_2_13): a build of a copy of its csrc/
    after this is a ccache hit."""
    from tests.support.shared_runs import openreg_built_on_2_13

    run = openreg_built_on_2_13(tmp_path_factory)
    assert run.returncode == 0, f"OpenReg does not build on 2.13.0:\n{run.stdout}\n{run.stderr}"


@pytest.fixture(scope="session")
def layer_torch(torch_layer) -> dict:
    """What the 2.13.0 layer's torch says of itself (version, git_version, dist_version, location).

    Tests compare with this rather than with literals: `pip install torch==2.13.0` is the
    local CPU wheel (2.13.0+cpu) here, and may be another build of 2.13.0 elsewhere.
    """
    from ootci.runner.torch_supply import envs

    return envs.torch_info(torch_layer.python)


@pytest.fixture(scope="session")
def make_env(torch_layer, tmp_path_factory):
    """make_env(*pip_args) -> Env: a fresh venv over the torch layer with pip_args installed."""
    from ootci.runner.core import procs
    from ootci.runner.torch_supply import envs

    def make(*pip_args: str, name: str = "env"):
        env = envs.layered_env(torch_layer, tmp_path_factory.mktemp(name) / "venv")
        if pip_args:
            result = procs.run(envs.pip_argv(env, "install", "--no-deps", "--no-build-isolation", *pip_args),
                               timeout=600)
            assert result.ok, result.output_tail[-3000:]
        return env

    return make


@pytest.fixture(scope="session")
def openreg_env(torch_layer, tmp_path_factory):
    """A fresh environment over the torch layer with the bundled OpenReg wheel
    (tests/support/fixture_backends.py: built once per source state)."""
    from ootci.runner.core import procs
    from ootci.runner.torch_supply import envs
    from tests.support.fixture_backends import OPENREG, openreg_wheels

    if not (OPENREG / "setup.py").is_file():
        pytest.skip("backends/openreg is not in this checkout")
    wheels = openreg_wheels(torch_layer)
    env = envs.layered_env(torch_layer, tmp_path_factory.mktemp("openreg") / "venv")
    installed = procs.run(envs.pip_argv(env, "install", "--no-deps", *map(str, wheels)), timeout=600)
    assert installed.ok, installed.output_tail[-3000:]
    return env


# `make test` runs the files on several workers (pytest-xdist, --dist loadfile): a file is
# one unit of work, handed out in collection order (--no-loadscope-reorder). The longest
# files go first, so that no worker starts one of them while the others are finishing.
# Measured on a clean clone (2 cores): these take from 10 down to 1 minute; the rest less.
LONGEST_FIRST = (
    "test_workflows_act_vendor.py", "test_torch_releases.py", "test_bisect.py", "test_workflows_act.py",
    "test_init.py", "test_partly_red.py", "test_pipeline.py", "test_shards.py", "test_slowdown_planted.py",
    "test_openreg.py",
    "test_bench.py", "test_verify.py", "test_suites_devices.py", "test_suites_synthetic.py", "test_packaging.py",
    "test_bisect_path.py",
)


def pytest_collection_modifyitems(session, config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    # Stable: a file keeps its order, and files not named come last.
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def pytest_configure(config):
    from tests.support.cpu_report import register

    register(config)
