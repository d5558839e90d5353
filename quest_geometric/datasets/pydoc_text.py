r"""The Python language reference as token blocks for a pretrained tokenizer, split by topic.

The text is :data:`pydoc_data.topics.topics` (79 topics on CPython 3.11, shipped with every
CPython, so nothing is downloaded). The split is by **topic**, so no passage of a validation
topic is ever seen in training; with the sorted topic keys :math:`t_0, \dots, t_{n-1}`,

.. math::

    \mathcal{V} = \{\, t_i : i \ge 2,\ (i - 2) \bmod \mathrm{val\_every} = 0 \,\},
    \qquad \mathcal{T} = \{t_0, \dots, t_{n-1}\} \setminus \mathcal{V} .

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

__all__ = ["pydoc_topic_split", "token_blocks"]

_SEPARATOR = "\n\n"


def _topics() -> dict:
    from pydoc_data.topics import topics

    return topics


def pydoc_topic_split(val_every: int = 5) -> tuple[list[str], list[str]]:
    r"""Split the topics of :mod:`pydoc_data.topics` into training and validation topics.

    With the topic keys sorted, :math:`t_0, \dots, t_{n-1}`, topic :math:`t_i` goes to
    validation when :math:`i \ge 2` and :math:`(i - 2) \bmod \mathrm{val\_every} = 0`
    (indices 2, 2 + ``val_every``, ...), every other topic to training. No topic is in both
    parts, and the split is the same on every run of the same CPython.

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
        raise TypeError("token_blocks: 'tokenizer' must have an encode(text, add_special_tokens=False) "
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
        raise ValueError(f"token_blocks: unknown topic(s) {unknown[:5]} (not keys of pydoc_data.topics)")
    text = _SEPARATOR.join(topics[n] for n in sorted(names))
    ids = _encode(tokenizer, text)
    n_blocks = len(ids) // block_size
    if n_blocks == 0:
        raise ValueError(f"token_blocks: the {len(names)} topic(s) give {len(ids)} tokens, fewer than "
                         f"one block of 'block_size'={block_size}")
    if max_blocks is not None:
        n_blocks = min(n_blocks, max_blocks)
    return torch.tensor(ids[:n_blocks * block_size], dtype=torch.long).view(n_blocks, block_size)
