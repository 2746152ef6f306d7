"""Fixtures and options of the integration suite.

Runs in the environment under test: imports torch, pytest and the stdlib only.
"""

import os
import sys

import pytest

# ootci_plugin sits one directory up; the runner also passes it with -p.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytest_plugins = ["ootci_plugin"]


def pytest_addoption(parser):
    group = parser.getgroup("ootci")
    group.addoption("--ootci-ops", default=os.environ.get("OOTCI_OPS", ""),
                    help="comma-separated fnmatch patterns of OpInfo names to compare "
                         "(default: $OOTCI_OPS, else all of op_db)")
    group.addoption("--ootci-max-samples", type=int, default=int(os.environ.get("OOTCI_MAX_SAMPLES", "12")),
                    help="sample inputs compared per op and dtype (0: all; default 12)")


def pytest_configure(config):
    # Each xdist worker (or forked child, --ootci-fork) is one process per core already;
    # more threads only contend.
    if hasattr(config, "workerinput") or config.getoption("ootci_fork", 0) > 1:
        import torch

        torch.set_num_threads(1)


@pytest.fixture(scope="session")
def device(ootci_device) -> str:
    return ootci_device
