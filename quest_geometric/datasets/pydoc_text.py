r"""The Python language reference as token blocks for a pretrained tokenizer, split by topic.

The text is :data:`pydoc_data.topics.topics` (shipped with every CPython, so nothing is
downloaded). :func:`pydoc_topic_split` splits it by **topic**: with the sorted topic keys
:math:`t_0, \dots, t_{n-1}`,

.. math::

    \mathcal{V} = \{\, t_i : i \ge 2,\ (i - 2) \bmod \mathrm{val\_every} = 0 \,\},
    \qquad \mathcal{T} = \{t_0, \dots, t_{n-1}\} \setminus \mathcal{V} .

No topic is in both parts, **but their text overlaps**: many topics repeat passages of others
(the statement sections ``async``, ``function``, ``try`` and ``with`` are also parts of the
training topic ``compound``, special method names appear in several topics), so a large share
of its validation tokens lies inside 32-token windows that occur verbatim in its training
tokens (``python -m benchmarks.focus.data_splits`` measures it), and a perplexity on it
measures partly memory, not generalisation. :func:`pydoc_splits` gives held-out text that is:
validation and test blocks cut only from text that shares no 32-token window with the
training tokens
(:func:`~quest_geometric.datasets.deduplicated_splits`).

The same functions serve the Focus retrofit benchmark and the query/key probe of SmolLM2, so
both read exactly the same blocks.
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
    r"""Split the sorted topic keys :math:`t_0, \dots, t_{n-1}` of :mod:`pydoc_data.topics`
    into two sorted lists ``(train, val)``: :math:`t_i` goes to validation when
    :math:`i \ge 2` and :math:`(i - 2) \bmod \mathrm{val\_every} = 0` (the parts' *text*
    overlaps: see the module docstring).

    Args:
        val_every (int): one topic in ``val_every`` goes to validation; at least 2 (else a
            :class:`ValueError`). (default: :obj:`5`, 16 of 79 topics)
    """
    check_int(val_every, "'val_every'", 2, where="pydoc_topic_split")
    names = sorted(_topics())
    val = _every(names, 2, val_every)
    return [n for n in names if n not in set(val)], val


def _every(names: list[str], start: int, every: int) -> list[str]:
    return [n for i, n in enumerate(names) if i >= start and (i - start) % every == 0]


def _encode(tokenizer: Any, text: str) -> list[int]:
    """Token ids of ``text`` without special tokens."""
    encode = getattr(tokenizer, "encode", None)
    if encode is None:
        raise TypeError("token_blocks: 'tokenizer' must have an encode(text, "
                        f"add_special_tokens=False) method, got {type(tokenizer).__name__}")
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
    r"""Tokenize the given topics once (:func:`pydoc_text`, no special tokens) and cut
    non-overlapping blocks: block :math:`b` holds tokens :math:`[b\,S, (b+1)\,S)`
    (:math:`S` = ``block_size``); the incomplete remainder is dropped.

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
    ids = _encode(tokenizer, _joined(names, "token_blocks"))
    n_blocks = len(ids) // block_size
    if n_blocks == 0:
        raise ValueError(f"token_blocks: the {len(names)} topic(s) give {len(ids)} tokens, fewer "
                         f"than one block of 'block_size'={block_size}")
    if max_blocks is not None:
        n_blocks = min(n_blocks, max_blocks)
    return torch.tensor(ids[:n_blocks * block_size], dtype=torch.long).view(n_blocks, block_size)


def pydoc_topic_splits(every: int = 4) -> tuple[list[str], list[str], list[str]]:
    r"""Split the sorted topic keys into three sorted lists ``(train, val, test)``: :math:`t_i`
    goes to validation when :math:`i \ge 2` and :math:`(i - 2) \bmod \mathrm{every} = 0` (as
    :func:`pydoc_topic_split`), to test when :math:`i \ge 4` and :math:`(i - 4) \bmod
    \mathrm{every} = 0`, and to training otherwise.

    Args:
        every (int): one topic in ``every`` goes to validation and one to test; at least 3
            (else a :class:`ValueError`). (default: :obj:`4`: 20, 19 and 40 topics of 79)
    """
    check_int(every, "'every'", 3, where="pydoc_topic_splits")
    names = sorted(_topics())
    val, test = _every(names, 2, every), _every(names, 4, every)
    held = set(val) | set(test)
    return [n for n in names if n not in held], val, test


def pydoc_text(names: Sequence[str]) -> str:
    r"""The text of the given topic keys ``names``, sorted and joined with ``"\n\n"`` (what
    :func:`token_blocks` tokenizes)."""
    return _joined(names, "pydoc_text")


def _joined(names: Sequence[str], where: str) -> str:
    topics = _topics()
    unknown = [n for n in names if n not in topics]
    if unknown:
        raise ValueError(f"{where}: unknown topic(s) {unknown[:5]} (not keys of "
                         "pydoc_data.topics)")
    return _SEPARATOR.join(topics[n] for n in sorted(names))


def pydoc_splits(tokenizer: Any, block_size: int = 1024, n: int = 32, every: int = 4,
                 max_blocks: Optional[int] = None):
    r"""Train / validation / test blocks of the language reference, validation and test
    deduplicated against the training text.

    Each part of :func:`pydoc_topic_splits` is joined (:func:`pydoc_text`) and tokenized once;
    the parts go through :func:`~quest_geometric.datasets.deduplicated_splits`, so the
    held-out overlap is 0 and that of the plain topic split is reported beside it.

    Args:
        tokenizer: a Hugging Face tokenizer, or any object with
            ``encode(text, add_special_tokens=False) -> list[int]``.
        block_size (int): tokens per block (default: :obj:`1024`).
        n (int): the deduplication window (default: :obj:`32`).
        every (int): the topic split's period (default: :obj:`4`; a larger period leaves
            too little clean held-out text).
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
