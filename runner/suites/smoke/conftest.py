"""Fixtures of the smoke suite: the device under test and the dtypes it claims.

Runs in the environment under test: imports torch, pytest and the stdlib only.
"""

import os
import sys

import pytest

# ootci_plugin sits one directory up; the runner also passes it with -p, this line
# makes the suite runnable by hand: python -m pytest -c runner/suites/smoke/pytest.ini ...
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytest_plugins = ["ootci_plugin"]

import ootci_plugin  # noqa: E402
import torch  # noqa: E402

SMOKE_DTYPES = ("float32", "float16", "bfloat16", "int64", "bool")
FLOAT_DTYPES = ("float32", "float16", "bfloat16")


@pytest.fixture(scope="session")
def device(ootci_device) -> str:
    return ootci_device


@pytest.fixture(scope="session")
def device_module(device):
    return torch.get_device_module(device)


def _claimed(request, name: str):
    if name not in ootci_plugin.claimed_dtype_names(request.config):
        pytest.skip(f"dtype '{name}' not claimed")
    request.node.user_properties.append(("dtype", name))
    return getattr(torch, name)


@pytest.fixture(params=SMOKE_DTYPES)
def dtype(request):
    return _claimed(request, request.param)


@pytest.fixture(params=FLOAT_DTYPES)
def float_dtype(request):
    return _claimed(request, request.param)


@pytest.fixture
def device_count(device, device_module) -> int:
    return int(device_module.device_count())
