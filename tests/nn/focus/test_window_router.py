"""Window-only routing: the sliding window plus attention sinks as a Focus pattern, in every
back-end, cached decoding, compose_focus and the router files."""
import math

import pytest
import torch

from quest_geometric.nn.focus import (
    FocusAttention,
    FocusDecodeState,
    WindowOnlyRouter,
    focus_blocks_attention,
    focus_blocks_reference,
    focus_dense_attention,
    focus_edge_index,
    focus_pair_share,
    pattern_share,
    route_step,
)
from quest_geometric.nn.focus.config import current_blocks_config
from quest_geometric.nn.focus.edges import FocusEdgeAttention
from quest_geometric.nn.focus.flex import FLEX_AVAILABLE, focus_flex_attention


def band_mask(t, window, num_sinks, causal):
    """The sliding window plus sinks from torch.ones: a band of width w around the diagonal
    (below it if causal) or'ed with the first num_sinks columns (and rows if non-causal)."""
    ones = torch.ones(t, t, dtype=torch.bool)
    band = ones.tril(window) & ones.triu(-window)
    sink = torch.zeros(t, t, dtype=torch.bool)
    sink[:, :num_sinks] = True
    if not causal:
        sink[:num_sinks, :] = True
    mask = band | sink
    return mask.tril() if causal else mask


def attention(q, k, v, mask):
    s = torch.einsum("ihd,jhd->hij", q.double(), k.double()) / math.sqrt(q.size(-1))
    return torch.einsum("hij,jhd->ihd", torch.softmax(s.masked_fill(~mask, -math.inf), -1),
                        v.double())


BACKENDS = {
    "dense": lambda q, k, v, g, w, c, s: focus_dense_attention(q, k, v, g, w, None, c, 1,
                                                               num_sinks=s),
    "blocks_fused": lambda q, k, v, g, w, c, s: focus_blocks_attention(
        q, k, v, g, w, None, c, 1, fused=True, num_sinks=s),
    "blocks_reference": lambda q, k, v, g, w, c, s: focus_blocks_reference(
        q, k, v, g, w, None, c, 1, num_sinks=s),
    "edges": lambda q, k, v, g, w, c, s: FocusEdgeAttention()(
        q, k, v, focus_edge_index(g, w, None, c, num_sinks=s)),
}
if FLEX_AVAILABLE:
    BACKENDS["flex"] = lambda q, k, v, g, w, c, s: focus_flex_attention(
        q.detach(), k.detach(), v.detach(), g, w, None, c, 1, block_size=16, num_sinks=s)


@pytest.mark.parametrize("backend", [pytest.param(b, marks=pytest.mark.slow) if b == "flex"
                                     else b for b in BACKENDS])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("window, num_sinks", [(0, 0), (3, 0), (3, 2), (0, 4), (40, 1),
                                               (2, 50)])
def test_backends_keep_exactly_the_window_and_the_sinks(backend, causal, window, num_sinks,
                                                        focus_mask_reference):
    t = 37
    torch.manual_seed(window + num_sinks)
    groups = WindowOnlyRouter(causal)(torch.randn(t, 8)).groups
    assert groups.shape == (t, 0) and groups.dtype == torch.long
    mask = band_mask(t, window, num_sinks, causal)
    # the band construction is the reference mask of the empty group sets
    assert torch.equal(mask, focus_mask_reference(groups, window, None, causal, num_sinks))
    q, k, v = (torch.randn(t, 2, 8, dtype=torch.float64, requires_grad=True)
               for _ in range(3))
    ref = attention(q, k, v, mask)
    out = BACKENDS[backend](q, k, v, groups, window, causal, num_sinks)
    torch.testing.assert_close(out.double(), ref, atol=1e-6, rtol=1e-6)
    if backend != "flex":
        go = torch.randn_like(ref)
        for a, b in zip(torch.autograd.grad(out, (q, k, v), go.to(out.dtype)),
                        torch.autograd.grad(ref, (q, k, v), go)):
            torch.testing.assert_close(a.double(), b, atol=1e-6, rtol=1e-6)
    if backend == "edges":  # the edge set is exactly the band and the sinks
        ei = focus_edge_index(groups, window, None, causal, num_sinks=num_sinks)
        assert torch.equal(ei[1] * t + ei[0], mask.flatten().nonzero().view(-1))
    assert focus_pair_share(groups, window, None, causal, num_sinks) == pytest.approx(
        pattern_share(t, window, num_sinks, causal), abs=1e-15)


def test_router_protocol_and_top_k():
    r = WindowOnlyRouter()
    assert r.num_groups == 1 and r.top_k == 0 and r.causal and not list(r.parameters())
    out = r(torch.randn(2, 5, 4, dtype=torch.float64))
    assert out.soft.shape == (2, 5, 1) and out.soft.dtype == torch.float64
    assert torch.equal(out.soft, torch.ones(2, 5, 1, dtype=torch.float64))
    assert out.groups.shape == (2, 5, 0) and out.log_soft.shape == (2, 5, 1)
    r.top_k = 0
    with pytest.raises(ValueError, match="WindowOnlyRouter: 'top_k' must be 0"):
        r.top_k = 1
    with pytest.raises(TypeError, match="top_k"):
        r.top_k = 0.0
    with pytest.raises(ValueError, match="batch"):
        r(torch.randn(2, 5, 4), torch.zeros(10, dtype=torch.long))
    with pytest.raises(ValueError, match="sorted"):
        r(torch.randn(3, 4), torch.tensor([1, 0, 0]))
    layer = FocusAttention(8, 2, window=2, router=r)
    with pytest.raises(ValueError, match="top_k"):
        layer.top_k = 2


@pytest.mark.parametrize("training", [False, True])
def test_focus_attention_runs_the_window_and_sinks_in_both_modes(training):
    torch.manual_seed(0)
    t, w, s = 30, 3, 2
    layer = FocusAttention(16, 2, window=w, num_sinks=s, router=WindowOnlyRouter(),
                           backend="blocks").train(training)
    x = torch.randn(1, t, 16)
    q, k, v = (p(x[0]).view(t, 2, 8) for p in (layer.q_proj, layer.k_proj, layer.v_proj))
    ref = layer.out_proj(attention(q, k, v, band_mask(t, w, s, True)).float().reshape(t, 16))
    torch.testing.assert_close(layer(x)[0], ref, atol=1e-5, rtol=1e-5)


def test_decoding_steps_append_empty_group_sets():
    r = WindowOnlyRouter()
    st = FocusDecodeState(torch.empty(2, 0, 0, dtype=torch.long), torch.empty(2, 0,
                          dtype=torch.long), torch.empty(2, 0, 1, dtype=torch.float64),
                          torch.zeros(2, dtype=torch.long))
    valid = torch.tensor([[True, False], [True, True]])
    g = route_step(r, torch.randn(2, 2, 4), st, valid)
    assert g.shape == (2, 2, 0) and st.count.tolist() == [1, 2]
    assert st.pos.tolist() == [[0, -1], [0, 1]]


@pytest.mark.slow
@pytest.mark.parametrize("num_sinks", [0, 2])
def test_composed_cached_decoding_and_router_files(num_sinks, tmp_path):
    pytest.importorskip("transformers")
    from quest_geometric.nn.focus import compose_focus, load_routers, save_routers
    from quest_geometric.nn.focus.compose import focus_layers
    from quest_geometric.nn.focus.router_files import ROUTERS_CONFIG
    from quest_geometric.testing.hf import build_hf, tokens

    m = build_hf("llama")
    compose_focus(m, window=3, num_sinks=num_sinks, router=WindowOnlyRouter())
    x = tokens(1, 24, seed=11)
    with torch.no_grad():
        full = m(x, use_cache=False).logits
        cache = m(x[:, :10], use_cache=True).past_key_values
        for i in range(10, 24):
            o = m(x[:, i:i + 1], cache=cache, use_cache=True)
            torch.testing.assert_close(o.logits[:, 0], full[:, i], atol=1e-4, rtol=0)
        states = list(getattr(cache, "_quest_focus_states").values())
        assert states and all(st.fast_steps == 14 and st._fast.stores is None  # the fast step
                              for st in states)  # ran at every step, keeping no store
    save_routers(m, str(tmp_path))
    import json
    cfg = json.loads((tmp_path / ROUTERS_CONFIG).read_text())["config"]
    assert cfg["router"] == {"type": "window_only", "causal": True}
    assert cfg["num_sinks"] == num_sinks and cfg["window"] == 3
    base = load_routers(build_hf("llama"), str(tmp_path))
    assert all(isinstance(f.router, WindowOnlyRouter) and f.num_sinks == num_sinks
               for f in focus_layers(base))
    with torch.no_grad():
        torch.testing.assert_close(base(x, use_cache=False).logits, full)


def split_band_pairs(n, window):
    """The (query, key) pairs the split band's calls compute, from their description alone:
    chunk c of a call pairs query q0 + c lq + a with key k0 + c lk + b for every (a, b), for
    b <= a if causal, b >= a if causal and flipped (each pair counted)."""
    from quest_geometric.nn.focus.blocks import _split_band_calls

    count = torch.zeros(n, n, dtype=torch.long)
    for call in _split_band_calls(n, window):
        a = torch.arange(call.lq).view(-1, 1)
        b = torch.arange(call.lk).view(1, -1)
        keep = torch.ones(call.lq, call.lk, dtype=torch.bool)
        if call.causal:
            keep = b >= a if call.flip else b <= a
        for c in range(call.nb):
            rows = call.q0 + c * call.lq + a.expand_as(keep)[keep]
            cols = call.k0 + c * call.lk + b.expand_as(keep)[keep]
            count.index_put_((rows, cols), torch.ones_like(rows), accumulate=True)
    return count


@pytest.mark.parametrize("n", [1, 5, 7, 8, 13, 21, 40, 64])
@pytest.mark.parametrize("window", [1, 2, 3, 7, 8, 20, 63, 100])
def test_split_band_calls_cover_the_causal_band_once(n, window):
    # every pair 0 <= i - j <= w exactly once, nothing else
    band = torch.ones(n, n, dtype=torch.bool).tril() & torch.ones(n, n, dtype=torch.bool).triu(
        -window)
    assert torch.equal(split_band_pairs(n, window), band.long())


def test_split_band_calls_refuse_window_zero():
    from quest_geometric.nn.focus.blocks import _split_band_calls

    with pytest.raises(ValueError, match="window must be at least 1"):
        _split_band_calls(10, 0)


@pytest.mark.parametrize("t, window, num_sinks", [(37, 5, 0), (37, 5, 4), (40, 8, 2),
                                                  (40, 39, 3), (12, 30, 2), (33, 1, 0)])
def test_fused_split_band_equals_the_dense_band_and_the_masked_path(monkeypatch, t, window,
                                                                    num_sinks, tuning):
    from quest_geometric.nn.focus import blocks

    calls = []
    real = blocks._split_band_calls
    monkeypatch.setattr(blocks, "_split_band_calls",
                        lambda n, w: calls.append((n, w)) or real(n, w))
    tuning.blocks(split_band_min_window=1, window_chunks=None)
    torch.manual_seed(t + window)
    groups = torch.zeros(t, 0, dtype=torch.long)
    q, k, v = (torch.randn(t, 3, 8, dtype=torch.float64, requires_grad=True)
               for _ in range(3))
    out = focus_blocks_attention(q, k, v, groups, window, None, True, 1, fused=True,
                                 num_sinks=num_sinks)
    assert calls == [(t, window)]  # the split path ran
    ref = attention(q, k, v, band_mask(t, window, num_sinks, True))
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=1e-12)
    go = torch.randn_like(ref)
    for a, b in zip(torch.autograd.grad(out, (q, k, v), go),
                    torch.autograd.grad(ref, (q, k, v), go)):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-12)
    # the masked query blocks (the split and the query chunks off) and the query chunks
    # (the split off) give the same float32 output
    q32, k32, v32 = (x.detach().float() for x in (q, k, v))
    outs = []
    for split_min, chunks in ((None, None), (None, ((math.inf, 8),)), (1, None)):
        tuning.blocks(split_band_min_window=split_min, window_chunks=chunks)
        outs.append(focus_blocks_attention(q32, k32, v32, groups, window, None, True, 1,
                                           fused=True, num_sinks=num_sinks))
    assert len(calls) == 2
    for other in outs[1:]:
        torch.testing.assert_close(other, outs[0], atol=1e-5, rtol=1e-5)


def test_split_band_only_for_one_causal_sequence_without_groups(monkeypatch, tuning):
    from quest_geometric.nn.focus import blocks

    tuning.blocks(split_band_min_window=4)
    seq = torch.zeros(20, dtype=torch.long)

    def plan(groups, window, causal=True, nseq=1, num_groups=1):
        return blocks._BlocksPlan(groups, seq, nseq, num_groups, window, causal, torch.float32)

    empty = torch.zeros(20, 0, dtype=torch.long)
    assert current_blocks_config().band_splits(4) and not current_blocks_config().band_splits(3)
    assert plan(empty, 4).band_calls and not plan(empty, 4).segments
    assert not plan(empty, 3).band_calls  # below split_band_min_window
    assert not plan(empty, 4, causal=False).band_calls
    assert not plan(torch.zeros(20, 1, dtype=torch.long), 4).band_calls  # groups to exclude
    tuning.blocks(split_band_min_window=None)
    assert not current_blocks_config().band_splits(10**6)
    assert not plan(empty, 4).band_calls and plan(empty, 4).segments


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_fused_split_band_in_half_precision(monkeypatch, dtype, tuning):
    # the kernels' float32 log-sum-exps merge the split calls as in float32

    tuning.blocks(split_band_min_window=1, window_chunks=None)
    t, window = 45, 8
    torch.manual_seed(1)
    q, k, v = (torch.randn(t, 2, 16, dtype=torch.float64) for _ in range(3))
    out = focus_blocks_attention(*(x.to(dtype) for x in (q, k, v)),
                                 torch.zeros(t, 0, dtype=torch.long), window, None, True, 1,
                                 fused=True, num_sinks=2)
    assert out.dtype == dtype
    ref = attention(*(x.to(dtype).double() for x in (q, k, v)), band_mask(t, window, 2, True))
    torch.testing.assert_close(out.double(), ref, atol=2e-2, rtol=2e-2)
