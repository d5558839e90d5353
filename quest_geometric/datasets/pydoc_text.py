r"""The Python language reference as token blocks for a pretrained tokenizer, split by topic.

The text is :data:`pydoc_data.topics.topics` (79 topics on CPython 3.11, shipped with every
CPython, so nothing is downloaded). :func:`pydoc_topic_split` splits it by **topic**: with the
sorted topic keys :math:`t_0, \dots, t_{n-1}`,

.. math::

    \mathcal{V} = \{\, t_i : i \ge 2,\ (i - 2) \bmod \mathrm{val\_every} = 0 \,\},
    \qquad \mathcal{T} = \{t_0, \dots, t_{n-1}\} \setminus \mathcal{V} .

No topic is in both parts, **but their text overlaps**: many topics repeat passages of
others (the statement sections ``async``, ``function``, ``try`` and ``with`` are also parts of
the training topic ``compound``, special method names appear in several topics), so a large
share of the validation tokens of this split lies inside 32-token windows that occur verbatim
in its training tokens; ``python -m benchmarks.focus.data_splits`` measures it, per block, in
``benchmarks/focus/results/focus_data_splits.md``. A perplexity on that validation split measures
partly memory, not generalisation.

:func:`pydoc_splits` gives held-out text that is: three topic parts
(:func:`pydoc_topic_splits`), and validation and test blocks cut only from text that shares no
32-token window with the training tokens
(:func:`~quest_geometric.datasets.deduplicated_splits`), their overlap measured and 0.

:func:`token_blocks` joins the chosen topics (sorted) with ``"\n\n"``, tokenizes the text
**once** without special tokens and cuts it into non-overlapping blocks; block :math:`b` is
tokens :math:`[b\,S, (b+1)\,S)` of that tokenization, the remainder is dropped. The same
function and split serve the Focus retrofit benchmark and the query/key probe of SmolLM2, so
both read exactly the same validation blocks.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

import torch
from torch import Tensor

from quest_geometric._utils.checks import check_int

__all__ = ["pydoc_topic_split", "pydoc_topic_splits", "pydoc_splits", "pydoc_text", "token_blocks"]

_SEPARATOR = "\n\n"


def _topics() -> dict:
    from pydoc_data.topics import topics

    return topics


def pydoc_topic_split(val_every: int = 5) -> tuple[list[str], list[str]]:
    r"""Split the topics of :mod:`pydoc_data.topics` into training and validation topics.

    With the topic keys sorted, :math:`t_0, \dots, t_{n-1}`, topic :math:`t_i` goes to
    validation when :math:`i \ge 2` and :math:`(i - 2) \bmod \mathrm{val\_every} = 0`
    (indices 2, 2 + ``val_every``, ...), every other topic to training. No topic is in both
    parts, and the split is the same on every run of the same CPython; the parts' *text*
    overlaps (module docstring), so use :func:`pydoc_splits` to measure generalisation.

    Args:
        val_every (int): one topic in ``val_every`` goes to validation; at least 2
            (default: :obj:`5`, 16 of 79 topics).

    Returns:
        ``(train_topic_names, val_topic_names)``: two sorted lists of topic keys.

    Raises:
        ValueError: when ``val_every`` is not an integer of at least 2.
    """
    check_int(val_every, "'val_every'", 2, where="pydoc_topic_split")
    names = sorted(_topics())
    val = [n for i, n in enumerate(names) if i >= 2 and (i - 2) % val_every == 0]
    val_set = set(val)
    train = [n for n in names if n not in val_set]
    return train, val


def _encode(tokenizer: Any, text: str) -> list[int]:
    """Token ids of ``text`` without special tokens (an HF tokenizer, or any object with
    ``encode(text, add_special_tokens=False)``)."""
    encode = getattr(tokenizer, "encode", None)
    if encode is None:
        raise TypeError("token_blocks: 'tokenizer' must have an encode(text, "
                        "add_special_tokens=False) "
                        f"method, got {type(tokenizer).__name__}")
    try:  # silence transformers' "sequence longer than model_max_length" warning: we cut blocks
        from transformers.utils import logging as hf_logging

        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()
    except ImportError:  # pragma: no cover - transformers is optional here
        hf_logging = None
    try:
        ids = encode(text, add_special_tokens=False)
    finally:
        if hf_logging is not None:
            hf_logging.set_verbosity(verbosity)
    return list(ids)


def token_blocks(tokenizer: Any, names: Sequence[str], block_size: int = 1024,
                 max_blocks: Optional[int] = None) -> Tensor:
    r"""Tokenize the given :mod:`pydoc_data.topics` topics once and cut non-overlapping blocks.

    The topics are joined in sorted order with ``"\n\n"``, tokenized once without special
    tokens (no BOS/EOS), and block :math:`b` holds tokens :math:`[b\,S, (b+1)\,S)` of that
    single tokenization (:math:`S` = ``block_size``); the incomplete remainder is dropped.

    Args:
        tokenizer: a Hugging Face tokenizer, or any object with
            ``encode(text, add_special_tokens=False) -> list[int]``.
        names (Sequence[str]): topic keys, e.g. one part of :func:`pydoc_topic_split`.
        block_size (int): tokens per block (default: :obj:`1024`).
        max_blocks (int, optional): keep only the first ``max_blocks`` blocks
            (default: :obj:`None`, all of them).

    Returns:
        torch.LongTensor: ``[n_blocks, block_size]`` token ids.

    Raises:
        ValueError: for an empty or repeated list of names, an unknown topic, a non-positive
            ``block_size`` or ``max_blocks``, or a text shorter than one block.
    """
    check_int(block_size, "'block_size'", 1, where="token_blocks")
    if max_blocks is not None:
        check_int(max_blocks, "'max_blocks' (or None)", 1, where="token_blocks")
    if isinstance(names, str):
        raise ValueError("token_blocks: 'names' must be a sequence of topic keys, not one string")
    names = list(names)
    if not names:
        raise ValueError("token_blocks: 'names' is empty; pass topic keys of pydoc_data.topics")
    if len(set(names)) != len(names):
        raise ValueError("token_blocks: 'names' contains a topic more than once")
    topics = _topics()
    unknown = [n for n in names if n not in topics]
    if unknown:
        raise ValueError(f"token_blocks: unknown topic(s) {unknown[:5]} (not keys of "
                         "pydoc_data.topics)")
    text = _SEPARATOR.join(topics[n] for n in sorted(names))
    ids = _encode(tokenizer, text)
    n_blocks = len(ids) // block_size
    if n_blocks == 0:
        raise ValueError(f"token_blocks: the {len(names)} topic(s) give {len(ids)} tokens, fewer "
                         "than "
                         f"one block of 'block_size'={block_size}")
    if max_blocks is not None:
        n_blocks = min(n_blocks, max_blocks)
    return torch.tensor(ids[:n_blocks * block_size], dtype=torch.long).view(n_blocks, block_size)


def pydoc_topic_splits(every: int = 4) -> tuple[list[str], list[str], list[str]]:
    r"""Split the topics of :mod:`pydoc_data.topics` into training, validation and test topics.

    With the topic keys sorted, :math:`t_0, \dots, t_{n-1}`, topic :math:`t_i` goes to
    validation when :math:`i \ge 2` and :math:`(i - 2) \bmod \mathrm{every} = 0` (the
    validation topics of :func:`pydoc_topic_split` with ``val_every=every``), to test when
    :math:`i \ge 4` and :math:`(i - 4) \bmod \mathrm{every} = 0`, and to training otherwise.
    Topics are disjoint, not their text: use :func:`pydoc_splits` for blocks deduplicated
    against the training text.

    Args:
        every (int): one topic in ``every`` goes to validation and one to test; at least 3
            (default: :obj:`4`: 20 validation, 19 test and 40 training topics of 79).

    Returns:
        ``(train, val, test)``: three sorted lists of topic keys.

    Raises:
        ValueError: when ``every`` is not an integer of at least 3.
    """
    check_int(every, "'every'", 3, where="pydoc_topic_splits")
    names = sorted(_topics())
    val = [n for i, n in enumerate(names) if i >= 2 and (i - 2) % every == 0]
    test = [n for i, n in enumerate(names) if i >= 4 and (i - 4) % every == 0]
    held = set(val) | set(test)
    return [n for n in names if n not in held], val, test


def pydoc_text(names: Sequence[str]) -> str:
    r"""The text of the given topics, sorted and joined with ``"\n\n"`` (what
    :func:`token_blocks` tokenizes).

    Args:
        names (Sequence[str]): topic keys of :mod:`pydoc_data.topics`.

    Returns:
        str: the joined text.
    """
    topics = _topics()
    unknown = [n for n in names if n not in topics]
    if unknown:
        raise ValueError(f"pydoc_text: unknown topic(s) {unknown[:5]} (not keys of "
                         "pydoc_data.topics)")
    return _SEPARATOR.join(topics[n] for n in sorted(names))


def pydoc_splits(tokenizer: Any, block_size: int = 1024, n: int = 32, every: int = 4,
                 max_blocks: Optional[int] = None):
    r"""Train / validation / test blocks of the language reference, validation and test
    deduplicated against the training text.

    The topics are split by :func:`pydoc_topic_splits`; each part's topics are joined
    (:func:`pydoc_text`) and tokenized once without special tokens; the training blocks are
    consecutive slices of the training tokens, and the validation and test blocks are cut
    from the runs of their streams that share no ``n``-token window with the training tokens
    (:func:`~quest_geometric.datasets.deduplicated_splits`), so their overlap is 0 and the
    overlap of the plain topic split is reported beside it.

    Args:
        tokenizer: a Hugging Face tokenizer, or any object with
            ``encode(text, add_special_tokens=False) -> list[int]``.
        block_size (int): tokens per block (default: :obj:`1024`).
        n (int): the deduplication window (default: :obj:`32`).
        every (int): the topic split's period (default: :obj:`4`: 20 validation, 19 test and
            40 training topics; a larger period leaves too little clean held-out text).
        max_blocks (int, optional): at most this many blocks per split.

    Returns:
        TextSplits: ``train``, ``val``, ``test`` blocks and the ``report`` of
        :func:`~quest_geometric.datasets.deduplicated_splits`, with the topic names added
        under ``report['topics']``.
    """
    from quest_geometric.datasets.text_splits import deduplicated_splits

    check_int(block_size, "'block_size'", 1, where="pydoc_splits")
    parts = pydoc_topic_splits(every)
    ids = [_encode(tokenizer, pydoc_text(p)) for p in parts]
    out = deduplicated_splits(*ids, block_len=block_size, n=n, max_blocks=max_blocks)
    out.report["topics"] = {"train": parts[0], "val": parts[1], "test": parts[2]}
    return out
