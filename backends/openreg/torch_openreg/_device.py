"""Device selection, mirroring ``torch.cuda``'s functions of the same names."""

from typing import Any

import torch

_ops = torch.ops.openreg


def is_available() -> bool:
    return device_count() > 0


def device_count() -> int:
    return _ops.device_count()


def is_initialized() -> bool:
    # Nothing is initialised lazily: the device is ready once loaded.
    return True


def _is_in_bad_fork() -> bool:
    # Host memory survives fork(); torch.manual_seed asks before seeding us.
    return False


def current_device() -> int:
    return _ops.current_device()


def _device_index(device: Any, optional: bool = True) -> int:
    """int | str | torch.device | None -> device index (-1: current)."""
    if device is None:
        if not optional:
            raise ValueError("Expected an openreg device, got None")
        return -1
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "openreg":
            raise ValueError(f"Expected an openreg device, got: {device}")
        return -1 if device.index is None else device.index
    raise ValueError(f"Expected an openreg device, got: {device!r}")


def set_device(device: Any) -> None:
    index = _device_index(device)
    if index >= 0:
        _ops.set_device(index)


def synchronize(device: Any = None) -> None:
    _ops.synchronize(_device_index(device))


class device:
    """Context manager that changes the current openreg device."""

    def __init__(self, device: Any):
        self.idx = _device_index(device, optional=True)
        self.prev_idx = -1

    def __enter__(self):
        self.prev_idx = _ops.exchange_device(self.idx)
        return self

    def __exit__(self, *exc_info):
        _ops.exchange_device(self.prev_idx)
        return False


def get_amp_supported_dtype() -> list[torch.dtype]:
    """Used by torch.autocast("openreg") to validate the requested dtype.

    torch.autocast calls this before it enables autocast for openreg, which makes
    it the place to register the autocast kernels: lazily, to keep them out of
    the cost of `import torch`.
    """
    _ops.register_autocast_kernels()
    return [torch.float16, torch.bfloat16]
