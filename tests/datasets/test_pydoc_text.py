"""pydoc_topic_split / token_blocks: a topic split with no overlap, and blocks that are exactly
consecutive slices of one tokenization (a tiny fake tokenizer, no model needed)."""
import pytest
import torch
from pydoc_data.topics import topics

from quest_geometric.datasets import pydoc_topic_split, token_blocks


class ByteTokenizer:
    """Fake tokenizer: one id per UTF-8 byte, with a BOS id 256 that must not be added."""

    def __init__(self):
        self.calls = []

    def encode(self, text, add_special_tokens=True):
        self.calls.append(text)
        return ([256] if add_special_tokens else []) + list(text.encode("utf-8"))


def test_split_partitions_sorted_topics():
    names = sorted(topics)
    for every in (2, 5, 7):
        train, val = pydoc_topic_split(every)
        assert not set(train) & set(val)
        assert sorted(train + val) == names
        assert train == sorted(train) and val == sorted(val)
        # hand-built rule: indices 2, 2 + every, ... go to validation
        assert val == [names[i] for i in range(2, len(names), every)]
    train, val = pydoc_topic_split()
    assert len(val) == len(range(2, len(names), 5)) and len(train) == len(names) - len(val)


def test_split_rejects_bad_val_every():
    for bad, err in ((1, ValueError), (0, ValueError), (-3, ValueError), (2.5, TypeError),
                     (True, TypeError), ("5", TypeError)):
        with pytest.raises(err, match="^pydoc_topic_split: 'val_every' must be an int >= 2"):
            pydoc_topic_split(bad)


def test_blocks_are_consecutive_slices_of_one_tokenization():
    _, val = pydoc_topic_split()
    tok = ByteTokenizer()
    shuffled = list(reversed(val[:4]))          # order of the names must not matter
    blocks = token_blocks(tok, shuffled, block_size=97)
    assert len(tok.calls) == 1                  # tokenized once
    text = "\n\n".join(topics[n] for n in sorted(shuffled))
    assert tok.calls[0] == text
    ids = list(text.encode("utf-8"))            # independent reference, no BOS
    n = len(ids) // 97
    assert blocks.dtype == torch.long and blocks.shape == (n, 97)
    assert torch.equal(blocks.flatten(), torch.tensor(ids[:n * 97]))
    for b in (0, n // 2, n - 1):
        assert blocks[b].tolist() == ids[b * 97:(b + 1) * 97]
    first = token_blocks(tok, shuffled, block_size=97, max_blocks=3)
    assert torch.equal(first, blocks[:3])
    assert torch.equal(token_blocks(tok, shuffled, block_size=97, max_blocks=10 ** 6), blocks)


def test_blocks_reject_bad_input():
    tok = ByteTokenizer()
    name = sorted(topics)[0]
    with pytest.raises(ValueError, match="block_size"):
        token_blocks(tok, [name], block_size=0)
    with pytest.raises(ValueError, match="max_blocks"):
        token_blocks(tok, [name], block_size=8, max_blocks=0)
    with pytest.raises(ValueError, match="empty"):
        token_blocks(tok, [], block_size=8)
    with pytest.raises(ValueError, match="more than once"):
        token_blocks(tok, [name, name], block_size=8)
    with pytest.raises(ValueError, match="unknown topic"):
        token_blocks(tok, ["no-such-topic"], block_size=8)
    with pytest.raises(ValueError, match="not one string"):
        token_blocks(tok, name, block_size=8)
    with pytest.raises(ValueError, match="fewer than one block"):
        token_blocks(tok, [name], block_size=10 ** 8)
    with pytest.raises(TypeError, match="encode"):
        token_blocks(object(), [name], block_size=8)
