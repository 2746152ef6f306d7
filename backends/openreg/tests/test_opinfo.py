"""Every float32 OpInfo of PyTorch's op_db, run on openreg and on the CPU
with the same sample inputs, must give the same result, except the OpInfos
listed with a reason in opinfo_exclusions.toml.

Run it in parallel: python -m pytest tests/test_opinfo.py -n 2
"""

import os
import random
import tomllib

import pytest
import torch

import torch_openreg  # noqa: F401

from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402
from torch.testing._internal.common_utils import SEED, TEST_NUMPY  # noqa: E402

if TEST_NUMPY:
    import numpy

HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "opinfo_exclusions.toml"), "rb") as f:
    EXCLUDED = tomllib.load(f)["reasons"]

DTYPE = torch.float32
MAX_SAMPLES = 8  # keeps the whole run within minutes on two cores


def _key(op):
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


OPS = [op for op in op_db if DTYPE in op.supported_dtypes("cpu")]


def _to(obj, device):
    if isinstance(obj, torch.Tensor):
        return obj.detach().to(device).requires_grad_(obj.requires_grad)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to(o, device) for o in obj)
    if isinstance(obj, dict):
        return {k: _to(v, device) for k, v in obj.items()}
    return obj


def _cpu(obj):
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, (list, tuple)):
        return type(obj)(_cpu(o) for o in obj) if not hasattr(obj, "_fields") else tuple(_cpu(o) for o in obj)
    return obj


def _devices(obj):
    if isinstance(obj, torch.Tensor):
        yield obj.device.type
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            yield from _devices(o)


def _seed(seed):
    """torch.manual_seed for the generators this test draws from: the CPU's and openreg's.
    (torch.manual_seed also queues a seeding of CUDA, XPU and MTIA where they are not
    initialised, and formats the whole call stack for each: most of this file's time.)"""
    torch.default_generator.manual_seed(seed)
    torch.openreg.manual_seed_all(seed)


def _samples(op):
    """The first MAX_SAMPLES of op.sample_inputs("cpu", float32), made exactly as it makes them
    for a test that is not a unittest method: each after set_rng_seed(SEED). Without its stack
    inspection per call, and without making the samples past MAX_SAMPLES."""
    made = iter(op.sample_inputs_func(op, "cpu", DTYPE, False))
    samples = []
    while len(samples) < MAX_SAMPLES:
        _seed(SEED)
        random.seed(SEED)
        if TEST_NUMPY:
            numpy.random.seed(SEED)
        try:
            samples.append(next(made))
        except StopIteration:
            break
    return samples


@pytest.mark.parametrize("op", OPS, ids=_key)
def test_matches_cpu(op):
    if _key(op) in EXCLUDED or op.name in EXCLUDED:
        pytest.skip(EXCLUDED.get(_key(op), EXCLUDED.get(op.name)))
    samples = _samples(op)
    if not samples:
        pytest.skip("no float32 samples")
    for i, sample in enumerate(samples):
        _seed(0)
        expected = op(sample.input, *sample.args, **sample.kwargs)
        inp = _to(sample.input, "openreg")
        args = _to(sample.args, "openreg")
        kwargs = _to(sample.kwargs, "openreg")
        actual = op(inp, *args, **kwargs)
        assert "cpu" not in set(_devices(actual)) or "cpu" in set(_devices(expected)), (
            f"sample {i}: result left the openreg device"
        )
        torch.testing.assert_close(
            _cpu(actual), _cpu(expected), equal_nan=True, msg=lambda m: f"sample {i}: {m}"
        )
