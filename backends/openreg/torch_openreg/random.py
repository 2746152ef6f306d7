"""Random number generator control, like ``torch.cuda.random``.

Each openreg device has its own default generator, separate from the CPU's.
"""

from typing import Any, Iterable

import torch

from torch_openreg._device import _device_index, device_count

_ops = torch.ops.openreg
_U64 = 1 << 64


def _to_int64(seed: int) -> int:
    # Seeds are uint64 in C++; torch.ops passes int64.
    seed = int(seed) % _U64
    return seed - _U64 if seed >= 1 << 63 else seed


def manual_seed(seed: int) -> None:
    _ops.manual_seed(-1, _to_int64(seed))


def manual_seed_all(seed: int) -> None:
    for i in range(device_count()):
        _ops.manual_seed(i, _to_int64(seed))


def seed() -> None:
    _ops.seed(-1)


def seed_all() -> None:
    for i in range(device_count()):
        _ops.seed(i)


def initial_seed() -> int:
    return _ops.initial_seed(-1) % _U64


def get_rng_state(device: Any = "openreg") -> torch.Tensor:
    return _ops.get_rng_state(_device_index(device))


def set_rng_state(new_state: torch.Tensor, device: Any = "openreg") -> None:
    _ops.set_rng_state(_device_index(device), new_state)


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states: Iterable[torch.Tensor]) -> None:
    for i, state in enumerate(new_states):
        set_rng_state(state, i)
