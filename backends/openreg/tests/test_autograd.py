"""Training on openreg gives the CPU's numbers, and processes that ran
backward() exit cleanly (autograd device threads vs. shutdown)."""

import pytest


def _train(torch, make_model, make_data, device, steps=5):
    torch.manual_seed(0)
    model = make_model()
    x, y = make_data()
    model = model.to(device)
    x, y = x.to(device), y.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _mlp(torch):
    return torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3)
    )


def _cnn(torch):
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 3, padding=1),
        torch.nn.BatchNorm2d(4),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(4 * 4 * 4, 3),
    )


def test_mlp_matches_cpu(torch):
    data = lambda: (torch.randn(32, 8), torch.randint(0, 3, (32,)))  # noqa: E731
    cpu = _train(torch, lambda: _mlp(torch), data, "cpu")
    dev = _train(torch, lambda: _mlp(torch), data, "openreg")
    assert dev == pytest.approx(cpu, rel=1e-5, abs=1e-6)
    assert dev[-1] < dev[0]


def test_cnn_matches_cpu(torch):
    data = lambda: (torch.randn(8, 1, 8, 8), torch.randint(0, 3, (8,)))  # noqa: E731
    cpu = _train(torch, lambda: _cnn(torch), data, "cpu")
    dev = _train(torch, lambda: _cnn(torch), data, "openreg")
    assert dev == pytest.approx(cpu, rel=1e-4, abs=1e-5)


def test_grad_lands_on_device(torch):
    w = torch.randn(3, device="openreg", requires_grad=True)
    (w * w).sum().backward()
    assert w.grad.device.type == "openreg"
    torch.testing.assert_close(w.grad.cpu(), 2 * w.detach().cpu())


def test_backward_on_second_device(torch):
    w = torch.randn(3, device="openreg:1", requires_grad=True)
    w.exp().sum().backward()
    assert w.grad.device == torch.device("openreg:1")


def test_views_and_inplace_autograd(torch):
    a = torch.randn(4, 4, device="openreg", requires_grad=True)
    b = a.clone()
    b[:, 0].mul_(2)
    b.diagonal().sum().backward()
    expected = torch.eye(4)
    expected[0, 0] = 2
    torch.testing.assert_close(a.grad.cpu(), expected)


CLEAN_EXIT = """
import torch
m = torch.nn.Linear(16, 4).to("openreg")
x = torch.randn(8, 16, device="openreg")
for _ in range(3):
    m(x).sum().backward()
w = torch.randn(5, device="openreg:1", requires_grad=True)
(w * 2).sum().backward()
print("done")
"""


def test_clean_exit_after_backward(python):
    """A smaller version of bench/openreg_clean_exit.py (100 runs)."""
    failures = []
    for _ in range(10):
        r = python(CLEAN_EXIT)
        if r.returncode != 0 or r.stdout.strip() != "done":
            failures.append((r.returncode, r.stderr[-500:]))
    assert not failures, failures
