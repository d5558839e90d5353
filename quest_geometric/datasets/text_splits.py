r"""Train / validation / test token blocks whose held-out parts never repeat the training text.

A split of *documents* is not a split of *text*: two documents can share long passages, and a
model trained on one then "generalises" to the other by memory. This module measures that
overlap and removes it.

**Overlap.** With :math:`W` the set of every :math:`n`-token window of the training tokens, a
position :math:`p` of a held-out sequence :math:`y` is *covered* when some window of :math:`y`
that contains it occurs in :math:`W`:

.. math::

    \mathrm{covered}(p) = \exists\, s \in [p - n + 1, p] :\ (y_s, \dots, y_{s+n-1}) \in W ,

and the *overlap* of a block (or split) is the share of its positions that are covered
(:func:`overlap_share`). Windows are compared exactly (their bytes are set keys).

**Deduplication by cutting** (:func:`clean_blocks`). The uncovered positions of the held-out
stream form maximal *clean runs*; blocks are cut only from inside clean runs, so no window of
a block occurs in the training tokens: its overlap is exactly 0. *Dropping* every fixed block
with a covered position would lose the clean text around one repeated sentence, and
*excising* covered spans would make blocks with seams (and new windows) mid-sentence. The price
of cutting, clean runs shorter than one block, is the reported ``kept_share``.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Optional, Union

import numpy as np
import torch
from torch import Tensor

from quest_geometric._utils.checks import check_int

__all__ = ["window_set", "covered_positions", "overlap_share", "clean_blocks", "TextSplits",
           "deduplicated_splits"]

TokenSeq = Union[Sequence[int], np.ndarray, Tensor]


def _as_array(tokens: Any, arg: str, where: str) -> np.ndarray:
    if isinstance(tokens, Tensor):
        tokens = tokens.detach().cpu().numpy()
    elif isinstance(tokens, (str, bytes)) or not hasattr(tokens, "__len__"):
        raise TypeError(f"{where}: {arg} must be a sequence of token ids (list, numpy array or "
                        f"tensor), got {type(tokens).__name__}")
    a = np.asarray(tokens)
    if a.size and not np.issubdtype(a.dtype, np.integer):
        raise TypeError(f"{where}: {arg} must hold integer token ids, got dtype {a.dtype}")
    if a.ndim != 1:
        raise ValueError(f"{where}: {arg} must be one-dimensional, got shape {tuple(a.shape)}")
    return a.astype(np.int64, copy=False)


def _windows(a: np.ndarray, n: int) -> np.ndarray:
    """``[len(a) - n + 1, n]`` contiguous windows (zero rows when ``a`` is shorter than n)."""
    if len(a) < n:
        return np.zeros((0, n), dtype=np.int64)
    return np.ascontiguousarray(np.lib.stride_tricks.sliding_window_view(a, n))


def window_set(tokens: Union[TokenSeq, Sequence[TokenSeq]], n: int = 32) -> frozenset:
    r"""The set of every ``n``-token window of ``tokens``, each window as its bytes (int64).

    Args:
        tokens: one token sequence (list, numpy array or 1-D tensor), or a list of them (no
            window spans two of them).
        n (int): the window length (default: :obj:`32`).

    Returns:
        frozenset: the windows, for :func:`covered_positions`.

    Example:
        >>> ws = window_set([1, 2, 3, 4], n=2)
        >>> len(ws)
        3
    """
    check_int(n, "'n'", 1, where="window_set")
    if (isinstance(tokens, (list, tuple)) and tokens
            and not isinstance(tokens[0], (int, np.integer))):
        parts = [_as_array(t, "'tokens'", "window_set") for t in tokens]
    else:
        parts = [_as_array(tokens, "'tokens'", "window_set")]
    out: set = set()
    for a in parts:
        out.update(row.tobytes() for row in _windows(a, n))
    return frozenset(out)


def covered_positions(tokens: TokenSeq, train_windows: frozenset, n: int = 32) -> np.ndarray:
    r"""Which positions of ``tokens`` lie inside an ``n``-window that occurs in training.

    Args:
        tokens: a held-out token sequence.
        train_windows (frozenset): :func:`window_set` of the training tokens, built with the
            same ``n``.
        n (int): the window length (default: :obj:`32`).

    Returns:
        numpy.ndarray: a boolean mask of ``len(tokens)`` (all :obj:`False` for a sequence
        shorter than ``n``).
    """
    check_int(n, "'n'", 1, where="covered_positions")
    a = _as_array(tokens, "'tokens'", "covered_positions")
    win = _windows(a, n)
    hit = np.fromiter((row.tobytes() in train_windows for row in win), dtype=bool, count=len(win))
    if not len(hit):
        return np.zeros(len(a), dtype=bool)
    # position p is covered when a hit window starts in [max(0, p - n + 1), min(p, H - 1)]
    c = np.concatenate([[0], np.cumsum(hit)])  # c[s] = number of hit windows starting before s
    p = np.arange(len(a))
    return c[np.minimum(p, len(hit) - 1) + 1] - c[np.maximum(p - n + 1, 0)] > 0


def overlap_share(blocks: Union[Tensor, Sequence[TokenSeq]], train_windows: frozenset,
                  n: int = 32) -> dict[str, Any]:
    r"""The overlap of held-out blocks with the training tokens, overall and per block (each
    block on its own windows, as a model evaluated block by block sees it).

    Args:
        blocks: a ``[B, S]`` tensor or a list of token sequences.
        train_windows (frozenset): :func:`window_set` of the training tokens.
        n (int): the window length (default: :obj:`32`).

    Returns:
        dict: ``share`` (covered positions / all positions of all blocks), ``per_block``
        (each block's share), ``covered`` and ``positions`` (counts), ``n``.
    """
    if isinstance(blocks, Tensor):  # a [0, S] tensor has no rows (reshape(0, -1) is refused)
        rows = list(blocks.reshape(len(blocks), -1)) if len(blocks) else []
    else:
        rows = list(blocks)
    per, covered, total = [], 0, 0
    for b in rows:
        m = covered_positions(b, train_windows, n)
        per.append(float(m.mean()) if len(m) else 0.0)
        covered += int(m.sum())
        total += len(m)
    return {"share": covered / total if total else float("nan"), "per_block": per,
            "covered": covered, "positions": total, "n": n}


def clean_blocks(tokens: TokenSeq, train_windows: frozenset, block_len: int, n: int = 32,
                 max_blocks: Optional[int] = None) -> tuple[Tensor, dict[str, Any]]:
    r"""Cut ``block_len``-token blocks from the clean runs of a held-out token stream.

    Each maximal run of positions not covered by a training window
    (:func:`covered_positions`) gives :math:`\lfloor \mathrm{len} / \mathrm{block\_len}
    \rfloor` consecutive blocks from its start; every block has overlap 0.

    Args:
        tokens: the held-out token stream.
        train_windows (frozenset): :func:`window_set` of the training tokens.
        block_len (int): tokens per block.
        n (int): the window length (default: :obj:`32`); at most ``block_len``.
        max_blocks (int, optional): keep only the first ``max_blocks`` blocks.

    Returns:
        ``(blocks, info)``: a ``[B, block_len]`` LongTensor (``B`` may be 0) and a dict with
        ``starts`` (each block's first position in ``tokens``), ``covered_share`` (of the
        stream), ``kept_share`` (positions in blocks / positions of the stream), ``runs``
        (number of clean runs).
    """
    check_int(block_len, "'block_len'", 1, where="clean_blocks")
    check_int(n, "'n'", 1, where="clean_blocks", maximum=block_len)
    if max_blocks is not None:
        check_int(max_blocks, "'max_blocks' (or None)", 1, where="clean_blocks")
    a = _as_array(tokens, "'tokens'", "clean_blocks")
    cov = covered_positions(a, train_windows, n)
    # Maximal clean runs [p, q): edges of the uncovered mask.
    edges = np.flatnonzero(np.diff(np.concatenate([[0], (~cov).astype(np.int8), [0]])))
    runs = len(edges) // 2
    starts = [s for p, q in zip(edges[::2], edges[1::2])
              for s in range(int(p), int(q) - block_len + 1, block_len)]
    L = len(a)
    if max_blocks is not None:
        starts = starts[:max_blocks]
    blocks = (torch.from_numpy(np.stack([a[s:s + block_len] for s in starts])) if starts
              else torch.zeros(0, block_len, dtype=torch.long))
    info = {"starts": starts, "covered_share": float(cov.mean()) if L else float("nan"),
            "kept_share": len(starts) * block_len / L if L else float("nan"), "runs": runs}
    return blocks, info


@dataclass
class TextSplits:
    r"""Train / validation / test token blocks and the measured overlap of each split.

    Attributes:
        train (Tensor): ``[B_train, S]`` training blocks (consecutive slices of the stream).
        val (Tensor): ``[B_val, S]`` validation blocks, deduplicated against training.
        test (Tensor): ``[B_test, S]`` test blocks, deduplicated against training.
        n (int): the window length of the deduplication.
        report (dict): per split (``'val'``, ``'test'``): ``stream`` (the overlap of the raw
            held-out stream cut into plain consecutive blocks, what a split without
            deduplication would report; :func:`overlap_share`), ``blocks`` (the overlap of
            the returned blocks, 0 by construction), ``kept_share``, ``tokens``.
    """

    train: Tensor
    val: Tensor
    test: Tensor
    n: int
    report: dict = field(default_factory=dict)


def _plain_blocks(a: np.ndarray, block_len: int) -> Tensor:
    nb = len(a) // block_len
    return torch.from_numpy(a[:nb * block_len].copy()).view(nb, block_len)


def deduplicated_splits(train_tokens: TokenSeq, val_tokens: TokenSeq, test_tokens: TokenSeq,
                        block_len: int = 1024, n: int = 32, max_blocks: Optional[int] = None
                        ) -> TextSplits:
    r"""Training blocks, and validation and test blocks with no ``n``-window of the training
    tokens (:func:`clean_blocks`), with the overlap of every split measured.

    Args:
        train_tokens: the training token stream; its blocks are consecutive slices (the
            remainder dropped), but every window of the whole stream counts.
        val_tokens: the validation stream.
        test_tokens: the test stream.
        block_len (int): tokens per block (default: :obj:`1024`).
        n (int): the window length (default: :obj:`32`).
        max_blocks (int, optional): at most this many blocks per split.

    Returns:
        TextSplits: the blocks and their ``report``.

    Example:
        >>> s = deduplicated_splits(list(range(100)), list(range(50, 90)) + list(range(200, 240)),
        ...                         list(range(300, 340)), block_len=8, n=4)
        >>> s.val.shape, s.report["val"]["blocks"]["share"]
        (torch.Size([5, 8]), 0.0)
    """
    check_int(block_len, "'block_len'", 1, where="deduplicated_splits")
    check_int(n, "'n'", 1, where="deduplicated_splits", maximum=block_len)
    tr = _as_array(train_tokens, "'train_tokens'", "deduplicated_splits")
    ws = window_set(tr, n)
    train = _plain_blocks(tr, block_len)
    if max_blocks is not None:
        train = train[:max_blocks]
    out, report = {}, {}
    for name, toks in (("val", val_tokens), ("test", test_tokens)):
        a = _as_array(toks, f"'{name}_tokens'", "deduplicated_splits")
        blocks, info = clean_blocks(a, ws, block_len, n, max_blocks)
        out[name] = blocks
        report[name] = {"tokens": len(a), "stream": overlap_share(_plain_blocks(a, block_len), ws,
                                                                  n),
                        "stream_covered_share": info["covered_share"],
                        "blocks": overlap_share(blocks, ws, n), "kept_share": info["kept_share"],
                        "starts": info["starts"], "runs": info["runs"]}
    report["train"] = {"tokens": len(tr), "blocks": len(train)}
    return TextSplits(train=train, val=out["val"], test=out["test"], n=n, report=report)
