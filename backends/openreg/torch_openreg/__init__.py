"""OpenReg: a reference PrivateUse1 device, ``openreg``, backed by host memory.

After ``import torch`` (autoload) or ``import torch_openreg`` the device is
usable as ``torch.device("openreg")`` and this module is ``torch.openreg``,
with the subset of ``torch.cuda``'s API that makes sense for it.

Import order: ``_autoload`` is defined *before* ``import torch``. If
``torch_openreg`` is imported first, importing torch runs torch's backend
autoload, which finds this half-initialised module in ``sys.modules`` and
calls ``_autoload``: it must already exist, and it registers the backend
through a separate submodule. The ``_loaded`` flag makes every later call a
no-op, whichever path ran first.
"""

_loaded = False


def _autoload():
    """Entry point of the ``torch.backends`` group (see pyproject.toml)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    from torch_openreg import _register

    _register.register_backend()


import torch  # noqa: E402

from torch_openreg._device import (  # noqa: E402
    _is_in_bad_fork,
    current_device,
    device,
    device_count,
    get_amp_supported_dtype,
    is_available,
    is_initialized,
    set_device,
    synchronize,
)
from torch_openreg.memory import (  # noqa: E402
    empty_cache,
    max_memory_allocated,
    max_memory_reserved,
    memory_allocated,
    memory_reserved,
    reset_peak_memory_stats,
)
from torch_openreg.random import (  # noqa: E402
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
)

_autoload()

__all__ = [
    "current_device",
    "device",
    "device_count",
    "empty_cache",
    "get_amp_supported_dtype",
    "get_rng_state",
    "get_rng_state_all",
    "initial_seed",
    "is_available",
    "is_initialized",
    "manual_seed",
    "manual_seed_all",
    "max_memory_allocated",
    "max_memory_reserved",
    "memory_allocated",
    "memory_reserved",
    "reset_peak_memory_stats",
    "seed",
    "seed_all",
    "set_device",
    "set_rng_state",
    "set_rng_state_all",
    "synchronize",
]
