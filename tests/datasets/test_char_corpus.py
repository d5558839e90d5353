import os

import pytest
import torch

from quest_geometric.datasets.char_corpus import (
    UNK_CHAR,
    WIKITEXT103_FILES,
    CharCorpus,
    load_python_reference,
)


@pytest.fixture(scope="module")
def corpus():
    return CharCorpus(block_size=32)


@pytest.fixture(scope="module")
def reference_text():
    from pydoc_data.topics import topics

    return "".join(topics[k] for k in sorted(topics))


def test_embedded_default_loads(corpus, reference_text):
    assert load_python_reference() == reference_text
    n = len(reference_text)
    cut = round(n * 0.9)
    assert corpus.split_length("train") == cut
    assert corpus.split_length("val") == n - cut
    # Vocabulary: sorted distinct characters of the training split, then <unk>.
    assert corpus.chars == "".join(sorted(set(reference_text[:cut])))
    assert corpus.vocab_size == len(corpus.chars) + 1
    assert corpus.unk_index == len(corpus.chars)
    assert corpus.splits["train"].dtype == torch.uint8
    assert sorted(corpus.splits) == ["train", "val"]
    assert repr(corpus).startswith("CharCorpus(source='python-reference', vocab_size=")


def test_roundtrip_and_splits_match_text(corpus, reference_text):
    cut = corpus.split_length("train")
    assert corpus.decode(corpus.splits["train"][:5000].long()) == reference_text[:5000]
    val_text = reference_text[cut:]
    decoded = corpus.decode(corpus.splits["val"].long())
    # Known characters round-trip; any unknown one becomes the replacement character.
    assert len(decoded) == len(val_text)
    assert all(d == c or (d == UNK_CHAR and c not in corpus.stoi) for d, c in zip(decoded,
                                                                                  val_text))
    s = "def f(x):\n    return x ** 2  # ok"
    ids = corpus.encode(s)
    assert ids.dtype == torch.long
    assert ids.tolist() == [corpus.chars.index(c) for c in s]
    assert corpus.decode(ids) == s


def test_unknown_characters_map_to_unk(corpus):
    ids = corpus.encode("a\u4e2db")
    assert ids[1].item() == corpus.unk_index
    assert corpus.decode(ids) == "a" + UNK_CHAR + "b"


def test_get_batch_shapes_shift_and_contiguity(corpus, reference_text):
    g = torch.Generator().manual_seed(0)
    x, y = corpus.get_batch("train", 6, generator=g)
    assert x.shape == y.shape == (6, 32)
    assert x.dtype == y.dtype == torch.long
    assert torch.equal(x[:, 1:], y[:, :-1])
    train_text = reference_text[: corpus.split_length("train")]
    for b in range(6):
        block = corpus.decode(x[b]) + corpus.decode(y[b, -1:])
        assert block in train_text


def test_get_batch_deterministic(corpus):
    a = corpus.get_batch("val", 4, generator=torch.Generator().manual_seed(7))
    b = corpus.get_batch("val", 4, generator=torch.Generator().manual_seed(7))
    c = corpus.get_batch("val", 4, generator=torch.Generator().manual_seed(8))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])
    x, _ = corpus.get_batch("val", 2, generator=torch.Generator().manual_seed(1), block_size=5)
    assert x.shape == (2, 5)


def test_iter_blocks_covers_split(tmp_path):
    text = "abcdefghij" * 7 + "xyz"  # 73 characters
    path = tmp_path / "t.txt"
    path.write_text(text, encoding="utf-8")
    c = CharCorpus(str(path), val_fraction=0.2, block_size=8)
    train = text[: round(73 * 0.8)]
    assert c.split_length("train") == len(train)
    xs, ys = zip(*c.iter_blocks("train", batch_size=3))
    x, y = torch.cat(xs), torch.cat(ys)
    nb = (len(train) - 1) // 8
    assert x.shape == (nb, 8) == (c.num_blocks("train"),) + (8,)
    assert c.decode(x.reshape(-1)) == train[: nb * 8]
    assert c.decode(y.reshape(-1)) == train[1: nb * 8 + 1]
    assert [len(b) for b in xs] == [3, 3, 1]
    assert sum(len(b) for b, _ in c.iter_blocks("train", batch_size=2, max_blocks=3)) == 3
    # Deterministic: a second pass gives the same blocks.
    assert torch.equal(torch.cat([b for b, _ in c.iter_blocks("train", batch_size=3)]), x)


def _write_wikitext(d, texts):
    d.mkdir()
    for split, name in WIKITEXT103_FILES.items():
        (d / name).write_text(texts[split], encoding="utf-8")


WIKI = {
    "train": " \n = Valkyria Chronicles = \n \n The game was released in 2011 @-@ 2012 , "
             "selling 1 @,@ 000 copies at 3 @.@ 5 dollars . \n \n = = Plot = = \n",
    "val": " \n = Robert Boulter = \n \n Boulter is an English actor @-@ writer . \n",
    "test": " \n = Tower Building = \n \n It was built in 1906 . Zürich \n",
}


def test_wikitext_raw_directory(tmp_path):
    d = tmp_path / "wikitext-103-raw"
    _write_wikitext(d, WIKI)
    c = CharCorpus(str(d), block_size=16)
    assert sorted(c.splits) == ["test", "train", "val"]
    assert c.chars == "".join(sorted(set(WIKI["train"])))
    assert c.decode(c.splits["train"].long()) == WIKI["train"]
    for split in ("val", "test"):
        assert c.split_length(split) == len(WIKI[split])
    # 'ü' and 'Z' are not in the training text: unknown.
    test_dec = c.decode(c.splits["test"].long())
    assert test_dec.count(UNK_CHAR) == sum(ch not in c.stoi for ch in WIKI["test"]) >= 2
    x, y = c.get_batch("test", 3, generator=torch.Generator().manual_seed(0))
    assert torch.equal(x[:, 1:], y[:, :-1])
    # val_fraction is ignored for WikiText (it has its own splits).
    c2 = CharCorpus(d, block_size=16, val_fraction=0.5)
    assert c2.split_length("train") == len(WIKI["train"])


def test_wikitext_detokenize(tmp_path):
    d = tmp_path / "wt"
    _write_wikitext(d, WIKI)
    c = CharCorpus(str(d), block_size=16, wikitext_detokenize=True)
    train = c.decode(c.splits["train"].long())
    assert "2011-2012" in train and "1,000" in train and "3.5" in train
    assert "@" not in train


def test_fixed_vocab(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("hello world, hello there\n" * 4, encoding="utf-8")
    c = CharCorpus(path, block_size=4, vocab="dlehow ")
    assert c.chars == "dlehow "
    assert c.encode("hello").tolist() == [3, 2, 1, 1, 4]  # d0 l1 e2 h3 o4
    assert c.encode(",").tolist() == [c.unk_index]
    other = CharCorpus(path, block_size=4, vocab=list(c.chars))
    assert torch.equal(other.splits["train"], c.splits["train"])


def test_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="python-reference"):
        CharCorpus(str(tmp_path / "missing.txt"))
    d = tmp_path / "partial"
    d.mkdir()
    (d / "wiki.train.raw").write_text("abc" * 100, encoding="utf-8")
    with pytest.raises(FileNotFoundError, match="wiki.valid.raw.*download"):
        CharCorpus(str(d))
    empty = tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    with pytest.raises(ValueError, match="empty"):
        CharCorpus(str(empty))
    small = tmp_path / "small.txt"
    small.write_text("abcdefghij" * 10, encoding="utf-8")
    with pytest.raises(ValueError, match="^CharCorpus: 'block_size' must be smaller than the "
                                         "length of the 'val' split"):
        CharCorpus(str(small), block_size=10)
    c = CharCorpus(str(small), block_size=4)
    with pytest.raises(ValueError, match="^CharCorpus.get_batch: 'block_size' must be smaller"):
        c.get_batch("val", 2, block_size=10)
    with pytest.raises(ValueError, match=r"^CharCorpus.get_batch: 'split' must be one of \("):
        c.get_batch("test", 2)
    with pytest.raises(ValueError, match="batch_size"):
        c.get_batch("train", 0)
    with pytest.raises(ValueError, match=r"^CharCorpus.decode: 'ids' must be ints in \[0, "):
        c.decode([0, c.vocab_size])
    for bad in (0.0, 1.0, -0.1):
        with pytest.raises(ValueError, match="val_fraction"):
            CharCorpus(str(small), val_fraction=bad)
    with pytest.raises(ValueError, match="block_size"):
        CharCorpus(str(small), block_size=0)
    with pytest.raises(ValueError, match="^CharCorpus: 'vocab' must be distinct characters, "
                                         "got 'a' more than once$"):
        CharCorpus(str(small), block_size=4, vocab="aab")
    with pytest.raises(TypeError, match="source"):
        CharCorpus(3)
    assert os.path.exists(small)
