"""Random balanced groups (RandomGroupsRouter) against their definition, through every hard
back-end, and cached decoding equal to the uncached forward."""
import pytest
import torch

from quest_geometric.nn.focus import FocusAttention, RandomGroupsRouter, Router
from quest_geometric.nn.focus.decode import FocusDecodeState, route_step


def _definition(p, k, top_k, seed):
    """Groups of position p, written out from the docstring's definition."""
    b, r = divmod(p, k)
    perm = torch.randperm(k, generator=torch.Generator().manual_seed(seed * 1000003 + b))
    return [int(perm[(r + c) % k]) for c in range(top_k)]


@pytest.mark.parametrize("k,top_k", [(4, 1), (4, 2), (5, 3)])
def test_groups_follow_the_definition_and_are_balanced(k, top_k):
    r = RandomGroupsRouter(k, top_k=top_k, seed=3)
    assert isinstance(r, Router)
    out = r(torch.randn(2, 23, 8))
    ref = torch.tensor([_definition(p, k, top_k, 3) for p in range(23)])
    assert torch.equal(out.groups[0], ref) and torch.equal(out.groups[1], ref)
    full = out.groups[0, :20].reshape(-1)  # 20 positions = whole blocks of K (K = 4, 5)
    assert torch.equal(torch.bincount(full, minlength=k), torch.full((k,), 20 * top_k // k))
    torch.testing.assert_close(out.soft.sum(-1), torch.ones(2, 23))
    # content-free: other hidden states, same groups; another seed, other groups
    assert torch.equal(r(torch.randn(2, 23, 8)).groups, out.groups)
    assert not torch.equal(RandomGroupsRouter(k, top_k=top_k, seed=4)(torch.randn(1, 23, 8))
                           .groups[0], ref)
    # PyG layout: positions restart in each sequence
    batch = torch.tensor([0] * 7 + [1] * 16)
    flat = r(torch.randn(23, 8), batch).groups
    assert torch.equal(flat[:7], ref[:7]) and torch.equal(flat[7:], ref[:16])


@pytest.mark.parametrize("backend", ["edges", "dense", "blocks"])
@pytest.mark.parametrize("top_k", [1, 2])
def test_backends_match_the_reference_mask(backend, top_k, focus_mask_reference):
    torch.manual_seed(0)
    layer = FocusAttention(16, 2, window=2, backend=backend, bias=False,
                           router=RandomGroupsRouter(4, top_k=top_k, seed=1)).eval()
    x = torch.randn(1, 19, 16)
    with torch.no_grad():
        out, rout = layer(x, return_router=True)
        mask = focus_mask_reference(rout.groups[0], 2, None, True)
        q, k, v = (p(x[0]).view(19, 2, 8).transpose(0, 1) for p in
                   (layer.q_proj, layer.k_proj, layer.v_proj))
        s = (q @ k.transpose(1, 2)) / 8 ** 0.5
        o = torch.softmax(s.masked_fill(~mask, float("-inf")), -1) @ v
        ref = layer.out_proj(o.transpose(0, 1).reshape(19, 16))
    torch.testing.assert_close(out[0], ref, atol=1e-5, rtol=1e-5)


def test_router_argument_is_checked():
    with pytest.raises(TypeError, match="'router' must be"):
        FocusAttention(16, 2, router=object())
    with pytest.raises(ValueError, match="contradicts causal"):
        FocusAttention(16, 2, causal=False, router=RandomGroupsRouter(4))


@pytest.mark.parametrize("top_k", [1, 2])
def test_steps_equal_the_whole_sequence(top_k):
    r = RandomGroupsRouter(4, top_k=top_k, seed=2)
    x = torch.randn(2, 30, 8)
    full = r(x).groups
    st = FocusDecodeState(torch.empty(2, 0, top_k, dtype=torch.long),
                          torch.empty(2, 0, dtype=torch.long),
                          torch.empty(2, 0, 4, dtype=torch.float64),
                          torch.zeros(2, dtype=torch.long))
    st.append(full[:, :10])
    for i in range(10, 30):
        assert torch.equal(route_step(r, x[:, i:i + 1], st), full[:, i:i + 1])
    assert torch.equal(st.groups, full)


@pytest.mark.slow
def test_composed_cached_decoding_equals_uncached():
    pytest.importorskip("transformers")
    from quest_geometric.testing.hf import build_hf, tokens

    from quest_geometric.nn.focus import compose_focus

    m = build_hf("llama")
    compose_focus(m, window=3, router=RandomGroupsRouter(4, top_k=2, seed=5))
    x = tokens(1, 30, seed=11)
    with torch.no_grad():
        full = m(x, use_cache=False).logits
        cache = m(x[:, :12], use_cache=True).past_key_values
        for i in range(12, 30):
            o = m(x[:, i:i + 1], cache=cache, use_cache=True)
            torch.testing.assert_close(o.logits[:, 0], full[:, i], atol=1e-4, rtol=0)
        assert len(getattr(cache, "_quest_focus_states")) > 0  # the Focus decoding path ran


@pytest.mark.parametrize("k,top_k", [(4, 2), (16, 2)])
def test_far_positions_draw_only_their_own_blocks(monkeypatch, k, top_k):
    """A decoding step at position p draws the permutation of p's block alone (not one per
    block before it), and the groups of scattered positions equal the definition."""
    from quest_geometric.nn.focus.random_router import random_balanced_groups

    pos = torch.tensor([[8191, 3], [40, 8191]])
    ref = torch.tensor([[_definition(int(p), k, top_k, 5) for p in row] for row in pos])
    drawn = []
    real = torch.randperm
    monkeypatch.setattr(torch, "randperm", lambda n, **kw: drawn.append(n) or real(n, **kw))
    assert torch.equal(random_balanced_groups(pos, k, top_k, seed=5), ref)
    assert len(drawn) == len({int(p) // k for p in pos.reshape(-1)})  # 3 blocks
    drawn.clear()
    random_balanced_groups(torch.tensor([8191]), k, top_k, seed=5)
    assert len(drawn) == 1
