"""pydoc_topic_splits / pydoc_splits: three disjoint topic parts by the documented rule, held-out
blocks that share no n-window with the training text (checked with an independent set of
tuples), and the old two-way split's text overlap that the module docstring states."""
import pytest
from pydoc_data.topics import topics

from quest_geometric.datasets import (
    overlap_share,
    pydoc_splits,
    pydoc_text,
    pydoc_topic_split,
    pydoc_topic_splits,
    window_set,
)


class ByteTokenizer:
    def encode(self, text, add_special_tokens=True):
        assert add_special_tokens is False
        return list(text.encode("utf-8"))


def test_three_way_split_rule():
    names = sorted(topics)
    for every in (3, 4, 5, 9):
        train, val, test = pydoc_topic_splits(every)
        assert val == [names[i] for i in range(2, len(names), every)]
        assert test == [names[i] for i in range(4, len(names), every)]
        assert not (set(train) & set(val) or set(train) & set(test) or set(val) & set(test))
        assert sorted(train + val + test) == names
    # the validation topics are those of the two-way split with the same period
    assert pydoc_topic_splits(5)[1] == pydoc_topic_split(5)[1]
    for bad, err in ((2, ValueError), (1, ValueError), (4.0, TypeError), (True, TypeError)):
        with pytest.raises(err, match="^pydoc_topic_splits: 'every' must be an int >= 3"):
            pydoc_topic_splits(bad)


def test_pydoc_text_joins_sorted_topics():
    assert pydoc_text(["with", "async"]) == topics["async"] + "\n\n" + topics["with"]
    with pytest.raises(ValueError, match="unknown topic"):
        pydoc_text(["no-such-topic"])


@pytest.mark.slow
def test_pydoc_splits_held_out_blocks_share_no_window_with_training():
    n, S = 32, 512
    s = pydoc_splits(ByteTokenizer(), block_size=S, n=n)
    train_ids = ByteTokenizer().encode(pydoc_text(s.report["topics"]["train"]), False)
    ref = {tuple(train_ids[i:i + n]) for i in range(len(train_ids) - n + 1)}  # independent
    assert s.train.shape[1] == S and s.train.flatten().tolist() == train_ids[:s.train.numel()]
    for part in ("val", "test"):
        blocks = getattr(s, part)
        assert len(blocks) > 0 and s.report[part]["blocks"]["share"] == 0.0
        stream = ByteTokenizer().encode(pydoc_text(s.report["topics"][part]), False)
        for start, b in zip(s.report[part]["starts"], blocks.tolist()):
            assert b == stream[start:start + S]
            assert not any(tuple(b[i:i + n]) in ref for i in range(S - n + 1))
        # the plain blocks of the same stream do repeat training text
        assert s.report[part]["stream"]["share"] > 0.0


@pytest.mark.slow
def test_old_two_way_split_overlaps_in_text():
    """The module docstring's statement: topic-disjoint, yet much validation text repeats
    training text (a byte-level check of 32-byte windows, no model needed)."""
    train, val = pydoc_topic_split()
    tok = ByteTokenizer()
    tr = tok.encode(pydoc_text(train), False)
    va = tok.encode(pydoc_text(val), False)
    r = overlap_share([va], window_set(tr, 32), 32)
    assert r["share"] > 0.3
