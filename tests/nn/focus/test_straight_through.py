"""The straight-through gate and the differentiable pair share: values against the hard
oracle and brute-force counts, gradients against hand-derived formulas."""
from __future__ import annotations

import math

import pytest
import torch

from quest_geometric.nn.focus import (
    FocusAttention,
    additive_gate_share,
    focus_dense_attention,
    focus_soft_attention,
    straight_through_membership,
    straight_through_pair_share,
    topk_groups,
)


def _memberships(t, k, top_k, seed=0):
    g = torch.Generator().manual_seed(seed)
    soft = torch.softmax(torch.randn(t, k, generator=g, dtype=torch.float64), -1)
    return soft.requires_grad_(), topk_groups(soft.detach().log(), top_k)


def test_membership_is_the_hard_indicator_with_the_soft_gradient():
    soft, groups = _memberships(9, 4, 2)
    m = straight_through_membership(soft, groups)
    ref = torch.zeros(9, 4, dtype=torch.float64)
    for i in range(9):
        for c in groups[i]:
            ref[i, c] = 1.0
    torch.testing.assert_close(m.detach(), ref)
    w = torch.randn(9, 4, dtype=torch.float64)
    (m * w).sum().backward()
    torch.testing.assert_close(soft.grad, w)  # d(m . w)/d soft = w
    with pytest.raises(TypeError, match="^straight_through_membership: 'groups' must be a long "
                       "tensor"):
        straight_through_membership(soft, groups.float())
    with pytest.raises(ValueError, match=r"^straight_through_membership: 'groups' must be of "
                       r"shape \[9\]"):
        straight_through_membership(soft, groups[:5])
    with pytest.raises(ValueError, match="^straight_through_membership: 'groups' must be of "
                       "shape"):
        straight_through_membership(soft, groups[:, :0])
    with pytest.raises(ValueError, match=r"^straight_through_membership: 'groups' must be group "
                       r"ids in \[0, 3\]"):
        straight_through_membership(soft, groups + 3)


@pytest.mark.parametrize("top_k", [1, 2])
def test_straight_through_gate_is_the_hard_pattern_at_a_large_scale(top_k):
    # two sequences of a PyG batch; with lambda = 200 the removed pairs get
    # log sigmoid(-100): the hard mask up to e^-100
    torch.manual_seed(0)
    n, h, d, k = 23, 2, 4, 4
    batch = torch.tensor([0] * 11 + [1] * 12)
    q, kk, v = (torch.randn(n, h, d, dtype=torch.float64) for _ in range(3))
    soft, groups = _memberships(n, k, top_k, seed=1)
    out = focus_soft_attention(q, kk, v, soft, 3, batch, gate="straight_through",
                               gate_scale=200.0, groups=groups)
    ref = focus_dense_attention(q, kk, v, groups, 3, batch, num_groups=k)
    torch.testing.assert_close(out, ref)
    out.sum().backward()
    assert soft.grad is not None and torch.isfinite(soft.grad).all()
    with pytest.raises(ValueError, match="needs the hard 'groups'"):
        focus_soft_attention(q, kk, v, soft, 3, batch, gate="straight_through")


def test_straight_through_gate_at_the_default_scale_leaks_e_minus_5():
    # one far key only: its weight against the window key is e^(s - 5 - 0) / ... by hand
    q = torch.zeros(3, 1, 2, dtype=torch.float64)
    kk = torch.zeros(3, 1, 2, dtype=torch.float64)
    v = torch.tensor([[[1.0, 0.0]], [[0.0, 0.0]], [[0.0, 0.0]]], dtype=torch.float64)
    soft = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0]], dtype=torch.float64)
    groups = torch.tensor([[0], [1], [1]])
    out = focus_soft_attention(q, kk, v, soft, 1, gate="straight_through", groups=groups)
    # token 2 sees token 0 (far, other group: log sigmoid(-5)) and tokens 1, 2 (window)
    w0 = torch.sigmoid(torch.tensor(-5.0, dtype=torch.float64))
    assert float(out[2, 0, 0]) == pytest.approx(float(w0 / (w0 + 2)))


def _brute_far_share(groups, window, causal, num_sinks=0):
    t = groups.size(0)
    sets = [set(g.tolist()) for g in groups]
    far = [(i, j) for i in range(t) for j in range(t)
           if ((i - j > window) if causal else (abs(i - j) > window))
           and min(i, j) >= num_sinks]
    return sum(bool(sets[i] & sets[j]) for i, j in far) / len(far), far


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("top_k", [1, 2])
@pytest.mark.parametrize("num_sinks", [0, 3])
def test_pair_share_value_and_gradient_by_brute_force(causal, top_k, num_sinks):
    t, k, w = 17, 4, 3
    soft, groups = _memberships(t, k, top_k, seed=2)
    r = straight_through_pair_share(soft, groups, w, causal=causal, num_sinks=num_sinks)
    ref, far = _brute_far_share(groups, w, causal, num_sinks)
    assert float(r.detach()) == pytest.approx(ref)
    r.backward()
    # d r / d g_i = (1/|F|) sum over far pairs (i, j) and (j, i) with |G_i & G_j| <= 1 of h_j
    h = torch.zeros(t, k, dtype=torch.float64).scatter_(1, groups, 1.0)
    grad = torch.zeros(t, k, dtype=torch.float64)
    for i, j in far:
        if float(h[i] @ h[j]) <= 1.0:
            grad[i] += h[j]
            grad[j] += h[i]
    torch.testing.assert_close(soft.grad, grad / len(far))


def _causal_share(mask_reference, groups, window):
    """The share of causal pairs the hard pattern keeps, counted on the dense reference mask."""
    t = groups.size(0)
    return float(mask_reference(groups, window, None, True).sum()) / (t * (t + 1) // 2)


def test_pair_share_gives_the_causal_pair_share_of_the_hard_pattern(focus_mask_reference):
    t, k, w = 40, 4, 5
    soft, groups = _memberships(t, k, 2, seed=3)
    r = float(straight_through_pair_share(soft, groups, w).detach())
    pairs = t * (t + 1) // 2
    far = (t - w - 1) * (t - w) // 2
    assert (pairs - far + r * far) / pairs == pytest.approx(
        _causal_share(focus_mask_reference, groups, w))


def test_pair_share_pools_the_sequences_of_a_batch():
    soft, groups = _memberships(20, 4, 2, seed=4)
    batch = torch.tensor([0] * 8 + [1] * 12)
    r = float(straight_through_pair_share(soft, groups, 2, batch).detach())
    a, fa = _brute_far_share(groups[:8], 2, True)
    b, fb = _brute_far_share(groups[8:], 2, True)
    assert r == pytest.approx((a * len(fa) + b * len(fb)) / (len(fa) + len(fb)))


def test_pair_share_without_far_pairs_and_bad_input():
    soft, groups = _memberships(4, 3, 1)
    r = straight_through_pair_share(soft, groups, 10)
    assert float(r.detach()) == 0.0
    r.backward()
    assert torch.equal(soft.grad, torch.zeros_like(soft))
    with pytest.raises(TypeError, match=r"^straight_through_pair_share: 'soft' must be a "
                       r"floating-point \[N, K\] tensor, got a torch.int64 tensor"):
        straight_through_pair_share(soft.detach().long(), groups, 1)
    with pytest.raises(ValueError, match="^straight_through_pair_share: 'window' must be an int"):
        straight_through_pair_share(soft, groups, -1)
    with pytest.raises(ValueError, match="'groups'"):
        straight_through_pair_share(soft, groups[:2], 1)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("num_sinks", [0, 2])
def test_additive_gate_share_by_brute_force(causal, num_sinks):
    t, k, w, lam, b = 15, 4, 3, 7.0, 0.3
    soft, _ = _memberships(t, k, 1, seed=5)
    soft = soft.detach()
    batch = torch.tensor([0] * 6 + [1] * 9)
    total, count = 0.0, 0
    for lo, hi in ((0, 6), (6, 15)):
        for i in range(lo, hi):
            for j in range(lo, hi):
                if causal and j > i:
                    continue
                x = float(soft[i] @ soft[j])
                near = abs(i - j) <= w or min(i, j) - lo < num_sinks
                total += 1.0 if near else 1.0 / (1.0 + math.exp(-lam * (x - b)))
                count += 1
    r = additive_gate_share(soft, w, lam, b, batch, causal, num_sinks=num_sinks)
    assert float(r) == pytest.approx(total / count, rel=1e-12)


@pytest.mark.parametrize("top_k", [1, 2])
def test_additive_gate_share_of_a_hard_gate_is_the_causal_pair_share(top_k,
                                                                     focus_mask_reference):
    """Memberships spread evenly over the hard groups and b = 1/(2 top_k^2) at a large scale:
    every factor is 0 or 1, so the share is that of the hard top-k pattern."""
    t, k, w = 40, 4, 5
    _, groups = _memberships(t, k, top_k, seed=6)
    even = torch.zeros(t, k, dtype=torch.float64).scatter_(1, groups, 1.0 / top_k)
    r = additive_gate_share(even, w, gate_scale=1e4, gate_bias=0.5 / top_k ** 2)
    assert float(r) == pytest.approx(_causal_share(focus_mask_reference, groups, w),
                                     abs=1e-12)
    # full attention (no far pair gated away) is 1; the default b = 1/2 keeps fewer at top-2
    assert float(additive_gate_share(even, t, 1e4, 0.5)) == 1.0
    if top_k == 2:
        assert float(additive_gate_share(even, w, 1e4, 0.5)) < float(r)


def test_additive_gate_share_bad_input():
    soft, _ = _memberships(6, 3, 1)
    with pytest.raises(TypeError, match=r"^additive_gate_share: 'soft' must be a floating-point "
                       r"\[N, K\] tensor, got a torch.int64 tensor"):
        additive_gate_share(soft.detach().long(), 1)
    with pytest.raises(ValueError, match="^additive_gate_share: 'window' must be an int >= 0"):
        additive_gate_share(soft, -1)
    with pytest.raises(ValueError, match="^additive_gate_share: 'gate_bias' must be a finite"):
        additive_gate_share(soft, 1, gate_bias=float("nan"))


def test_focus_attention_trains_through_the_straight_through_gate():
    torch.manual_seed(0)
    layer = FocusAttention(16, 2, num_groups=4, top_k=2, window=2, gate="straight_through")
    x = torch.randn(2, 12, 16)
    layer.train()
    out = layer(x)
    out.square().sum().backward()
    assert layer.router.lin.weight.grad is not None
    assert float(layer.router.lin.weight.grad.abs().sum()) > 0
    # at a large gate scale, training mode is the hard inference pattern
    layer.gate_scale = 300.0
    with torch.no_grad():
        torch.testing.assert_close(layer(x), layer(x, hard=True), rtol=1e-5, atol=1e-6)
    assert "straight_through" in repr(layer)
