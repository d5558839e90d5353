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

__all__ = ["CSRPattern", "NeighbourSum", "sparse_csr"]


def sparse_csr(crow: Tensor, col: Tensor, values: Tensor, size: tuple[int, int]) -> Tensor:
    with warnings.catch_warnings():  # "Sparse CSR tensor support is in beta state" (once)
        warnings.filterwarnings("ignore", message=".*Sparse CSR tensor support is in beta.*")
        return torch.sparse_csr_tensor(crow, col, values, size, check_invariants=False)


class CSRPattern:
    r"""The CSR pattern of a dense-layout graph with ``heads`` block-diagonal copies: row
    :math:`(i, h)` holds the :math:`k` entries :math:`(j, h)` of the in-neighbours of
    :math:`i`, in the layout ``[N_dst, heads, k]`` of the values.  The transposed pattern
    (for the backward pass) is built on first use and kept."""

    def __init__(self, src: Tensor, num_src: int, num_dst: int, k: int, heads: int) -> None:
        self.src, self.num_src, self.num_dst, self.k, self.heads = src, num_src, num_dst, k, heads
        dev = src.device
        self.crow = torch.arange(0, num_dst * heads * k + 1, k, device=dev)
        if heads == 1:
            self.col = src
        else:
            h = torch.arange(heads, device=dev).view(1, heads, 1)
            self.col = (src.view(num_dst, 1, k) * heads + h).reshape(-1)
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
            src, k, H, E = self.src, self.k, self.heads, self.src.numel()
            dev = src.device
            key = src.int() if self.num_src < 2 ** 31 else src  # int32 sorts ~3x faster
            perm = key.argsort(stable=True)
            deg = torch.bincount(src, minlength=self.num_src)
            ptr = torch.zeros(self.num_src + 1, dtype=torch.long, device=dev)
            ptr[1:] = deg.cumsum(0)
            dst = perm // k
            if H == 1:
                self._transposed = (ptr, dst, perm)
            else:
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
                crow_t = torch.zeros(self.num_src * H + 1, dtype=torch.long, device=dev)
                crow_t[1:] = deg.repeat_interleave(H).cumsum(0)
                self._transposed = (crow_t, col_t, gather)
        return self._transposed

    def mm(self, values: Tensor, dense: Tensor) -> Tensor:
        """:math:`A\\,D` with ``values`` in the forward layout; ``[rows, C]``."""
        return sparse_csr(self.crow, self.col, values, (self.rows, self.cols)) @ dense

    def mm_t(self, values: Tensor, dense: Tensor) -> Tensor:
        """:math:`A^{\\top} D` with ``values`` in the forward layout; ``[cols, C]``."""
        crow_t, col_t, gather = self.transposed()
        a_t = sparse_csr(crow_t, col_t, values.index_select(0, gather), (self.cols, self.rows))
        return a_t @ dense

    def sddmm(self, a: Tensor, b: Tensor) -> Tensor:
        """:math:`\\langle a_{r}, b_{c}\\rangle` for every entry :math:`(r, c)` of the pattern,
        in the forward layout (``[E * heads]``)."""
        pattern = sparse_csr(self.crow, self.col,
                              a.new_zeros(self.col.numel()), (self.rows, self.cols))
        return torch.sparse.sampled_addmm(pattern, a, b.t(), beta=0.0).values()


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
