r"""The tuning of the Focus kernels, as frozen configuration: :class:`BlocksConfig` for
:func:`~quest_geometric.nn.focus.blocks.focus_blocks_attention`, :class:`DecodeConfig` for
the fast step of :func:`~quest_geometric.nn.focus.decode.focus_decode_attention`. A kernel
takes one as ``config=``; without it reads the one in force, set for a block of code by
:func:`blocks_config` / :func:`decode_config` (a :mod:`contextvars` variable, so threads and
asynchronous tasks each see their own):

.. code-block:: python

    with blocks_config(band_block=128, split_band_min_window=None):
        out = focus_blocks_attention(q, k, v, groups, window)

A setting changes how the result is computed, never the result (up to rounding); each
default comes from a benchmark (``docs/focus.md``, section "Tuning").
"""
from __future__ import annotations

import contextvars
import math
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from typing import Iterator, Optional, Tuple

from quest_geometric._utils.checks import check_int, check_real, fail

__all__ = ["BlocksConfig", "DecodeConfig", "blocks_config", "decode_config",
           "current_blocks_config", "current_decode_config"]


def _check_optional_int(value, name: str, low: int, where: str) -> None:
    if value is not None:
        check_int(value, name, low, where=where)


def _check_share(value, name: str, where: str) -> None:
    r"""A real number >= 0, :obj:`math.inf` allowed (a rule that never switches)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise fail(TypeError, where, name, "a real number >= 0 (inf allowed)", value)
    if not value >= 0:
        raise fail(ValueError, where, name, "a real number >= 0 (inf allowed)", value)


def _check_by_window(rows, name: str, where: str) -> None:
    r"""A tuple of ``(largest window, size)`` with increasing windows, the last one inf."""
    if (not isinstance(rows, tuple) or not rows or rows[-1][0] != math.inf
            or any(a[0] >= b[0] for a, b in zip(rows, rows[1:]))):
        raise fail(ValueError, where, name, "a tuple of (largest window, size) with "
                   "increasing windows, the last one inf", rows)
    for _, b in rows:
        check_int(b, f"{name} size", 1, where=where)


@dataclass(frozen=True)
class BlocksConfig:
    r"""Tuning of the fused CPU decomposition (:func:`focus_blocks_attention`).

    Args:
        band_blocks (tuple): the band's query block by window, ``((largest window, block),
            ...)``, windows increasing, the last infinite: small blocks waste few band pairs,
            large ones run larger tiles, which pays once the window is wide.
        band_block (int, optional): one query block for every window (default: by window).
        split_band_min_window (int, optional): smallest window at which the causal band of one
            sequence with no groups runs as unmasked calls over chunks of :math:`w` tokens
            (when :attr:`window_chunks` is :obj:`None`; :obj:`None`: never).
        pad_ratio (float): largest overhead :math:`B\,c_{\max}^2 / \sum_b c_b^2` at which the
            :math:`B` causal top-1 buckets run as one padded call.
        bucket_query_block (int): query block of a causal top-:math:`k > 1` bucket (the masked
            kernel computes every tile of its call, so blocks skip the upper triangle).
        sink_dense_max_keys (int): most sink keys for which the sink part runs as dense
            products rather than explicit pairs.
        gather_budget (int): elements one gather of buckets holds at most.
        mask_budget (int): elements of one query chunk's mask in a top-:math:`k > 1` bucket.
        window_chunks (tuple, optional): the query chunk of the window plus sinks (empty group
            sets) by window, as :attr:`band_blocks`
            (:mod:`~quest_geometric.nn.focus.window_chunks`; :obj:`None`: the general band).
        window_chunk (int, optional): one query chunk for every window (default: by window).
        window_max_seqs (int): most sequences for which the window plus sinks runs in chunks.
        window_chunks_max_window (int, optional): widest window at which one causal sequence's
            window plus sinks runs in chunks; wider, it runs the split band (where
            :meth:`band_splits` allows), whose unmasked :math:`w`-token calls run larger
            tiles than masked chunks (:obj:`None`: the chunks at every window).
    """
    band_blocks: Tuple[Tuple[float, int], ...] = ((127, 16), (511, 32), (math.inf, 64))
    band_block: Optional[int] = None
    split_band_min_window: Optional[int] = 1024
    pad_ratio: float = 1.0
    bucket_query_block: int = 256
    sink_dense_max_keys: int = 256
    gather_budget: int = 1 << 21
    mask_budget: int = 1 << 22
    window_chunks: Optional[Tuple[Tuple[float, int], ...]] = ((1023, 128), (math.inf, 192))
    window_chunk: Optional[int] = None
    window_max_seqs: int = 16
    window_chunks_max_window: Optional[int] = 2048

    def __post_init__(self) -> None:
        where = "BlocksConfig"
        _check_by_window(self.band_blocks, "band_blocks", where)
        _check_optional_int(self.band_block, "band_block", 1, where)
        _check_optional_int(self.split_band_min_window, "split_band_min_window", 1, where)
        _check_share(self.pad_ratio, "pad_ratio", where)
        for name in ("bucket_query_block", "gather_budget", "mask_budget"):
            check_int(getattr(self, name), name, 1, where=where)
        check_int(self.sink_dense_max_keys, "sink_dense_max_keys", -1, where=where)
        if self.window_chunks is not None:
            _check_by_window(self.window_chunks, "window_chunks", where)
        _check_optional_int(self.window_chunk, "window_chunk", 1, where)
        check_int(self.window_max_seqs, "window_max_seqs", 1, where=where)
        _check_optional_int(self.window_chunks_max_window, "window_chunks_max_window", 0,
                            where)

    def band_block_size(self, window: int) -> int:
        r"""The band's query block at ``window`` (:attr:`band_block` or :attr:`band_blocks`)."""
        if self.band_block is not None:
            return self.band_block
        return next(b for w, b in self.band_blocks if window <= w)

    def window_chunk_size(self, window: int) -> int:
        r"""The query chunk of the window plus sinks at ``window`` (:attr:`window_chunk` or
        :attr:`window_chunks`)."""
        if self.window_chunk is not None:
            return self.window_chunk
        return next(b for w, b in self.window_chunks if window <= w)

    def window_in_chunks(self, num_seqs: int, window: int, causal: bool) -> bool:
        r"""Whether the window plus sinks of ``num_seqs`` sequences at ``window`` runs in chunks:
        not with :attr:`window_chunks` off or more than :attr:`window_max_seqs` sequences, nor
        for one causal sequence wider than :attr:`window_chunks_max_window` whose band splits
        (:meth:`band_splits`)."""
        if self.window_chunks is None or num_seqs > self.window_max_seqs:
            return False
        wide = (self.window_chunks_max_window is not None
                and window > self.window_chunks_max_window)
        return not (causal and num_seqs == 1 and wide and self.band_splits(window))

    def band_splits(self, window: int) -> bool:
        r"""Whether a causal band of one sequence with no groups runs split at ``window``."""
        return self.split_band_min_window is not None and window >= self.split_band_min_window


@dataclass(frozen=True)
class DecodeConfig:
    r"""Tuning of the fast decoding step (:func:`focus_decode_attention`).

    Args:
        store_after (int): fast steps a state takes before it may read a store, whose first
            read copies the out-of-window cache (the ski-rental rule: switch once the savings
            forgone equal that copy).
        masked_share (float): the cost, in key reads per cached key, of one masked SDPA over
            the whole cache.
        part_work (float): the fixed cost of reading one more store, in key reads times
            :math:`H_{kv} D`.
        max_store_parts (int): most group-set stores one step may read (beyond: the per-group
            stores or the masked SDPA).
    """
    store_after: int = 40
    masked_share: float = 0.75
    part_work: float = 30000.0
    max_store_parts: int = 16

    def __post_init__(self) -> None:
        where = "DecodeConfig"
        check_int(self.store_after, "store_after", 0, where=where)
        _check_share(self.masked_share, "masked_share", where)
        check_real(self.part_work, "part_work", positive=True, allow_zero=True, where=where)
        check_int(self.max_store_parts, "max_store_parts", 0, where=where)


_BLOCKS: contextvars.ContextVar[BlocksConfig] = contextvars.ContextVar(
    "focus_blocks_config", default=BlocksConfig())
_DECODE: contextvars.ContextVar[DecodeConfig] = contextvars.ContextVar(
    "focus_decode_config", default=DecodeConfig())


def current_blocks_config() -> BlocksConfig:
    """The :class:`BlocksConfig` in force (the defaults outside :func:`blocks_config`)."""
    return _BLOCKS.get()


def current_decode_config() -> DecodeConfig:
    """The :class:`DecodeConfig` in force (the defaults outside :func:`decode_config`)."""
    return _DECODE.get()


@contextmanager
def _setting(var: contextvars.ContextVar, cls, config, overrides) -> Iterator:
    base = var.get() if config is None else config
    if not isinstance(base, cls):
        raise fail(TypeError, f"{cls.__name__[:-6].lower()}_config", "config",
                   f"a {cls.__name__}", base)
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(overrides) - names)
    if unknown:
        raise TypeError(f"{cls.__name__[:-6].lower()}_config: unknown setting(s) {unknown}; "
                        f"the settings are {sorted(names)}")
    token = var.set(replace(base, **overrides))
    try:
        yield var.get()
    finally:
        var.reset(token)


@contextmanager
def blocks_config(config: Optional[BlocksConfig] = None, **overrides) -> Iterator[BlocksConfig]:
    r"""Set the :class:`BlocksConfig` in force inside a ``with`` block: :obj:`config` (default:
    the one in force) with the fields :obj:`overrides` replaced; yields it.

    Example:
        >>> with blocks_config(band_block=32) as cfg:
        ...     current_blocks_config().band_block_size(1000)
        32
    """
    with _setting(_BLOCKS, BlocksConfig, config, overrides) as cfg:
        yield cfg


@contextmanager
def decode_config(config: Optional[DecodeConfig] = None, **overrides) -> Iterator[DecodeConfig]:
    r"""Set the :class:`DecodeConfig` in force inside a ``with`` block (as :func:`blocks_config`).
    """
    with _setting(_DECODE, DecodeConfig, config, overrides) as cfg:
        yield cfg
