r"""The operators of :class:`~quest_geometric.nn.QSVConv`: its one door to the kernels
(private).

The layer reaches its native kernels (:mod:`~quest_geometric.nn._qsv_native`), its custom
operators (:mod:`~quest_geometric.nn._qsv_attend_graph`, :mod:`~quest_geometric.nn._qsv_csr`)
and the plain quaternion maths through this module alone.  Where an operator has a native and
a plain PyTorch form, the choice is made here from the tensors (:func:`supports`); which
*path* the layer takes is decided in :mod:`~quest_geometric.nn._qsv_path`.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from quest_geometric.nn import _qsv_attend_graph as graph_ops
from quest_geometric.nn import _qsv_native as native
from quest_geometric.nn._qsv_csr import CSRPattern, NeighbourSum, neighbour_sum_op, pattern_columns
from quest_geometric.nn._qsv_graph import DENSE_LAYOUT_ERROR, check_range, checked_edge_index
from quest_geometric.quaternion import rotate_vector_parts, to_rotation_matrix

__all__ = ["is_compiling", "checked", "supports", "rotation_matrix", "rotate",
           "prepare", "attend", "attend_graph", "neighbour_sum", "dense_targets",
           "assert_dense_targets"]


def is_compiling() -> bool:
    """Whether :func:`torch.compile` is tracing the call."""
    return bool(torch.compiler.is_compiling())


def checked(coo: Tensor, num_src: int, num_dst: int) -> Tensor:
    """``coo`` with its range checked against ``[0, num_src)`` and ``[0, num_dst)``, for the
    paths that index with it in PyTorch: on the host in eager mode, by the custom operator
    ``quest_geometric::qsv_checked_edge_index`` under :func:`torch.compile`.  The native
    kernels and custom attention operators check every index they read themselves."""
    if is_compiling():
        return checked_edge_index(coo, num_src, num_dst)
    check_range(coo, num_src, num_dst)
    return coo


def supports(*tensors: Tensor) -> bool:
    """Whether the native kernels may run on these tensors
    (:func:`~quest_geometric.nn._qsv_native.supports`)."""
    return native.supports(*tensors)


def rotation_matrix(q: Tensor) -> Tensor:
    """:func:`~quest_geometric.quaternion.to_rotation_matrix` of ``q [..., 4]``, by the
    native kernel where it can run (one pass instead of about twenty element-wise ones)."""
    if native.supports(q):
        return native.rotation_matrix(q)
    return to_rotation_matrix(q)


def rotate(rot: Tensor, x: Tensor, transpose: bool = False, bias: Optional[Tensor] = None
           ) -> Tensor:
    r""":math:`\mathrm{diag}(1, R)` (or its transpose) of every node and head applied to its
    quaternion groups, ``rot [N, H, 3, 3]``, ``x [N, H, m, 4]``, plus ``bias [H, m, 4]``
    (none when :obj:`None`): natively where it can run, else eagerly as one batched product
    and under :func:`torch.compile` as an elementwise sum, which the compiler fuses."""
    if native.supports(rot, x, *([] if bias is None else [bias])):
        return native.rotate(rot, x, transpose, bias)
    y = rotate_vector_parts(rot, x, transpose, method="elementwise" if is_compiling() else "bmm")
    return y if bias is None else y + bias


def prepare(x: Tensor, weight: Tensor, bias: Tensor, heads: int
            ) -> tuple[Tensor, Tensor, Tensor]:
    """The fused inference prologue (:func:`~quest_geometric.nn._qsv_native.prepare`)."""
    return native.prepare(x, weight, bias, heads)


def attend(q_src: Tensor, q_dst: Tensor, scale: Tensor, xs: Tensor, src: Tensor, k: int,
           transposed: Optional[tuple[Tensor, Tensor, Tensor]] = None,
           targets: Optional[Tensor] = None, rot: Optional[Tensor] = None,
           bias: Optional[Tensor] = None, check_finite: bool = False
           ) -> tuple[Tensor, Tensor]:
    """The native attention kernel on the dense layout
    (:func:`~quest_geometric.nn._qsv_native.attend`); with ``rot`` (inference only) also the
    output rotation and ``bias`` in its pass
    (:func:`~quest_geometric.nn._qsv_native.attend_rotate`)."""
    if rot is not None:
        return native.attend_rotate(q_src, q_dst, scale, xs, src, k, rot, bias, targets,
                                    check_finite)
    return native.attend(q_src, q_dst, scale, xs, src, k, transposed, targets)


def attend_graph(q_src: Tensor, q_dst: Tensor, scale: Tensor, xs: Tensor, src: Tensor,
                 dst: Tensor, num_dst: int, want_alpha: bool, rot: Optional[Tensor] = None,
                 bias: Optional[Tensor] = None, check_finite: bool = False
                 ) -> tuple[Tensor, Tensor]:
    """The attention over any graph, its layout found inside one custom operator
    (:mod:`~quest_geometric.nn._qsv_attend_graph`); ``rot`` as for :func:`attend`."""
    if rot is not None:
        return graph_ops.attend_graph_rotate(q_src, q_dst, scale, xs, src, dst, num_dst, rot,
                                             bias, want_alpha, check_finite)
    return graph_ops.attend_graph(q_src, q_dst, scale, xs, src, dst, num_dst, want_alpha)


def neighbour_sum(values: Tensor, feats: Tensor, src: Tensor, num_dst: int, k: int,
                  heads: int, pattern: Optional[CSRPattern] = None) -> Tensor:
    """:math:`Y = A(\\alpha)\\,X` over the dense layout's CSR pattern: on the ``pattern``
    the eager layer caches per graph, else (compiled) through the custom operator
    ``quest_geometric::neighbour_sum`` on a pattern built in the traced graph."""
    if pattern is None:
        crow, col = pattern_columns(src, num_dst, k, heads)
        return neighbour_sum_op(values, feats, crow, col, src, k, heads)
    return NeighbourSum.apply(values, feats, pattern)


def dense_targets(coo: Tensor, num_dst: int) -> Tensor:
    """Bool scalar tensor, computed in the graph (no host read): whether ``coo``'s targets
    are ``arange(num_dst).repeat_interleave(k)`` for ``k = E / num_dst`` (the caller ensures
    ``E`` is a positive multiple of ``num_dst``)."""
    k = coo.size(1) // num_dst
    targets = torch.arange(num_dst, device=coo.device).unsqueeze(1)
    return (coo[1].view(num_dst, k) == targets).all()


def assert_dense_targets(coo: Tensor, num_dst: int) -> None:
    """The targets' part of ``dense=True``'s check in a compiled graph where no native
    kernel reads them: an assertion the graph runs (no host synchronisation)."""
    torch._assert_async(dense_targets(coo, num_dst), DENSE_LAYOUT_ERROR)
