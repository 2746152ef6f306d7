"""The device probe asks every dtype the torch under test has, complex and float8 included: on the
CPU of the 2.13.0 layer (`--device cpu`), for real, and with a check that aborts the interpreter."""

from __future__ import annotations

import pytest

from ootci.runner.verification import device_probe

pytestmark = pytest.mark.slow

CRASH_ON_COMPLEX64 = """\
import builtins, os, sys

_import = builtins.__import__


def _crash_on_complex64(name, *args, **kwargs):
    module = _import(name, *args, **kwargs)
    # Once the probe's checks import torch: torch.ones of complex64 on the device aborts.
    if name == "torch" and sys._getframe(1).f_code.co_filename.endswith("capabilities.py") \\
            and not hasattr(module.ones, "ootci_patched"):
        ones = module.ones

        def crashing(*a, **k):
            if k.get("dtype") is module.complex64 and k.get("device") is not None:
                os.abort()
            return ones(*a, **k)

        crashing.ootci_patched = True
        module.ones = crashing
    return module


builtins.__import__ = _crash_on_complex64
"""


def test_every_dtype_of_the_torch_is_asked_and_a_crash_in_one_costs_only_that_one(torch_layer, tmp_path,
                                                                                     monkeypatch):
    probed = device_probe.probe(torch_layer.python, "torch", "cpu", log=tmp_path / "probe.log")
    assert probed.failure is None and probed.device == "cpu"
    held = [name for name, finding in probed.dtypes.items() if finding.works]
    # The usual ones first, then what torch 2.13.0 adds: complex, the wide unsigned ints, every float8.
    assert held[:10] == list(device_probe.DTYPES[:10])
    assert {"complex64", "complex128", "complex32", "uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2",
            "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu"} <= set(held)
    assert len(held) == len(probed.dtypes), probed.dtypes  # the CPU holds every dtype the probe lists
    # Neither the quantized dtypes (a capability) nor the shell dtypes without a kernel (bits8, int3).
    assert not {"qint8", "quint8", "bits8", "int3", "uint7"} & set(probed.dtypes)

    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(CRASH_ON_COMPLEX64)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    crashed = device_probe.probe(torch_layer.python, "torch", "cpu", log=tmp_path / "crashed.log")
    complex64 = crashed.dtypes["complex64"]
    assert not complex64.works and "SIGABRT" in complex64.detail and "dtype complex64 check" in complex64.detail
    assert list(crashed.dtypes) == list(probed.dtypes)
    assert [n for n, f in crashed.dtypes.items() if not f.works] == ["complex64"]
