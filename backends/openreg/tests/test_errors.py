"""Bad input fails with clear Python exceptions, never a crash."""

import pytest


def test_invalid_device_index_factory(torch):
    with pytest.raises(RuntimeError, match="invalid device ordinal"):
        torch.ones(1, device="openreg:5")


def test_invalid_set_device(torch):
    with pytest.raises(RuntimeError, match="invalid device ordinal"):
        torch.openreg.set_device(7)
    assert torch.openreg.current_device() == 0


def test_invalid_device_in_to(torch):
    with pytest.raises(RuntimeError, match="invalid device ordinal"):
        torch.ones(1).to("openreg:2")


def test_wrong_device_type_in_api(torch):
    with pytest.raises(ValueError):
        torch.openreg.set_device("cpu")


def test_sparse_is_not_implemented(torch):
    with pytest.raises(NotImplementedError, match="openreg") as e:
        torch.ones(2, 2, device="openreg").to_sparse()
    assert "aten::" in str(e.value)
    with pytest.raises(NotImplementedError, match="openreg"):
        torch.sparse_coo_tensor(torch.tensor([[0], [0]]), torch.tensor([1.0]), (2, 2), device="openreg")
    with pytest.raises(NotImplementedError, match="openreg"):
        torch.empty(2, layout=torch.sparse_coo, device="openreg")


def test_op_without_cpu_kernel(torch):
    # _fused_sdp_choice-like ops have no CPU kernel; use a CUDA-only op.
    with pytest.raises(NotImplementedError, match="openreg"):
        torch.ops.aten._cudnn_rnn_flatten_weight(
            [torch.ones(1, device="openreg")], 1, 1, 1, 1, 1, 1, False, False
        )


def test_mixed_openreg_devices(torch):
    a = torch.ones(2, device="openreg:0")
    b = torch.ones(2, device="openreg:1")
    with pytest.raises(RuntimeError, match="same device"):
        a + b
    with pytest.raises(RuntimeError, match="same device"):
        torch.mm(a.view(1, 2), b.view(2, 1))
    assert torch.equal((a + b.to("openreg:0")).cpu(), torch.full((2,), 2.0))


def test_shape_errors_are_python_errors(torch):
    with pytest.raises(RuntimeError):
        torch.ones(2, 3, device="openreg") @ torch.ones(2, 3, device="openreg")


def test_crash_free_subprocess(python):
    r = python(
        """
        import torch
        for f in (lambda: torch.ones(1, device="openreg:9"),
                  lambda: torch.ones(2, device="openreg").to_sparse(),
                  lambda: torch.openreg.set_device(-3)):
            try:
                f()
            except (RuntimeError, ValueError, NotImplementedError):
                pass
        print("alive")
        """
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "alive"
