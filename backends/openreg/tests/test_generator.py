"""The openreg generator: per-device default generators, separate from the
CPU's, used by random operators that run through the fallback."""

import pytest


def test_same_seed_same_numbers(torch):
    torch.openreg.manual_seed(1234)
    a = torch.randn(8, device="openreg").cpu()
    torch.openreg.manual_seed(1234)
    b = torch.randn(8, device="openreg").cpu()
    assert torch.equal(a, b)


def test_draws_from_openreg_not_cpu_generator(torch):
    torch.manual_seed(7)
    torch.openreg.manual_seed(99)
    cpu_state = torch.get_rng_state()
    torch.randn(16, device="openreg")
    torch.rand(16, device="openreg")
    torch.empty(16, device="openreg").uniform_()
    # The CPU generator did not advance...
    assert torch.equal(torch.get_rng_state(), cpu_state)
    # ...and the openreg stream differs from the CPU stream for another seed.
    # (torch.manual_seed seeds openreg too, so seed openreg after it.)
    torch.manual_seed(7)
    torch.openreg.manual_seed(99)
    assert not torch.equal(torch.randn(16, device="openreg").cpu(), torch.randn(16))


def test_openreg_stream_matches_cpu_algorithm(torch):
    # openreg runs the CPU kernels with its own CPU-type generator, so the
    # same seed gives the numbers the CPU would give.
    torch.openreg.manual_seed(5)
    torch.manual_seed(5)
    assert torch.equal(torch.randn(4, device="openreg").cpu(), torch.randn(4))


def test_get_set_rng_state(torch):
    torch.openreg.manual_seed(3)
    state = torch.openreg.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    a = torch.rand(5, device="openreg").cpu()
    torch.openreg.set_rng_state(state)
    b = torch.rand(5, device="openreg").cpu()
    assert torch.equal(a, b)


def test_initial_seed_and_manual_seed_all(torch):
    torch.openreg.manual_seed_all(42)
    assert torch.openreg.initial_seed() == 42
    with torch.openreg.device(1):
        assert torch.openreg.initial_seed() == 42
    torch.openreg.manual_seed(2**64 - 1)
    assert torch.openreg.initial_seed() == 2**64 - 1


def test_devices_have_separate_generators(torch):
    torch.openreg.manual_seed_all(0)
    a = torch.randn(4, device="openreg:0").cpu()
    b = torch.randn(4, device="openreg:1").cpu()
    assert torch.equal(a, b)  # both fresh from seed 0: independent streams
    states = torch.openreg.get_rng_state_all()
    assert len(states) == 2


def test_torch_manual_seed_seeds_openreg(torch):
    torch.manual_seed(11)
    a = torch.randn(3, device="openreg").cpu()
    torch.manual_seed(11)
    b = torch.randn(3, device="openreg").cpu()
    assert torch.equal(a, b)


def test_explicit_generator(torch):
    g = torch.Generator(device="openreg")
    assert g.device.type == "openreg"
    g.manual_seed(21)
    a = torch.randn(4, device="openreg", generator=g).cpu()
    g.manual_seed(21)
    b = torch.randn(4, device="openreg", generator=g).cpu()
    assert torch.equal(a, b)
    assert g.initial_seed() == 21
    c = g.clone_state() if hasattr(g, "clone_state") else None
    del c


def test_dropout_and_randperm_use_openreg_generator(torch):
    torch.openreg.manual_seed(8)
    a = torch.nn.functional.dropout(torch.ones(100, device="openreg"), 0.5).cpu()
    p = torch.randperm(10, device="openreg").cpu()
    torch.openreg.manual_seed(8)
    assert torch.equal(a, torch.nn.functional.dropout(torch.ones(100, device="openreg"), 0.5).cpu())
    assert torch.equal(p, torch.randperm(10, device="openreg").cpu())


def test_fork_rng(torch):
    torch.openreg.manual_seed(1)
    with torch.random.fork_rng(device_type="openreg"):
        torch.randn(10, device="openreg")
    a = torch.randn(3, device="openreg").cpu()
    torch.openreg.manual_seed(1)
    assert torch.equal(a, torch.randn(3, device="openreg").cpu())


@pytest.mark.parametrize("bad", [-5, 2])
def test_rng_state_bad_device(torch, bad):
    with pytest.raises((RuntimeError, ValueError)):
        torch.openreg.get_rng_state(bad)


def test_philox_state_names_the_generator(torch):
    # Generator.philox_state exists from torch 2.14; Generator.cpp overrides it
    # behind a version guard.
    if not hasattr(torch.Generator, "philox_state"):
        pytest.skip(f"torch {torch.__version__} has no Generator.philox_state (added in 2.14)")
    with pytest.raises(RuntimeError, match="openreg generator is not Philox-based"):
        torch.Generator(device="openreg").philox_state(4)
