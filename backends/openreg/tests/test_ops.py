"""Operators: factories, storage, copies, views, and the zero-copy fallback."""

import pytest


def test_factories(torch):
    assert torch.empty(2, 3, device="openreg").shape == (2, 3)
    t = torch.empty_strided((2, 3), (1, 2), device="openreg")
    assert t.stride() == (1, 2)
    assert torch.zeros(3, device="openreg").cpu().tolist() == [0, 0, 0]
    assert torch.full((2,), 7, device="openreg").cpu().tolist() == [7, 7]
    assert torch.arange(4, device="openreg").cpu().tolist() == [0, 1, 2, 3]
    cl = torch.empty(2, 3, 4, 5, device="openreg", memory_format=torch.channels_last)
    assert cl.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16", "int64", "int32", "bool"])
def test_dtypes_roundtrip(torch, dtype):
    dtype = getattr(torch, dtype)
    c = (torch.arange(6) % 2).to(dtype)
    d = c.to("openreg")
    assert d.dtype == dtype and d.device.type == "openreg"
    assert torch.equal(d.cpu(), c)
    assert torch.equal((d + d).cpu(), c + c)


def test_copy_dtype_conversion_and_broadcast(torch):
    d = torch.empty(2, 3, device="openreg", dtype=torch.float64)
    d.copy_(torch.tensor([1, 2, 3], dtype=torch.int32))
    assert d.cpu().tolist() == [[1, 2, 3], [1, 2, 3]]


def test_copy_conj_and_neg_views(torch):
    z = torch.randn(4, dtype=torch.complex64)
    d = z.to("openreg")
    assert torch.equal(d.conj().cpu(), z.conj())
    assert torch.equal(d.conj().imag.cpu(), z.conj().imag)  # negative view
    out = torch.empty(4, dtype=torch.complex64, device="openreg")
    out.copy_(d.conj())
    assert torch.equal(out.cpu(), z.conj().resolve_conj())


def test_views_share_memory(torch):
    base = torch.arange(12.0, device="openreg")
    v = base.view(3, 4)
    v[1, 1] = -1.0
    assert base[5].item() == -1.0
    u = base.unfold(0, 4, 4)
    assert u.shape == (3, 4) and u.data_ptr() == base.data_ptr()
    s = base.as_strided((2, 2), (1, 2), 1)
    assert s.cpu().tolist() == [[1.0, 3.0], [2.0, 4.0]]
    t = base.view(3, 4).t()
    assert t.reshape(-1).shape == (12,)
    assert base.view(3, 4)[:, 1].data_ptr() == base.data_ptr() + 4


def test_fallback_is_zero_copy(torch):
    # A fallback view op (diagonal has no openreg kernel) must alias the
    # input's memory, and an in-place op must write into it.
    x = torch.zeros(3, 3, device="openreg")
    d = x.diagonal()
    assert d.data_ptr() == x.data_ptr()
    d.fill_(1.0)
    assert x.cpu().trace().item() == 3.0
    y = x.exp_()
    assert y is x
    assert torch.ops.openreg.fallback_kind() == "zero_copy"


def test_out_argument_resized(torch):
    out = torch.empty(0, device="openreg")
    keep = out
    r = torch.add(torch.ones(3, device="openreg"), 1, out=out)
    assert r is keep and out.shape == (3,)
    assert out.cpu().tolist() == [2.0, 2.0, 2.0]
    # out= through the fallback re-strides too
    out2 = torch.empty(10, device="openreg")
    torch.mm(torch.ones(2, 3, device="openreg"), torch.ones(3, 4, device="openreg"), out=out2)
    assert out2.shape == (2, 4) and out2.cpu().sum().item() == 24.0


def test_out_argument_sharing_storage_with_views(torch):
    base = torch.zeros(2, device="openreg")
    view = base[:]
    torch.cumsum(torch.ones(5, device="openreg"), 0, out=base)
    assert base.cpu().tolist() == [1, 2, 3, 4, 5]
    assert view.shape == (2,)


def test_multi_output_and_lists(torch):
    x = torch.randn(6, device="openreg")
    vals, idx = x.sort()
    assert vals.device.type == idx.device.type == "openreg"
    assert torch.equal(vals.cpu(), x.cpu().sort().values)
    parts = x.exp().split(2)
    assert [p.storage_offset() for p in parts] == [0, 2, 4]
    assert parts[0].untyped_storage().data_ptr() == parts[2].untyped_storage().data_ptr()
    cat = torch.cat([x, x])
    assert cat.shape == (12,)
    st = torch.stack(list(x.unbind()))
    assert torch.equal(st.cpu(), x.cpu())


def test_indexing(torch):
    x = torch.arange(10.0, device="openreg")
    i = torch.tensor([1, 3, 5], device="openreg")
    assert x[i].cpu().tolist() == [1.0, 3.0, 5.0]
    x[i] = 0.0
    assert x.cpu().tolist()[:4] == [0.0, 0.0, 2.0, 0.0]
    assert x[x > 5].cpu().tolist() == [6.0, 7.0, 8.0, 9.0]
    m = torch.zeros(3, 3, device="openreg")
    m[torch.tensor([0, 2]), torch.tensor([1, 1])] = 5.0
    assert m.cpu()[:, 1].tolist() == [5.0, 0.0, 5.0]


def test_scalars_and_item(torch):
    x = torch.tensor([2.5], device="openreg")
    assert x.item() == 2.5
    assert (x * 2).item() == 5.0
    assert (x + torch.tensor(1.0)).item() == 3.5  # CPU scalar tensor operand
    assert torch.tensor(3, device="openreg").tolist() == 3


def test_reductions_and_linalg(torch):
    a = torch.randn(5, 5)
    d = a.to("openreg")
    torch.testing.assert_close(d.sum().cpu(), a.sum())
    torch.testing.assert_close(d.mean(1).cpu(), a.mean(1))
    torch.testing.assert_close((d @ d).cpu(), a @ a)
    torch.testing.assert_close(torch.linalg.inv(d + 5 * torch.eye(5, device="openreg")).cpu(),
                               torch.linalg.inv(a + 5 * torch.eye(5)))


def test_set_and_storage(torch):
    src = torch.arange(6.0, device="openreg")
    t = torch.empty(0, device="openreg")
    t.set_(src.untyped_storage(), 2, (2, 2), (2, 1))
    assert t.cpu().tolist() == [[2.0, 3.0], [4.0, 5.0]]
    u = torch.empty(0, device="openreg").set_(src)
    assert u.data_ptr() == src.data_ptr()
    v = torch.ones(3, device="openreg").set_()
    assert v.numel() == 0 and v.device.type == "openreg"


def test_convolution_forward_backward_matches_cpu(torch):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 8, 8, requires_grad=True)
    conv = torch.nn.Conv2d(3, 4, 3, padding=1)
    y = conv(x)
    y.square().sum().backward()
    xd = x.detach().to("openreg").requires_grad_()
    convd = torch.nn.Conv2d(3, 4, 3, padding=1).openreg()
    convd.load_state_dict(conv.state_dict())
    yd = convd(xd)
    yd.square().sum().backward()
    torch.testing.assert_close(yd.cpu(), y)
    torch.testing.assert_close(xd.grad.cpu(), x.grad)
    torch.testing.assert_close(convd.weight.grad.cpu(), conv.weight.grad)
    torch.testing.assert_close(convd.bias.grad.cpu(), conv.bias.grad)


def test_conv_transpose(torch):
    ct = torch.nn.ConvTranspose1d(2, 3, 3, stride=2)
    x = torch.randn(1, 2, 5)
    ctd = torch.nn.ConvTranspose1d(2, 3, 3, stride=2).openreg()
    ctd.load_state_dict(ct.state_dict())
    torch.testing.assert_close(ctd(x.openreg()).cpu(), ct(x))
