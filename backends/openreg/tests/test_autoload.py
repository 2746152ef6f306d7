"""Autoload: `import torch` alone brings up the device (torch.backends entry
point), it can be switched off, and import order never matters."""


def test_plain_import_torch_autoloads(python):
    r = python(
        """
        import torch
        print(repr(torch.tensor(1, device="openreg")))
        print(torch.tensor([1, 2, 3], device="openreg"))
        """
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "tensor(1, device='openreg:0')",
        "tensor([1, 2, 3], device='openreg:0')",
    ]


def test_autoload_disabled_then_explicit_import(python):
    r = python(
        """
        import sys
        import torch
        assert "torch_openreg" not in sys.modules, "loaded despite AUTOLOAD=0"
        assert torch._C._get_privateuse1_backend_name() == "privateuseone"
        import torch_openreg
        print(torch.ones(2, device="openreg").device)
        """,
        env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "openreg:0"


def test_import_backend_before_torch(python):
    r = python(
        """
        import torch_openreg
        import torch
        assert torch.openreg is torch_openreg
        print(torch.zeros(1, device="openreg").device)
        """
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "openreg:0"


def test_import_backend_after_torch(python):
    r = python(
        """
        import torch
        import torch_openreg
        assert torch.get_device_module("openreg") is torch_openreg
        print(torch_openreg.device_count())
        """
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "2"


def test_autoload_entry_point_is_idempotent(python):
    r = python(
        """
        import torch, torch_openreg
        torch_openreg._autoload()
        torch_openreg._autoload()
        print(torch.ones(1, device="openreg").sum().item())
        """
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "1.0"


def test_entry_point_declared():
    from importlib.metadata import entry_points

    names = {ep.name: ep.value for ep in entry_points(group="torch.backends")}
    assert names.get("torch_openreg") == "torch_openreg:_autoload"
