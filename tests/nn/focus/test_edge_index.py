import pytest
import torch

from quest_geometric.nn.focus.edge_index import focus_edge_index


def pairs(mask):
    """The (target, source) pairs of a [N, N] (query, key) mask, sorted (row-major order)."""
    return [tuple(p) for p in mask.nonzero().tolist()]


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("top_k", [0, 1, 2, 3])
@pytest.mark.parametrize("window", [0, 1, 3, 50])
@pytest.mark.parametrize("num_sinks", [0, 1, 3, 30])
def test_matches_dense_definition(causal, top_k, window, num_sinks, focus_mask_reference):
    torch.manual_seed(top_k * 10 + window)
    n, k = 23, 5
    groups = torch.stack([torch.randperm(k)[:top_k] for _ in range(n)])
    batch = torch.tensor([0] * 9 + [1] * 1 + [2] * 13)
    for b in (None, batch):
        ei = focus_edge_index(groups, window, b, causal=causal, num_sinks=num_sinks)
        got = list(zip(ei[1].tolist(), ei[0].tolist()))
        # exact, once, sorted
        assert got == pairs(focus_mask_reference(groups, window, b, causal, num_sinks))


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


@pytest.mark.parametrize("causal", [True, False])
def test_huge_window_is_bounded_by_the_sequence_length(causal, focus_mask_reference):
    # issue 28 §6: the window band used to take N x window entries whatever N (40 tokens at
    # window=2_000_000: 2.4 GB); a window past the longest sequence means the whole sequence
    torch.manual_seed(0)
    n = 40
    groups = torch.randint(0, 6, (n, 2))
    batch = torch.tensor([0] * 7 + [1] * 30 + [2] * 3)
    for b in (None, batch):
        ref = focus_edge_index(groups, n - 1, b, causal=causal)
        for w in (2_000_000, 10**9):
            ei = focus_edge_index(groups, w, b, causal=causal)
            assert torch.equal(ei, ref)
            got = list(zip(ei[1].tolist(), ei[0].tolist()))
            assert got == pairs(focus_mask_reference(groups, n - 1, b, causal))
    # one short sequence, window 10**9: every causal pair
    ei = focus_edge_index(torch.zeros(3, 1, dtype=torch.long) + torch.arange(3)[:, None],
                          10**9)
    assert list(zip(ei[1].tolist(), ei[0].tolist())) == \
        [(0, 0), (1, 0), (1, 1), (2, 0), (2, 1), (2, 2)]
