"""Tests for QuaternionLinear against explicit per-group Hamilton products."""
from __future__ import annotations

import pytest
import torch

from quest_geometric.nn.quaternion_linear import QuaternionLinear
from quest_geometric.quaternion import multiply


def hamilton_reference(lin: QuaternionLinear, x: torch.Tensor) -> torch.Tensor:
    """y_o = sum_i W_oi (x) x_i + b_o with W_oi = (W_r, W_i, W_j, W_k)[o, i] a quaternion."""
    n_out, n_in = lin.out_channels // 4, lin.in_channels // 4
    xq = x.reshape(-1, n_in, 4)
    out = torch.zeros(xq.size(0), n_out, 4, dtype=x.dtype)
    for o in range(n_out):
        for i in range(n_in):
            w_oi = torch.stack([lin.weight[c, o, i] for c in range(4)])  # (r, i, j, k)
            out[:, o] += multiply(w_oi.expand_as(xq[:, i]), xq[:, i])
    out = out.reshape(*x.shape[:-1], lin.out_channels)
    if lin.bias is not None:
        out = out + lin.bias
    return out


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(8, 12), (4, 4), (16, 8)])
def test_matches_per_group_hamilton_product(shape, bias):
    torch.manual_seed(0)
    lin = QuaternionLinear(*shape, bias=bias).double()
    if bias:
        torch.nn.init.normal_(lin.bias)  # non-zero, so the bias path is checked
    x = torch.randn(3, 5, shape[0], dtype=torch.double)
    out = lin(x)
    assert out.shape == (3, 5, shape[1])
    torch.testing.assert_close(out, hamilton_reference(lin, x))


def test_block_matrix_layout():
    # One quaternion in, one out: the matrix is left multiplication by w = (a, b, c, d).
    lin = QuaternionLinear(4, 4, bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([1.0, 2.0, 3.0, 4.0]).view(4, 1, 1))
    a, b, c, d = 1.0, 2.0, 3.0, 4.0
    expected = torch.tensor([[a, -b, -c, -d],
                             [b, a, -d, c],
                             [c, d, a, -b],
                             [d, -c, b, a]])
    torch.testing.assert_close(lin.full_weight().detach(), expected)
    # i * j = k: weight i applied to input j gives k.
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([0.0, 1.0, 0.0, 0.0]).view(4, 1, 1))
    torch.testing.assert_close(lin(torch.tensor([0.0, 0.0, 1.0, 0.0])),
                               torch.tensor([0.0, 0.0, 0.0, 1.0]))


@pytest.mark.parametrize("bias", [True, False])
def test_parameter_count_is_a_quarter_of_linear(bias):
    lin = QuaternionLinear(64, 32, bias=bias)
    dense = torch.nn.Linear(64, 32, bias=bias)
    n = sum(p.numel() for p in lin.parameters())
    assert n == 64 * 32 // 4 + (32 if bias else 0)
    assert n - (32 if bias else 0) == (dense.weight.numel()) // 4
    assert "basis" not in lin.state_dict()


def test_initialisation_variance_and_zero_bias():
    torch.manual_seed(0)
    lin = QuaternionLinear(256, 128)
    var = lin.full_weight().detach().var().item()
    assert abs(var - 2.0 / (256 + 128)) < 0.1 * 2.0 / (256 + 128)
    assert torch.count_nonzero(lin.bias) == 0


def test_gradients_reach_every_component():
    lin = QuaternionLinear(8, 8)
    lin(torch.randn(6, 8)).square().sum().backward()
    assert lin.weight.grad is not None and bool((lin.weight.grad.abs().sum((1, 2)) > 0).all())
    assert lin.bias.grad is not None


def test_repr_and_bad_input():
    assert str(QuaternionLinear(64, 32)) == "QuaternionLinear(64, 32)"
    assert str(QuaternionLinear(8, 4, bias=False)) == "QuaternionLinear(8, 4, bias=False)"
    with pytest.raises(ValueError, match="^QuaternionLinear: 'in_channels' must be a positive "
                       "multiple of 4 .*, got 6$"):
        QuaternionLinear(6, 8)
    with pytest.raises(ValueError, match="^QuaternionLinear: 'out_channels' must be an int >= 4"):
        QuaternionLinear(8, 0)
    with pytest.raises(TypeError, match="^QuaternionLinear: 'in_channels' must be an int >= 4, "
                       "got True$"):
        QuaternionLinear(True, 8)
    with pytest.raises(TypeError, match="^QuaternionLinear: 'bias' must be a bool, got 1$"):
        QuaternionLinear(8, 8, bias=1)
    lin = QuaternionLinear(8, 4)
    with pytest.raises(ValueError, match="^QuaternionLinear: 'x' must be a tensor of 8 channels"):
        lin(torch.randn(3, 4))
    with pytest.raises(TypeError, match="^QuaternionLinear: 'x' must be a tensor, got list"):
        lin([1.0] * 8)


def test_other_dtype_than_parameters_is_a_type_error():
    # issue 28 §6: the mismatch used to fail inside matmul without naming the argument
    lin = QuaternionLinear(8, 4)
    x = torch.randn(3, 8, dtype=torch.double)
    with pytest.raises(TypeError, match=r"QuaternionLinear: 'x' must be of the dtype of the "
                                        r"layer's parameters \(torch.float32\), got "
                                        r"torch.float64.*layer.to\(torch.float64\)"):
        lin(x)
    with pytest.raises(TypeError, match=r"'x'.*torch.int64"):
        lin(torch.ones(3, 8, dtype=torch.long))
    with pytest.raises(TypeError, match=r"^QuaternionLinear: 'x' must be a tensor, got list"):
        lin([0.0] * 8)
    # the fixes the message names give the reference result
    torch.testing.assert_close(lin(x.float()).double(), hamilton_reference(lin.double(), x),
                               atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(lin(x), hamilton_reference(lin, x))
    # autocast decides the dtype itself: no error there
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert QuaternionLinear(8, 4)(torch.randn(3, 8)).dtype == torch.bfloat16
