"""The device guard and the torch.cuda-like device API."""


def test_basic_api(torch):
    assert torch.openreg.is_available()
    assert torch.openreg.device_count() == 2
    assert torch.openreg.is_initialized()
    assert torch.openreg.current_device() == 0


def test_set_device_moves_default_placement(torch):
    torch.openreg.set_device(1)
    assert torch.openreg.current_device() == 1
    assert torch.empty(1, device="openreg").device == torch.device("openreg:1")
    torch.openreg.set_device("openreg:0")
    assert torch.empty(1, device="openreg").device.index == 0


def test_device_context_manager(torch):
    with torch.openreg.device(1):
        assert torch.openreg.current_device() == 1
        assert torch.ones(1, device="openreg").device.index == 1
    assert torch.openreg.current_device() == 0
    with torch.openreg.device(torch.device("openreg:1")):
        assert torch.openreg.current_device() == 1


def test_ops_stay_on_their_device(torch):
    a = torch.randn(3, device="openreg:1")
    assert (a * 2).device.index == 1
    assert a.sum().device.index == 1
    assert torch.randn(2, device="openreg:1").device.index == 1


def test_cross_device_copy(torch):
    a = torch.arange(5.0, device="openreg:0")
    b = a.to("openreg:1")
    assert b.device.index == 1 and torch.equal(b.cpu(), a.cpu())


def test_synchronize(torch):
    torch.openreg.synchronize()
    torch.openreg.synchronize(1)
    torch.openreg.synchronize("openreg:0")


def test_generated_methods(torch):
    t = torch.ones(2).openreg()
    assert t.is_openreg and t.device.type == "openreg"
    m = torch.nn.Linear(2, 2).openreg()
    assert m.weight.device.type == "openreg"
    s = torch.ones(2).untyped_storage().openreg()
    assert s.is_openreg


def test_device_guard_via_torch_device(torch):
    # torch.device as a context manager goes through the device guard.
    with torch.device("openreg:1"):
        assert torch.empty(2).device == torch.device("openreg:1")
