r"""The CSR kernel of :class:`~quest_geometric.nn.QSVConv`'s fused dense path (private).

:class:`CSRPattern` is the block-diagonal CSR pattern of a dense-layout graph with ``heads``
copies, and :class:`NeighbourSum` the autograd function :math:`Y = A(\alpha)\,X` on it.
The plain gather reference (``QSVConv._dense_propagate``) stays beside the layer and the
tests hold both equal to the scatter path.
"""
from __future__ import annotations

import warnings
from typing import Any, Optional

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

__all__ = [
    "CSRPattern", "NeighbourSum", "sparse_csr", "transpose_pattern", "pattern_columns",
    "csr_matmul", "csr_sampled",
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
    key = src.int() if num_src < 2 ** 31 else src  # int32 sorts ~3x faster
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
    (for the backward pass) is built on first use and kept."""

    def __init__(self, src: Tensor, num_src: int, num_dst: int, k: int, heads: int) -> None:
        self.src, self.num_src, self.num_dst, self.k, self.heads = src, num_src, num_dst, k, heads
        self.crow, self.col = pattern_columns(src, num_dst, k, heads)
        self._transposed: Optional[tuple[Tensor, Tensor, Tensor]] = None

    @property
    def rows(self) -> int:
        return self.num_dst * self.heads

    @property
    def cols(self) -> int:
        return self.num_src * self.heads

    def transposed(self) -> tuple[Tensor, Tensor, Tensor]:
        """``(crow_t, col_t, gather)``: the CSR pattern of the transpose and, for each of its
        entries, the position of its value in the forward layout."""
        if self._transposed is None:
            self._transposed = transpose_pattern(self.src, self.num_src, self.k, self.heads)
        return self._transposed

    def mm(self, values: Tensor, dense: Tensor) -> Tensor:
        """:math:`A\\,D` with ``values`` in the forward layout; ``[rows, C]``."""
        return csr_matmul(self.crow, self.col, values, self.cols, dense)

    def mm_t(self, values: Tensor, dense: Tensor) -> Tensor:
        """:math:`A^{\\top} D` with ``values`` in the forward layout; ``[cols, C]``."""
        crow_t, col_t, gather = self.transposed()
        return csr_matmul(crow_t, col_t, values.index_select(0, gather), self.rows, dense)

    def sddmm(self, a: Tensor, b: Tensor) -> Tensor:
        """:math:`\\langle a_{r}, b_{c}\\rangle` for every entry :math:`(r, c)` of the pattern,
        in the forward layout (``[E * heads]``)."""
        return csr_sampled(self.crow, self.col, self.cols, a, b)


class NeighbourSum(torch.autograd.Function):
    r""":math:`Y = A(\alpha)\,X` on a :class:`CSRPattern` (one pass over the neighbours'
    features); the backward is :math:`\nabla X = A^{\top} G` and
    :math:`\nabla \alpha_{rc} = \langle G_r, X_c \rangle`."""

    @staticmethod
    def forward(ctx: Any, values: Tensor, x: Tensor, pattern: CSRPattern) -> Tensor:
        ctx.save_for_backward(values, x)
        ctx.pattern = pattern
        return pattern.mm(values, x)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple[Optional[Tensor], Optional[Tensor], None]:
        values, x = ctx.saved_tensors
        pattern: CSRPattern = ctx.pattern
        grad = grad.contiguous()
        g_values = pattern.sddmm(grad, x) if ctx.needs_input_grad[0] else None
        g_x = pattern.mm_t(values, grad) if ctx.needs_input_grad[1] else None
        return g_values, g_x, None

