r"""The CSR kernel of :class:`~quest_geometric.nn.QSVConv`'s fused dense path (private).

:class:`CSRPattern` is the block-diagonal CSR pattern of a dense-layout graph with ``heads``
copies, and :class:`NeighbourSum` the autograd function :math:`Y = A(\alpha)\,X` on it;
:func:`neighbour_sum_op` is the same product as a custom operator, for
:func:`torch.compile`.
"""
from __future__ import annotations

import warnings
from typing import Any, Optional

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from quest_geometric._utils.checks import check_int, fail
from quest_geometric._utils.compare import same_values

__all__ = [
    "CSRPattern", "NeighbourSum", "TransposeCache", "TRANSPOSES", "sparse_csr",
    "transpose_pattern", "pattern_columns", "csr_matmul", "csr_sampled", "neighbour_sum_op",
    "neighbour_sum_backward_op",
]


def sparse_csr(crow: Tensor, col: Tensor, values: Tensor, size: tuple[int, int]) -> Tensor:
    with warnings.catch_warnings():  # "Sparse CSR tensor support is in beta state" (once)
        warnings.filterwarnings("ignore", message=".*Sparse CSR tensor support is in beta.*")
        return torch.sparse_csr_tensor(crow, col, values, size, check_invariants=False)


def transpose_pattern(src: Tensor, num_src: int, k: int, heads: int
                      ) -> tuple[Tensor, Tensor, Tensor]:
    r"""``(crow_t, col_t, gather)`` of the transpose of the pattern of :class:`CSRPattern`
    ``(src, num_src, num_dst = src.numel() // k, k, heads)``: the CSR rows and columns of
    :math:`A^{\top}` (``[num_src * heads + 1]`` and ``[E * heads]``) and, for each of its
    entries, the position of its value in the forward layout (``[E * heads]``)."""
    E, H = src.numel(), heads
    dev = src.device
    key = src.int() if num_src < 2 ** 31 else src  # int32 keys sort faster than int64
    perm = key.argsort(stable=True)
    deg = torch.bincount(src, minlength=num_src)
    ptr = torch.zeros(num_src + 1, dtype=torch.long, device=dev)
    ptr[1:] = deg.cumsum(0)
    dst = perm // k
    if H == 1:
        return ptr, dst, perm
    j = src.index_select(0, perm)
    offset = torch.arange(E, device=dev) - ptr.index_select(0, j)
    h = torch.arange(H, device=dev).view(1, H)
    pos = (ptr.index_select(0, j).view(E, 1) * H + h * deg.index_select(0, j).view(E, 1)
           + offset.view(E, 1)).reshape(-1)
    value_pos = (dst.view(E, 1) * (H * k) + h * k + (perm % k).view(E, 1)).reshape(-1)
    gather = torch.empty(E * H, dtype=torch.long, device=dev)
    gather[pos] = value_pos
    col_t = torch.empty(E * H, dtype=torch.long, device=dev)
    col_t[pos] = (dst.view(E, 1) * H + h).reshape(-1)
    crow_t = torch.zeros(num_src * H + 1, dtype=torch.long, device=dev)
    crow_t[1:] = deg.repeat_interleave(H).cumsum(0)
    return crow_t, col_t, gather


def pattern_columns(src: Tensor, num_dst: int, k: int, heads: int) -> tuple[Tensor, Tensor]:
    """``(crow, col)`` of the forward pattern of :class:`CSRPattern` (traceable: no data is
    read)."""
    dev = src.device
    crow = torch.arange(0, num_dst * heads * k + 1, k, device=dev)
    if heads == 1:
        return crow, src
    h = torch.arange(heads, device=dev).view(1, heads, 1)
    return crow, (src.view(num_dst, 1, k) * heads + h).reshape(-1)


def csr_matmul(crow: Tensor, col: Tensor, values: Tensor, num_cols: int, dense: Tensor) -> Tensor:
    r""":math:`A\,D` for the CSR matrix ``(crow, col, values)`` of ``num_cols`` columns."""
    return sparse_csr(crow, col, values, (crow.numel() - 1, num_cols)) @ dense


def csr_sampled(crow: Tensor, col: Tensor, num_cols: int, a: Tensor, b: Tensor) -> Tensor:
    r""":math:`\langle a_{r}, b_{c}\rangle` for every entry :math:`(r, c)` of the CSR pattern
    ``(crow, col)``, in its value order (``[col.numel()]``)."""
    pattern = sparse_csr(crow, col, a.new_zeros(col.numel()), (crow.numel() - 1, num_cols))
    return torch.sparse.sampled_addmm(pattern, a, b.t(), beta=0.0).values()


class CSRPattern:
    r"""The CSR pattern of a dense-layout graph with ``heads`` block-diagonal copies: row
    :math:`(i, h)` holds the :math:`k` entries :math:`(j, h)` of the in-neighbours of
    :math:`i`, in the layout ``[N_dst, heads, k]`` of the values.  The transposed pattern
    (for the backward pass) is found on first use and kept."""

    def __init__(self, src: Tensor, num_src: int, num_dst: int, k: int, heads: int) -> None:
        self.src, self.num_src, self.num_dst, self.k, self.heads = src, num_src, num_dst, k, heads
        self.crow, self.col = pattern_columns(src, num_dst, k, heads)
        self._transposed: Optional[tuple[Tensor, Tensor, Tensor]] = None

    def transposed(self) -> tuple[Tensor, Tensor, Tensor]:
        """``(crow_t, col_t, gather)`` of the transpose (:func:`transpose_pattern`)."""
        if self._transposed is None:
            self._transposed = TRANSPOSES(self.src, self.num_src, self.k, self.heads)
        return self._transposed


class NeighbourSum(torch.autograd.Function):
    r""":math:`Y = A(\alpha)\,X` on a :class:`CSRPattern`; the backward is
    :math:`\nabla X = A^{\top} G` and :math:`\nabla \alpha_{rc} = \langle G_r, X_c \rangle`."""

    @staticmethod
    def forward(ctx: Any, values: Tensor, x: Tensor, pattern: CSRPattern) -> Tensor:
        ctx.save_for_backward(values, x)
        ctx.pattern = pattern
        return csr_matmul(pattern.crow, pattern.col, values, pattern.num_src * pattern.heads, x)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple[Optional[Tensor], Optional[Tensor], None]:
        values, x = ctx.saved_tensors
        p: CSRPattern = ctx.pattern
        grad = grad.contiguous()
        g_values = g_x = None
        if ctx.needs_input_grad[0]:
            g_values = csr_sampled(p.crow, p.col, p.num_src * p.heads, grad, x)
        if ctx.needs_input_grad[1]:
            crow_t, col_t, gather = p.transposed()
            g_x = csr_matmul(crow_t, col_t, values.index_select(0, gather), p.num_dst * p.heads,
                             grad)
        return g_values, g_x, None


class TransposeCache:
    r"""The transposed patterns (:func:`transpose_pattern`) of the last ``size`` source
    vectors seen, found again by exact comparison of the sources (one ``memcmp``,
    :func:`~quest_geometric._utils.compare.same_values`) and of ``(num_src, k, heads)``.

    A traced backward cannot read the eager layer's per-graph cache (its ``edge_index`` is a
    new tensor at every call), so without this it would sort a graph's sources at every
    call.  The cache lives inside the opaque backward operator: its tensors are never
    outputs of a compiled graph, whose buffers the compiler may reuse.  Each entry holds a
    copy of the sources and the transpose (about four ``int64`` per edge and head);
    :meth:`clear` frees them."""

    def __init__(self, size: int = 2) -> None:
        self.size = check_int(size, "'size'", 1, where="TransposeCache")
        self._entries: list[tuple[tuple, Tensor, tuple[Tensor, Tensor, Tensor]]] = []
        #: Calls answered from the cache and calls that built a transpose (for tests).
        self.hits = self.misses = 0

    def __call__(self, src: Tensor, num_src: int, k: int, heads: int
                 ) -> tuple[Tensor, Tensor, Tensor]:
        key = (num_src, k, heads, src.numel(), src.dtype, src.device)
        for i, (entry_key, entry_src, result) in enumerate(self._entries):
            if entry_key == key and same_values(entry_src, src):
                self._entries.append(self._entries.pop(i))  # most recently used last
                self.hits += 1
                return result
        result = transpose_pattern(src, num_src, k, heads)
        self._entries.append((key, src.clone(), result))
        del self._entries[:-self.size]
        self.misses += 1
        return result

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        """Forget every entry (and free its memory)."""
        self._entries.clear()

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(size={self.size}, entries={len(self)})"


#: The cache of :func:`neighbour_sum_backward_op`.
TRANSPOSES = TransposeCache()


def _check_sources(src: Tensor, num_src: int) -> None:
    """Refuse a source outside ``[0, num_src)`` before a sparse product reads it (the CSR
    matrices skip torch's own invariant checks), inside compiled graphs too."""
    if src.numel() and (int(src.min()) < 0 or int(src.max()) >= num_src):
        # the wording of _qsv_graph.range_error (which this lower module cannot import)
        raise fail(ValueError, "QSVConv", "edge_index", f"entries in [0, {num_src - 1}] for "
                   f"{num_src} nodes", got_text=f"min {int(src.min())}, max {int(src.max())}")


@torch.library.custom_op("quest_geometric::neighbour_sum", mutates_args=())
def neighbour_sum_op(values: Tensor, x: Tensor, crow: Tensor, col: Tensor, src: Tensor,
                     k: int, heads: int) -> Tensor:
    r""":class:`NeighbourSum` as a custom operator: ``A`` the CSR matrix ``(crow, col,
    values)`` of :class:`CSRPattern` ``(src, x.size(0) // heads, src.numel() // k, k, heads)``
    with ``x.size(0)`` columns; its backward is :func:`neighbour_sum_backward_op`."""
    _check_sources(src, x.size(0) // heads)
    return csr_matmul(crow, col, values, x.size(0), x)


@neighbour_sum_op.register_fake
def _(values: Tensor, x: Tensor, crow: Tensor, col: Tensor, src: Tensor, k: int,
      heads: int) -> Tensor:
    torch._check(values.numel() == col.numel())
    return x.new_empty(crow.numel() - 1, x.size(1))


@torch.library.custom_op("quest_geometric::neighbour_sum_backward", mutates_args=())
def neighbour_sum_backward_op(values: Tensor, x: Tensor, grad: Tensor, crow: Tensor,
                              col: Tensor, src: Tensor, k: int, heads: int,
                              need_values: bool, need_x: bool) -> tuple[Tensor, Tensor]:
    r"""The gradients of :func:`neighbour_sum_op`, :math:`\nabla \alpha_{rc} = \langle G_r,
    X_c \rangle` and :math:`\nabla X = A^{\top} G` (the transposed pattern from
    :data:`TRANSPOSES`); one not needed comes back empty."""
    _check_sources(src, x.size(0) // heads)
    g_values = csr_sampled(crow, col, x.size(0), grad, x) if need_values else values.new_empty(0)
    if need_x:
        crow_t, col_t, gather = TRANSPOSES(src, x.size(0) // heads, k, heads)
        g_x = csr_matmul(crow_t, col_t, values.index_select(0, gather), grad.size(0), grad)
    else:
        g_x = x.new_empty(0)
    return g_values, g_x


@neighbour_sum_backward_op.register_fake
def _(values: Tensor, x: Tensor, grad: Tensor, crow: Tensor, col: Tensor, src: Tensor, k: int,
      heads: int, need_values: bool, need_x: bool) -> tuple[Tensor, Tensor]:
    torch._check(grad.size(0) == crow.numel() - 1)
    return (values.new_empty(values.shape if need_values else (0,)),
            x.new_empty(x.shape if need_x else (0,)))


def _neighbour_sum_setup(ctx: Any, inputs: tuple, output: Tensor) -> None:
    values, x, crow, col, src, k, heads = inputs
    ctx.save_for_backward(values, x, crow, col, src)
    ctx.k, ctx.heads = k, heads


def _neighbour_sum_backward(ctx: Any, grad: Tensor) -> tuple[Optional[Tensor], ...]:
    values, x, crow, col, src = ctx.saved_tensors
    need_values, need_x = bool(ctx.needs_input_grad[0]), bool(ctx.needs_input_grad[1])
    g_values, g_x = neighbour_sum_backward_op(values, x, grad.contiguous(), crow, col, src,
                                              ctx.k, ctx.heads, need_values, need_x)
    return (g_values if need_values else None, g_x if need_x else None,
            None, None, None, None, None)


neighbour_sum_op.register_autograd(_neighbour_sum_backward, setup_context=_neighbour_sum_setup)
