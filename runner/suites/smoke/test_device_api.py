"""The device's Python API: torch.<device>, torch.accelerator, a second device."""

import pytest
import torch


def _current_index(device, device_module):
    # torch.cpu.current_device() answers "cpu": the host has no device indices.
    return None if device == "cpu" else device_module.current_device()


def test_device_module(device, device_module):
    assert getattr(torch, device, None) is device_module, f"torch.{device} is not the device module"
    assert device_module.is_available() is True
    count = device_module.device_count()
    assert isinstance(count, int) and count >= 1, f"device_count() returned {count!r}"
    current = _current_index(device, device_module)
    if current is not None:
        assert isinstance(current, int) and 0 <= current < count, f"current_device() returned {current!r}"
        x = torch.ones(2, device=device)
        assert x.device == torch.device(device, current), f"a new tensor lands on {x.device}, not the current device"


@pytest.mark.capability("synchronize")
def test_synchronize(device, device_module):
    y = torch.arange(4, device=device) + 1
    device_module.synchronize()
    assert y.cpu().tolist() == [1, 2, 3, 4]


def test_device_objects(device, device_module):
    assert torch.device(device).type == device
    index = _current_index(device, device_module)
    x = torch.zeros(1, device=device if index is None else f"{device}:{index}")
    assert x.device.index == index
    assert x.is_cpu is (device == "cpu")
    if device != "cpu":
        assert torch._C._get_privateuse1_backend_name() == device or hasattr(torch._C, f"_{device}_init"), \
            f"device {device!r} is neither the PrivateUse1 backend nor built in"
        assert getattr(x, f"is_{device}", True) is True, f"Tensor.is_{device} is not True for a tensor on it"


def _accelerator_only(device):
    if device == "cpu":
        pytest.skip("device 'cpu' is not an accelerator: torch.accelerator does not describe it")


def test_accelerator_api(device, device_module):
    _accelerator_only(device)
    assert torch.accelerator.is_available()
    current = torch.accelerator.current_accelerator()
    assert current is not None and current.type == device, f"current accelerator is {current}, expected {device}"
    assert torch.accelerator.device_count() == device_module.device_count()
    index = torch.accelerator.current_device_index()
    assert index == device_module.current_device()
    torch.accelerator.set_device_index(index)
    with torch.accelerator.device_index(index):
        y = torch.arange(3, device=device) * 2
    torch.accelerator.synchronize()
    assert y.cpu().tolist() == [0, 2, 4]


@pytest.mark.capability("multi_device")
def test_second_device(device, device_module, device_count):
    if device_count < 2:
        pytest.skip(f"multi_device claimed, but only {device_count} {device} device is visible here")
    first = torch.arange(6.0, device=f"{device}:0")
    second = first.to(f"{device}:1")
    assert second.device == torch.device(device, 1)
    assert torch.equal(second.cpu(), first.cpu())
    back = (second * 2).to(f"{device}:0")
    assert back.device.index == 0 and back.cpu().tolist() == [0.0, 2, 4, 6, 8, 10]
    previous = device_module.current_device()
    try:
        device_module.set_device(1)
        assert device_module.current_device() == 1
        assert torch.ones(1, device=device).device.index == 1
    finally:
        device_module.set_device(previous)
    with torch.accelerator.device_index(1):
        assert torch.accelerator.current_device_index() == 1
    assert torch.accelerator.current_device_index() == previous
