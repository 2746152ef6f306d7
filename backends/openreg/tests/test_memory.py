"""The openreg DeviceAllocator and its per-device statistics, plus pinned
host memory from the hooks' host allocator."""

import pytest


def test_memory_allocated_tracks_tensors(torch):
    before = torch.openreg.memory_allocated(0)
    x = torch.empty(1024, dtype=torch.float32, device="openreg:0")
    assert torch.openreg.memory_allocated(0) == before + 4096
    del x
    assert torch.openreg.memory_allocated(0) == before


def test_statistics_are_per_device(torch):
    before0 = torch.openreg.memory_allocated(0)
    before1 = torch.openreg.memory_allocated("openreg:1")
    y = torch.empty(256, device="openreg:1")
    assert torch.openreg.memory_allocated(1) == before1 + 1024
    assert torch.openreg.memory_allocated(0) == before0
    del y


def test_peak_and_reset(torch):
    torch.openreg.reset_peak_memory_stats()
    base = torch.openreg.memory_allocated()
    big = torch.empty(1 << 20, dtype=torch.uint8, device="openreg")
    del big
    assert torch.openreg.max_memory_allocated() >= base + (1 << 20)
    torch.openreg.reset_peak_memory_stats()
    assert torch.openreg.max_memory_allocated() == torch.openreg.memory_allocated()


def test_reserved_and_empty_cache(torch):
    x = torch.ones(100, device="openreg")
    assert torch.openreg.memory_reserved() >= x.numel() * 4
    torch.openreg.empty_cache()  # nothing is cached: must just work
    assert torch.openreg.max_memory_reserved() >= torch.openreg.memory_reserved()


def test_results_of_fallback_ops_are_accounted(torch):
    # exp() runs the CPU kernel; its output memory is adopted, not copied,
    # and must still show up in the statistics.
    a = torch.ones(4096, device="openreg")
    before = torch.openreg.memory_allocated()
    b = a.exp()
    assert torch.openreg.memory_allocated() == before + 4096 * 4
    del b
    assert torch.openreg.memory_allocated() == before


def test_pin_memory(torch):
    t = torch.randn(16)
    assert not t.is_pinned()
    p = t.pin_memory()
    assert p.is_pinned() and p.device.type == "cpu"
    d = p.to("openreg", non_blocking=True)
    torch.openreg.synchronize()
    assert torch.equal(d.cpu(), t)


def test_empty_pinned_factory(torch):
    assert torch.empty(8, pin_memory=True).is_pinned()


def test_untyped_storage_on_device(torch):
    s = torch.UntypedStorage(16, device="openreg")
    assert s.device.type == "openreg" and s.nbytes() == 16
    s.resize_(32)
    assert s.nbytes() == 32


def test_resize_grows_storage(torch):
    t = torch.arange(4.0, device="openreg")
    t.resize_(8)
    assert t.shape == (8,) and t.device.type == "openreg"
    assert t[:4].cpu().tolist() == [0.0, 1.0, 2.0, 3.0]


@pytest.mark.parametrize("n", [0, 1, 1000])
def test_empty_sizes(torch, n):
    assert torch.empty(n, device="openreg").numel() == n
