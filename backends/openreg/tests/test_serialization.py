"""torch.save/torch.load of openreg tensors (storage location tags)."""

import io


def _roundtrip(torch, obj, **kw):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, **kw)


def test_tensor_roundtrip_stays_on_openreg(torch):
    t = torch.arange(6.0, device="openreg").view(2, 3)
    back = _roundtrip(torch, t)
    assert back.device == torch.device("openreg:0")
    assert torch.equal(back.cpu(), t.cpu())


def test_map_location_cpu(torch):
    t = torch.randn(5, device="openreg")
    back = _roundtrip(torch, t, map_location="cpu")
    assert back.device.type == "cpu"
    assert torch.equal(back, t.cpu())


def test_second_device_and_map_location(torch):
    t = torch.ones(3, device="openreg:1")
    assert _roundtrip(torch, t).device == torch.device("openreg:1")
    assert _roundtrip(torch, t, map_location="openreg:0").device == torch.device("openreg:0")


def test_cpu_tensor_loaded_onto_openreg(torch):
    back = _roundtrip(torch, torch.ones(2), map_location="openreg")
    assert back.device.type == "openreg"


def test_state_dict_and_views(torch):
    m = torch.nn.Linear(3, 2).openreg()
    sd = _roundtrip(torch, m.state_dict())
    assert all(v.device.type == "openreg" for v in sd.values())
    base = torch.arange(10.0, device="openreg")
    a, b = _roundtrip(torch, (base[2:5], base[4:8]))
    # shared storage survives the round trip
    a[2] = 100.0
    assert b[0].item() == 100.0


def test_file_roundtrip(torch, tmp_path):
    p = tmp_path / "t.pt"
    torch.save({"x": torch.ones(2, device="openreg")}, p)
    assert torch.load(p)["x"].device.type == "openreg"
