"""torch.autocast("openreg"): AutocastPrivateUse1 kernels and policies."""

import pytest


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_matmul_linear_conv_lower_precision(torch, dtype):
    dtype = getattr(torch, dtype)
    a = torch.randn(4, 4, device="openreg")
    lin = torch.nn.Linear(4, 4).openreg()
    conv = torch.nn.Conv2d(1, 2, 3).openreg()
    img = torch.randn(1, 1, 5, 5, device="openreg")
    with torch.autocast("openreg", dtype=dtype):
        assert torch.is_autocast_enabled("openreg")
        assert torch.get_autocast_dtype("openreg") == dtype
        assert (a @ a).dtype == dtype
        assert torch.mm(a, a).dtype == dtype
        assert lin(a).dtype == dtype
        assert conv(img).dtype == dtype
    assert not torch.is_autocast_enabled("openreg")
    assert (a @ a).dtype == torch.float32


def test_fp32_ops_stay_fp32(torch):
    a = torch.randn(4, 4, device="openreg")
    with torch.autocast("openreg", dtype=torch.float16):
        h = a @ a
        assert h.dtype == torch.float16
        assert torch.softmax(h, 0).dtype == torch.float32
        assert torch.exp(h).dtype == torch.float32
        assert torch.nn.functional.mse_loss(h, h).dtype == torch.float32
        assert h.sum().dtype == torch.float32


def test_untouched_ops_keep_dtype(torch):
    a = torch.randn(4, device="openreg")
    with torch.autocast("openreg"):
        assert (a + a).dtype == torch.float32
        assert torch.relu(a).dtype == torch.float32


def test_default_autocast_dtype(torch):
    assert torch.get_autocast_dtype("openreg") in (torch.float16, torch.bfloat16)
    torch.set_autocast_dtype("openreg", torch.bfloat16)
    try:
        with torch.autocast("openreg"):
            assert (torch.ones(2, 2, device="openreg") @ torch.ones(2, 2, device="openreg")).dtype == torch.bfloat16
    finally:
        torch.set_autocast_dtype("openreg", torch.float16)


def test_unsupported_dtype_is_refused(torch):
    with pytest.warns(UserWarning):
        with torch.autocast("openreg", dtype=torch.float64):
            pass


def test_autocast_backward(torch):
    lin = torch.nn.Linear(4, 2).openreg()
    x = torch.randn(3, 4, device="openreg")
    with torch.autocast("openreg", dtype=torch.bfloat16):
        loss = lin(x).float().pow(2).mean()
    loss.backward()
    assert lin.weight.grad.dtype == torch.float32


def test_autocast_kernels_are_registered_on_first_use():
    """They stay out of `import torch` (they cost ~6 ms there) until autocast asks."""
    import subprocess
    import sys

    code = (
        "import torch\n"
        "has = lambda: torch._C._dispatch_has_kernel_for_dispatch_key('aten::mm', 'AutocastPrivateUse1')\n"
        "before = has()\n"
        "with torch.autocast('openreg', dtype=torch.float16):\n"
        "    pass\n"
        "print(before, has())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "True"]
