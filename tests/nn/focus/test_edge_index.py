import pytest
import torch

from quest_geometric.nn.focus.edge_index import focus_edge_index


def pairs(mask):
    """The (target, source) pairs of a [N, N] (query, key) mask, sorted (row-major order)."""
    return [tuple(p) for p in mask.nonzero().tolist()]


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("top_k", [1, 2, 3])
@pytest.mark.parametrize("window", [0, 1, 3, 50])
def test_matches_dense_definition(causal, top_k, window, focus_mask_reference):
    torch.manual_seed(top_k * 10 + window)
    n, k = 23, 5
    groups = torch.stack([torch.randperm(k)[:top_k] for _ in range(n)])
    batch = torch.tensor([0] * 9 + [1] * 1 + [2] * 13)
    for b in (None, batch):
        ei = focus_edge_index(groups, window, b, causal=causal)
        got = list(zip(ei[1].tolist(), ei[0].tolist()))
        assert got == pairs(focus_mask_reference(groups, window, b, causal))  # exact, once, sorted


def test_duplicate_ids_in_a_set_and_1d_groups(focus_mask_reference):
    groups = torch.tensor([[0, 0], [1, 1], [0, 2], [2, 2]])
    ei = focus_edge_index(groups, 0)
    got = list(zip(ei[1].tolist(), ei[0].tolist()))
    assert got == pairs(focus_mask_reference(groups, 0, None, True))
    g1 = torch.tensor([0, 1, 0, 1, 1])
    ei = focus_edge_index(g1, 1)
    assert list(zip(ei[1].tolist(), ei[0].tolist())) == \
        pairs(focus_mask_reference(g1[:, None], 1, None, True))


@pytest.mark.slow
def test_large_batched_input_count_without_dense_matrix():
    # 64K tokens, K = 8: 64 sequences of 1024 tokens, groups i % 8, window 3.
    # Window offsets 1..3 are always in other groups, so
    # E = per sequence: sum_g c(c+1)/2 (c = 128) + (T-1) + (T-2) + (T-3).
    t, b, k, w = 1024, 64, 8, 3
    n = t * b
    groups = (torch.arange(n) % k)[:, None]
    batch = torch.arange(b).repeat_interleave(t)
    ei = focus_edge_index(groups, w, batch)
    per_seq = k * 128 * 129 // 2 + (3 * t - 6)
    assert ei.shape == (2, b * per_seq)
    # a dense N x N boolean would be 4 GiB; E is ~4.4M: check sortedness and locality
    assert bool((ei[1][1:] >= ei[1][:-1]).all())
    assert bool((batch[ei[0]] == batch[ei[1]]).all())
    assert bool((ei[0] <= ei[1]).all())


def test_errors():
    g = torch.zeros(4, 1, dtype=torch.long)
    with pytest.raises(ValueError, match="window"):
        focus_edge_index(g, -1)
    with pytest.raises(ValueError, match="sorted"):
        focus_edge_index(g, 1, torch.tensor([0, 1, 0, 1]))
    with pytest.raises(TypeError, match="groups"):
        focus_edge_index(g.float(), 1)
    assert focus_edge_index(torch.zeros(0, 1, dtype=torch.long), 2).shape == (2, 0)
