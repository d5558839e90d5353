"""Focus layers in half precision, the deterministic tie rule of the hard top-k, validated
options, and clear errors for bad input (issue 10, section 6)."""
import copy
import math

import pytest
import torch

from quest_geometric.nn.focus import (
    FocusAttention,
    FocusEdgeAttention,
    focus_blocks_attention,
    focus_blocks_reference,
    focus_dense_attention,
    focus_soft_attention,
)
from quest_geometric.nn.focus.edge_index import focus_edge_index
from quest_geometric.nn.focus.router import FocusRouter
from quest_geometric.nn.focus.topk import TIE_RTOL, topk_groups

K = 4
#: relative error bounds of half precision against float32 on the same (upcast) values:
#: about 2-3 unit roundoffs of the format for outputs, more for gradients (two matmuls more)
TOL = {torch.bfloat16: (2e-2, 5e-2), torch.float16: (3e-3, 1e-2)}


def rel_err(a, b):
    return float((a.detach().float() - b.detach()).norm() / b.detach().norm().clamp_min(1e-30))


# ---- half precision: every back-end x top_k x train/eval x causal ----------------------


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("backend", ["edges", "dense", "blocks"])
@pytest.mark.parametrize("top_k", [1, 2, K])
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidir"])
def test_half_precision_matches_float32(dtype, backend, top_k, training, causal):
    torch.manual_seed(0)
    mh = FocusAttention(16, 2, num_groups=K, top_k=top_k, window=3, backend=backend,
                        causal=causal).to(dtype).train(training)
    m32 = copy.deepcopy(mh).float()  # the same values, upcast exactly
    xh = torch.randn(2, 20, 16).to(dtype).requires_grad_()
    x32 = xh.detach().float().requires_grad_()
    yh, rh = mh(xh, return_router=True)
    y32, r32 = m32(x32, return_router=True)
    assert yh.dtype == dtype and rh.soft.dtype == dtype
    assert bool(torch.isfinite(yh).all())
    # routing runs in float32 on the upcast values, so the hard groups are the float32 ones
    assert torch.equal(rh.groups, r32.groups)
    go = torch.randn(y32.shape)
    (yh.float() * go).sum().backward()
    (y32 * go).sum().backward()
    out_tol, grad_tol = TOL[dtype]
    assert rel_err(yh, y32) < out_tol
    assert bool(torch.isfinite(xh.grad).all()) and rel_err(xh.grad, x32.grad) < grad_tol
    pairs = [(n, a.grad, b.grad) for (n, a), b in zip(mh.named_parameters(), m32.parameters())]
    total = math.sqrt(sum(float(b.norm()) ** 2 for _, _, b in pairs if b is not None))
    for name, a, b in pairs:
        assert (a is None) == (b is None), name
        if b is None:
            continue
        assert a.dtype == dtype and bool(torch.isfinite(a).all()), name
        # a gradient that is zero in exact arithmetic (the key bias) is measured against
        # 1% of the whole gradient
        scale = max(float(b.norm()), 1e-2 * total)
        assert float((a.float() - b).norm()) < grad_tol * scale, name


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("top_k", [1, 2])
@pytest.mark.parametrize("causal", [True, False])
def test_half_precision_functional_backends(dtype, top_k, causal):
    # the reference decomposition and the edge layer, called directly, on a PyG batch
    torch.manual_seed(1)
    batch = torch.tensor([0] * 7 + [1] * 30)
    n = batch.numel()
    groups = torch.stack([torch.randperm(K)[:top_k] for _ in range(n)])
    q, k, v = (torch.randn(n, 2, 8) for _ in range(3))
    ref = focus_dense_attention(q, k, v, groups, 3, batch, causal, K)
    qh, kh, vh = (t.to(dtype).requires_grad_() for t in (q, k, v))
    outs = {
        "reference": focus_blocks_reference(qh, kh, vh, groups, 3, batch, causal, K),
        "fused": focus_blocks_attention(qh, kh, vh, groups, 3, batch, causal, K, fused=True),
        "edges": FocusEdgeAttention()(qh, kh, vh, focus_edge_index(groups, 3, batch, causal)),
    }
    for name, out in outs.items():
        assert out.dtype == dtype, name
        assert rel_err(out, ref) < 2 * TOL[dtype][0], name
        grads = torch.autograd.grad(out.float().square().sum(), (qh, kh, vh))
        assert all(bool(torch.isfinite(g).all()) for g in grads), name


# ---- the tie rule ---------------------------------------------------------------------


def test_topk_groups_tie_rule_hand_computed():
    # an exact tie perturbed by rounding noise: the lowest ids win, whatever the noise
    for sign in (1.0, -1.0):
        uniform = torch.full((1, 4), -math.log(4), dtype=torch.float64)
        noisy = uniform + sign * torch.tensor([[3e-16, -2e-16, 1e-16, 4e-16]],
                                              dtype=torch.float64)
        assert topk_groups(noisy, 2).tolist() == [[0, 1]]
        assert topk_groups(noisy, 4).tolist() == [[0, 1, 2, 3]]
    # groups 1 and 2 tied within the tolerance, 3 clearly below: 1 wins, then 2, then 3
    p = torch.tensor([[0.10, 0.40, 0.40 * (1 - TIE_RTOL / 10), 0.11]])
    assert topk_groups(p.log(), 3).tolist() == [[1, 2, 3]]
    p = torch.tensor([[0.10, 0.40 * (1 - TIE_RTOL / 10), 0.40, 0.11]])
    assert topk_groups(p.log(), 1).tolist() == [[1]]
    # farther apart than the tolerance: the plain order
    p = torch.tensor([[0.10, 0.40 * (1 - 10 * TIE_RTOL), 0.40, 0.11]])
    assert topk_groups(p.log(), 2).tolist() == [[2, 1]]
    with pytest.raises(ValueError, match="top_k"):
        topk_groups(p.log(), 5)


def test_topk_groups_equals_torch_topk_without_ties():
    torch.manual_seed(2)
    logits = torch.randn(500, 6, dtype=torch.float64) * 3
    for top_k in (1, 3, 6):
        assert torch.equal(topk_groups(logits, top_k), logits.topk(top_k, -1).indices)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("top_k", [1, 2])
def test_groups_in_a_batch_equal_groups_alone(dtype, causal, top_k):
    # before the tie rule, float64 prefix-causal routing gave the (uniform) first token of a
    # padded sequence different groups than the same sequence alone
    lens = [5, 17, 9, 1]
    batch = torch.repeat_interleave(torch.arange(len(lens)), torch.tensor(lens))
    for seed in range(10):
        torch.manual_seed(seed)
        r = FocusRouter(8, num_groups=K, top_k=top_k, causal=causal).to(dtype)
        h = torch.randn(batch.numel(), 8, dtype=dtype)
        together = r(h, batch).groups
        alone = torch.cat([r(h[batch == i]).groups for i in range(len(lens))])
        assert torch.equal(together, alone), seed
        # a [B, T, C] batch of equal lengths too
        h3 = torch.randn(3, 11, 8, dtype=dtype)
        g3 = r(h3).groups
        for b in range(3):
            assert torch.equal(g3[b], r(h3[b]).groups), seed
        if causal:  # the uniform first token: groups 0..top_k-1
            starts = torch.tensor([0, 5, 22, 31])
            assert together[starts].tolist() == [list(range(top_k))] * len(lens)


# ---- options assigned after construction ----------------------------------------------


def _fresh_like(m, **kwargs):
    opts = dict(num_groups=m.num_groups, top_k=m.top_k, window=m.window, backend=m.backend,
                causal=m.causal)
    opts.update(kwargs)
    fresh = FocusAttention(m.embed_dim, m.num_heads, **opts).eval()
    fresh.load_state_dict(m.state_dict())
    return fresh


@pytest.mark.parametrize("backend", ["blocks", "edges", "dense"])
def test_assigned_options_take_effect(backend):
    torch.manual_seed(3)
    m = FocusAttention(16, 2, num_groups=K, top_k=1, window=2, backend=backend).eval()
    x = torch.randn(2, 30, 16)
    with torch.no_grad():
        before = m(x)
        m.top_k = 2
        assert m.router.top_k == 2 and m(x, return_router=True)[1].groups.shape[-1] == 2
        after = m(x)
        torch.testing.assert_close(after, _fresh_like(m, top_k=2)(x))
        assert not torch.allclose(after, before, atol=1e-4)
        m.window = 6
        after_w = m(x)
        torch.testing.assert_close(after_w, _fresh_like(m, top_k=2, window=6)(x))
        assert not torch.allclose(after_w, after, atol=1e-4)
        other = "dense" if backend != "dense" else "edges"
        m.backend = other
        assert m.backend == other and f"backend={other!r}" in repr(m)
        torch.testing.assert_close(m(x), after_w, atol=1e-5, rtol=1e-5)
        # the router's top_k is the layer's: assigning either sets both
        m.router.top_k = 3
        assert m.top_k == 3 and "top_k=3" in repr(m)
        # the chained assignment of compose_focus.set_focus_options
        m.top_k = m.router.top_k = 1
        torch.testing.assert_close(m(x), _fresh_like(m, top_k=1, window=6)(x))


def test_assigned_options_are_validated():
    m = FocusAttention(16, 2, num_groups=K, top_k=1, window=2)
    for name, value, err in (("top_k", 0, ValueError), ("top_k", K + 1, ValueError),
                             ("top_k", 1.5, TypeError), ("top_k", True, TypeError),
                             ("window", -1, ValueError), ("window", 2.0, TypeError),
                             ("backend", "flash", ValueError), ("backend", 3, TypeError),
                             ("gate", "sigmoid", ValueError)):
        with pytest.raises(err, match=f"^FocusRouter\\(num_groups={K}\\): 'top_k' must be"
                           if name == "top_k" else f"^FocusAttention: '{name}' must be"):
            setattr(m, name, value)
    with pytest.raises(ValueError, match="'top_k'"):
        m.router.top_k = K + 1
    for name in ("gate_scale", "gate_bias"):
        with pytest.raises(ValueError, match=f"'{name}'"):
            setattr(m, name, float("nan"))
        with pytest.raises(TypeError, match=f"'{name}'"):
            setattr(m, name, "1.0")
    with pytest.raises(ValueError, match="'tau'"):
        m.router.tau = float("inf")
    with pytest.raises(AttributeError, match="'num_groups'"):
        m.num_groups = 8
    with pytest.raises(AttributeError, match="'num_groups'"):
        m.router.num_groups = 8
    # nothing changed
    assert (m.top_k, m.window, m.backend, m.gate, m.num_groups) == (1, 2, "auto",
                                                                    "additive", K)
    assert m.gate_scale == 10.0 and m.gate_bias == 0.5 and m.router.tau == 0.1


# ---- clear errors naming the argument ---------------------------------------------------


def test_empty_inputs_are_refused():
    r = FocusRouter(8, num_groups=K)
    m = FocusAttention(8, 2, num_groups=K)
    empty = torch.zeros(0, dtype=torch.long)
    for h in (torch.randn(0, 8), torch.randn(0, 5, 8), torch.randn(2, 0, 8)):
        with pytest.raises(ValueError, match="^FocusRouter: 'h' must be a tensor holding at "
                           "least one token"):
            r(h)
        with pytest.raises(ValueError, match="^FocusAttention: 'x' must be a tensor holding "
                           "at least one token"):
            m(h)
    with pytest.raises(ValueError, match="^FocusRouter: 'h' must be a tensor holding at least "
                       "one token"):
        r(torch.randn(0, 8), empty)
    with pytest.raises(ValueError, match="^FocusAttention: 'x' must be a tensor holding at "
                       "least one token"):
        m(torch.randn(0, 8), empty)
    with pytest.raises(ValueError, match=r"^FocusAttention: 'batch' must be of shape \[3\]"):
        m(torch.randn(3, 8), empty)  # an empty batch for real tokens
    m.gate = None  # the full-attention path refuses it too
    with pytest.raises(ValueError, match="^FocusAttention: 'x' must be a tensor holding at "
                       "least one token"):
        m(torch.randn(0, 8))


def test_integer_features_are_refused():
    r = FocusRouter(8, num_groups=K)
    m = FocusAttention(8, 2, num_groups=K)
    xi = torch.randint(0, 5, (6, 8))
    with pytest.raises(TypeError, match="^FocusRouter: 'h' must be a floating-point tensor"):
        r(xi)
    with pytest.raises(TypeError, match="^FocusAttention: 'x' must be a floating-point tensor"):
        m(xi)
    with pytest.raises(TypeError, match="^FocusAttention: 'x' must be a floating-point tensor"):
        m(xi.view(2, 3, 8))
    q = torch.randn(6, 2, 4)
    g = torch.zeros(6, 1, dtype=torch.long)
    for fn in (focus_dense_attention, focus_blocks_attention, focus_blocks_reference):
        with pytest.raises(TypeError, match=rf"^{fn.__name__}: 'k' must be a floating-point "
                           r"\[N, H, D\] tensor, got a torch.int64 tensor"):
            fn(q, q.long(), q, g, 1)
    with pytest.raises(TypeError, match=r"^FocusEdgeAttention: 'q' must be a floating-point "
                       r"\[N, H, D\] tensor"):
        FocusEdgeAttention()(q.long(), q, q, focus_edge_index(g, 1))


def test_edge_index_must_be_integer_and_in_range():
    q = torch.randn(5, 2, 4)
    ei = focus_edge_index(torch.zeros(5, 1, dtype=torch.long), 1)
    layer = FocusEdgeAttention()
    with pytest.raises(TypeError, match="^FocusEdgeAttention: 'edge_index' must be an integer"):
        layer(q, q, q, ei.float())
    with pytest.raises(TypeError, match="^FocusEdgeAttention: 'edge_index' must be an integer"):
        layer(q, q, q, ei.bool())
    with pytest.raises(ValueError, match=r"^FocusEdgeAttention: 'edge_index' must be of shape "
                       r"\[2, E\]"):
        layer(q, q, q, ei[:1])
    bad = ei.clone()
    bad[0, -1] = 5
    with pytest.raises(ValueError, match=r"^FocusEdgeAttention: 'edge_index' must be node ids in "
                       r"\[0, 5\)"):
        layer(q, q, q, bad)


def test_negative_window_is_refused():
    q = torch.randn(6, 2, 4)
    g = torch.zeros(6, 1, dtype=torch.long)
    for fn in (focus_dense_attention, focus_blocks_attention, focus_blocks_reference):
        for w, err in ((-1, ValueError), (1.5, TypeError), (None, TypeError)):
            with pytest.raises(err, match=f"^{fn.__name__}: 'window' must be an int >= 0"):
                fn(q, q, q, g, w)
    with pytest.raises(ValueError, match="^focus_soft_attention: 'window' must be an int >= 0"):
        focus_soft_attention(q, q, q, torch.full((6, K), 1 / K), -1)


@pytest.mark.parametrize("fn", [focus_dense_attention, focus_blocks_attention,
                                focus_blocks_reference])
def test_group_ids_outside_the_range_are_refused(fn):
    # with num_groups=3, id 3 in sequence 0 would have landed in sequence 1's bucket 0
    q = torch.randn(6, 2, 4)
    batch = torch.tensor([0, 0, 0, 1, 1, 1])
    g = torch.tensor([[0], [3], [1], [0], [1], [2]])
    name = fn.__name__
    with pytest.raises(ValueError, match=rf"^{name}: 'groups' must be group ids in "
                       r"\[0, num_groups=3\), got id 3$"):
        fn(q, q, q, g, 0, batch, True, 3)
    with pytest.raises(ValueError, match=f"^{name}: 'groups' must be non-negative"):
        fn(q, q, q, -g, 0, batch, True, 3)
    with pytest.raises(TypeError, match=f"^{name}: 'groups' must be a long tensor"):
        fn(q, q, q, g.float(), 0, batch, True, 4)
    with pytest.raises(ValueError, match=rf"^{name}: 'groups' must be of 6 rows"):
        fn(q, q, q, g[:5], 0, batch, True, 4)
    with pytest.raises(ValueError, match=f"^{name}: 'num_groups' must be an int >= 1"):
        fn(q, q, q, g, 0, batch, True, 0)
    # the same ids are fine with num_groups=4, and equal the dense oracle
    ref = focus_dense_attention(q, q, q, g, 0, batch, True, 4)
    torch.testing.assert_close(fn(q, q, q, g, 0, batch, True, 4), ref)


@pytest.mark.parametrize("name", ["gate_scale", "gate_bias", "tau"])
def test_non_finite_or_non_numeric_scalars_are_refused(name):
    for value, err in ((float("nan"), ValueError), (float("inf"), ValueError),
                       (-float("inf"), ValueError), ("0.5", TypeError), (None, TypeError),
                       (True, TypeError), (1 + 2j, TypeError)):
        with pytest.raises(err, match=f"'{name}'"):
            FocusAttention(8, 2, num_groups=K, **{name: value})
    if name == "tau":
        for value, err in ((0.0, ValueError), (-0.1, ValueError), ("0.1", TypeError),
                           (float("nan"), ValueError)):
            with pytest.raises(err, match="'tau'"):
                FocusRouter(8, num_groups=K, tau=value)
    else:
        q = torch.randn(6, 2, 4)
        soft = torch.full((6, K), 1 / K)
        with pytest.raises(ValueError, match=f"^focus_soft_attention: '{name}' must be a "
                           "finite number, got nan"):
            focus_soft_attention(q, q, q, soft, 1, **{name: float("nan")})
        with pytest.raises(TypeError, match=f"^focus_soft_attention: '{name}' must be a real "
                           "number"):
            focus_soft_attention(q, q, q, soft, 1, **{name: "1"})
    # a 0-d tensor or an int is a number
    m = FocusAttention(8, 2, num_groups=K, **{name: torch.tensor(0.25)})
    obj = m.router if name == "tau" else m
    assert getattr(obj, name) == 0.25 and isinstance(getattr(obj, name), float)


def test_num_groups_zero_names_num_groups():
    for make in (lambda: FocusAttention(8, 2, num_groups=0),
                 lambda: FocusAttention(8, 2, num_groups=0, top_k=1),
                 lambda: FocusRouter(8, num_groups=0)):
        with pytest.raises(ValueError, match="'num_groups' must be an int >= 1") as info:
            make()
        assert "top_k" not in str(info.value)


# ---- bounded memory, no silent NaN, dtype errors (issue 28 section 6) -------------------


def test_edges_backend_at_a_huge_window_equals_dense():
    # the 'edges' back-end's window band is bounded by the sequence length, like 'blocks'
    # and 'dense': window=10**9 on a short sequence works and equals the whole sequence
    torch.manual_seed(5)
    x = torch.randn(2, 20, 16)
    with torch.no_grad():
        m = FocusAttention(16, 2, num_groups=K, top_k=1, window=10**9, backend="edges").eval()
        got = m(x)
        m.window = 19
        torch.testing.assert_close(got, m(x))
        m.backend = "dense"
        torch.testing.assert_close(got, m(x), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("gate", ["additive", "multiplicative", "straight_through"])
def test_non_finite_soft_memberships_are_refused(gate):
    torch.manual_seed(6)
    q = torch.randn(6, 2, 4)
    soft = torch.softmax(torch.randn(6, K), -1)
    groups = soft.argmax(-1, keepdim=True)
    out = focus_soft_attention(q, q, q, soft, 1, gate=gate, groups=groups)
    assert bool(torch.isfinite(out).all())
    for bad in (float("nan"), float("inf")):
        s = soft.clone()
        s[3, 1] = bad
        with pytest.raises(ValueError, match=r"focus_soft_attention: 'soft' must be finite, "
                                             r"got 1 NaN or infinite of 24"):
            focus_soft_attention(q, q, q, s, 1, gate=gate, groups=groups)


def test_other_dtype_than_parameters_is_a_type_error():
    m = FocusAttention(16, 2, num_groups=K, top_k=1, window=2)
    x = torch.randn(2, 10, 16, dtype=torch.float64)
    for xx in (x, x.view(20, 16)):
        with pytest.raises(TypeError, match=r"FocusAttention: 'x' must be of the dtype of the "
                                            r"layer's parameters \(torch.float32\), got "
                                            r"torch.float64.*layer.to\(torch.float64\)"):
            m(xx)
    m.gate = None  # the full-attention path too
    with pytest.raises(TypeError, match=r"'x'.*torch.bfloat16"):
        m(x.bfloat16())
    # the fixes the message names agree
    m.gate = "additive"
    m.eval()
    with torch.no_grad():
        ref = m(x.float())
        torch.testing.assert_close(m.double()(x).float(), ref, atol=1e-5, rtol=1e-5)
