import math

import pytest
import torch

import quest_geometric.nn.focus.blocks as blocks_module
from quest_geometric.nn.focus.config import BlocksConfig, blocks_config
from quest_geometric.nn.focus import (
    FocusAttention,
    focus_blocks_attention,
    focus_blocks_reference,
    focus_dense_attention,
    focus_soft_attention,
)


def reference_attention(q, k, v, mask):
    """float64 softmax attention with an [N, N] (query, key) mask; q, k, v [N, H, D]."""
    q, k, v = q.double(), k.double(), v.double()
    s = torch.einsum("ihd,jhd->hij", q, k) / math.sqrt(q.size(-1))
    s = s.masked_fill(~mask, float("-inf"))
    return torch.einsum("hij,jhd->ihd", torch.softmax(s, -1), v)


def random_case(seed, top_k, num_groups=6):
    torch.manual_seed(seed)
    # sequences of 1, 4 (shorter than the window below) and 31 tokens; groups 4 and 5 empty
    batch = torch.tensor([0] * 1 + [1] * 4 + [2] * 31)
    n = batch.numel()
    groups = torch.stack([torch.randperm(4)[:top_k] for _ in range(n)])
    if top_k:
        groups[7, :] = torch.arange(top_k) + (4 - top_k)  # some rarely-used sets
    q, k, v = (torch.randn(n, 2, 8, requires_grad=True) for _ in range(3))
    return q, k, v, groups, batch, num_groups


BACKENDS = {
    "dense": lambda q, k, v, g, w, b, c, K, s=0: focus_dense_attention(
        q, k, v, g, w, b, c, K, num_sinks=s),
    "blocks_fused": lambda q, k, v, g, w, b, c, K, s=0: focus_blocks_attention(
        q, k, v, g, w, b, c, K, fused=True, num_sinks=s),
    "blocks_reference": lambda q, k, v, g, w, b, c, K, s=0: focus_blocks_reference(
        q, k, v, g, w, b, c, K, num_sinks=s),
}


def edges_backend(q, k, v, g, w, b, c, K, s=0):
    from quest_geometric.nn.focus.edge_index import focus_edge_index
    from quest_geometric.nn.focus.edges import FocusEdgeAttention
    return FocusEdgeAttention()(q, k, v, focus_edge_index(g, w, b, c, num_sinks=s))


BACKENDS["edges"] = edges_backend


def blocks_padded(q, k, v, g, w, b, c, K, s=0):
    """The fused path forced to batch all causal top_k = 1 buckets into one padded call."""
    return focus_blocks_attention(q, k, v, g, w, b, c, K, fused=True, num_sinks=s,
                                  config=BlocksConfig(pad_ratio=math.inf))


BACKENDS["blocks_fused_padded"] = blocks_padded


def blocks_sink_pairs(q, k, v, g, w, b, c, K, s=0):
    """The fused path with part C as explicit pairs (its form above
    ``sink_dense_max_keys`` sink keys) instead of dense products over the sink keys."""
    with blocks_config(sink_dense_max_keys=-1):
        return focus_blocks_attention(q, k, v, g, w, b, c, K, fused=True, num_sinks=s)


BACKENDS["blocks_fused_sink_pairs"] = blocks_sink_pairs


@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("top_k", [0, 1, 2, 4])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("num_sinks", [0, 2, 40])
def test_backends_match_definition_values_and_gradients(backend, top_k, causal, num_sinks,
                                                         focus_mask_reference):
    # top_k = 0: no group (window-only routing); 40 sinks: more than any sequence's length
    q, k, v, groups, batch, K = random_case(top_k, top_k)
    window = 5
    ref = reference_attention(q, k, v, focus_mask_reference(groups, window, batch, causal,
                                                            num_sinks))
    out = BACKENDS[backend](q, k, v, groups, window, batch, causal, K, num_sinks)
    torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-5)
    go = torch.randn_like(out)
    g_out = torch.autograd.grad(out, (q, k, v), go)
    g_ref = torch.autograd.grad(ref, (q, k, v), go.double())
    for a, b in zip(g_out, g_ref):
        torch.testing.assert_close(a.double(), b.double(), atol=1e-5, rtol=1e-5)


def _assert_same_values_and_gradients(out, ref, inputs, tol=1e-10):
    """``out`` equals ``ref`` (float64), and so do their gradients w.r.t. ``inputs`` for one
    random output gradient."""
    torch.testing.assert_close(out, ref, atol=tol, rtol=tol)
    go = torch.randn_like(out)
    for a, b in zip(torch.autograd.grad(out, inputs, go), torch.autograd.grad(ref, inputs, go)):
        torch.testing.assert_close(a, b, atol=tol, rtol=tol)


@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("top_k", [1, 2])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("num_sinks", [0, 5])
@pytest.mark.slow
def test_fused_blocks_long_runs_and_band_blocks(top_k, causal, padded, num_sinks,
                                               focus_mask_reference):
    # long enough for the band's head, strided body and tail; a window that is not a multiple
    # of the band block; runs of one group longer than the window (queries whose band keeps
    # no key at all); two sequences meeting inside a band block
    torch.manual_seed(30 + top_k)
    batch = torch.tensor([0] * 93 + [1] * 64)
    n, window, K = batch.numel(), 21, 4
    first = (torch.arange(n) // 30) % 3
    first[100:110] = torch.randint(0, K, (10,))
    groups = first.view(-1, 1) if top_k == 1 else torch.stack([first, (first + 1) % K], 1)
    q, k, v = (torch.randn(n, 2, 8, dtype=torch.float64, requires_grad=True) for _ in range(3))
    ref = reference_attention(q, k, v, focus_mask_reference(groups, window, batch, causal,
                                                            num_sinks))
    out = (blocks_padded if padded else BACKENDS["blocks_fused"])(q, k, v, groups, window,
                                                                  batch, causal, K, num_sinks)
    _assert_same_values_and_gradients(out, ref, (q, k, v))
    if num_sinks and not padded:  # part C as explicit pairs, the form for many sequences
        out = blocks_sink_pairs(q, k, v, groups, window, batch, causal, K, num_sinks)
        ref = reference_attention(q, k, v, focus_mask_reference(groups, window, batch, causal,
                                                                num_sinks))
        _assert_same_values_and_gradients(out, ref, (q, k, v))


@pytest.mark.parametrize("padded", [False, True])
def test_fused_blocks_half_precision_runs(padded, focus_mask_reference):
    # bfloat16 inputs: the kernels return float32 log-sum-exps; the merge must cope
    torch.manual_seed(40)
    n, window, K = 90, 7, 3
    groups = torch.randint(0, K, (n, 1))
    q, k, v = (torch.randn(n, 2, 8, dtype=torch.float64) for _ in range(3))
    ref = reference_attention(q, k, v, focus_mask_reference(groups, window, torch.zeros(n), True))
    fn = blocks_padded if padded else BACKENDS["blocks_fused"]
    out = fn(q.bfloat16(), k.bfloat16(), v.bfloat16(), groups, window, None, True, K)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.double(), ref, atol=3e-2, rtol=3e-2)


@pytest.mark.parametrize("backend", ["blocks", "edges", "dense"])
@pytest.mark.parametrize("top_k", [1, 2])
@pytest.mark.parametrize("num_sinks", [0, 2])
def test_module_backends_agree_on_pyg_batch(backend, top_k, num_sinks, focus_mask_reference):
    torch.manual_seed(10)
    batch = torch.tensor([0] * 3 + [1] * 40 + [2] * 17)
    x = torch.randn(batch.numel(), 16)
    m = FocusAttention(16, 2, num_groups=4, top_k=top_k, window=4, backend="dense",
                       num_sinks=num_sinks).eval()
    ref = m(x, batch)
    # the dense back-end is the definition's mask (sinks included)
    groups = m.router(x, batch).groups
    q, k, v = (p(x).view(-1, 2, 8) for p in (m.q_proj, m.k_proj, m.v_proj))
    mask = focus_mask_reference(groups, 4, batch, True, num_sinks)
    torch.testing.assert_close(ref, m.out_proj(reference_attention(q, k, v, mask).float()
                                               .reshape(-1, 16)), atol=1e-5, rtol=1e-5)
    gref = torch.autograd.grad(ref.square().sum(), list(m.parameters()), allow_unused=True)
    m.backend = backend
    out = m(x, batch)
    gout = torch.autograd.grad(out.square().sum(), list(m.parameters()), allow_unused=True)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    for a, b in zip(gout, gref):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    # a PyG batch equals running each sequence alone
    parts = [m(x[batch == i]) for i in range(3)]
    torch.testing.assert_close(out, torch.cat(parts), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", ["blocks", "edges", "dense"])
def test_top_k_equal_K_is_full_causal_attention(backend):
    torch.manual_seed(11)
    m = FocusAttention(16, 4, num_groups=3, top_k=3, window=0, backend=backend).eval()
    x = torch.randn(2, 25, 16)
    full = FocusAttention(16, 4, num_groups=3, gate=None)
    full.load_state_dict(m.state_dict())
    torch.testing.assert_close(m(x), full(x), atol=1e-5, rtol=1e-5)
    # and the plain formula
    q, k, v = (p(x).view(2, 25, 4, 4) for p in (m.q_proj, m.k_proj, m.v_proj))
    mask = torch.ones(25, 25, dtype=torch.bool).tril()
    o = torch.stack([reference_attention(q[b], k[b], v[b], mask) for b in range(2)])
    torch.testing.assert_close(m(x), m.out_proj(o.float().reshape(2, 25, 16)),
                               atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", ["blocks", "edges", "dense"])
@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("gate", ["additive", "multiplicative"])
def test_future_tokens_never_change_past_outputs(backend, training, gate):
    torch.manual_seed(12)
    m = FocusAttention(16, 2, num_groups=4, top_k=1, window=3, backend=backend, gate=gate)
    m.train(training)
    x = torch.randn(1, 40, 16)
    x2 = x.clone()
    x2[:, 25:] = torch.randn(1, 15, 16) * 3
    o1, r1 = m(x, return_router=True)
    o2, r2 = m(x2, return_router=True)
    torch.testing.assert_close(o1[:, :25], o2[:, :25], atol=1e-6, rtol=1e-6)
    assert not torch.allclose(o1[:, 25:], o2[:, 25:])


@pytest.mark.parametrize("num_sinks", [0, 2])
def test_soft_gates_match_formulas(num_sinks):
    torch.manual_seed(13)
    n, w, lam, b = 9, 2, 3.0, 0.4
    q, k, v = (torch.randn(n, 1, 4, dtype=torch.float64) for _ in range(3))
    soft = torch.softmax(torch.randn(n, 3, dtype=torch.float64), -1)
    s = (q[:, 0] @ k[:, 0].t()) / 2.0
    g = soft @ soft.t()
    i = torch.arange(n)
    near = ((i[:, None] - i[None, :]).abs() <= w) | (torch.minimum(i[:, None], i[None, :])
                                                      < num_sinks)  # sinks are never gated
    causal = i[None, :] <= i[:, None]
    for gate, logits in (
        ("multiplicative", s * torch.where(near, torch.ones_like(g), torch.sigmoid(lam * g))),
        ("additive", s + torch.where(near, torch.zeros_like(g),
                                     torch.log(torch.sigmoid(lam * (g - b))))),
    ):
        ref = torch.softmax(logits.masked_fill(~causal, float("-inf")), -1) @ v[:, 0]
        out = focus_soft_attention(q, k, v, soft, w, None, True, gate, lam, b,
                                   num_sinks=num_sinks)
        torch.testing.assert_close(out[:, 0], ref)


@pytest.mark.parametrize("top_k", [1, 2, 3])
def test_additive_gate_tends_to_hard_mask(top_k):
    q, k, v, groups, batch, K = random_case(20 + top_k, top_k)
    onehot = torch.zeros(groups.size(0), K).scatter_(1, groups, 1.0 / top_k)
    hard = focus_dense_attention(q, k, v, groups, 3, batch, True, K)
    # overlap of two sets is >= 1/top_k^2 when they intersect, 0 otherwise: b = 1/(2 top_k^2)
    soft = focus_soft_attention(q, k, v, onehot, 3, batch, True, "additive",
                                gate_scale=1e4, gate_bias=0.5 / top_k ** 2)
    torch.testing.assert_close(soft, hard, atol=1e-5, rtol=1e-5)
    if 2 * top_k <= 4:  # some sets of top_k of the 4 used groups are disjoint
        mult = focus_soft_attention(q, k, v, onehot, 3, batch, True, "multiplicative",
                                    gate_scale=1e4)
        assert not torch.allclose(mult, hard, atol=1e-3)  # the paper's gate does not prune


def test_training_mode_gradients_reach_router():
    torch.manual_seed(14)
    m = FocusAttention(16, 2, num_groups=4, window=2).train()
    m(torch.randn(2, 12, 16)).sum().backward()
    assert m.router.lin.weight.grad is not None
    assert m.router.lin.weight.grad.abs().sum() > 0 and m.router.centroids.grad.abs().sum() > 0


def test_disabled_gates_and_from_projections():
    torch.manual_seed(15)
    q, k, v, o = (torch.nn.Linear(16, 16) for _ in range(4))
    x = torch.randn(2, 10, 16)
    # the original model: plain causal multi-head attention with these projections
    qh, kh, vh = (p(x).view(2, 10, 4, 4).transpose(1, 2) for p in (q, k, v))
    orig = o(torch.nn.functional.scaled_dot_product_attention(qh, kh, vh, is_causal=True)
             .transpose(1, 2).reshape(2, 10, 16))
    m = FocusAttention.from_projections(q, k, v, o, num_heads=4, num_groups=4, top_k=2,
                                        gate=None)
    assert m.q_proj is q and m.out_proj is o
    for mode in (True, False):
        m.train(mode)
        assert torch.equal(m(x), orig)
    m2 = FocusAttention.from_projections(q, k, v, o, num_heads=4, num_groups=4, window=1)
    m2.enabled = False
    assert torch.equal(m2(x), orig)
    m2.enabled = True
    assert not torch.allclose(m2.eval()(x), orig)
    fused = FocusAttention.from_projections(qkv=lambda t: (q(t), k(t), v(t)), out_proj=o,
                                            num_heads=4, embed_dim=16, num_groups=4, window=1)
    fused.router.load_state_dict(m2.router.state_dict())
    torch.testing.assert_close(fused.eval()(x), m2(x))


def test_batched_3d_equals_flat_with_batch():
    torch.manual_seed(16)
    m = FocusAttention(8, 2, num_groups=3, window=2).eval()
    x = torch.randn(3, 7, 8)
    flat = m(x.reshape(21, 8), torch.arange(3).repeat_interleave(7))
    torch.testing.assert_close(m(x).reshape(21, 8), flat)


def test_repr_and_errors():
    m = FocusAttention(32, 4)
    assert str(m) == ("FocusAttention(32, num_heads=4, num_groups=8, top_k=1, window=128, "
                      "backend='auto', gate='additive', gate_bias=0.5)")
    assert str(FocusAttention(32, 4, gate_bias=0.125)).endswith("gate_bias=0.125)")
    with pytest.raises(ValueError, match="top_k"):
        FocusAttention(32, 4, num_groups=4, top_k=5)
    with pytest.raises(ValueError, match="window"):
        FocusAttention(32, 4, window=-1)
    with pytest.raises(ValueError, match="num_sinks"):
        FocusAttention(32, 4, num_sinks=-1)
    with pytest.raises(TypeError, match="num_sinks"):
        m.num_sinks = True
    m.num_sinks = 4
    assert "num_sinks=4" in repr(m)
    m.num_sinks = 0
    with pytest.raises(ValueError, match="divisible"):
        FocusAttention(30, 4)
    with pytest.raises(ValueError, match="backend"):
        FocusAttention(32, 4, backend="flash")
    with pytest.raises(ValueError, match="sorted"):
        m(torch.randn(4, 32), torch.tensor([0, 1, 1, 0]))
    bad = FocusAttention.from_projections(torch.nn.Linear(32, 32), torch.nn.Linear(32, 16),
                                          torch.nn.Linear(32, 32), num_heads=4)
    with pytest.raises(ValueError, match="projected k"):
        bad(torch.randn(5, 32))
    x = torch.randn(5, 32)
    x[1, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        m(x)


@pytest.mark.parametrize("top_k", [1, 2, 4])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.slow
def test_module_flex_backend_matches_dense_in_inference(top_k, causal):
    # FlexAttention's eager CPU path: forward only (no CPU backward in torch)
    torch.manual_seed(13)
    batch = torch.tensor([0] * 5 + [1] * 70 + [2] * 33)
    x = torch.randn(batch.numel(), 16)
    m = FocusAttention(16, 2, num_groups=4, top_k=top_k, window=6, backend="dense",
                       causal=causal).eval()
    with torch.no_grad():
        ref = m(x, batch)
        m.backend = "flex"
        out = m(x, batch)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    assert "backend='flex'" in repr(m)
    # on CPU a gradient through the flex kernel is refused with a pointer to 'blocks'
    with pytest.raises(ValueError, match="backend='blocks'"):
        m(x, batch)


def test_blocks_function_keeps_cpu_kernels_and_reference_when_not_fused():
    # the CUDA dispatch to FlexAttention must not change the CPU choices
    torch.manual_seed(14)
    q, k, v = (torch.randn(50, 2, 8, dtype=torch.float64) for _ in range(3))
    groups = torch.randint(0, 3, (50, 1))
    ref = focus_dense_attention(q, k, v, groups, 4, num_groups=3)
    for fused in (None, True, False):
        out = focus_blocks_attention(q, k, v, groups, 4, num_groups=3, fused=fused)
        torch.testing.assert_close(out, ref, atol=1e-10, rtol=1e-10)


def test_edge_attention_sorted_fast_path_equals_unsorted_and_scatter_reference():
    # sorted by target -> EdgeIndex (segment softmax/sum); a permutation -> plain scatter path
    from torch_geometric.utils import scatter
    from torch_geometric.utils import softmax as pyg_softmax

    from quest_geometric.nn.focus.edge_index import focus_edge_index
    from quest_geometric.nn.focus.edges import FocusEdgeAttention

    torch.manual_seed(15)
    n = 40
    q, k, v = (torch.randn(n, 2, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    groups = torch.randint(0, 3, (n, 1))
    ei = focus_edge_index(groups, 3)
    assert bool((ei[1, 1:] >= ei[1, :-1]).all())
    layer = FocusEdgeAttention()
    a = layer(q, k, v, ei)
    b = layer(q, k, v, ei[:, torch.randperm(ei.size(1))])
    row, col = ei
    alpha = pyg_softmax((q[col] * k[row]).sum(-1) / 2.0, col, num_nodes=n)
    ref = scatter(alpha.unsqueeze(-1) * v[row], col, 0, n, reduce="sum")
    torch.testing.assert_close(a, ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(b, ref, rtol=1e-12, atol=1e-12)
    ga = torch.autograd.grad(a.square().sum(), (q, k, v))
    gr = torch.autograd.grad(ref.square().sum(), (q, k, v))
    for x, y in zip(ga, gr):
        torch.testing.assert_close(x, y, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("num_groups", [2, 9, 10, 16, 17, 32, 33, 63, 64])
@pytest.mark.parametrize("causal", [True, False])
def test_top_k_bucket_masks_from_group_bits_equal_smallest_shared_group(num_groups, causal):
    """The fused path's top_k > 1 bucket masks (one AND of the members' group bits below the
    bucket's group, in the narrowest integer type) against the plain definition, the smallest
    shared group equal to the bucket's, at every integer-type boundary; above MAX_SET_GROUPS
    (63) groups the plan keeps the comparison path. Repeated ids in a token's set count once."""
    from quest_geometric.nn.focus.edge_index import smallest_shared_group

    torch.manual_seed(num_groups)
    n, kk = 60, 3
    # ids biased to the top of the range, so that the high bits (62 for K = 63) are used
    groups = torch.randint(max(0, num_groups - 6), num_groups, (n, kk))
    groups[::7] = torch.randint(0, num_groups, (len(range(0, n, 7)), kk))
    groups[5] = groups[5, 0]  # one token whose set is {g}, listed three times
    seq = torch.zeros(n, dtype=torch.long)
    plan = blocks_module._BlocksPlan(groups, seq, 1, num_groups, 4, causal, torch.float64)
    assert (plan.bits is None) == (num_groups > 63)
    seen = 0
    for st, c, g in plan.spans:
        idx = plan.order[st:st + c]
        gi = groups[idx]
        ssg = smallest_shared_group(gi.repeat_interleave(c, 0), gi.repeat(c, 1),
                                    num_groups).view(c, c)
        want = ssg == g
        if causal:
            want &= torch.ones(c, c, dtype=torch.bool).tril()
        for s, e, lk, bias, row_any in plan.bucket_chunks(idx, g, torch.float64):
            got = bias.view(e - s, lk) == 0
            assert torch.equal(got, want[s:e, :lk])
            assert torch.equal(row_any, want[s:e, :lk].any(-1))
            assert torch.isneginf(bias.view(e - s, lk)[~got]).all()
            seen += e - s
    assert seen == sum(c for _, c, _ in plan.spans)


@pytest.mark.parametrize("num_groups", [12, 40, 70])
def test_fused_blocks_many_groups_match_definition(num_groups, focus_mask_reference):
    """End to end at K above uint8's bits (int16, int64) and above 64 (comparison path)."""
    torch.manual_seed(num_groups)
    batch = torch.tensor([0] * 40 + [1] * 25)
    n, window = batch.numel(), 3
    groups = torch.stack([torch.randperm(num_groups)[:3] for _ in range(n)])
    groups[::2, 0] = num_groups - 1  # a shared top group keeps the buckets populated
    groups[1::2, 1] = num_groups - 2
    q, k, v = (torch.randn(n, 2, 8, dtype=torch.float64, requires_grad=True) for _ in range(3))
    ref = reference_attention(q, k, v, focus_mask_reference(groups, window, batch, True, 2))
    out = focus_blocks_attention(q, k, v, groups, window, batch, True, num_groups, fused=True,
                                 num_sinks=2)
    _assert_same_values_and_gradients(out, ref, (q, k, v))


@pytest.mark.parametrize("block", [1, 7])
@pytest.mark.parametrize("causal", [True, False])
def test_fused_blocks_top_k_buckets_in_query_blocks(block, causal, monkeypatch,
                                                   focus_mask_reference, tuning):
    """Causal top_k > 1 buckets run in query blocks of BUCKET_QUERY_BLOCK over keys [0, e)
    (forward and backward); shrunk here so that every bucket spans several blocks, one of
    them ragged."""
    tuning.blocks(bucket_query_block=block)
    torch.manual_seed(block)
    batch = torch.tensor([0] * 50 + [1] * 23)
    n, window, K = batch.numel(), 4, 3
    groups = torch.stack([torch.randperm(K)[:2] for _ in range(n)])
    q, k, v = (torch.randn(n, 2, 8, dtype=torch.float64, requires_grad=True) for _ in range(3))
    ref = reference_attention(q, k, v, focus_mask_reference(groups, window, batch, causal, 3))
    out = focus_blocks_attention(q, k, v, groups, window, batch, causal, K, fused=True,
                                 num_sinks=3)
    _assert_same_values_and_gradients(out, ref, (q, k, v))
    plan = blocks_module._BlocksPlan(groups, torch.zeros(n, dtype=torch.long), 1, K, window,
                                     causal, torch.float64)
    st, c, g = plan.spans[0]
    chunks = [(s, e, lk) for s, e, lk, _, _ in plan.bucket_chunks(plan.order[st:st + c], g,
                                                                  torch.float64)]
    step = block if causal else c
    assert chunks == [(s, min(c, s + step), min(c, s + step) if causal else c)
                      for s in range(0, c, step)]


@pytest.mark.parametrize("causal", [True, False])
def test_band_masks_from_group_bits_equal_the_comparisons(causal):
    # top_k > 1: the band excludes the pairs whose group sets meet, found from the bit sets
    # (one AND per pair); with no code (K above MAX_SET_GROUPS) from the k^2
    # comparisons. Repeated ids in a set, two sequences inside one band block.
    from quest_geometric.nn.focus import blocks
    from quest_geometric.nn.focus.group_sets import MAX_SET_GROUPS

    torch.manual_seed(7)
    n, K, window = 150, 5, 9
    groups = torch.randint(0, K, (n, 3))
    groups[::7, 1] = groups[::7, 0]  # repeated ids
    seq = (torch.arange(n) >= 80).long()

    def plan(num_groups):
        return blocks._BlocksPlan(groups, seq, 2, num_groups, window, causal, torch.float32)

    with_bits = plan(K)
    assert with_bits.bits is not None
    without = plan(MAX_SET_GROUPS + 1)
    assert without.bits is None
    assert len(with_bits.segments) == len(without.segments) >= 3
    for a, b in zip(with_bits.segments, without.segments):
        assert torch.equal(a.bias, b.bias) and torch.equal(a.row_any, b.row_any)
        assert bool(torch.isinf(a.bias).any()) and bool((a.bias == 0).any())


@pytest.mark.parametrize("budget_rows", [0, 6, 10 ** 6])
@pytest.mark.parametrize("top_k", [1, 2])
@pytest.mark.parametrize("causal", [True, False])
def test_fused_blocks_gather_buckets_in_batches(budget_rows, top_k, causal, monkeypatch,
                                                focus_mask_reference, tuning):
    """The buckets are gathered in batches of consecutive buckets of at most
    ``_GATHER_BUDGET`` elements (a larger bucket alone): shrunk here so that some batches hold
    one bucket, some several, some a bucket larger than the budget; forward and backward
    equal the definition, and the batches cover every bucket once, in order."""
    h, d = 2, 8
    tuning.blocks(gather_budget=max(1, budget_rows * h * d))
    torch.manual_seed(budget_rows + top_k)
    batch = torch.tensor([0] * 3 + [1] * 29 + [2] * 2 + [3] * 41)
    n, window, K = batch.numel(), 4, 5
    groups = torch.stack([torch.randperm(K)[:top_k] for _ in range(n)])
    q, k, v = (torch.randn(n, h, d, dtype=torch.float64, requires_grad=True) for _ in range(3))
    ref = reference_attention(q, k, v, focus_mask_reference(groups, window, batch, causal, 2))
    out = focus_blocks_attention(q, k, v, groups, window, batch, causal, K, fused=True,
                                 num_sinks=2)
    _assert_same_values_and_gradients(out, ref, (q, k, v))
    seq = batch
    plan = blocks_module._BlocksPlan(groups, seq, 4, K, window, causal, torch.float64)
    batches = blocks_module._gather_batches(plan.spans, h * d, plan.config.gather_budget)
    assert [s for _, _, b in batches for s in b] == plan.spans
    for b0, b1, spans in batches:
        assert b0 == spans[0][0] and b1 == spans[-1][0] + spans[-1][1]
        assert all(st == prev[0] + prev[1] for prev, (st, _, _) in zip(spans, spans[1:]))
        assert len(spans) == 1 or (b1 - b0) <= budget_rows
    sizes = [len(b) for _, _, b in batches]
    if budget_rows == 0:
        assert sizes == [1] * len(plan.spans)
    elif budget_rows == 6:  # batches of one and of several buckets, and larger buckets alone
        assert max(sizes) > 1 and any(b1 - b0 > 6 for b0, b1, _ in batches)
    else:
        assert sizes == [len(plan.spans)]
