"""Turns PrivateUse1 into the ``openreg`` device. Runs once per process.

Order matters: the C++ library registers the allocator, device guard, hooks
and kernels when it is loaded; the backend is then named, its module becomes
``torch.openreg``, and ``Tensor.openreg()``/``is_openreg`` style methods are
generated (they look the module up by the backend's name).
"""

import atexit
import time
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
    atexit.register(_drain_autograd_workers)


# Leaves of the drain graphs; kept alive until modules are torn down, long
# after the workers have let go of them.
_drain_leaves: list = []


def _drain_autograd_workers() -> None:
    """Shutdown race, and why a backend has to care.

    backward() on a device runs in the autograd engine's per-device worker
    threads. backward() returns as soon as the graph has run, while the worker
    still drops its last references to that graph. If the interpreter is
    already finalizing and one of those references owns a Python object, the
    worker must take the GIL, and CPython ends such a thread with
    pthread_exit; the C++ runtime turns that into std::terminate ("terminate
    called without an active exception"). CPU-only programs never see it:
    there are no device workers.

    At exit, before finalization, we run a tiny backward pass on every
    openreg device. Each worker handles its queue in order, so the pass cannot
    finish before the worker has released the user's last graph (the GIL is
    free meanwhile: the main thread waits inside backward()). Releasing the
    drain graph itself needs the GIL once more, right after the pass
    completes, so we then give the GIL away for a moment. The engine offers
    no signal for "worker idle", so this last step is a bounded wait.
    """
    if not torch.ops.openreg.autograd_workers_started():
        return
    for index in range(torch.ops.openreg.device_count()):
        leaf = torch.zeros((), device=f"{BACKEND}:{index}", requires_grad=True)
        _drain_leaves.append(leaf)
        (leaf * 1.0).backward()
    time.sleep(0.02)  # releases the GIL; the workers need it for microseconds
