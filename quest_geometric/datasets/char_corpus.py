"""Character-level language-modelling corpus (:class:`CharCorpus`): vocabulary, splits and
random blocks, from the Python language reference shipped with CPython (no download), a UTF-8
text file, or the WikiText-103 raw files (the setting of the query/key geometry study).
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence

from typing import Optional, Union

import numpy as np
import torch
from torch import Tensor

from quest_geometric._utils.checks import check_choice, check_int, check_real, fail

__all__ = ["CharCorpus", "WIKITEXT103_FILES", "UNK_CHAR", "load_python_reference"]

#: The WikiText-103 raw files expected in a directory source, by split.
WIKITEXT103_FILES: dict[str, str] = {
    "train": "wiki.train.raw",
    "val": "wiki.valid.raw",
    "test": "wiki.test.raw",
}

#: How the unknown-character index is rendered by :meth:`CharCorpus.decode`.
UNK_CHAR: str = "\ufffd"

_WIKITEXT_URL = (
    "https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-103-raw-v1.zip "
    "(or the Hugging Face dataset 'Salesforce/wikitext', config 'wikitext-103-raw-v1')"
)

# WikiText's tokenisation of in-word hyphens and number separators.
_WIKITEXT_DETOK = ((" @-@ ", "-"), (" @,@ ", ","), (" @.@ ", "."))

_CHUNK = 1 << 22  # characters encoded at a time (bounds the UTF-32 buffer to 16 MiB)


def load_python_reference() -> str:
    """The Python language reference shipped with CPython: the topics of
    :data:`pydoc_data.topics.topics` concatenated in sorted key order (the same text on every
    run of one CPython version)."""
    from pydoc_data.topics import topics

    return "".join(topics[k] for k in sorted(topics))


def _codepoints(text: str) -> np.ndarray:
    """Unicode code points of ``text`` as a ``uint32`` array (no per-character Python loop)."""
    return np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)


def _distinct_chars(text: str) -> str:
    """Sorted distinct characters of ``text`` (by code point, like ``sorted(set(text))``)."""
    seen = np.zeros(0, dtype=np.uint32)
    for start in range(0, len(text), _CHUNK):
        seen = np.union1d(seen, np.unique(_codepoints(text[start:start + _CHUNK])))
    return "".join(map(chr, seen.tolist()))


def _storage_dtype(vocab_size: int) -> torch.dtype:
    if vocab_size <= 256:
        return torch.uint8
    if vocab_size <= 32767:
        return torch.int16
    return torch.int32


class CharCorpus:
    r"""A character-level corpus with a fixed vocabulary and train/val(/test) splits.

    The vocabulary is the sorted set of distinct characters of the **training** split (or
    ``vocab``), plus an *unknown* index ``unk_index == len(chars)`` for any other character
    (rendered ``'\ufffd'`` by :meth:`decode`), so a model trained on one corpus can be
    evaluated on any text. Splits are stored encoded in the smallest integer type that holds
    the vocabulary; blocks are :obj:`torch.long`. A training example is a block ``x`` of
    ``block_size`` characters and the block shifted by one, ``y``:

    .. math::
        x = (c_s, \ldots, c_{s+T-1}), \qquad y = (c_{s+1}, \ldots, c_{s+T}),
        \qquad s \sim \mathcal{U}\{0, \ldots, n - T - 1\}.

    Args:
        source (str or os.PathLike): ``'python-reference'``, a path to a UTF-8 text file, or a
            directory holding :data:`WIKITEXT103_FILES`. (default: ``'python-reference'``)
        val_fraction (float): for a single text, the trailing fraction held out as the
            ``'val'`` split (WikiText-103 has its own splits). (default: ``0.1``)
        block_size (int): context length of the blocks. (default: ``256``)
        vocab (str or Sequence[str], optional): a fixed vocabulary of distinct characters in
            index order (e.g. ``other.chars``); :obj:`None` builds it from the training split.
            (default: :obj:`None`)
        wikitext_detokenize (bool): for WikiText-103, undo its ``" @-@ "``, ``" @,@ "`` and
            ``" @.@ "`` tokens; off keeps the raw benchmark text. (default: :obj:`False`)

    Attributes:
        chars (str): the known characters in index order.
        splits (dict[str, Tensor]): the encoded splits (``'train'``, ``'val'`` and, for
            WikiText-103, ``'test'``).

    Example:
        >>> corpus = CharCorpus(block_size=64)
        >>> x, y = corpus.get_batch('train', 8, generator=torch.Generator().manual_seed(0))
        >>> x.shape, bool((x[:, 1:] == y[:, :-1]).all())
        (torch.Size([8, 64]), True)
    """

    def __init__(self, source: Union[str, os.PathLike] = "python-reference",
                 val_fraction: float = 0.1, block_size: int = 256,
                 vocab: Optional[Union[str, Sequence[str]]] = None,
                 wikitext_detokenize: bool = False) -> None:
        check_int(block_size, "block_size", 1, where="CharCorpus")
        if not 0.0 < check_real(val_fraction, "val_fraction", where="CharCorpus") < 1.0:
            raise fail(ValueError, "CharCorpus", "val_fraction", "strictly between 0 and 1",
                       val_fraction)
        self.block_size = block_size
        self.val_fraction = float(val_fraction)
        self.wikitext_detokenize = bool(wikitext_detokenize)
        texts = self._read_source(source)  # sets self.source
        for split, text in texts.items():
            if len(text) == 0:
                raise ValueError(
                    f"CharCorpus: the {split!r} split of source {self.source!r} is empty")
        self.chars = (_distinct_chars(texts["train"]) if vocab is None
                      else self._check_vocab(vocab))
        self._codes = _codepoints(self.chars).astype(np.int64)  # sorted if built here
        self._order = np.argsort(self._codes, kind="stable")
        self._sorted_codes = self._codes[self._order]
        self._itos = list(self.chars) + [UNK_CHAR]
        self.stoi: dict[str, int] = {c: i for i, c in enumerate(self.chars)}
        self.dtype = _storage_dtype(self.vocab_size)
        self.splits: dict[str, Tensor] = {split: self._encode_array(text)
                                          for split, text in texts.items()}
        for split, data in self.splits.items():
            if block_size >= data.numel():
                raise fail(ValueError, "CharCorpus", "block_size", "smaller than the length of "
                           f"the {split!r} split ({data.numel()} characters)", block_size,
                           hint="; a block needs block_size + 1 characters")

    def _read_source(self, source: Union[str, os.PathLike]) -> dict[str, str]:
        if not isinstance(source, (str, os.PathLike)):
            raise fail(TypeError, "CharCorpus", "source", "'python-reference', a text file "
                       "path or a WikiText-103 raw directory", source)
        if isinstance(source, str) and source == "python-reference":
            self.source = "python-reference"
            return self._split_text(load_python_reference())
        self.source = path = os.fspath(source)
        if os.path.isdir(path):
            return self._read_wikitext(path)
        if not os.path.exists(path):
            raise FileNotFoundError(
                f"CharCorpus: source {path!r} does not exist; pass 'python-reference' (the "
                "embedded default), a UTF-8 text file, or a directory with the WikiText-103 "
                f"raw files {sorted(WIKITEXT103_FILES.values())} (download {_WIKITEXT_URL})")
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if len(text) == 0:
            raise ValueError(f"CharCorpus: the text file {path!r} is empty")
        return self._split_text(text)

    def _split_text(self, text: str) -> dict[str, str]:
        cut = int(round(len(text) * (1.0 - self.val_fraction)))
        return {"train": text[:cut], "val": text[cut:]}

    def _read_wikitext(self, path: str) -> dict[str, str]:
        missing = [f for f in WIKITEXT103_FILES.values()
                   if not os.path.isfile(os.path.join(path, f))]
        if missing:
            raise FileNotFoundError(
                f"CharCorpus: directory {path!r} lacks the WikiText-103 raw files {missing}; "
                f"download {_WIKITEXT_URL} and pass the extracted 'wikitext-103-raw' "
                "directory, or pass a single text file instead")
        texts = {}
        for split, name in WIKITEXT103_FILES.items():
            with open(os.path.join(path, name), encoding="utf-8") as f:
                text = f.read()
            if self.wikitext_detokenize:
                for tok, rep in _WIKITEXT_DETOK:
                    text = text.replace(tok, rep)
            texts[split] = text
        return texts

    @staticmethod
    def _check_vocab(vocab: Union[str, Sequence[str]]) -> str:
        where, what = "CharCorpus", "a str or a sequence of single characters"
        if isinstance(vocab, str):
            items = list(vocab)
        else:
            if not isinstance(vocab, Iterable):
                raise fail(TypeError, where, "vocab", what, vocab)
            items = list(vocab)
            for c in items:
                if not isinstance(c, str):
                    raise fail(TypeError, where, "vocab", what, got_text=f"an entry {c!r}")
                if len(c) != 1:
                    raise fail(ValueError, where, "vocab", what, got_text=f"an entry {c!r}")
        if len(items) == 0:
            raise fail(ValueError, where, "vocab", "non-empty", vocab)
        if len(set(items)) != len(items):
            dup = next(c for i, c in enumerate(items) if c in items[:i])
            raise fail(ValueError, where, "vocab", "distinct characters",
                       got_text=f"{dup!r} more than once")
        if UNK_CHAR in items:
            raise fail(ValueError, where, "vocab", f"free of {UNK_CHAR!r} (which renders the "
                       "unknown index)", got_text=f"a vocabulary holding {UNK_CHAR!r}")
        return "".join(items)

    @property
    def vocab_size(self) -> int:
        """Number of symbols: the known characters plus the unknown index."""
        return len(self.chars) + 1

    @property
    def unk_index(self) -> int:
        """Index of unknown characters (the last index, ``len(chars)``)."""
        return len(self.chars)

    def _encode_array(self, text: str) -> Tensor:
        out = np.empty(len(text), dtype=np.int64)
        n_sorted = len(self._sorted_codes)
        for start in range(0, len(text), _CHUNK):
            cp = _codepoints(text[start:start + _CHUNK]).astype(np.int64)
            pos = np.searchsorted(self._sorted_codes, cp)
            pos_c = np.minimum(pos, n_sorted - 1)
            known = self._sorted_codes[pos_c] == cp
            out[start:start + len(cp)] = np.where(known, self._order[pos_c], self.unk_index)
        return torch.from_numpy(out).to(self.dtype)

    def encode(self, text: str) -> Tensor:
        """Encode a string as a :obj:`torch.long` tensor ``[len(text)]`` of indices
        (:attr:`unk_index` outside the vocabulary)."""
        if not isinstance(text, str):
            raise fail(TypeError, "CharCorpus.encode", "text", "a str", text)
        return self._encode_array(text).long()

    def decode(self, ids: Union[Tensor, Sequence[int]]) -> str:
        """Decode a 1-D tensor or sequence of indices back to a string (the unknown index
        renders as ``'\\ufffd'``)."""
        if isinstance(ids, Tensor):
            if ids.dim() != 1:
                raise fail(ValueError, "CharCorpus.decode", "ids", "1-D", ids)
            ids = ids.tolist()
        elif isinstance(ids, str) or not isinstance(ids, Iterable):
            raise fail(TypeError, "CharCorpus.decode", "ids", "a 1-D tensor or a sequence of "
                       "ints", ids)
        ids = list(ids)
        expected = f"ints in [0, {self.vocab_size})"
        bad = [i for i in ids if isinstance(i, bool) or not isinstance(i, (int, np.integer))]
        if bad:
            raise fail(TypeError, "CharCorpus.decode", "ids", expected,
                       got_text=f"e.g. {bad[:3]}")
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise fail(ValueError, "CharCorpus.decode", "ids", expected,
                       got_text=f"e.g. {bad[:3]}")
        return "".join(self._itos[i] for i in ids)

    def _split(self, split: str, where: str) -> Tensor:
        check_choice(split, "split", sorted(self.splits), where=where)
        return self.splits[split]

    def split_length(self, split: str) -> int:
        """Number of characters in a split."""
        return self._split(split, "CharCorpus.split_length").numel()

    def _check_block(self, split: str, block_size: Optional[int],
                     where: str) -> tuple[Tensor, int]:
        data = self._split(split, where)
        T = self.block_size if block_size is None else block_size
        check_int(T, "block_size", 1, where=where)
        if T >= data.numel():
            raise fail(ValueError, where, "block_size", f"smaller than the {split!r} split "
                       f"({data.numel()} characters)", T)
        return data, T

    def get_batch(self, split: str, batch_size: int, generator: Optional[torch.Generator] = None,
                  device: Optional[Union[str, torch.device]] = None,
                  block_size: Optional[int] = None) -> tuple[Tensor, Tensor]:
        """Draw random contiguous blocks and their next-character targets, with start
        positions uniform (with replacement) from ``generator`` (CPU, so a seed gives the same
        batch on every device).

        Args:
            split (str): ``'train'``, ``'val'`` or (WikiText-103) ``'test'``.
            batch_size (int): number of blocks.
            generator (torch.Generator, optional): a CPU generator. (default: :obj:`None`)
            device (str or torch.device, optional): where to put them. (default: :obj:`None`, CPU)
            block_size (int, optional): override of the corpus block size.
                (default: :obj:`None`)

        Returns:
            (Tensor, Tensor): ``x`` and ``y``, :obj:`torch.long` ``[batch_size, block_size]``.
        """
        data, T = self._check_block(split, block_size, "CharCorpus.get_batch")
        check_int(batch_size, "batch_size", 1, where="CharCorpus.get_batch")
        starts = torch.randint(0, data.numel() - T, (batch_size,), generator=generator)
        idx = starts[:, None] + torch.arange(T + 1)
        chunk = data[idx].long()
        x, y = chunk[:, :-1].contiguous(), chunk[:, 1:].contiguous()
        if device is not None:
            x, y = x.to(device), y.to(device)
        return x, y

    def num_blocks(self, split: str, block_size: Optional[int] = None) -> int:
        """Number of non-overlapping blocks :meth:`iter_blocks` yields for a split."""
        data, T = self._check_block(split, block_size, "CharCorpus.num_blocks")
        return (data.numel() - 1) // T

    def iter_blocks(self, split: str, batch_size: int = 64, block_size: Optional[int] = None,
                    max_blocks: Optional[int] = None,
                    device: Optional[Union[str, torch.device]] = None
                    ) -> Iterator[tuple[Tensor, Tensor]]:
        """Iterate over the ``(len - 1) // T`` non-overlapping blocks of a split (evaluation):
        block ``b`` has inputs ``data[b*T : (b+1)*T]`` and targets shifted by one, so every
        character but the dropped tail is predicted exactly once.

        Args:
            split (str): the split.
            batch_size (int): blocks per yielded batch (the last may be smaller). (default: ``64``)
            block_size (int, optional): override of the corpus block size.
                (default: :obj:`None`)
            max_blocks (int, optional): keep the first ``max_blocks``. (default: :obj:`None`)
            device (str or torch.device, optional): where to put them. (default: :obj:`None`, CPU)

        Yields:
            (Tensor, Tensor): ``x`` and ``y`` of shape ``[b, block_size]``, :obj:`torch.long`.
        """
        data, T = self._check_block(split, block_size, "CharCorpus.iter_blocks")
        check_int(batch_size, "batch_size", 1, where="CharCorpus.iter_blocks")
        n = (data.numel() - 1) // T
        if max_blocks is not None:
            n = min(n, check_int(max_blocks, "max_blocks (or None)", 1,
                                 where="CharCorpus.iter_blocks"))
        for b0 in range(0, n, batch_size):
            b1 = min(n, b0 + batch_size)
            x = data[b0 * T:b1 * T].long().view(b1 - b0, T)
            y = data[b0 * T + 1:b1 * T + 1].long().view(b1 - b0, T)
            if device is not None:
                x, y = x.to(device), y.to(device)
            yield x, y

    def __repr__(self) -> str:
        sizes = ", ".join(f"{k}={v.numel()}" for k, v in self.splits.items())
        return (
            f"{self.__class__.__name__}(source={self.source!r}, vocab_size={self.vocab_size}, "
            f"block_size={self.block_size}, {sizes})"
        )
