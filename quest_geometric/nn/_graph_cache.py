r"""The process-wide per-graph cache of :class:`~quest_geometric.nn.QSVConv` (private).

What one ``edge_index`` tensor tells the layer (its COO form, whether it is in the dense
layout, its CSR patterns) is computed once and kept, keyed by the tensor's identity and
version, for the last few tensors, so the blocks of a network that share one ``edge_index``
pay for the data-dependent checks once.
"""
from __future__ import annotations

import weakref
from typing import Any, Optional

import torch
from torch import Tensor

from quest_geometric.nn._qsv_csr import CSRPattern

__all__ = ["GraphInfo", "cached_info", "store_info", "layout_degree", "dense_degree",
           "DENSE_LAYOUT_ERROR"]

#: What a layer told that its graph has the dense layout raises where it does not (eagerly
#: from the cached check, under :func:`torch.compile` from the attention kernel, which sweeps
#: each thread's targets before its rows).
DENSE_LAYOUT_ERROR = (
    "QSVConv: 'dense=True' needs every node to have the same number k >= 1 of in-edges "
    "sorted by target (edge_index[1] == arange(N).repeat_interleave(k)); pass dense=None or "
    "False for other graphs")


class GraphInfo:
    """What one ``edge_index`` (or sparse adjacency) tells the layer: its COO form (for
    sparse input), whether it is in the dense layout, and the CSR patterns per head count.
    Computed once per tensor and shared by every layer that is given the same tensor (the
    blocks of a network), so the data-dependent checks (host synchronisations) run once."""

    def __init__(self, num_src: int, num_dst: int) -> None:
        self.num_src, self.num_dst = num_src, num_dst
        self.coo: Optional[Tensor] = None  # for sparse input: the converted edge_index
        self.adj: Optional[Tensor] = None  # for uncoalesced COO input: the coalesced adj_t
        self.k: Optional[int] = None  # in-degree of the dense layout; 0: not dense
        self.patterns: dict[int, CSRPattern] = {}

    def dense_k(self, edge_index: Tensor) -> int:
        if self.k is None:
            self.k = dense_degree(edge_index[1], self.num_dst)
        return self.k

    def pattern(self, edge_index: Tensor, heads: int) -> CSRPattern:
        if heads not in self.patterns:
            k = self.dense_k(edge_index)
            self.patterns[heads] = CSRPattern(edge_index[0], self.num_src, self.num_dst, k, heads)
        return self.patterns[heads]


_CACHE: list[tuple[Any, int, tuple, GraphInfo]] = []
_CACHE_SIZE = 4


def cached_info(edge_index: Tensor, key: tuple) -> Optional[GraphInfo]:
    try:
        version = edge_index._version
    except RuntimeError:  # inference tensors have no version counter
        return None
    for ref, ver, k, info in _CACHE:
        if ref() is edge_index and ver == version and k == key:
            return info
    return None


def store_info(edge_index: Tensor, key: tuple, info: GraphInfo) -> None:
    try:
        version = edge_index._version
        ref = weakref.ref(edge_index, _forget)
    except (RuntimeError, TypeError):
        return
    _CACHE.insert(0, (ref, version, key, info))
    del _CACHE[_CACHE_SIZE:]


def _forget(ref: Any) -> None:
    _CACHE[:] = [entry for entry in _CACHE if entry[0] is not ref]


def layout_degree(num_edges: int, num_dst: int) -> int:
    """``k = E / N_dst`` where the sizes allow the dense layout (``E`` a positive multiple of
    ``N_dst``), else 0: the part of the layout check that reads no data."""
    if num_dst == 0 or num_edges == 0 or num_edges % num_dst != 0:
        return 0
    return num_edges // num_dst


def dense_degree(targets: Tensor, num_dst: int) -> int:
    """``k`` if ``targets == arange(num_dst).repeat_interleave(k)`` for some ``k >= 1`` (the
    edges' targets, ``edge_index[1]``), else 0 (reads the data)."""
    k = layout_degree(targets.numel(), num_dst)
    if not k:
        return 0
    target = torch.arange(num_dst, device=targets.device).unsqueeze(1)
    return k if bool((targets.view(num_dst, k) == target).all()) else 0
