"""Turns PrivateUse1 into the ``openreg`` device. Runs once per process.

Order matters: the C++ library registers the allocator, device guard, hooks
and kernels when it is loaded; the backend is then named, its module becomes
``torch.openreg``, and ``Tensor.openreg()``/``is_openreg`` style methods are
generated (they look the module up by the backend's name).
"""

import importlib.util
import sys

import torch

BACKEND = "openreg"


def _library_path() -> str:
    # Located, not imported: the library has no Python init function.
    spec = importlib.util.find_spec("torch_openreg._C")
    if spec is None or spec.origin is None:
        raise ImportError("torch_openreg._C is missing: was torch_openreg built?")
    return spec.origin


def register_backend() -> None:
    torch.ops.load_library(_library_path())
    torch.utils.rename_privateuse1_backend(BACKEND)
    torch._register_device_module(BACKEND, sys.modules["torch_openreg"])
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
    )
