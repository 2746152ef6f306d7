"""Runtime features, each tied to the capability a backend claims for it."""

import io

import pytest
import torch
from torch import nn


@pytest.mark.capability("generator")
def test_device_generator_reproducible(device):
    g = torch.Generator(device=device)
    assert g.device.type == device
    g.manual_seed(1234)
    first = torch.randn(64, generator=g, device=device).cpu()
    state = g.get_state()
    after = torch.rand(8, generator=g, device=device).cpu()
    g.manual_seed(1234)
    assert torch.equal(torch.randn(64, generator=g, device=device).cpu(), first), "same seed, different numbers"
    g.set_state(state)
    assert torch.equal(torch.rand(8, generator=g, device=device).cpu(), after), "set_state did not replay"
    g.manual_seed(4321)
    assert not torch.equal(torch.randn(64, generator=g, device=device).cpu(), first), "different seeds, same numbers"


@pytest.mark.capability("generator")
def test_global_seed(device, device_module):
    torch.manual_seed(7)
    a = torch.rand(16, device=device).cpu()
    torch.manual_seed(7)
    b = torch.rand(16, device=device).cpu()
    assert torch.equal(a, b), "torch.manual_seed does not seed the device"
    if hasattr(device_module, "manual_seed"):
        device_module.manual_seed(11)
        c = torch.rand(16, device=device).cpu()
        device_module.manual_seed(11)
        assert torch.equal(torch.rand(16, device=device).cpu(), c)
    dropped = torch.nn.functional.dropout(torch.ones(1000, device=device), p=0.5).cpu()
    kept = (dropped != 0).float().mean().item()
    assert 0.35 < kept < 0.65, f"dropout kept {kept:.0%} of the values"


@pytest.mark.capability("streams")
def test_streams(device):
    default = torch.accelerator.current_stream() if device != "cpu" else None
    stream = torch.Stream(device=device)
    assert stream.device.type == device
    x = torch.randn(256, 256)
    with stream:
        if default is not None:
            assert torch.accelerator.current_stream() == stream
        y = (x.to(device) @ x.to(device)).sum(dim=0)
    stream.synchronize()
    assert stream.query()
    if default is not None:
        assert torch.accelerator.current_stream() == default
    torch.testing.assert_close(y.cpu(), (x @ x).sum(dim=0), atol=1e-2, rtol=1e-4)


@pytest.mark.capability("streams", "events")
def test_events_order_streams(device):
    producer, consumer = torch.Stream(device=device), torch.Stream(device=device)
    with producer:
        x = torch.full((1024,), 3.0, device=device)
        done = torch.Event(device=device)
        done.record(producer)
    consumer.wait_event(done)
    with consumer:
        y = x * 2
    consumer.synchronize()
    assert done.query()
    assert y.cpu().eq(6.0).all()


@pytest.mark.capability("events")
def test_event_timing(device):
    start = torch.Event(device=device, enable_timing=True)
    end = torch.Event(device=device, enable_timing=True)
    start.record()
    z = torch.randn(128, 128, device=device)
    for _ in range(5):
        z = z @ z.t() / 128
    end.record()
    end.synchronize()
    assert end.query()
    elapsed = start.elapsed_time(end)
    assert elapsed >= 0.0, f"elapsed_time returned {elapsed}"


@pytest.mark.capability("pinned_memory")
def test_pinned_non_blocking_copies(device):
    host = torch.arange(4096, dtype=torch.float32).pin_memory()
    assert host.is_pinned(), "pin_memory() returned an unpinned tensor"
    assert torch.empty(16, pin_memory=True).is_pinned()
    on_device = host.to(device, non_blocking=True)
    back = torch.empty(4096, pin_memory=True)
    back.copy_(on_device * 2, non_blocking=True)
    torch.accelerator.synchronize()
    assert torch.equal(back, host * 2)


@pytest.mark.capability("autocast")
def test_autocast(device):
    assert torch.amp.is_autocast_available(device), f"autocast is not available for {device}"
    low = torch.get_autocast_dtype(device)
    assert low in (torch.float16, torch.bfloat16), f"autocast dtype for {device} is {low}"
    a, b = torch.randn(8, 8, device=device), torch.randn(8, 8, device=device)
    with torch.autocast(device_type=device, dtype=low):
        assert torch.is_autocast_enabled(device)
        product = a @ b
        total = product.float().sum()
    assert not torch.is_autocast_enabled(device)
    assert product.dtype is low, f"matmul under autocast gave {product.dtype}, expected {low}"
    assert total.dtype is torch.float32
    torch.testing.assert_close(product.float().cpu(), (a.cpu() @ b.cpu()), atol=0.25, rtol=0.05)


@pytest.mark.capability("serialization")
def test_save_load(device, tmp_path):
    x = torch.randn(3, 5, device=device)
    model = nn.Linear(5, 2).to(device)
    path = tmp_path / "checkpoint.pt"
    torch.save({"x": x, "model": model.state_dict(), "slice": x[1:]}, path)
    restored = torch.load(path, weights_only=True)
    assert restored["x"].device.type == device, "a device tensor did not load back onto the device"
    assert torch.equal(restored["x"].cpu(), x.cpu())
    assert torch.equal(restored["slice"].cpu(), x[1:].cpu())
    on_cpu = torch.load(path, map_location="cpu", weights_only=True)
    assert on_cpu["x"].device.type == "cpu" and torch.equal(on_cpu["x"], x.cpu())
    fresh = nn.Linear(5, 2).to(device)
    fresh.load_state_dict(restored["model"])
    torch.testing.assert_close(fresh(x).cpu(), model(x).cpu())
    buffer = io.BytesIO()
    torch.save(x, buffer)
    buffer.seek(0)
    assert torch.equal(torch.load(buffer, weights_only=True).cpu(), x.cpu())


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 3))


@pytest.mark.capability("autograd")
def test_autograd_mlp(device):
    cpu_model = _mlp()
    device_model = _mlp().to(device)
    x = torch.randn(16, 10)
    target = torch.randint(0, 3, (16,))
    cpu_loss = nn.functional.cross_entropy(cpu_model(x), target)
    device_loss = nn.functional.cross_entropy(device_model(x.to(device)), target.to(device))
    cpu_loss.backward()
    device_loss.backward()
    torch.testing.assert_close(device_loss.cpu(), cpu_loss, atol=1e-5, rtol=1e-5)
    for (name, cpu_param), device_param in zip(cpu_model.named_parameters(), device_model.parameters(), strict=True):
        assert device_param.grad is not None, f"{name}: no gradient on the device"
        assert device_param.grad.device.type == device
        torch.testing.assert_close(device_param.grad.cpu(), cpu_param.grad, atol=1e-5, rtol=1e-4, msg=name)
    leaf = torch.randn(4, device=device, requires_grad=True)
    (leaf.sin() * leaf).sum().backward()
    expected = leaf.detach().cpu()
    torch.testing.assert_close(leaf.grad.cpu(), expected.cos() * expected + expected.sin())


@pytest.mark.capability("autograd")
@pytest.mark.parametrize("optimizer", ["SGD", "Adam"])
def test_optimizer_step(device, optimizer):
    cpu_model = _mlp()
    device_model = _mlp().to(device)
    options = {"SGD": {"lr": 0.1, "momentum": 0.9}, "Adam": {"lr": 0.01}}[optimizer]
    cpu_opt = getattr(torch.optim, optimizer)(cpu_model.parameters(), **options)
    device_opt = getattr(torch.optim, optimizer)(device_model.parameters(), **options)
    x, target = torch.randn(16, 10), torch.randn(16, 3)
    for _ in range(3):
        for model, opt, inputs, goal in ((cpu_model, cpu_opt, x, target),
                                         (device_model, device_opt, x.to(device), target.to(device))):
            opt.zero_grad()
            nn.functional.mse_loss(model(inputs), goal).backward()
            opt.step()
    for cpu_param, device_param in zip(cpu_model.parameters(), device_model.parameters(), strict=True):
        assert device_param.device.type == device
        torch.testing.assert_close(device_param.detach().cpu(), cpu_param.detach(), atol=1e-5, rtol=1e-4)
