"""Tensor layouts beyond strided: each needs its capability, since many backends have
only dense kernels. Each test computes on the device and compares with the CPU."""

import pytest
import torch


def dense(seed=0):
    g = torch.Generator().manual_seed(seed)
    values = torch.randn(6, 5, generator=g)
    return values * (torch.rand(6, 5, generator=g) > 0.6)  # mostly zeros


@pytest.mark.capability("sparse")
def test_sparse_coo_round_trip_and_matmul(device):
    host = dense()
    sparse = host.to(device).to_sparse()
    assert sparse.layout is torch.sparse_coo and sparse.device.type == device
    torch.testing.assert_close(sparse.to_dense().cpu(), host)
    other = torch.randn(5, 3, generator=torch.Generator().manual_seed(1))
    product = torch.sparse.mm(sparse, other.to(device))
    torch.testing.assert_close(product.cpu(), host @ other)


@pytest.mark.capability("quantized")
def test_quantized_per_tensor_round_trip(device):
    host = torch.linspace(-2, 2, 17)
    quantized = torch.quantize_per_tensor(host.to(device), scale=0.05, zero_point=10, dtype=torch.quint8)
    assert quantized.is_quantized and quantized.device.type == device
    expected = torch.quantize_per_tensor(host, scale=0.05, zero_point=10, dtype=torch.quint8)
    assert torch.equal(quantized.int_repr().cpu(), expected.int_repr())
    torch.testing.assert_close(quantized.dequantize().cpu(), expected.dequantize())
