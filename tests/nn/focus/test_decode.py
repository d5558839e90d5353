"""The fast decoding step of Focus (one sequence, one new token) against the plain paths it
replaces: the Python-float routing step against the tensor Sinkhorn step and
``topk_groups``; the group-set-store attention against the gather path
(``focus_decode_attention_reference``) and an independent dense softmax; composed models
decoding with it against their full forward; the single-pass cache prefill against the old
two-pass one. Speed is measured in ``python -m benchmarks.focus.decode_step``, never here."""
from __future__ import annotations

import itertools
import math

import pytest
import torch

from quest_geometric.nn.focus import decode
from quest_geometric.nn.focus.config import DecodeConfig
from quest_geometric.nn.focus.decode import (
    FocusDecodeState,
    focus_decode_attention,
    focus_decode_attention_reference,
    route_prefix,
    route_step,
)
from quest_geometric.nn.focus.group_sets import MAX_SET_GROUPS
from quest_geometric.nn.focus.router import FocusRouter
from quest_geometric.nn.focus.sinkhorn import (
    sinkhorn_prefix_state,
    sinkhorn_step,
    sinkhorn_step_host,
)
from quest_geometric.nn.focus.topk import TIE_RTOL, topk_groups, topk_groups_host
from quest_geometric.testing.focus import random_groups


def _gen(seed):
    return torch.Generator().manual_seed(seed)


# --------------------------------------------------------------------------------------
# routing on Python floats
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("num_iters", [0, 1, 3, 10])
def test_host_sinkhorn_step_equals_tensor_step(num_iters):
    g = _gen(num_iters)
    for trial in range(20):
        k = 1 + trial % 6
        scores = torch.randn(1, k, generator=g, dtype=torch.float64) * 8
        if trial % 4 == 0:  # an empty prefix: every total is -inf
            col = torch.full((1, num_iters, k), -math.inf, dtype=torch.float64)
        else:
            col = torch.randn(1, num_iters, k, generator=g, dtype=torch.float64) * 3 + 2
        ref, ref_col = sinkhorn_step(scores, col)
        rows = col[0].tolist()
        got = sinkhorn_step_host(scores[0].tolist(), rows)
        torch.testing.assert_close(torch.tensor(got, dtype=torch.float64), ref[0],
                                   rtol=1e-12, atol=1e-12)
        if num_iters:
            torch.testing.assert_close(torch.tensor(rows, dtype=torch.float64), ref_col[0],
                                       rtol=1e-12, atol=1e-12)


def _tie_cases(k, g):
    """Log memberships with exact ties, ties within TIE_RTOL and near misses just outside."""
    base = torch.randn(k, generator=g) - 2.0
    yield base
    yield torch.full((k,), -math.log(k))  # the uniform first token
    for i, j in itertools.combinations(range(k), 2):
        for rel in (0.0, 0.5 * TIE_RTOL, 0.99 * TIE_RTOL, 1.01 * TIE_RTOL, 3 * TIE_RTOL):
            v = base.clone()
            top = float(v.max()) + 0.1
            v[i] = top
            v[j] = top + math.log1p(-rel)  # membership ratio 1 - rel
            yield v
            yield -v.flip(0).abs()


@pytest.mark.parametrize("k", [1, 2, 3, 4, 6])
def test_host_topk_equals_topk_groups_with_its_tie_rule(k):
    g = _gen(k)
    n = 0
    for vals in _tie_cases(k, g):
        for dtype in (torch.float32, torch.float64):
            v = vals.to(dtype)
            for top_k in range(1, k + 1):
                ref = topk_groups(v, top_k).tolist()
                assert topk_groups_host(v.tolist(), top_k, dtype == torch.float32) == ref, (v,
                                                                                            top_k)
                n += 1
    assert n > (10 if k > 1 else 2)


def _router_state(router, x, top_k, store=False):
    """A state after routing ``x [1, T, C]`` as a whole (the full prefix-causal Sinkhorn)."""
    out, col = route_prefix(router, x[0])
    st = FocusDecodeState(out.groups.new_empty(1, 0, top_k), out.groups.new_empty(1, 0), col,
                          torch.zeros(1, dtype=torch.long), store=store)
    st.append(out.groups.view(1, -1, top_k))
    return st


@pytest.mark.parametrize("top_k", [1, 2, 4])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fast_route_step_equals_tensor_route_and_full_sequence(top_k, dtype):
    torch.manual_seed(0)
    router = FocusRouter(12, num_groups=4, group_dim=5, tau=0.3, sinkhorn_iters=6,
                         top_k=top_k).to(dtype)
    x = torch.randn(1, 30, 12, generator=_gen(1), dtype=dtype)
    st = _router_state(router, x[:, :10], top_k)
    col = st.col_lse.clone()
    ref_groups = []
    for i in range(10, 30):
        got = route_step(router, x[:, i:i + 1], st)  # one token of one sequence: host path
        s = router.scores(x[0, i:i + 1])
        log_soft, col = sinkhorn_step(s, col)
        ref = topk_groups(log_soft.to(s.dtype), top_k)
        assert torch.equal(got[0, 0], ref[0])
        ref_groups.append(ref[0])
    torch.testing.assert_close(st.col_lse, col, rtol=1e-12, atol=1e-12)
    assert torch.equal(st.pos, torch.arange(30).view(1, 30)) and int(st.count) == 30
    # ... and the whole sequence routed at once gives the same groups
    full = router(x[0]).groups
    assert torch.equal(st.groups[0], full)
    assert torch.equal(st.groups[0, 10:], torch.stack(ref_groups))


def test_route_step_refuses_a_changed_top_k():
    router = FocusRouter(8, num_groups=4, top_k=2)
    st = _router_state(router, torch.randn(1, 5, 8), 2)
    router.top_k = 1
    with pytest.raises(ValueError, match="top_k=2.*top_k=1"):
        route_step(router, torch.randn(1, 1, 8), st)


def test_route_step_padding_and_batches_take_the_tensor_path():
    router = FocusRouter(8, num_groups=4, top_k=1)
    st = FocusDecodeState(torch.empty(2, 0, 1, dtype=torch.long),
                          torch.empty(2, 0, dtype=torch.long),
                          torch.full((2, router.sinkhorn_iters, 4), -math.inf,
                                     dtype=torch.float64), torch.zeros(2, dtype=torch.long))
    valid = torch.tensor([[True], [False]])
    g = route_step(router, torch.randn(2, 1, 8), st, valid)
    assert g[1, 0, 0] == -1 and int(st.pos[1, 0]) == -1 and st.count.tolist() == [1, 0]
    assert not st._simple
    one = FocusDecodeState(torch.empty(1, 0, 1, dtype=torch.long),
                           torch.empty(1, 0, dtype=torch.long),
                           torch.full((1, router.sinkhorn_iters, 4), -math.inf,
                                      dtype=torch.float64), torch.zeros(1, dtype=torch.long))
    route_step(router, torch.randn(1, 1, 8), one, torch.tensor([[False]]))
    assert not one._simple and one.count.tolist() == [0]


# --------------------------------------------------------------------------------------
# attention over the group-set stores
# --------------------------------------------------------------------------------------


def _state(groups, store=True):
    s, kk = groups.shape
    st = FocusDecodeState(groups.view(1, s, kk).clone(), torch.arange(s).view(1, s),
                          torch.zeros(1, 1, 4, dtype=torch.float64), torch.tensor([s]),
                          store=store)
    return st


def _dense_oracle(q, k, v, groups, window, scale, num_sinks=0):
    """Softmax over the allowed keys of the last token, from scratch (repeat_kv layout)."""
    s = groups.size(0)
    h, hkv = q.size(1), k.size(1)
    kr = k[:, :, :s].repeat_interleave(h // hkv, 1)
    vr = v[:, :, :s].repeat_interleave(h // hkv, 1)
    mine = set(groups[-1].tolist())
    allowed = torch.tensor([(s - 1 - j) <= window or bool(mine & set(groups[j].tolist()))
                            or j < num_sinks for j in range(s)])
    logits = (q.double() @ kr.double().transpose(-1, -2)) * scale
    p = torch.softmax(logits.masked_fill(~allowed, -math.inf), -1)
    return (p @ vr.double()).to(q.dtype)


CASES = [  # (tokens, window, K, top_k); top_k = 0: no group (window and sinks only)
    (1, 0, 4, 1), (2, 0, 4, 1), (40, 0, 4, 1), (40, 1, 4, 2), (70, 5, 4, 1), (70, 5, 4, 2),
    (70, 5, 4, 3), (90, 5, 4, 4), (30, 100, 4, 2), (150, 8, 8, 2), (200, 3, 8, 1),
    (70, 5, 4, 0), (3, 0, 4, 0),
    # a longer cache, whose first step records hundreds of slots at once
    (600, 20, 8, 2), (600, 20, 4, 1), (600, 20, 4, 0),
]


#: DecodeConfig.masked_share values that force the fast step's ways: the masked SDPA over
#: the cache (0: always cheaper), the group-set stores (inf: never; with store_after = 0,
#: stores from the first step) and, with "groups", the per-group stores (max_store_parts = 0
#: as well: every group-set count is too many; top-k >= 1); None keeps the rule
PATHS = [0.0, math.inf, "groups", None]


def _force(tuning, share):
    if share == "groups":
        tuning.decode(max_store_parts=0)
        share = math.inf
    if share == math.inf:  # stores from the first step
        tuning.decode(store_after=0)
    if share is not None:
        tuning.decode(masked_share=share)


def _sdpa_calls(monkeypatch):
    """Count the calls of scaled_dot_product_attention (the masked path makes exactly one;
    the store path none)."""
    calls = []
    real = torch.nn.functional.scaled_dot_product_attention

    def spy(*a, **kw):
        calls.append(kw.get("attn_mask"))
        return real(*a, **kw)

    monkeypatch.setattr(decode.F, "scaled_dot_product_attention", spy)
    return calls


@pytest.mark.parametrize("s, window, num_groups, top_k", CASES)
@pytest.mark.parametrize("heads", [(6, 2), (3, 3)])
@pytest.mark.parametrize("share", PATHS)
@pytest.mark.parametrize("ns", [0, 3])
def test_fast_step_equals_gather_path_and_dense_oracle(s, window, num_groups, top_k, heads,
                                                       share, ns, monkeypatch, tuning):
    _force(tuning, share)
    g = _gen(s * 7 + window)
    h, hkv = heads
    groups = random_groups(s, num_groups, top_k, generator=g)
    q = torch.randn(1, h, 1, 16, generator=g)
    cap = s + 9  # a preallocated cache: slots past the state's length are garbage
    k = torch.randn(1, hkv, cap, 16, generator=g)
    v = torch.randn(1, hkv, cap, 16, generator=g)
    st = _state(groups)
    calls = _sdpa_calls(monkeypatch)
    o = focus_decode_attention(q, k, v, st, window, 0.3, num_sinks=ns)
    assert st.fast_steps == 1  # the fast path ran
    far = max(0, s - 1 - window - ns)  # out-of-window tokens that are not sinks
    if top_k == 0:  # window-only routing: two slices of the cache, no group set recorded
        assert st._fast.stores is None and st._fast.codes.size == 0  # no code
        if share in (0.0, math.inf):  # forced: the masked SDPA, or the two slices
            assert len(calls) == (1 if share == 0.0 else 0)
    else:
        assert sum(st._fast.stores.counts.values()) == far
    stored = 0 if top_k == 0 else sum(e.size for e in st._fast.stores.sets.values())
    if share == 0.0:  # the masked path reads the cache: no store is filled
        assert stored == 0
    elif share == math.inf:  # the store path: every out-of-window token in its store
        assert stored == (far if top_k else 0)
    elif share == "groups" and st._fast.group_stores is not None:
        # the per-group path ran: each out-of-window token once per group, no group-set store
        per_group = sum(e.size for e in st._fast.group_stores.sets.values())
        assert stored == 0 and per_group == far * top_k
    ref = focus_decode_attention_reference(q, k, v, _state(groups, store=False), window, 0.3,
                                           num_sinks=ns)
    torch.testing.assert_close(o, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(o, _dense_oracle(q, k, v, groups, window, 0.3, ns), rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("top_k, s", [(2, 2000), (3, 6000)])  # top-3 reads 3/16 per store
@pytest.mark.parametrize("ns", [0, 4])
def test_many_groups_take_the_per_group_stores_by_the_rule(top_k, s, ns, monkeypatch, tuning):
    """K = 16: more than max_store_parts group sets meet a top-2 token, and at a small
    window the per-group stores read far fewer keys than the cache: the rule takes them (no
    SDPA call, no group-set store), and the step equals the gather path and the oracle,
    with tokens that share several groups with the new one counted once."""
    tuning.decode(store_after=2)
    calls = _sdpa_calls(monkeypatch)
    g = _gen(16 + top_k)
    w, hkv, h, d = 6, 3, 9, 64  # SmolLM2's heads: a part costs about 156 key reads
    groups = random_groups(s, 16, top_k, generator=g)
    groups[: s // 40] = groups[-1]  # earlier tokens that share all of the new one's groups
    q = torch.randn(1, h, 1, d, generator=g)
    k, v = torch.randn(1, hkv, s, d, generator=g), torch.randn(1, hkv, s, d, generator=g)
    st = _state(groups)
    for _ in range(2):  # the first STORE_AFTER steps: masked, nothing copied
        focus_decode_attention(q, k, v, st, w, 0.4, num_sinks=ns)
    assert len(calls) == 2 and st._fast.group_stores is None
    o = focus_decode_attention(q, k, v, st, w, 0.4, num_sinks=ns)
    assert st._fast.group_stores is not None and len(calls) == 2
    assert sum(e.size for e in st._fast.stores.sets.values()) == 0
    ref = focus_decode_attention_reference(q, k, v, _state(groups, store=False), w, 0.4,
                                           num_sinks=ns)
    torch.testing.assert_close(o, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(o, _dense_oracle(q, k, v, groups, w, 0.4, ns), rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("top_k, w", [(1, 4), (2, 6)])
def test_the_first_step_counts_a_long_prefix_by_group_set(top_k, w):
    """The first fast step counts the out-of-window tokens of a 900-token prefix by group
    set in one pass (``unique`` over their codes): the counts equal a count of the Python
    sets, and every later step adds the tokens that left the window (one, or three after
    a step that appended three tokens)."""
    import collections

    g = _gen(40 + top_k)
    s, hkv, d = 900, 2, 8
    groups = random_groups(s, 8, top_k, generator=g)
    k = torch.randn(1, hkv, s + 20, d, generator=g)
    v = torch.randn(1, hkv, s + 20, d, generator=g)
    st = _state(groups)
    for step in range(8):
        for _ in range(3 if step == 4 else int(step > 0)):  # step 4: three tokens at once
            new = random_groups(1, 8, top_k, generator=g)
            groups = torch.cat([groups, new])
            st.append_one(new[0].tolist())
        n = groups.size(0)
        q = torch.randn(1, 4, 1, d, generator=g)
        o = focus_decode_attention(q, k, v, st, w, 0.4, num_sinks=2)
        torch.testing.assert_close(o, _dense_oracle(q, k, v, groups, w, 0.4, 2), rtol=1e-5,
                                   atol=1e-5)
        want = collections.Counter(sum(1 << x for x in set(row))
                                   for row in groups[2:n - 1 - w].tolist())
        assert st._fast.stores.counts == dict(want)


def test_more_groups_than_a_bitmask_holds_take_the_plain_path(monkeypatch):
    """A router of 100 groups: the fast step cannot code a group past MAX_SET_GROUPS, so
    it gives way to the gather path (same values as the oracle, no store kept), for the
    prefix and for a decoded token."""
    calls = []
    ref = decode.focus_decode_attention_reference
    monkeypatch.setattr(decode, "focus_decode_attention_reference",
                        lambda *a, **kw: calls.append(1) or ref(*a, **kw))
    g = _gen(8)
    s, w = 120, 5
    groups = torch.randint(0, 100, (s, 2), generator=g)
    groups[:, 1] = (groups[:, 0] + 1 + torch.randint(0, 98, (s,), generator=g)) % 100
    k, v = torch.randn(1, 2, s + 1, 8, generator=g), torch.randn(1, 2, s + 1, 8, generator=g)
    st = _state(groups)
    q = torch.randn(1, 4, 1, 8, generator=g)
    o = focus_decode_attention(q, k, v, st, w, 0.5)
    torch.testing.assert_close(o, _dense_oracle(q, k, v, groups, w, 0.5), rtol=1e-5, atol=1e-5)
    assert calls == [1] and st._fast.stores is None and not st._fast.codable
    small = _state(groups[:, :1] % MAX_SET_GROUPS)  # codable prefix, then group 99
    focus_decode_attention(q, k[:, :, :s], v[:, :, :s], small, w, 0.5)
    assert small._fast.codable and len(calls) == 1
    small.append_one([99])
    grown = torch.cat([groups[:, :1] % MAX_SET_GROUPS, torch.tensor([[99]])])
    o = focus_decode_attention(q, k, v, small, w, 0.5)
    torch.testing.assert_close(o, _dense_oracle(q, k, v, grown, w, 0.5), rtol=1e-5, atol=1e-5)
    assert len(calls) == 2 and not small._fast.codable


@pytest.mark.parametrize("num_groups, top_k, s", [(4, 1, 1500), (8, 2, 8000), (16, 2, 1500)])
def test_a_short_generation_reads_no_store(num_groups, top_k, s, monkeypatch, tuning):
    """By the rule (STORE_AFTER = 3 here), the first steps after a long prefix run the
    masked SDPA and copy nothing, though the stores would read fewer keys; from step 4 on a
    store path is taken (group-set stores for few sets, per-group stores for many: no SDPA
    call), and every step equals the dense oracle."""
    tuning.decode(store_after=3)
    g = _gen(num_groups)
    w, hkv, h, d = 6, 3, 9, 64  # SmolLM2's heads (the cost model's part cost)
    groups = random_groups(s, num_groups, top_k, generator=g)
    k = torch.randn(1, hkv, s + 8, d, generator=g)
    v = torch.randn(1, hkv, s + 8, d, generator=g)
    st = _state(groups)
    calls = _sdpa_calls(monkeypatch)
    for step in range(6):
        if step:
            new = random_groups(1, num_groups, top_k, generator=g)
            groups = torch.cat([groups, new])
            st.append_one(new[0].tolist())
        q = torch.randn(1, h, 1, d, generator=g)
        o = focus_decode_attention(q, k, v, st, w, 0.3)
        torch.testing.assert_close(o, _dense_oracle(q, k, v, groups, w, 0.3), rtol=1e-5,
                                   atol=1e-5)
        group_stores = st._fast.group_stores
        stored = sum(e.size for e in st._fast.stores.sets.values()) + (
            0 if group_stores is None else sum(e.size for e in group_stores.sets.values()))
        if step < 3:
            assert len(calls) == step + 1 and stored == 0
        else:
            assert len(calls) == 3 and stored > 0


def test_a_group_without_earlier_members_sees_its_window_only():
    g = _gen(3)
    s, w = 50, 4
    groups = torch.zeros(s, 1, dtype=torch.long)
    groups[-1] = 3  # nobody before shares group 3
    q, k, v = torch.randn(1, 4, 1, 8, generator=g), torch.randn(1, 2, s, 8), torch.randn(1, 2, s, 8)
    o = focus_decode_attention(q, k, v, _state(groups), w, 0.5)
    win = torch.nn.functional.scaled_dot_product_attention(
        q, k[:, :, -w - 1:], v[:, :, -w - 1:], scale=0.5, enable_gqa=True)
    torch.testing.assert_close(o, win, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("top_k", [1, 2])
@pytest.mark.parametrize("share", PATHS)
@pytest.mark.parametrize("ns", [0, 3])
def test_consecutive_steps_grow_the_stores_and_stay_equal(top_k, share, ns, monkeypatch, tuning):
    _force(tuning, share)
    g = _gen(top_k)
    hkv, h, d, w = 2, 4, 8, 6
    groups = random_groups(20, 4, top_k, generator=g)
    k = torch.randn(1, hkv, 20, d, generator=g)
    v = torch.randn(1, hkv, 20, d, generator=g)
    st = _state(groups)
    for step in range(400):  # well past the stores' first capacity (64): they double
        if step:  # a new token: appended to the state and (by concatenation) to the cache
            new = random_groups(1, 4, top_k, generator=g)
            groups = torch.cat([groups, new])
            st.append(new.view(1, 1, top_k))
            k = torch.cat([k, torch.randn(1, hkv, 1, d, generator=g)], 2)
            v = torch.cat([v, torch.randn(1, hkv, 1, d, generator=g)], 2)
        q = torch.randn(1, h, 1, d, generator=g)
        o = focus_decode_attention(q, k, v, st, w, 0.4, num_sinks=ns)
        if step % 37 == 0 or step > 390:
            ref = focus_decode_attention_reference(q, k, v, st, w, 0.4, num_sinks=ns)
            torch.testing.assert_close(o, ref, rtol=1e-5, atol=1e-5)
    assert st._fast.stores.counted == groups.size(0) - 1 - w
    assert st._fast.codes.size == groups.size(0) and st._fast.codes.capacity > 64  # they doubled
    if share == math.inf:  # the stores grew past their first capacity (64): they doubled
        assert max(e.capacity for e in st._fast.stores.sets.values()) > 64
        assert st._fast.stores.done == groups.size(0) - 1 - w
    if share == 0.0:
        assert not st._fast.stores.sets
    if share == "groups":  # the per-group stores hold every out-of-window token per group
        gs = st._fast.group_stores
        assert gs.done == groups.size(0) - 1 - w and not st._fast.stores.sets
        assert max(e.capacity for e in gs.sets.values()) > 64  # they doubled
        assert sum(e.size for e in gs.sets.values()) == (gs.done - ns) * top_k


@pytest.mark.parametrize("share, masked", [(0.0, True), (math.inf, False)])
def test_the_forced_path_is_the_one_taken(share, masked, monkeypatch, tuning):
    _force(tuning, share)
    g = _gen(11)
    groups = random_groups(100, 4, 2, generator=g)
    q, k, v = torch.randn(1, 4, 1, 8), torch.randn(1, 2, 100, 8), torch.randn(1, 2, 100, 8)
    calls = _sdpa_calls(monkeypatch)
    o = focus_decode_attention(q, k, v, _state(groups), 5, 0.5)
    assert len(calls) == int(masked)
    if masked:  # the mask allows exactly the oracle's keys: window or a shared group
        mine = set(groups[-1].tolist())
        want = torch.tensor([99 - j <= 5 or bool(mine & set(groups[j].tolist()))
                             for j in range(100)])
        assert torch.equal(calls[0].view(-1), want)
    torch.testing.assert_close(o, _dense_oracle(q, k, v, groups, 5, 0.5), rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("top_k, masked", [(1, False), (2, True)])
def test_the_default_rule_reads_the_stores_for_few_kept_keys(top_k, masked, monkeypatch, tuning):
    # K = 4, window 8 of 2,000 keys: top-1 keeps about a quarter (stores), top-2 about 5/6
    # (one masked SDPA is cheaper), with SmolLM2's H_kv D = 192; the cost model alone (stores
    # allowed from the first step)
    tuning.decode(store_after=0)
    g = _gen(12)
    s = 2000
    groups = random_groups(s, 4, top_k, generator=g)
    q = torch.randn(1, 9, 1, 64, generator=g)
    k, v = torch.randn(1, 3, s, 64, generator=g), torch.randn(1, 3, s, 64, generator=g)
    calls = _sdpa_calls(monkeypatch)
    focus_decode_attention(q, k, v, _state(groups), 8, 0.125)
    assert len(calls) == int(masked)


def test_switching_paths_between_steps_catches_the_stores_up(monkeypatch, tuning):
    # masked steps leave the stores behind; the next store step copies every token that
    # left the window meanwhile (in cache order) and must equal the oracle
    g = _gen(13)
    w, d = 4, 8
    groups = random_groups(30, 4, 1, generator=g)
    k, v = torch.randn(1, 2, 200, d, generator=g), torch.randn(1, 2, 200, d, generator=g)
    st = _state(groups)
    for step in range(120):
        if step:
            new = random_groups(1, 4, 1, generator=g)
            groups = torch.cat([groups, new])
            st.append(new.view(1, 1, 1))
        _force(tuning, math.inf if (step // 7) % 2 else 0.0)  # 7 steps each way
        q = torch.randn(1, 4, 1, d, generator=g)
        o = focus_decode_attention(q, k, v, st, w, 0.4)
        torch.testing.assert_close(o, _dense_oracle(q, k, v, groups, w, 0.4), rtol=1e-5,
                                   atol=1e-5)
    assert st._fast.stores.done == groups.size(0) - 1 - w  # the last step (119) read the stores
    assert sum(e.size for e in st._fast.stores.sets.values()) == st._fast.stores.done


def test_a_group_set_that_appears_late_enters_the_masked_path(monkeypatch, tuning):
    # the table of the sets a query meets is rebuilt when a new set leaves the window
    _force(tuning, 0.0)
    w = 3
    groups = torch.zeros(40, 1, dtype=torch.long)
    k, v = torch.randn(1, 1, 60, 8), torch.randn(1, 1, 60, 8)
    st = _state(groups)
    q = torch.randn(1, 2, 1, 8)
    focus_decode_attention(q, k, v, st, w, 0.5)  # a table for {0}, one set known
    for step in range(12):  # tokens of group 1 arrive and leave the window
        new = torch.tensor([[[1]]])
        st.append(new)
        groups = torch.cat([groups, new[0]])
        o = focus_decode_attention(q, k, v, st, w, 0.5)
        torch.testing.assert_close(o, _dense_oracle(q, k, v, groups, w, 0.5), rtol=1e-5,
                                   atol=1e-5)
    assert set(st._fast.stores.counts) == {0b01, 0b10}  # the codes of {0} and {1}


def test_the_fast_route_refuses_nonfinite_scores():
    router = FocusRouter(8, num_groups=4, top_k=1)
    st = _router_state(router, torch.randn(1, 5, 8), 1)
    x = torch.randn(1, 1, 8)
    x[0, 0, 3] = float("nan")
    with pytest.raises(ValueError, match="NaN or inf"):
        route_step(router, x, st)
    assert len(st) == 5  # nothing appended


@pytest.mark.parametrize("share", [0.0, math.inf])
def test_too_many_group_sets_never_read_the_group_set_stores(share, monkeypatch, tuning):
    """29 group sets meet a top-2 token of K = 16, more than max_store_parts: the step reads
    the per-group stores (the masked SDPA forced dearer) or the masked SDPA (forced
    cheaper), never the group-set stores."""
    _force(tuning, share)
    tuning.decode(store_after=0)
    g = _gen(5)
    s, num_groups, top_k = 400, 16, 2  # C(16,2) - C(14,2) = 29 stores meet a token's groups
    groups = random_groups(s, num_groups, top_k, generator=g)
    q, k, v = torch.randn(1, 2, 1, 8), torch.randn(1, 2, s, 8), torch.randn(1, 2, s, 8)
    st = _state(groups)
    calls = _sdpa_calls(monkeypatch)
    o = focus_decode_attention(q, k, v, st, 3, 0.5)
    assert math.comb(16, 2) - math.comb(14, 2) > DecodeConfig().max_store_parts
    assert st.store and not st._fast.stores.sets  # no group-set store copied
    if share == 0.0:
        assert len(calls) == 1 and st._fast.group_stores is None  # masked
    else:
        assert not calls and st._fast.group_stores.sets  # per-group stores
    ref = focus_decode_attention_reference(q, k, v, st, 3, 0.5)
    torch.testing.assert_close(o, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(o, _dense_oracle(q, k, v, groups, 3, 0.5), rtol=1e-5,
                               atol=1e-5)


def test_padding_batches_and_fast_false_use_the_gather_path():
    g = _gen(6)
    s, w = 60, 3
    groups = random_groups(s, 4, 2, generator=g)
    q, k, v = torch.randn(1, 2, 1, 8), torch.randn(1, 1, s, 8), torch.randn(1, 1, s, 8)
    st = _state(groups)
    assert torch.equal(focus_decode_attention(q, k, v, st, w, 0.5, fast=False),
                       focus_decode_attention_reference(q, k, v, st, w, 0.5))
    assert st._fast.stores is None
    # one sequence with left padding: positions are not the cache slots
    pos = torch.cat([torch.full((5,), -1), torch.arange(s - 5)]).view(1, s)
    gp = groups.clone().view(1, s, 2)
    gp[0, :5] = -1
    padded = FocusDecodeState(gp, pos, torch.zeros(1, 1, 4, dtype=torch.float64),
                              torch.tensor([s - 5]), store=True)
    assert not padded._simple
    assert torch.equal(focus_decode_attention(q, k, v, padded, w, 0.5),
                       focus_decode_attention_reference(q, k, v, padded, w, 0.5))
    assert padded._fast.stores is None
    # two sequences
    two = FocusDecodeState(groups.view(1, s, 2).repeat(2, 1, 1), torch.arange(s).repeat(2, 1),
                           torch.zeros(2, 1, 4, dtype=torch.float64), torch.tensor([s, s]),
                           store=True)
    q2, k2, v2 = q.repeat(2, 1, 1, 1), k.repeat(2, 1, 1, 1), v.repeat(2, 1, 1, 1)
    assert torch.equal(focus_decode_attention(q2, k2, v2, two, w, 0.5),
                       focus_decode_attention_reference(q2, k2, v2, two, w, 0.5))
    assert two._fast.stores is None


def test_select_drops_the_stores_and_they_are_rebuilt_from_the_reordered_cache():
    g = _gen(7)
    s, w = 80, 4
    groups = random_groups(s, 4, 1, generator=g)
    q, k, v = torch.randn(1, 2, 1, 8), torch.randn(1, 2, s, 8), torch.randn(1, 2, s, 8)
    st = _state(groups)
    focus_decode_attention(q, k, v, st, w, 0.5)
    picked = st.select(torch.tensor([0]))
    assert picked.store and picked._fast.stores is None and picked._simple
    o = focus_decode_attention(q, k, v, picked, w, 0.5)
    torch.testing.assert_close(o, focus_decode_attention_reference(q, k, v, st, w, 0.5),
                               rtol=1e-5, atol=1e-5)
    assert "store=True" in repr(picked)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_fast_step_in_half_precision(dtype):
    g = _gen(8)
    s, w = 120, 5
    groups = random_groups(s, 4, 2, generator=g)
    q = torch.randn(1, 4, 1, 16, generator=g).to(dtype)
    k = torch.randn(1, 2, s, 16, generator=g).to(dtype)
    v = torch.randn(1, 2, s, 16, generator=g).to(dtype)
    o = focus_decode_attention(q, k, v, _state(groups), w, 0.25)
    assert o.dtype == dtype
    ref = _dense_oracle(q.float(), k.float(), v.float(), groups, w, 0.25)
    torch.testing.assert_close(o.float(), ref, rtol=2e-2, atol=2e-2)


# --------------------------------------------------------------------------------------
# composed models
# --------------------------------------------------------------------------------------


def test_route_prefix_equals_router_and_second_pass():
    torch.manual_seed(1)
    router = FocusRouter(10, num_groups=4, top_k=2, sinkhorn_iters=5)
    x = torch.randn(17, 10)
    batch = torch.tensor([0] * 9 + [1] * 8)
    for b, nseq in ((None, 1), (batch, 2)):
        out, col = route_prefix(router, x, b, nseq)
        ref = router(x, b)
        for a, r in zip(out, ref):
            assert torch.equal(a, r)
        from torch_geometric.utils import to_dense_batch

        s = router.scores(x)
        dense, valid = (s.unsqueeze(0), None) if b is None else to_dense_batch(s, b)
        assert torch.equal(col, sinkhorn_prefix_state(dense, valid, 5))


pytest.importorskip("transformers")
from quest_geometric.nn.focus.compose import compose_focus  # noqa: E402
from quest_geometric.testing.hf import build_hf, tokens  # noqa: E402

_STATES = "_quest_focus_states"


@pytest.mark.parametrize("arch", ["llama", "gpt2", "neox"])
@pytest.mark.parametrize("top_k", [1, 2])
@pytest.mark.parametrize("num_sinks", [0, 2])
def test_one_sequence_cached_decoding_takes_the_fast_path_and_equals_full_forward(
        arch, top_k, num_sinks):
    m = build_hf(arch)
    w = 3
    compose_focus(m, num_groups=4, top_k=top_k, window=w, num_sinks=num_sinks)
    x = tokens(1, 40, seed=11)
    with torch.no_grad():
        full = m(x, use_cache=False).logits
        pre = m(x[:, :20], use_cache=True)
        cache = pre.past_key_values
        for i in range(20, 40):
            o = m(x[:, i:i + 1], cache=cache, use_cache=True)
            torch.testing.assert_close(o.logits[:, 0], full[:, i], atol=1e-4, rtol=0)
        states = list(getattr(cache, _STATES).values())
        assert states and all(st._fast.stores is not None for st in states)
        assert all(st._fast.stores.counted == 40 - 1 - w for st in states)
        with pytest.raises(NotImplementedError, match="crop"):
            cache.crop(30)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["llama", "gpt2"])
@pytest.mark.parametrize("top_k", [1, 2])
def test_one_sequence_generate_and_beam_search_equal_uncached(arch, top_k):
    m = build_hf(arch)
    compose_focus(m, num_groups=4, top_k=top_k, window=3)
    x = tokens(1, 10, seed=11)
    with torch.no_grad():
        g1 = m.generate(x[:, :10], max_new_tokens=15, do_sample=False, use_cache=True)
        g2 = m.generate(x[:, :10], max_new_tokens=15, do_sample=False, use_cache=False)
        b1 = m.generate(x[:, :10], max_new_tokens=8, num_beams=2, do_sample=False,
                        use_cache=True)
        b2 = m.generate(x[:, :10], max_new_tokens=8, num_beams=2, do_sample=False,
                        use_cache=False)
    assert torch.equal(g1, g2) and torch.equal(b1, b2)


def test_static_cache_one_sequence_fast_path_equals_uncached():
    m = build_hf("llama")
    compose_focus(m, num_groups=4, top_k=2, window=2)
    x = tokens(1, 16, seed=12)
    with torch.no_grad():
        a = m.generate(x, max_new_tokens=12, do_sample=False, use_cache=False)
        b = m.generate(x, max_new_tokens=12, do_sample=False, cache_implementation="static")
    assert torch.equal(a, b)


@pytest.mark.parametrize("train", [False, True])
@pytest.mark.parametrize("padded", [False, True])
def test_single_pass_prefill_equals_the_two_pass_one(train, padded):
    """With a hook on the routers the prefill calls them as modules and records the statistics
    in a second Sinkhorn pass (the old path); without, it routes once: the same logits and
    the same states, bit for bit."""
    m = build_hf("llama")
    compose_focus(m, num_groups=4, top_k=2, window=3)
    m.train(train)
    x = tokens(2, 18, seed=13)
    mask = torch.ones(2, 18, dtype=torch.long)
    if padded:
        mask[0, :5] = 0
    kw = {"attention_mask": mask} if padded else {}
    routers = [mod.router for mod in m.modules() if hasattr(mod, "adapter")]
    with torch.no_grad():
        one = m(x, use_cache=True, **kw)
        seen = []
        hooks = [r.register_forward_hook(lambda *a: seen.append(1)) for r in routers]
        two = m(x, use_cache=True, **kw)
        for hk in hooks:
            hk.remove()
    assert len(seen) == len(routers)  # the old path ran (hooks fire there)
    assert torch.equal(one.logits, two.logits)
    s1 = getattr(one.past_key_values, _STATES)
    s2 = getattr(two.past_key_values, _STATES)
    assert len(s1) == len(s2) == len(routers)
    for key in s1:
        a, b = s1[key], s2[key]
        for name in ("groups", "pos", "col_lse", "count"):
            assert torch.equal(getattr(a, name), getattr(b, name)), name
        assert not a.col_lse.requires_grad


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("heads", [(9, 3), (8, 2)])
def test_masked_layout_follows_the_thread_count_and_equals_the_oracle(threads, heads,
                                                                      monkeypatch, tuning):
    # packed query heads at one thread or when the threads divide H_kv; else enable_gqa
    h, hkv = heads
    g = _gen(21)
    groups = random_groups(120, 4, 2, generator=g)
    q = torch.randn(1, h, 1, 16, generator=g)
    k, v = torch.randn(1, hkv, 130, 16, generator=g), torch.randn(1, hkv, 130, 16, generator=g)
    shapes = []
    real = torch.nn.functional.scaled_dot_product_attention

    def spy(qq, *a, **kw):
        shapes.append((tuple(qq.shape), kw.get("enable_gqa", False)))
        return real(qq, *a, **kw)

    _force(tuning, 0.0)  # always the masked SDPA
    monkeypatch.setattr(decode.F, "scaled_dot_product_attention", spy)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        o = focus_decode_attention(q, k, v, _state(groups), 5, 0.25)
    finally:
        torch.set_num_threads(before)
    packed = threads == 1 or hkv % threads == 0
    assert shapes == [((1, hkv, h // hkv, 16), False) if packed else ((1, h, 1, 16), True)]
    torch.testing.assert_close(o, _dense_oracle(q, k, v, groups, 5, 0.25), rtol=1e-5,
                               atol=1e-5)
