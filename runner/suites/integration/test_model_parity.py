"""Small models trained for a few steps on the device and on CPU from the same seed.

The same initial weights (made on CPU, copied to the device) and the same batches go
through both; the loss of every step must agree within LOSS_RTOL (relative) or
LOSS_ATOL, and so must the final weights within WEIGHT_TOL. Float32 throughout: the
tolerance absorbs a different summation order, not a different precision.
"""

import copy

import pytest
import torch
from torch import nn

STEPS = 5
LOSS_RTOL = 1e-3
LOSS_ATOL = 1e-5
WEIGHT_TOL = 1e-3


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(20, 64), nn.GELU(), nn.LayerNorm(64), nn.Linear(64, 5))

    def forward(self, x):
        return self.net(x)


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(16, 5)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


class TransformerBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 32)
        self.block = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0,
                                                batch_first=True)
        self.head = nn.Linear(32, 5)

    def forward(self, tokens):
        return self.head(self.block(self.embed(tokens)).mean(dim=1))


def _batch(kind, seed=0):
    """One fixed batch, trained on for every step: the loss must go down."""
    g = torch.Generator().manual_seed(seed)
    if kind == "mlp":
        x = torch.randn(32, 20, generator=g)
    elif kind == "cnn":
        x = torch.randn(8, 3, 16, 16, generator=g)
    else:
        x = torch.randint(0, 50, (8, 12), generator=g)
    return x, torch.randint(0, 5, (x.shape[0],), generator=g)


MODELS = {"mlp": MLP, "cnn": CNN, "transformer_block": TransformerBlock}


def _train(model, device, kind, optimizer_name):
    optimizer = {"sgd": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
                 "adamw": lambda p: torch.optim.AdamW(p, lr=1e-3)}[optimizer_name](model.parameters())
    losses = []
    model.train()
    x, y = _batch(kind)
    for _ in range(STEPS):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x.to(device)), y.to(device))
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


@pytest.mark.capability("autograd")
@pytest.mark.parametrize("optimizer_name", ["sgd", "adamw"])
@pytest.mark.parametrize("kind", sorted(MODELS))
def test_training_matches_cpu(device, kind, optimizer_name, record_property):
    torch.manual_seed(0)
    cpu_model = MODELS[kind]()
    device_model = copy.deepcopy(cpu_model).to(device)
    cpu_losses = _train(cpu_model, "cpu", kind, optimizer_name)
    device_losses = _train(device_model, device, kind, optimizer_name)
    record_property("losses_cpu", " ".join(f"{v:.6g}" for v in cpu_losses))
    record_property("losses_device", " ".join(f"{v:.6g}" for v in device_losses))
    for step, (on_device, on_cpu) in enumerate(zip(device_losses, cpu_losses, strict=True)):
        assert abs(on_device - on_cpu) <= LOSS_ATOL + LOSS_RTOL * abs(on_cpu), (
            f"step {step}: loss {on_device:.6g} on {device}, {on_cpu:.6g} on CPU "
            f"(tolerance {LOSS_RTOL:g} relative); losses {device} {device_losses}, CPU {cpu_losses}")
    assert cpu_losses[-1] < cpu_losses[0], f"the {kind} did not learn on CPU either: {cpu_losses}"
    for (name, cpu_param), device_param in zip(cpu_model.state_dict().items(), device_model.state_dict().values(),
                                               strict=True):
        assert device_param.device.type == device, f"{name} left the device"
        torch.testing.assert_close(device_param.cpu(), cpu_param, atol=WEIGHT_TOL, rtol=WEIGHT_TOL, msg=name)
