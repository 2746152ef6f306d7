"""Memory statistics of the openreg allocator, like ``torch.cuda.memory``.

The allocator does not cache, so reserved memory equals allocated memory and
``empty_cache`` has nothing to release.
"""

from typing import Any

import torch

from torch_openreg._device import _device_index

_ops = torch.ops.openreg


def _stats(device: Any) -> list[int]:
    return _ops.memory_stats(_device_index(device))


def memory_allocated(device: Any = None) -> int:
    return _stats(device)[0]


def max_memory_allocated(device: Any = None) -> int:
    return _stats(device)[1]


def memory_reserved(device: Any = None) -> int:
    return _stats(device)[2]


def max_memory_reserved(device: Any = None) -> int:
    return _stats(device)[3]


def reset_peak_memory_stats(device: Any = None) -> None:
    _ops.reset_peak_memory_stats(_device_index(device))


def empty_cache() -> None:
    _ops.empty_cache()
