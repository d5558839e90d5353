"""text_splits: exact n-window overlap against a brute-force reference, deduplicated blocks
with zero overlap cut only from clean runs, and the bad-input errors."""
import numpy as np
import pytest
import torch

from quest_geometric.datasets import (
    clean_blocks,
    covered_positions,
    deduplicated_splits,
    overlap_share,
    window_set,
)


def brute_covered(y, train, n):
    """Position p is covered when some n-window of y containing p occurs in train (lists)."""
    train_w = {tuple(train[s:s + n]) for s in range(len(train) - n + 1)}
    out = [False] * len(y)
    for s in range(len(y) - n + 1):
        if tuple(y[s:s + n]) in train_w:
            for p in range(s, s + n):
                out[p] = True
    return out


def corpus(seed, length, vocab=4):
    return np.random.default_rng(seed).integers(0, vocab, length).tolist()


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_covered_positions_match_brute_force(n):
    for seed in range(6):
        train = corpus(seed, 60)
        y = corpus(100 + seed, 50) + train[10:25] + corpus(200 + seed, 7)  # one copied span
        ws = window_set(train, n)
        got = covered_positions(y, ws, n)
        assert got.tolist() == brute_covered(y, train, n)


def test_copied_span_is_covered_exactly():
    train = list(range(100, 200))
    y = [1, 2, 3] + list(range(120, 130)) + [4, 5]  # 10 tokens copied from training
    m = covered_positions(y, window_set(train, 4), 4)
    assert m.tolist() == [False] * 3 + [True] * 10 + [False] * 2
    # 9 copied tokens with n = 10: no full window copied -> nothing covered
    assert not covered_positions([1] + list(range(120, 129)) + [2], window_set(train, 10), 10).any()


def test_window_set_is_exact_and_respects_parts():
    ws = window_set([[1, 2, 3], [4, 5]], n=2)
    # windows inside each part, none across the boundary (3, 4)
    assert ws == window_set([1, 2, 3], 2) | window_set([4, 5], 2)
    assert np.array([3, 4], dtype=np.int64).tobytes() not in ws
    # tensors, numpy arrays and lists give the same set
    assert window_set(torch.tensor([7, 8, 9]), 2) == window_set(np.array([7, 8, 9]),
                                                                2) == window_set([7, 8, 9], 2)


def test_overlap_share_counts_and_per_block():
    train = list(range(50))
    blocks = torch.tensor([list(range(10, 18)), [90, 91, 92, 93, 94, 95, 96, 97]])
    r = overlap_share(blocks, window_set(train, 3), 3)
    assert r["per_block"] == [1.0, 0.0]
    assert r["share"] == 0.5 and r["covered"] == 8 and r["positions"] == 16
    # no block at all (a held-out stream shorter than one block): nothing measured
    empty = overlap_share(torch.zeros(0, 8, dtype=torch.long), window_set(train, 3), 3)
    assert empty["per_block"] == [] and empty["positions"] == 0 and empty["share"] != empty[
        "share"]  # NaN


def test_clean_blocks_have_zero_overlap_and_come_from_clean_runs():
    rng = np.random.default_rng(0)
    train = rng.integers(0, 50, 400).tolist()
    # held-out stream: clean text with training spans pasted in
    held = (rng.integers(50, 100, 37).tolist() + train[5:45] + rng.integers(50, 100, 90).tolist()
            + train[300:330] + rng.integers(50, 100, 25).tolist())
    n, L = 8, 16
    ws = window_set(train, n)
    blocks, info = clean_blocks(held, ws, L, n)
    cov = brute_covered(held, train, n)
    expected = []  # hand rule: maximal uncovered runs, blocks from each run's start
    p = 0
    while p < len(held):
        if cov[p]:
            p += 1
            continue
        q = p
        while q < len(held) and not cov[q]:
            q += 1
        expected += list(range(p, q - L + 1, L))
        p = q
    assert info["starts"] == expected and len(expected) > 0
    for s, b in zip(info["starts"], blocks):
        assert b.tolist() == held[s:s + L]
        assert not any(brute_covered(b.tolist(), train, n))
    assert info["kept_share"] == pytest.approx(len(expected) * L / len(held))
    assert overlap_share(blocks, ws, n)["share"] == 0.0


def test_deduplicated_splits_reports_the_raw_overlap():
    train = list(range(1000))
    val = list(range(100, 164)) + list(range(2000, 2064))  # half copied
    test = list(range(3000, 3064))
    s = deduplicated_splits(train, val, test, block_len=32, n=8)
    assert s.train.shape == (31, 32) and s.test.shape == (2, 32)
    assert s.val.shape == (2, 32) and s.val.min() >= 2000
    assert s.report["val"]["stream"]["per_block"] == [1.0, 1.0, 0.0, 0.0]
    assert s.report["val"]["stream"]["share"] == 0.5
    assert s.report["val"]["blocks"]["share"] == 0.0 and s.report["test"]["stream"]["share"] == 0.0
    assert s.report["val"]["kept_share"] == 0.5


def test_bad_input():
    with pytest.raises(ValueError, match="'n'"):
        window_set([1, 2], 0)
    with pytest.raises(TypeError, match="'tokens'"):
        window_set("abc", 2)
    with pytest.raises(TypeError, match="integer"):
        covered_positions([0.5, 1.5], frozenset(), 2)
    with pytest.raises(ValueError, match="one-dimensional"):
        covered_positions(np.zeros((2, 2), dtype=int), frozenset(), 2)
    with pytest.raises(ValueError, match="'n'"):
        clean_blocks([1, 2, 3], frozenset(), block_len=2, n=3)
