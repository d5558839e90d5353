r"""What one call of :class:`~quest_geometric.nn.QSVConv` knows of its graph (private):
the graph read and checked (:func:`read_graph`), its layout (:func:`graph_layout`).

Nothing is kept across calls by a tensor's identity or version, which in-place edits through
``from_numpy`` buffers or ``.data`` do not change (the transposed patterns are found again by
the sources' bytes, :data:`~quest_geometric.nn._qsv_csr.TRANSPOSES`).
"""
from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor
from torch_geometric.typing import SparseTensor
from torch_geometric.utils import is_torch_sparse_tensor, to_edge_index

from quest_geometric._utils.checks import fail
from quest_geometric.nn._qsv_csr import CSRPattern
from quest_geometric.nn._qsv_path import Layout

__all__ = ["GraphInfo", "layout_degree", "dense_degree", "DENSE_LAYOUT_ERROR",
           "NonFiniteOutput", "range_error", "check_range", "checked_edge_index",
           "read_graph", "graph_layout"]

#: What ``dense=True`` raises for a graph without the dense layout (eagerly from the host's
#: check, compiled from the kernel that reads each row's targets).
DENSE_LAYOUT_ERROR = (
    "QSVConv: 'dense=True' needs every node to have the same number k >= 1 of in-edges "
    "sorted by target (edge_index[1] == arange(N).repeat_interleave(k)); pass dense=None or "
    "False for other graphs")


class NonFiniteOutput(ValueError):
    """Raised by the native attention with its output epilogue (``check_finite=True``) where
    a finished output entry is NaN or infinite; the layer turns it into its own error naming
    the input, so it does not reach users."""


def range_error(num_src: int, num_dst: Optional[int], src: Tensor,
                dst: Optional[Tensor] = None) -> ValueError:
    """The layer's :class:`ValueError` for an ``edge_index`` with an index outside the nodes,
    the same wherever it is found (eager or compiled): the ranges it holds, read on this
    error path only.  ``dst`` :obj:`None`: the targets are known to be in range (the dense
    layout was checked), or not known (``num_dst`` :obj:`None`)."""
    lo_s, hi_s = (int(src.min()), int(src.max())) if src.numel() else (0, -1)
    if dst is not None and dst.numel():
        lo_d, hi_d = int(dst.min()), int(dst.max())
    else:
        lo_d, hi_d = 0, (num_src if num_dst is None else num_dst) - 1
    if num_dst is None or num_src == num_dst:
        n = num_src
        return fail(ValueError, "QSVConv", "edge_index", f"entries in [0, {n - 1}] for {n} "
                    "nodes", got_text=f"min {min(lo_s, lo_d)}, max {max(hi_s, hi_d)}")
    return fail(ValueError, "QSVConv", "edge_index", f"sources in [0, {num_src - 1}] "
                f"and targets in [0, {num_dst - 1}]", got_text=f"sources in "
                f"[{lo_s}, {hi_s}], targets in [{lo_d}, {hi_d}]")


def check_range(edge_index: Tensor, num_src: int, num_dst: int) -> None:
    """Refuse an ``int64`` ``edge_index [2, E]`` with a source outside ``[0, num_src)`` or a
    target outside ``[0, num_dst)`` with the layer's :class:`ValueError` (one host
    synchronisation)."""
    if edge_index.numel() == 0:
        return
    lo, hi = torch.aminmax(edge_index, dim=1)
    (lo_s, lo_d), (hi_s, hi_d) = torch.stack([lo, hi]).tolist()
    if lo_s < 0 or hi_s >= num_src or lo_d < 0 or hi_d >= num_dst:
        raise range_error(num_src, num_dst, edge_index[0], edge_index[1])


@torch.library.custom_op("quest_geometric::qsv_checked_edge_index", mutates_args=())
def checked_edge_index(edge_index: Tensor, num_src: int, num_dst: int) -> Tensor:
    """A copy of ``edge_index`` after :func:`check_range`, for compiled paths without a
    native kernel: an opaque operator whose output the paths read, so it runs before them."""
    check_range(edge_index, num_src, num_dst)
    return edge_index.clone()


@checked_edge_index.register_fake
def _(edge_index: Tensor, num_src: int, num_dst: int) -> Tensor:
    return torch.empty_like(edge_index)


_INT_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


class GraphInfo:
    """What one ``edge_index`` (or sparse adjacency) tells the layer in one call, each
    computed at most once: its dense layout and CSR patterns per head count."""

    def __init__(self, num_src: int, num_dst: int) -> None:
        self.num_src, self.num_dst = num_src, num_dst
        self.adj: Optional[Tensor] = None  # for uncoalesced COO input: the coalesced adj_t
        self.k: Optional[int] = None  # in-degree of the dense layout; 0: not dense
        self.patterns: dict[int, CSRPattern] = {}

    def dense_k(self, edge_index: Tensor) -> int:
        if self.k is None:
            self.k = dense_degree(edge_index[1], self.num_dst)
        return self.k

    def host_layout(self, edge_index: Tensor) -> Layout:
        """:attr:`Layout.DENSE` or :attr:`Layout.SCATTER`, read on the host (eager mode)."""
        return Layout.DENSE if self.dense_k(edge_index) > 0 else Layout.SCATTER

    def pattern(self, edge_index: Tensor, heads: int) -> CSRPattern:
        if heads not in self.patterns:
            k = self.dense_k(edge_index)
            self.patterns[heads] = CSRPattern(edge_index[0], self.num_src, self.num_dst, k, heads)
        return self.patterns[heads]


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


def read_graph(edge_index: Any, num_src: int, num_dst: int) -> tuple[GraphInfo, Tensor]:
    """The call's :class:`GraphInfo` and the COO ``edge_index [2, E]`` (``int64``; its type
    and shape checked, its range not yet) of an ``edge_index`` tensor or a sparse adjacency
    ``adj_t``."""
    info = GraphInfo(num_src, num_dst)
    shape = (num_dst, num_src)
    if isinstance(edge_index, SparseTensor):  # torch_sparse, when installed
        row, col, _ = edge_index.coo()
        if tuple(edge_index.sizes()) != shape:
            raise fail(ValueError, "QSVConv", "edge_index", f"as a sparse adjacency adj_t "
                       f"{num_dst} x {num_src} (targets x sources)",
                       got_text=str(tuple(edge_index.sizes())))
        return info, torch.stack([col, row], dim=0).long()
    if not isinstance(edge_index, Tensor):
        raise fail(TypeError, "QSVConv", "edge_index", "a LongTensor [2, E] or a "
                   "torch.sparse adjacency", edge_index)
    if is_torch_sparse_tensor(edge_index):
        if tuple(edge_index.shape[:2]) != shape:
            raise fail(ValueError, "QSVConv", "edge_index", f"as a sparse adjacency adj_t "
                       f"{num_dst} x {num_src} (targets x sources)", edge_index)
        if edge_index.layout == torch.sparse_coo and not edge_index.is_coalesced():
            edge_index = edge_index.coalesce()  # PyG would only flag it coalesced
            info.adj = edge_index
        # PyG convention: a sparse `edge_index` is adj_t, adj_t[i, j] != 0 for j -> i.
        ei, _ = to_edge_index(edge_index)
        return info, ei.flip(0)
    if edge_index.dtype not in _INT_DTYPES:
        raise fail(TypeError, "QSVConv", "edge_index", "of an integer dtype", edge_index)
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise fail(ValueError, "QSVConv", "edge_index", "of shape [2, E]", edge_index)
    return info, edge_index.long()


def graph_layout(info: GraphInfo, coo: Tensor, num_dst: int, dense: Optional[bool], *,
                 observed: bool, hooked: bool, dropout: bool) -> Layout:
    """What the call knows of the graph's layout (:class:`~quest_geometric.nn._qsv_path.
    Layout`) before the path is chosen: with ``dense=None`` and sizes that allow the dense
    layout, :attr:`Layout.RUN_TIME` (found in the kernel's pass, or on the host by
    :meth:`GraphInfo.host_layout` where the path has no kernel); ``dense=True`` checks its
    claim (on the host eagerly; the sizes while tracing, the targets in the compiled graph)
    and refuses message-passing hooks.  ``observed``: PyG expects the messages (explaining
    or hooks); ``hooked``: a hook is registered; ``dropout``: attention dropout is on."""
    compiling = torch.compiler.is_compiling()
    if dense is None:
        if observed or not layout_degree(coo.size(1), num_dst) or (compiling and dropout):
            return Layout.SCATTER
        return Layout.RUN_TIME
    if not dense:
        return Layout.SCATTER
    if not (layout_degree(coo.size(1), num_dst) if compiling else info.dense_k(coo)):
        raise ValueError(DENSE_LAYOUT_ERROR)
    if hooked:
        raise ValueError(
            "QSVConv: 'dense=True' computes no messages for the registered message-passing "
            "hooks to see; pass dense=None or False while hooks are registered"
        )
    return Layout.ASSUMED_DENSE if compiling else Layout.DENSE
