"""Core tensor behaviour every backend must have: no capability needed.

Each test computes on the device and compares with the same computation on CPU.
"""

import pytest
import torch


def make(shape, dtype, seed=0):
    """Deterministic CPU data of any dtype, with negative values where the dtype allows."""
    g = torch.Generator().manual_seed(seed)
    if dtype is torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g) * 3).to(dtype)
    return torch.randint(-50, 50, shape, generator=g).to(dtype)


def same(actual, expected, **tolerance):
    assert actual.device.type == "cpu", "compare on CPU"
    torch.testing.assert_close(actual, expected, **tolerance)


def on_device(tensor, device):
    assert tensor.device.type == device, f"result is on {tensor.device}, expected {device}"
    return tensor.cpu()


def test_create(device, dtype):
    fill = True if dtype is torch.bool else 3
    cases = {
        "zeros": (torch.zeros(2, 3, dtype=dtype, device=device), torch.zeros(2, 3, dtype=dtype)),
        "ones": (torch.ones(4, dtype=dtype, device=device), torch.ones(4, dtype=dtype)),
        "full": (torch.full((2, 2), fill, dtype=dtype, device=device), torch.full((2, 2), fill, dtype=dtype)),
        "tensor": (torch.tensor([1, 0, 1], dtype=dtype, device=device), torch.tensor([1, 0, 1], dtype=dtype)),
        "empty_shape": (torch.empty(0, 5, dtype=dtype, device=device), torch.empty(0, 5, dtype=dtype)),
    }
    if dtype is not torch.bool:
        cases["arange"] = (torch.arange(6, dtype=dtype, device=device), torch.arange(6, dtype=dtype))
    for name, (actual, expected) in cases.items():
        assert actual.dtype is dtype, name
        same(on_device(actual, device), expected, msg=name)


def test_round_trip(device, dtype):
    for shape in [(), (1,), (7, 5), (2, 3, 4), (0, 3)]:
        cpu = make(shape, dtype)
        back = cpu.to(device).to("cpu")
        assert back.shape == cpu.shape and back.dtype is dtype
        assert torch.equal(back, cpu), f"round trip changed a {shape} tensor"


def test_non_contiguous_copies(device, dtype):
    base = make((6, 8), dtype)
    for name, view in {
        "transpose": base.t(),
        "step_slice": base[::2, 1::3],
        "expand": base[:1].expand(4, 8),
        "permute3d": make((2, 3, 4), dtype).permute(2, 0, 1),
    }.items():
        assert not view.is_contiguous(), name
        moved = view.to(device)
        same(on_device(moved, device), view, msg=name)
        # copy_ into a non-contiguous destination on the device
        dest = torch.zeros(view.shape[::-1], dtype=dtype, device=device).transpose(0, -1)
        if dest.shape == view.shape:
            dest.copy_(moved)
            same(dest.cpu(), view, msg=f"{name}: copy_ into a strided view")
    device_base = base.to(device)
    same(on_device(device_base.t().contiguous(), device), base.t().contiguous())
    same(on_device(device_base[:, ::2].clone(), device), base[:, ::2])


def test_views_share_storage(device):
    x = torch.zeros(4, 6, device=device)
    row = x[1]
    row.fill_(2.0)
    column = x.view(24).narrow(0, 0, 6)
    column.add_(1.0)
    x.t()[5].fill_(7.0)  # the last column, through a transposed view
    expected = torch.zeros(4, 6)
    expected[1] = 2.0
    expected.view(24)[:6] += 1.0
    expected[:, 5] = 7.0
    same(x.cpu(), expected)
    assert x.unsqueeze(0).squeeze(0).data_ptr() == x.data_ptr()
    assert x.reshape(2, 12).data_ptr() == x.data_ptr()


def test_in_place(device, dtype):
    if dtype is torch.bool:
        a = make((5, 5), dtype)
        d = a.to(device)
        d.logical_not_()
        d.logical_or_(a.to(device))
        a.logical_not_()
        a.logical_or_(make((5, 5), dtype))
        same(d.cpu(), a)
        return
    a = make((5, 5), dtype)
    b = make((5, 5), dtype, seed=1)
    d, e = a.to(device), b.to(device)
    ptr = d.data_ptr()
    for fn in (
        lambda x, y: x.add_(y),
        lambda x, y: x.mul_(2),
        lambda x, y: x.sub_(y, alpha=2),
        lambda x, y: x.clamp_(-20, 20),
        lambda x, y: x.masked_fill_(y > 0, 1),
        lambda x, y: x.abs_(),
    ):
        fn(d, e)
        fn(a, b)
    assert d.data_ptr() == ptr, "an in-place op reallocated its tensor"
    tolerance = {"atol": 0.1, "rtol": 0.02} if dtype in (torch.float16, torch.bfloat16) else {}
    same(d.cpu(), a, **tolerance)
    d.zero_()
    assert not d.cpu().any()


def test_reductions(device, dtype):
    x = make((4, 6), dtype)
    d = x.to(device)
    if dtype is torch.bool:
        for name in ("all", "any"):
            same(on_device(getattr(d, name)(), device), getattr(x, name)(), msg=name)
            same(on_device(getattr(d, name)(dim=1), device), getattr(x, name)(dim=1), msg=name)
        same(on_device(d.sum(), device), x.sum())
        return
    low_precision = dtype in (torch.float16, torch.bfloat16)
    tolerance = {"atol": 0.25, "rtol": 0.02} if low_precision else {}
    for name in ("sum", "amax", "amin", "argmax", "argmin"):
        same(on_device(getattr(d, name)(), device), getattr(x, name)(), msg=name, **tolerance)
        same(on_device(getattr(d, name)(dim=0), device), getattr(x, name)(dim=0), msg=f"{name}(dim=0)", **tolerance)
    values, indices = d.max(dim=1)
    cpu_values, cpu_indices = x.max(dim=1)
    same(on_device(values, device), cpu_values)
    same(on_device(indices, device), cpu_indices)
    if dtype.is_floating_point:
        same(on_device(d.mean(dim=1), device), x.mean(dim=1), **tolerance)
        same(on_device(d.std(), device), x.std(), atol=0.1 if low_precision else 1e-4,
             rtol=0.02 if low_precision else 1e-4)


def test_matmul(device, float_dtype):
    a, b = make((8, 16), float_dtype), make((16, 4), float_dtype, seed=1)
    batch_a, batch_b = make((3, 5, 6), float_dtype, seed=2), make((3, 6, 2), float_dtype, seed=3)
    bias = make((8, 4), float_dtype, seed=4)
    low = float_dtype is not torch.float32
    tolerance = {"atol": 0.5, "rtol": 0.03} if low else {"atol": 1e-4, "rtol": 1e-4}
    da, db = a.to(device), b.to(device)
    same(on_device(da @ db, device), a @ b, **tolerance)
    same(on_device(torch.mm(da, db), device), torch.mm(a, b), **tolerance)
    same(on_device(torch.bmm(batch_a.to(device), batch_b.to(device)), device), torch.bmm(batch_a, batch_b), **tolerance)
    same(on_device(torch.addmm(bias.to(device), da, db), device), torch.addmm(bias, a, b), **tolerance)
    same(on_device(da.t().matmul(da), device), a.t().matmul(a), **tolerance)


def test_indexing(device, dtype):
    x = make((6, 5), dtype)
    d = x.to(device)
    mask = make((6, 5), torch.bool, seed=7)
    rows = torch.tensor([4, 0, 2])
    same(on_device(d[2], device), x[2])
    same(on_device(d[1:5:2, -1], device), x[1:5:2, -1])
    same(on_device(d[mask.to(device)], device), x[mask])
    same(on_device(d[rows.to(device)], device), x[rows])
    same(on_device(d.index_select(1, rows[:2].to(device)), device), x.index_select(1, rows[:2]))
    index = torch.tensor([[0, 1], [2, 0]])
    same(on_device(torch.gather(d, 1, index.to(device).repeat(3, 1)), device), torch.gather(x, 1, index.repeat(3, 1)))
    value = True if dtype is torch.bool else 9
    d[0, 0] = value
    d[mask.to(device)] = value
    x[0, 0] = value
    x[mask] = value
    same(d.cpu(), x)
    target = torch.zeros(3, 5, dtype=dtype)
    src = make((2, 5), dtype, seed=8)
    scatter_index = torch.tensor([[0, 1, 2, 0, 1], [2, 0, 1, 2, 0]])
    same(on_device(target.to(device).scatter(0, scatter_index.to(device), src.to(device)), device),
         target.scatter(0, scatter_index, src))


def test_dtype_conversions(device, dtype):
    x = make((3, 4), dtype)
    d = x.to(device)
    for target in (torch.float32, torch.int64, torch.bool):
        converted = d.to(target)
        assert converted.device.type == device and converted.dtype is target
        same(converted.cpu(), x.to(target))


@pytest.mark.parametrize("shape", [(1000,), (64, 64, 8)])
def test_elementwise_math(device, shape):
    x = make(shape, torch.float32)
    d = x.to(device)
    for name in ("exp", "sin", "tanh", "sigmoid", "relu", "neg"):
        same(on_device(getattr(torch, name)(d), device), getattr(torch, name)(x), msg=name, atol=1e-5, rtol=1e-5)
    same(on_device(torch.where(d > 0, d, d * 0.5), device), torch.where(x > 0, x, x * 0.5))
