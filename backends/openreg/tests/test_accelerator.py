"""openreg as the current accelerator (torch.accelerator, device modules)."""


def test_current_accelerator(torch):
    acc = torch.accelerator.current_accelerator()
    assert acc is not None and acc.type == "openreg"
    assert torch.accelerator.is_available()


def test_accelerator_device_api(torch):
    assert torch.accelerator.device_count() == 2
    assert torch.accelerator.current_device_index() == 0
    torch.accelerator.set_device_index(1)
    assert torch.accelerator.current_device_index() == 1
    assert torch.openreg.current_device() == 1
    torch.accelerator.set_device_index(0)
    torch.accelerator.synchronize()
    torch.accelerator.synchronize(1)


def test_accelerator_memory_api(torch):
    x = torch.empty(256, device="openreg")
    assert torch.accelerator.memory_allocated(0) == torch.openreg.memory_allocated(0)
    del x


def test_device_module(torch):
    mod = torch.get_device_module("openreg")
    assert mod is torch.openreg
    assert torch.get_device_module(torch.device("openreg:1")) is torch.openreg
    assert torch._C._get_privateuse1_backend_name() == "openreg"


def test_hooks(torch):
    assert torch._C._get_accelerator().type == "openreg"
    g = torch.Generator(device="openreg:1")
    assert g.device == torch.device("openreg:1")
