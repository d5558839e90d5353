"""Pair budgets: the measured share of pairs a hard pattern keeps (focus_pair_share), the
closed-form share of the sliding window plus sinks (pattern_share) and the window at a
given budget (window_for_share), against brute-force counts of the dense mask."""
import pytest
import torch

from quest_geometric.nn.focus import focus_pair_share, pattern_share, window_for_share
from quest_geometric.testing.focus import random_groups


def _brute(seq_len, window, num_sinks, causal, focus_mask_reference):
    """(kept, total) pairs of the window-plus-sinks pattern from the reference mask."""
    groups = torch.empty(seq_len, 0, dtype=torch.long)  # no group
    mask = focus_mask_reference(groups, window, None, causal, num_sinks)
    total = seq_len * (seq_len + 1) // 2 if causal else seq_len * seq_len
    return int(mask.sum()), total


@pytest.mark.parametrize("causal", [True, False])
def test_pattern_share_equals_brute_force_counts(causal, focus_mask_reference):
    for seq_len in (1, 2, 5, 13):
        for window in (0, 1, 3, seq_len - 1, seq_len, seq_len + 7):
            for num_sinks in (0, 1, 4, seq_len, seq_len + 3):
                kept, total = _brute(seq_len, window, num_sinks, causal, focus_mask_reference)
                assert pattern_share(seq_len, window, num_sinks, causal) == kept / total, (
                    seq_len, window, num_sinks)


def test_pattern_share_edge_cases():
    assert pattern_share(1, 0) == 1.0
    assert pattern_share(9, 8) == pattern_share(9, 100) == 1.0  # window >= L - 1: all pairs
    assert pattern_share(9, 0, num_sinks=9) == pattern_share(9, 0, num_sinks=50) == 1.0
    assert pattern_share(10, 0) == 10 / 55  # the diagonal
    assert pattern_share(10, 0, causal=False) == 10 / 100


@pytest.mark.parametrize("causal", [True, False])
def test_window_for_share_is_the_smallest_window_reaching_the_share(causal):
    for seq_len in (1, 3, 16, 37):
        for num_sinks in (0, 2, seq_len, seq_len + 1):
            shares = [pattern_share(seq_len, w, num_sinks, causal) for w in range(seq_len)]
            for share in [0.0, 1.0, 0.5, 0.123, 0.999] + shares:
                w = window_for_share(seq_len, share, num_sinks, causal)
                # brute force: the first window whose exact share reaches the target
                want = next(i for i, r in enumerate(shares) if r >= share)
                assert w == want, (seq_len, num_sinks, share)
                assert pattern_share(seq_len, w, num_sinks, causal) >= share


def test_window_for_share_edge_cases():
    assert window_for_share(100, 0.0) == 0
    assert window_for_share(100, 1.0) == 99  # every pair: the whole sequence
    assert window_for_share(100, 1.0, num_sinks=100) == 0  # the sinks hold every pair
    assert window_for_share(100, 1.0, num_sinks=99) == 0  # the last query's diagonal too
    assert window_for_share(1, 1.0) == 0
    # the share of a window is reached by that window exactly
    for w in (0, 5, 50):
        assert window_for_share(100, pattern_share(100, w, 4), num_sinks=4) == w
    # a budget between two windows' shares needs the larger window
    mid = (pattern_share(100, 5, 4) + pattern_share(100, 6, 4)) / 2
    assert window_for_share(100, mid, num_sinks=4) == 6


def test_budget_functions_refuse_bad_arguments():
    with pytest.raises(TypeError, match="window_for_share: 'seq_len'"):
        window_for_share(10.0, 0.5)
    with pytest.raises(ValueError, match="window_for_share: 'seq_len'"):
        window_for_share(0, 0.5)
    with pytest.raises(ValueError, match="window_for_share: 'share'"):
        window_for_share(10, 1.5)
    with pytest.raises(ValueError, match="window_for_share: 'share'"):
        window_for_share(10, -0.1)
    with pytest.raises(ValueError, match="window_for_share: 'share'"):
        window_for_share(10, float("nan"))
    with pytest.raises(TypeError, match="window_for_share: 'share'"):
        window_for_share(10, "half")
    with pytest.raises(TypeError, match="window_for_share: 'share'"):
        window_for_share(10, True)
    with pytest.raises(ValueError, match="window_for_share: 'num_sinks'"):
        window_for_share(10, 0.5, num_sinks=-1)
    with pytest.raises(TypeError, match="pattern_share: 'window'"):
        pattern_share(10, 1.5)
    with pytest.raises(ValueError, match="pattern_share: 'window'"):
        pattern_share(10, -1)
    with pytest.raises(ValueError, match="pattern_share: 'seq_len'"):
        pattern_share(-3, 1)
    with pytest.raises(TypeError, match="pattern_share: 'num_sinks'"):
        pattern_share(10, 1, num_sinks=None)
    with pytest.raises(ValueError, match="num_sinks"):
        focus_pair_share(torch.zeros(4, 1, dtype=torch.long), 1, num_sinks=-2)
    with pytest.raises(ValueError, match="window"):
        focus_pair_share(torch.zeros(4, 1, dtype=torch.long), -1)
    with pytest.raises(TypeError, match="groups"):
        focus_pair_share(torch.zeros(4, 1), 1)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("top_k", [0, 1, 2])
@pytest.mark.parametrize("num_sinks", [0, 3])
def test_focus_pair_share_counts_the_reference_mask(causal, top_k, num_sinks,
                                                    focus_mask_reference):
    batch = torch.tensor([0] * 5 + [1] * 1 + [2] * 24)
    groups = random_groups(batch.numel(), 4, top_k, seed=top_k)
    for b in (None, batch):
        mask = focus_mask_reference(groups, 2, b, causal, num_sinks)
        seq = torch.zeros(batch.numel(), dtype=torch.long) if b is None else b
        same = seq.view(-1, 1) == seq.view(1, -1)
        pairs = same.tril() if causal else same
        want = int(mask.sum()) / int(pairs.sum())
        assert focus_pair_share(groups, 2, b, causal, num_sinks) == want
        # several query chunks per sequence count the same pairs
        assert focus_pair_share(groups, 2, b, causal, num_sinks, chunk=7) == want


def test_focus_pair_share_without_groups_is_the_pattern_share():
    groups = torch.empty(50, 0, dtype=torch.long)
    for w, s in ((0, 0), (3, 2), (10, 0), (49, 5)):
        assert focus_pair_share(groups, w, num_sinks=s) == pattern_share(50, w, s)
    assert focus_pair_share(torch.zeros(20, 1, dtype=torch.long), 0) == 1.0  # one group
