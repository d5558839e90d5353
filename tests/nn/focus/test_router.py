import numpy as np
import pytest
import torch

from quest_geometric.nn.focus.router import FocusRouter, group_balance
from quest_geometric.nn.focus.sinkhorn import sinkhorn_log


def numpy_sinkhorn(s, iters, causal):
    """Plain probability-space Sinkhorn in float64 (s = scores / tau)."""
    q = np.exp(s - s.max())
    for _ in range(iters):
        if causal:
            q = q / np.cumsum(q, axis=0)
        else:
            q = q / q.sum(axis=0, keepdims=True)
        q = q / q.sum(axis=1, keepdims=True)
    return q


@pytest.mark.parametrize("causal", [False, True])
def test_sinkhorn_matches_numpy_float64(causal):
    torch.manual_seed(0)
    r = FocusRouter(6, num_groups=4, group_dim=3, tau=0.5, top_k=2, causal=causal).double()
    h = torch.randn(11, 6, dtype=torch.float64)
    out = r(h)
    s = r.scores(h).detach().numpy()
    ref = numpy_sinkhorn(s, 10, causal)
    np.testing.assert_allclose(out.soft.detach().numpy(), ref, rtol=1e-10, atol=1e-12)
    assert out.groups.dtype == torch.long and out.groups.shape == (11, 2)
    first = 1 if causal else 0  # causal: the first token is uniform (a tie)
    assert torch.equal(out.groups[first:, 0], torch.from_numpy(ref.argmax(1))[first:])
    np.testing.assert_allclose(out.soft.sum(-1).detach().numpy(), 1.0, rtol=1e-12)


def test_sinkhorn_balances_groups():
    torch.manual_seed(1)
    s = torch.randn(40, 4, dtype=torch.float64) * 3
    q = sinkhorn_log(s, num_iters=300, causal=False).exp()
    # fixed point: rows sum to 1, columns to N / K
    torch.testing.assert_close(q.sum(0), torch.full((4,), 10.0, dtype=torch.float64),
                               rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("causal", [False, True])
def test_per_sequence_normalisation_in_pyg_batch(causal):
    torch.manual_seed(2)
    r = FocusRouter(8, num_groups=3, top_k=2, causal=causal)
    a, b = torch.randn(7, 8), torch.randn(12, 8)
    batch = torch.tensor([0] * 7 + [1] * 12)
    out = r(torch.cat([a, b]), batch)
    oa, ob = r(a), r(b)
    torch.testing.assert_close(out.soft, torch.cat([oa.soft, ob.soft]), rtol=1e-6, atol=1e-6)
    assert torch.equal(out.groups, torch.cat([oa.groups, ob.groups]))
    # [B, T, C] input equals flat input with batch
    x = torch.randn(2, 5, 8)
    o3 = r(x)
    of = r(x.reshape(10, 8), torch.arange(2).repeat_interleave(5))
    torch.testing.assert_close(o3.soft.reshape(10, 3), of.soft)


@pytest.mark.parametrize("causal", [False, True])
def test_future_tokens_never_change_past_memberships(causal):
    torch.manual_seed(3)
    r = FocusRouter(8, num_groups=4, top_k=2, causal=causal)
    h = torch.randn(1, 30, 8)
    h2 = h.clone()
    h2[:, 20:] = torch.randn(1, 10, 8) * 5
    o1, o2 = r(h), r(h2)
    same = torch.allclose(o1.soft[:, :20], o2.soft[:, :20], atol=1e-6, rtol=0)
    if causal:
        assert same and torch.equal(o1.groups[:, :20], o2.groups[:, :20])
    else:
        assert not same  # the paper's full-sequence Sinkhorn does leak (gap 2)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
def test_half_precision_stable_small_tau(dtype, causal):
    torch.manual_seed(4)
    r = FocusRouter(16, num_groups=8, tau=0.05, causal=causal)
    with torch.no_grad():
        r.lin.weight.mul_(20.0)  # large scores: exp(S / tau) overflows half and float32
    h = torch.randn(64, 16)
    out = r.to(dtype)(h.to(dtype))
    assert out.soft.dtype == dtype and bool(torch.isfinite(out.soft).all())
    assert bool(torch.isfinite(out.log_soft).all())
    ref = r.float()(h)
    torch.testing.assert_close(out.soft.float(), ref.soft, atol=0.05, rtol=0)


def test_gradients_reach_router_parameters():
    r = FocusRouter(8, num_groups=4)
    out = r(torch.randn(2, 9, 8))
    (out.soft * torch.randn_like(out.soft)).sum().backward()
    assert r.lin.weight.grad is not None and bool(torch.isfinite(r.lin.weight.grad).all())
    assert r.centroids.grad is not None and r.centroids.grad.abs().sum() > 0


def test_group_balance_hand_computed():
    g = torch.tensor([[0], [0], [0], [1]])
    assert float(group_balance(g, 4)) == pytest.approx(0.75)
    g2 = torch.tensor([[0, 1], [0, 2], [3, 1], [0, 1]])
    assert float(group_balance(g2, 4)) == pytest.approx(3 / 8)
    per = group_balance(torch.tensor([[0], [0], [1], [2], [2], [2]]), 3,
                        torch.tensor([0, 0, 0, 1, 1, 1]))
    torch.testing.assert_close(per, torch.tensor([2 / 3, 1.0]))
    r = FocusRouter(4, num_groups=2)
    out = r(torch.randn(10, 4))
    assert float(FocusRouter.balance(out)) >= 0.5


def test_repr_and_errors():
    r = FocusRouter(32, num_groups=8, top_k=2)
    assert str(r) == "FocusRouter(32, num_groups=8, group_dim=16, top_k=2, causal=True)"
    with pytest.raises(ValueError, match="top_k"):
        FocusRouter(8, num_groups=4, top_k=5)
    with pytest.raises(ValueError, match="top_k"):
        FocusRouter(8, num_groups=4, top_k=0)
    with pytest.raises(ValueError, match="sorted"):
        r(torch.randn(4, 32), torch.tensor([1, 0, 0, 1]))
    h = torch.randn(4, 32)
    h[2, 3] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        r(h)
    with pytest.raises(ValueError, match="channels"):
        r(torch.randn(4, 31))


# ---- the fast prefix log-sum-exp (private) beside torch.logcumsumexp --------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("dim", [0, 1])
def test_logcumsumexp_matches_torch(dtype, dim):
    from quest_geometric.nn.focus.sinkhorn import _logcumsumexp as logcumsumexp

    x = torch.randn(300, 7, dtype=dtype, generator=torch.Generator().manual_seed(0)) * 20
    tol = dict(rtol=1e-5, atol=1e-4) if dtype == torch.float32 else dict(rtol=1e-12,
                                                                          atol=1e-10)
    torch.testing.assert_close(logcumsumexp(x, dim), torch.logcumsumexp(x, dim), **tol)
    # against a plain float64 numpy prefix sum (independent of both implementations)
    xd = x.double().numpy()
    ref = np.log(np.cumsum(np.exp(xd - xd.max()), axis=dim)) + xd.max()
    np.testing.assert_allclose(logcumsumexp(x, dim).double().numpy(), ref,
                               rtol=1e-5 if dtype == torch.float32 else 1e-12)


def test_logcumsumexp_falls_back_exactly_where_float64_underflows():
    from quest_geometric.nn.focus.sinkhorn import LCSE_TINY
    from quest_geometric.nn.focus.sinkhorn import _logcumsumexp as logcumsumexp

    # early prefix e^-2000 below the column max: exp underflows even in float64
    x = torch.tensor([[-2000.0], [-1999.0], [0.0], [1.0]], dtype=torch.float64)
    assert float(torch.exp(x[0] - x.max())) < LCSE_TINY  # the fast path cannot hold it
    out = logcumsumexp(x, 0)
    assert torch.isfinite(out).all()
    expect = torch.tensor([-2000.0, -1999.0 + np.log1p(np.exp(-1.0)), np.log1p(np.exp(-1999.0)),
                           1.0 + np.log1p(np.exp(-1.0))], dtype=torch.float64)
    torch.testing.assert_close(out[:, 0], expect, rtol=1e-12, atol=1e-12)


def test_logcumsumexp_gradients_match_torch():
    from quest_geometric.nn.focus.sinkhorn import _logcumsumexp as logcumsumexp

    x = torch.randn(40, 3, dtype=torch.float64, requires_grad=True)
    w = torch.randn(40, 3, dtype=torch.float64)
    g1, = torch.autograd.grad((logcumsumexp(x, 0) * w).sum(), x)
    g2, = torch.autograd.grad((torch.logcumsumexp(x, 0) * w).sum(), x)
    torch.testing.assert_close(g1, g2, rtol=1e-10, atol=1e-12)
    torch.autograd.gradcheck(lambda t: logcumsumexp(t, 0), (x[:6].detach().requires_grad_(),))


@pytest.mark.parametrize("causal", [False, True])
def test_sinkhorn_pyg_batch_with_padding_matches_per_sequence(causal):
    s = torch.randn(3 + 9 + 5, 4, dtype=torch.float64) * 4
    batch = torch.tensor([0] * 3 + [1] * 9 + [2] * 5)
    out = sinkhorn_log(s, batch, 3, num_iters=7, causal=causal)
    parts = [sinkhorn_log(p, num_iters=7, causal=causal) for p in s.split([3, 9, 5])]
    torch.testing.assert_close(out, torch.cat(parts), rtol=1e-12, atol=1e-12)
    q = s.numpy()
    np.testing.assert_allclose(out[3:12].exp().numpy(), numpy_sinkhorn(q[3:12], 7, causal),
                               rtol=1e-10, atol=1e-12)
