r""":class:`~quest_geometric.nn.QSVConv`'s attention over a graph of unknown layout, as one
custom operator (``quest_geometric::qsv_attend_graph``).

A compiled layer with ``dense=None`` cannot read the layout on the host. Choosing the path in
the graph with :func:`torch.cond` works, but the backward of :func:`torch.cond` runs the taken
branch's forward again (the attention twice per step). This operator makes the choice inside
its own implementation instead, which the compiler treats as opaque: where the targets have the
dense layout (``dst == arange(N_dst).repeat_interleave(k)``) it runs the native kernel
(:func:`~quest_geometric.nn._qsv_native.attend_checked`, which checks each row's targets
beside its sources just before the row's attention: no pass of its own, as the operator runs
at every call, eagerly too),
elsewhere a scatter form over the edges;
its backward runs the form that computed the forward, from the weights it saved, so nothing
is recomputed.  Its forward-only sibling ``quest_geometric::qsv_attend_graph_rotate``
(:func:`attend_graph_rotate`) also applies the layer's output rotation and bias, in the
kernel's pass on the dense layout: what a compiled layer runs when no gradient is needed.

Both forms compute, per edge :math:`j \to i` and head :math:`h`,

.. math::
    \alpha_{ij} = \operatorname{softmax}_{j \in \mathcal{N}(i)}\bigl(s_h \langle q_i,
    q_j\rangle\bigr), \qquad y_i = \sum_{j \in \mathcal{N}(i)} \alpha_{ij} x_j,

and the backward, with :math:`g_{ij} = \langle G_i, x_j\rangle + \bar A_{ij}` (the output's
and the weights' gradients) and :math:`\bar g_{ij} = \alpha_{ij}(g_{ij} - \sum_l \alpha_{il}
g_{il})`: :math:`\nabla x_j = \sum_i \alpha_{ij} G_i`, :math:`\nabla q_i = \sum_j s_h \bar
g_{ij} q_j`, :math:`\nabla q_j = \sum_i s_h \bar g_{ij} q_i`, :math:`\nabla s_h = \sum_{ij}
\bar g_{ij} \langle q_i, q_j\rangle`.  :func:`attend_graph_reference` is the plain autograd
form beside it (PyG's :func:`~torch_geometric.utils.softmax` and a scatter sum).
"""
from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor
from torch_geometric.utils import scatter, softmax

from quest_geometric._utils.checks import all_finite
from quest_geometric.nn import _qsv_native as native
from quest_geometric.nn._qsv_graph import NonFiniteOutput, check_range, layout_degree

__all__ = ["attend_graph", "attend_graph_reference", "attend_graph_rotate"]


def attend_graph_reference(q_src: Tensor, q_dst: Tensor, scale: Tensor, xs: Tensor,
                           src: Tensor, dst: Tensor, num_dst: int) -> tuple[Tensor, Tensor]:
    """The plain autograd form of :func:`attend_graph`: ``(out [N_dst, H, C], alpha [E, H])``
    with PyG's segment softmax and a scatter sum (a target without in-edges gets zeros)."""
    logit = (q_src.index_select(0, src) * q_dst.index_select(0, dst)).sum(-1) * scale
    alpha = softmax(logit, dst, num_nodes=num_dst)
    out = scatter(alpha.unsqueeze(-1) * xs.index_select(0, src), dst, dim=0,
                  dim_size=num_dst, reduce="sum")
    return out, alpha


def _dense_attend(q_src: Tensor, q_dst: Tensor, scale: Tensor, xs: Tensor, src: Tensor,
                  dst: Tensor, num_dst: int, rot: Optional[Tensor] = None,
                  bias: Optional[Tensor] = None, check_finite: bool = False
                  ) -> Optional[tuple[Tensor, Tensor, int]]:
    """``(out, weights [N_dst, H, k], k)`` of the native kernel, which checks the dense
    layout itself, or :obj:`None` where it cannot run or the targets do not have the layout
    (the caller runs the scatter form)."""
    k = layout_degree(dst.numel(), num_dst)
    if (not k or not native.supports(q_src, q_dst, scale, xs) or int(dst[0]) != 0
            or int(dst[-1]) != num_dst - 1):
        return None
    out, weights, ok = native.attend_checked(q_src, q_dst, scale, xs, src, k, rot, bias,
                                             targets=dst, check_finite=check_finite)
    return (out, weights, k) if ok else None


def _edge_major(t: Tensor, k: int) -> Tensor:
    """``[N_dst, H, k]`` (the kernel's order) as ``[N_dst * k, H]`` (edge order), a copy."""
    Nd, H, _ = t.shape
    return t.transpose(1, 2).reshape(Nd * k, H).clone()


def _scatter_form(q_src: Tensor, q_dst: Tensor, scale: Tensor, xs: Tensor, src: Tensor,
                  dst: Tensor, num_dst: int) -> tuple[Tensor, Tensor]:
    """``(out [N_dst, H, C], weights [E, H])`` over edges in any order; an index outside the
    nodes raises the layer's :class:`ValueError` (inside compiled graphs too, where the
    layer does not check the range)."""
    check_range(torch.stack([src, dst]), xs.size(0), num_dst)
    qs, qd = q_src.index_select(0, src), q_dst.index_select(0, dst)
    weights = softmax((qs * qd).sum(-1) * scale, dst, num_nodes=num_dst)
    out = xs.new_zeros(num_dst, xs.size(1), xs.size(2))
    out.index_add_(0, dst, weights.unsqueeze(-1) * xs.index_select(0, src))
    return out, weights


@torch.library.custom_op("quest_geometric::qsv_attend_graph", mutates_args=())
def _attend_graph_op(q_src: Tensor, q_dst: Tensor, scale: Tensor, xs: Tensor, src: Tensor,
                     dst: Tensor, num_dst: int, want_alpha: bool
                     ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(out [N_dst, H, C], weights [E * H], order, alpha)``: ``weights`` in the form's own
    order, saved for the backward (the kernel's ``[N_dst, H, k]`` where the ``int64`` scalar
    ``order`` holds ``k``, edge order where it holds 0); ``alpha`` the weights in edge order
    ``[E, H]`` when ``want_alpha``, else empty (no copy)."""
    dense = _dense_attend(q_src, q_dst, scale, xs, src, dst, num_dst)
    if dense is not None:
        out, weights, k = dense
        alpha = _edge_major(weights, k) if want_alpha else weights.new_empty(0)
    else:
        out, weights = _scatter_form(q_src, q_dst, scale, xs, src, dst, num_dst)
        alpha, k = weights.clone() if want_alpha else weights.new_empty(0), 0
    return out, weights.reshape(-1), torch.tensor(k, dtype=torch.int64), alpha


@_attend_graph_op.register_fake
def _(q_src: Tensor, q_dst: Tensor, scale: Tensor, xs: Tensor, src: Tensor, dst: Tensor,
      num_dst: int, want_alpha: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    torch._check(src.numel() == dst.numel())
    E, H = src.numel(), xs.size(1)
    return (xs.new_empty(num_dst, H, xs.size(2)), xs.new_empty(E * H),
            torch.empty((), dtype=torch.int64), xs.new_empty((E, H) if want_alpha else (0,)))


@torch.library.custom_op("quest_geometric::qsv_attend_graph_backward", mutates_args=())
def _attend_graph_backward_op(grad: Tensor, grad_alpha: Optional[Tensor], weights: Tensor,
                              order: Tensor, q_src: Tensor, q_dst: Tensor, scale: Tensor,
                              xs: Tensor, src: Tensor, dst: Tensor, num_dst: int,
                              need_q_src: bool, need_xs: bool
                              ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(g_q_src, g_q_dst, g_scale [H], g_xs)`` from the output's gradient and the edge-order
    weights' (:obj:`None` where they are not used), by the form that computed the forward's
    ``weights``; ``g_q_src`` and ``g_xs`` empty unless asked for."""
    k = int(order)
    H = xs.size(1)
    if k:
        g_ga = None
        if grad_alpha is not None:  # edge order [E, H] -> the kernel's [N_dst, H, k]
            g_ga = grad_alpha.view(-1, k, H).transpose(1, 2).contiguous()
        g_qs, g_qd, g_scale, g_xs = torch.ops.quest_geometric.qsv_attend_backward(
            grad, g_ga, weights.view(num_dst, H, k), q_src, q_dst, scale, xs, src, k, None,
            None, None, need_q_src, need_xs)
        return g_qs, g_qd, g_scale.sum(0), g_xs
    alpha = weights.view(-1, H)
    G_i = grad.index_select(0, dst)                                  # [E, H, C]
    g = (G_i * xs.index_select(0, src)).sum(-1)                      # [E, H]
    if grad_alpha is not None:
        g = g + grad_alpha
    row = alpha.new_zeros(num_dst, H).index_add_(0, dst, alpha * g)
    g_bar = alpha * (g - row.index_select(0, dst))
    qs, qd = q_src.index_select(0, src), q_dst.index_select(0, dst)
    g_qd = torch.zeros_like(q_dst).index_add_(0, dst, (g_bar * scale).unsqueeze(-1) * qs)
    g_scale = (g_bar * (qs * qd).sum(-1)).sum(0)
    g_qs = q_src.new_empty(0)
    if need_q_src:
        g_qs = torch.zeros_like(q_src).index_add_(0, src, (g_bar * scale).unsqueeze(-1) * qd)
    g_xs = xs.new_empty(0)
    if need_xs:
        g_xs = torch.zeros_like(xs).index_add_(0, src, alpha.unsqueeze(-1) * G_i)
    return g_qs, g_qd, g_scale, g_xs


@_attend_graph_backward_op.register_fake
def _(grad: Tensor, grad_alpha: Optional[Tensor], weights: Tensor, order: Tensor,
      q_src: Tensor, q_dst: Tensor, scale: Tensor, xs: Tensor, src: Tensor, dst: Tensor,
      num_dst: int, need_q_src: bool, need_xs: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    return (q_src.new_empty(q_src.shape if need_q_src else (0,)), torch.empty_like(q_dst),
            torch.empty_like(scale), xs.new_empty(xs.shape if need_xs else (0,)))


def _setup(ctx: Any, inputs: tuple, output: tuple[Tensor, Tensor, Tensor, Tensor]) -> None:
    q_src, q_dst, scale, xs, src, dst, num_dst, want_alpha = inputs
    ctx.save_for_backward(output[1], output[2], q_src, q_dst, scale, xs, src, dst)
    ctx.mark_non_differentiable(output[1], output[2])
    ctx.set_materialize_grads(False)
    ctx.num_dst, ctx.want_alpha = num_dst, want_alpha


def _backward(ctx: Any, grad: Optional[Tensor], grad_weights: Optional[Tensor],
              grad_order: Optional[Tensor], grad_alpha: Optional[Tensor]
              ) -> tuple[Optional[Tensor], ...]:
    weights, order, q_src, q_dst, scale, xs, src, dst = ctx.saved_tensors
    need = ctx.needs_input_grad
    if not any(need[:4]) or (grad is None and grad_alpha is None):
        return (None,) * 8
    if grad is None:
        grad = xs.new_zeros(ctx.num_dst, xs.size(1), xs.size(2))
    g_qs, g_qd, g_scale, g_xs = _attend_graph_backward_op(
        grad, grad_alpha if ctx.want_alpha else None, weights, order, q_src, q_dst, scale, xs,
        src, dst, ctx.num_dst, bool(need[0]), bool(need[3]))
    return (g_qs if need[0] else None, g_qd if need[1] else None,
            g_scale if need[2] else None, g_xs if need[3] else None, None, None, None, None)


_attend_graph_op.register_autograd(_backward, setup_context=_setup)


def _attend_graph_rotate_impl(q_src: Tensor, q_dst: Tensor, scale: Tensor, xs: Tensor,
                              src: Tensor, dst: Tensor, num_dst: int, want_alpha: bool,
                              rot: Tensor, bias: Optional[Tensor], check_finite: bool = False
                              ) -> tuple[Tensor, Tensor]:
    """``(y [N_dst, H, C], alpha)`` of :func:`attend_graph_rotate`."""
    dense = _dense_attend(q_src, q_dst, scale, xs, src, dst, num_dst, rot, bias, check_finite)
    if dense is not None:
        out, weights, k = dense
        return out, (_edge_major(weights, k) if want_alpha else weights.new_empty(0))
    out, weights = _scatter_form(q_src, q_dst, scale, xs, src, dst, num_dst)
    Nd, H, C = out.shape
    b = None if bias is None else bias.reshape(H, C // 4, 4)
    y = native.rotate(rot.reshape(Nd, H, 3, 3), out.view(Nd, H, C // 4, 4), True, b)
    if check_finite and not all_finite(y):
        raise NonFiniteOutput("attend_graph_rotate: the output holds NaN or infinite entries")
    return y.view(Nd, H, C), (weights if want_alpha else weights.new_empty(0))


# The operator, for compiled graphs; eager calls run the implementation directly (forward
# only, so the dispatcher has nothing to add but its cost).
_attend_graph_rotate_op = torch.library.custom_op(
    "quest_geometric::qsv_attend_graph_rotate", mutates_args=())(_attend_graph_rotate_impl)


@_attend_graph_rotate_op.register_fake
def _(q_src: Tensor, q_dst: Tensor, scale: Tensor, xs: Tensor, src: Tensor, dst: Tensor,
      num_dst: int, want_alpha: bool, rot: Tensor, bias: Optional[Tensor],
      check_finite: bool = False) -> tuple[Tensor, Tensor]:
    torch._check(src.numel() == dst.numel())
    torch._check(rot.numel() == num_dst * xs.size(1) * 9)
    E, H = src.numel(), xs.size(1)
    return (xs.new_empty(num_dst, H, xs.size(2)), xs.new_empty((E, H) if want_alpha else (0,)))


def attend_graph_rotate(q_src: Tensor, q_dst: Tensor, scale: Tensor, xs: Tensor, src: Tensor,
                        dst: Tensor, num_dst: int, rot: Tensor, bias: Optional[Tensor] = None,
                        want_alpha: bool = True, check_finite: bool = False
                        ) -> tuple[Tensor, Tensor]:
    r""":func:`attend_graph` followed by the layer's output rotation and bias,

    .. math::
        z_i^{(h)} = \bigl(y_0,\; R_i^{(h)\top} \mathbf{y}_v\bigr) + b^{(h)}
        \quad \text{per quaternion of } y_i^{(h)},

    in the attention kernel's pass where the targets have the dense layout
    (:func:`~quest_geometric.nn._qsv_native.attend_rotate`), else the scatter form then
    :func:`~quest_geometric.nn._qsv_native.rotate`.  **Forward only** (no autograd formula):
    what a compiled :class:`~quest_geometric.nn.QSVConv` with ``dense=None`` runs when no
    gradient is needed, as the eager layer runs :func:`~quest_geometric.nn._qsv_native.
    attend_rotate` on a graph it found dense.

    Args:
        q_src, q_dst, scale, xs, src, dst, num_dst, want_alpha: as for :func:`attend_graph`.
        rot (torch.Tensor): The targets' rotation matrices (``N_dst * H * 9`` entries,
            ``[N_dst, H, 3, 3]`` or ``[N_dst, H, 9]``).
        bias (torch.Tensor, optional): ``H * C`` entries, added to the rotated rows.
        check_finite (bool, optional): Raise :class:`~quest_geometric.nn._qsv_graph.
            NonFiniteOutput` where an output entry is NaN or infinite (in the kernel's pass
            on the dense layout). (default: :obj:`False`)

    Returns:
        ``(z [N_dst, H, C], alpha [E, H])``, as :func:`attend_graph`.
    """
    op = _attend_graph_rotate_op if torch.compiler.is_compiling() else _attend_graph_rotate_impl
    return op(q_src, q_dst, scale, xs, src.long(), dst.long(), num_dst, want_alpha, rot, bias,
              check_finite)


def attend_graph(q_src: Tensor, q_dst: Tensor, scale: Tensor, xs: Tensor, src: Tensor,
                 dst: Tensor, num_dst: int, want_alpha: bool = True) -> tuple[Tensor, Tensor]:
    r"""Softmax attention of every target over its in-edges, the layout found inside the
    operator: :math:`\alpha_{ij}` and :math:`y_i` of the module docstring, per head.

    Args:
        q_src (torch.Tensor): Source quaternions ``[N_src, H, 4]``.
        q_dst (torch.Tensor): Target quaternions ``[N_dst, H, 4]``.
        scale (torch.Tensor): Logit scale per head ``[H]``.
        xs (torch.Tensor): Source features ``[N_src, H, C]``.
        src (torch.Tensor): ``int64`` sources of the edges ``[E]``.
        dst (torch.Tensor): ``int64`` targets of the edges ``[E]``, any order.
        num_dst (int): ``N_dst``.
        want_alpha (bool, optional): Return the weights in edge order; :obj:`False` returns
            an empty tensor in their place and saves the copy (the weights are then used only
            by the backward). (default: :obj:`True`)

    Returns:
        ``(out [N_dst, H, C], alpha [E, H])`` (weights in edge order), differentiable in the
        quaternions, the scale and the features.  The native kernel runs where the targets
        have the dense layout and :func:`~quest_geometric.nn._qsv_native.supports` holds, the
        scatter form elsewhere.  The caller checks the shapes and the index range.
    """
    out, _, _, alpha = _attend_graph_op(q_src, q_dst, scale, xs, src.long(), dst.long(),
                                        num_dst, want_alpha)
    return out, alpha


def _flops(q_src: Any, q_dst: Any, scale: Any, xs: Any, src: Any, dst: Any, num_dst: int,
           want_alpha: bool, *, out_shape: Any = None) -> int:
    return native.attend_edge_flops(int(src[0]) * int(q_dst[1]), int(xs[-1]))


def _backward_flops(grad: Any, grad_alpha: Any, weights: Any, order: Any, q_src: Any,
                    q_dst: Any, scale: Any, xs: Any, src: Any, dst: Any, num_dst: int,
                    need_q_src: bool, need_xs: bool, *, out_shape: Any = None) -> int:
    return native.attend_backward_edge_flops(int(src[0]) * int(q_dst[1]), int(xs[-1]),
                                             need_q_src, need_xs)


native.register_flop_formulas({"qsv_attend_graph": _flops,
                               "qsv_attend_graph_backward": _backward_flops})
