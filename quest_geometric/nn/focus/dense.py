r"""Focus attention computed densely: the hard-mask oracle, the soft-gated training
attention and plain full attention.

Each sequence of a PyG batch is laid out as a padded ``[B, T, ...]`` block
(:func:`~torch_geometric.utils.to_dense_batch`) and every (query, key) pair is scored: memory
:math:`O(B T^2)`, so these are references and the training path, not the inference fast path
(:mod:`quest_geometric.nn.focus.blocks`).
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.utils import to_dense_batch

from quest_geometric._utils.checks import (check_all_finite, check_batch, check_hard_args,
                                           check_num_sinks, check_qkv, check_real, check_soft,
                                           check_tensor, check_window, fail)
from quest_geometric.nn.focus._layout import HALF_DTYPES, seq_layout

__all__ = ["focus_dense_attention", "focus_soft_attention", "full_attention",
           "straight_through_membership", "focus_far_bias_attention", "SOFT_GATES"]

#: The gates of :func:`focus_soft_attention`.
SOFT_GATES = ("additive", "multiplicative", "straight_through")


def straight_through_membership(soft: Tensor, groups: Tensor) -> Tensor:
    r"""Hard top-:math:`k` membership with the gradient of the soft one:

    .. math::
        \tilde{\mathbf{m}}_i = \mathbf{h}_i + \mathbf{g}_i
        - \operatorname{sg}(\mathbf{g}_i), \qquad h_{ik} = [k \in G_i],

    whose value is the 0/1 indicator of the hard groups :math:`G_i` and whose gradient is
    that of the soft membership :math:`\mathbf{g}_i` (:math:`\operatorname{sg}`: stop
    gradient), so :math:`\tilde{\mathbf{m}}_i^{\top}\tilde{\mathbf{m}}_j =
    |G_i \cap G_j|` in value.

    Args:
        soft (torch.Tensor): soft memberships ``[..., K]``.
        groups (torch.Tensor): hard group ids ``[..., top_k]``, long.

    Returns:
        torch.Tensor: ``[..., K]`` in the dtype of :obj:`soft`.
    """
    if not isinstance(groups, Tensor) or groups.dtype != torch.long:
        raise TypeError(f"straight_through_membership: 'groups' must be a long tensor, got "
                        f"{getattr(groups, 'dtype', type(groups).__name__)}")
    if groups.dim() != soft.dim() or groups.shape[:-1] != soft.shape[:-1] \
            or groups.size(-1) < 1:
        raise ValueError(f"straight_through_membership: 'groups' must be of shape "
                         f"{list(soft.shape[:-1])} + [top_k], "
                         f"got {list(groups.shape)}")
    if groups.numel() and (int(groups.min()) < 0 or int(groups.max()) >= soft.size(-1)):
        raise ValueError(f"straight_through_membership: 'groups' must be group ids in "
                         f"[0, {soft.size(-1) - 1}]")
    check_all_finite((("soft", soft),), where="straight_through_membership")
    hard = torch.zeros_like(soft).scatter_(-1, groups, 1.0)
    return hard + soft - soft.detach()


def _pair_offsets(t: int, device: torch.device) -> Tensor:
    r"""Query minus key position :math:`i - j` of every pair of a :math:`T`-token
    sequence, ``[T, T]`` long (the distance the window :math:`|i - j| \le w` and
    causality :math:`i - j \ge 0` read)."""
    i = torch.arange(t, device=device)
    return i.view(-1, 1) - i.view(1, -1)


def _near_pairs(t: int, window: int, num_sinks: int, device: torch.device) -> Tensor:
    r"""The pairs every Focus pattern keeps whatever the groups, ``[T, T]`` bool (query,
    key): the window :math:`|i - j| \le w` and the attention sinks
    :math:`\min(i, j) < s` (positions within the sequence)."""
    dist = _pair_offsets(t, device)
    near = dist.abs() <= window
    if num_sinks > 0:
        i = torch.arange(t, device=device)
        near = near | (torch.minimum(i.view(-1, 1), i.view(1, -1)) < num_sinks)
    return near


def _dense_allowed(groups: Tensor, seq: Tensor, nseq: int, window: int, causal: bool,
                   num_groups: int, num_sinks: int = 0) -> Tuple[Tensor, Tensor]:
    """Dense boolean Focus mask ``[B, T, T]`` (query, key) and the valid-token mask."""
    member = torch.zeros(groups.size(0), num_groups, device=groups.device)
    member.scatter_(1, groups, 1.0)
    md, valid = to_dense_batch(member, seq, batch_size=nseq)
    near = _near_pairs(md.size(1), window, num_sinks, groups.device)
    shared = (md @ md.transpose(1, 2)) > 0
    return (near | shared) & _key_mask(valid, causal), valid


def focus_dense_attention(q: Tensor, k: Tensor, v: Tensor, groups: Tensor, window: int,
                          batch: Optional[Tensor] = None, causal: bool = True,
                          num_groups: Optional[int] = None, num_sinks: int = 0) -> Tensor:
    r"""Focus attention with an explicit boolean mask and
    :func:`~torch.nn.functional.scaled_dot_product_attention` (the small-:math:`N` oracle).

    Query :math:`i` attends to the keys :math:`j` of its sequence (:math:`j \le i` if
    causal) with :math:`|i - j| \le w`, :math:`G_i \cap G_j \ne \emptyset` or
    :math:`\min(p_i, p_j) < s` (the :math:`s` attention sinks; :math:`p` the position in
    the sequence), see :func:`~quest_geometric.nn.focus.edge_index.focus_edge_index`.

    Args:
        q, k, v (torch.Tensor): ``[N, H, D]``.
        groups (torch.Tensor): ``[N, top_k]`` hard group ids.
        window (int): local window :math:`w`.
        batch (torch.Tensor, optional): sorted sequence ids (default: :obj:`None`).
        causal (bool): causal attention (default: :obj:`True`).
        num_groups (int, optional): :math:`K` (default: ``groups.max() + 1``).
        num_sinks (int): attention sinks :math:`s \ge 0` (default: :obj:`0`).

    Returns:
        torch.Tensor: ``[N, H, D]``.

    Raises:
        TypeError: for non-floating :obj:`q`, :obj:`k`, :obj:`v` or non-long :obj:`groups`.
        ValueError: for bad shapes, a negative :obj:`window` or :obj:`num_sinks`, a bad
            :obj:`batch` or group ids outside :math:`[0, K)`.
    """
    groups, kgroups = check_hard_args(q, k, v, groups, window, batch, num_groups,
                                      where="focus_dense_attention")
    check_num_sinks(num_sinks, where="focus_dense_attention")
    n, h, d = q.shape
    if n == 0:
        return q.new_empty(0, h, d)
    seq, nseq = seq_layout(batch, n, q.device)
    allowed, valid = _dense_allowed(groups, seq, nseq, window, causal, kgroups, num_sinks)
    qd, kd, vd = (to_dense_batch(x.reshape(n, h * d), seq, batch_size=nseq)[0]
                  .view(nseq, -1, h, d).transpose(1, 2) for x in (q, k, v))
    out = F.scaled_dot_product_attention(qd, kd, vd, attn_mask=allowed.unsqueeze(1))
    return out.transpose(1, 2)[valid]


def _additive_log_gate(sim: Tensor, near: Tensor, gate_scale: float, gate_bias: float
                       ) -> Tensor:
    r"""The additive gate's term per pair: :math:`0` where :obj:`near` (the window),
    :math:`\log\sigma(\lambda(\text{sim} - b))` elsewhere (:func:`focus_soft_attention`,
    :func:`~quest_geometric.nn.focus.budget.additive_gate_share`)."""
    return torch.where(near, torch.zeros_like(sim), F.logsigmoid(gate_scale * (sim - gate_bias)))


def focus_soft_attention(q: Tensor, k: Tensor, v: Tensor, soft: Tensor, window: int,
                         batch: Optional[Tensor] = None, causal: bool = True,
                         gate: str = "additive", gate_scale: float = 10.0,
                         gate_bias: float = 0.5, groups: Optional[Tensor] = None,
                         num_sinks: int = 0) -> Tensor:
    r"""Soft-gated dense attention over all pairs (training mode).

    With :math:`s_{ij} = \mathbf{q}_i^{\top}\mathbf{k}_j/\sqrt{D}`, :math:`\lambda` the gate
    scale and :math:`b` the gate bias, pairs outside the window
    (:math:`|i - j| > w`) and the sinks (:math:`\min(p_i, p_j) \ge s`) are gated by the
    soft memberships:

    .. math::
        \text{multiplicative (paper, Eq. 2):}\quad
        \tilde s_{ij} = s_{ij} \cdot \sigma(\lambda\, \mathbf{g}_i^{\top}\mathbf{g}_j),
        \qquad
        \text{additive:}\quad
        \tilde s_{ij} = s_{ij} + \log \sigma\bigl(\lambda (\mathbf{g}_i^{\top}\mathbf{g}_j
        - b)\bigr).

    The additive gate is a log-barrier: as :math:`\lambda \to \infty` it tends to
    :math:`0` where :math:`\mathbf{g}_i^{\top}\mathbf{g}_j > b` and to :math:`-\infty`
    below, i.e. to the hard mask for one-hot memberships (:math:`b = 1/2`; for memberships
    spread evenly over :math:`m` groups, the top-:math:`m` mask, :math:`b = 1/(2m^2)`),
    whereas the multiplicative gate
    only rescales a logit (a zero logit keeps its weight, and a negative logit is even
    *raised*), so soft training and hard inference disagree.

    The ``'straight_through'`` gate is the additive gate on the hard top-:math:`k`
    memberships with the soft memberships' gradient
    (:func:`straight_through_membership`), :math:`\tilde s_{ij} = s_{ij} + \log
    \sigma\bigl(\lambda(\tilde{\mathbf{m}}_i^{\top}\tilde{\mathbf{m}}_j - b)\bigr)`: in
    value a pair sharing a hard group gets :math:`\log\sigma(\lambda(1 - b))` (about
    :math:`-0.007` at the defaults) and any other far pair :math:`\log\sigma(-\lambda b)`
    (about :math:`-5.0`), so training sees the hard top-:math:`k` pattern of inference (up
    to an :math:`e^{-5}` leak that keeps a gradient on the removed pairs); it needs the
    hard :obj:`groups`.

    Args:
        q, k, v (torch.Tensor): ``[N, H, D]``.
        soft (torch.Tensor): soft memberships ``[N, K]``.
        window (int): local window :math:`w \ge 0`.
        batch (torch.Tensor, optional): sorted sequence ids (default: :obj:`None`).
        causal (bool): causal attention (default: :obj:`True`).
        gate (str): ``'additive'``, ``'multiplicative'`` or ``'straight_through'``
            (default: :obj:`'additive'`).
        gate_scale (float): :math:`\lambda`, finite (default: :obj:`10.0`).
        gate_bias (float): :math:`b`, finite (default: :obj:`0.5`).
        groups (torch.Tensor, optional): hard group ids ``[N, top_k]``, required by (and
            only used with) ``gate='straight_through'``. (default: :obj:`None`)
        num_sinks (int): attention sinks :math:`s \ge 0`, never gated (default: :obj:`0`).

    Returns:
        torch.Tensor: ``[N, H, D]``.

    Raises:
        ValueError: for bad shapes or options, or non-finite soft memberships (checked in
            eager mode, one host synchronisation; they would make the output NaN).
    """
    check_qkv(q, k, v, where="focus_soft_attention")
    check_window(window, where="focus_soft_attention")
    check_soft(soft, q.size(0), where="focus_soft_attention")
    check_batch(batch, q.size(0), where="focus_soft_attention")
    check_num_sinks(num_sinks, where="focus_soft_attention")
    gate_scale = check_real(gate_scale, "gate_scale", where="focus_soft_attention")
    gate_bias = check_real(gate_bias, "gate_bias", where="focus_soft_attention")
    if gate not in SOFT_GATES:
        raise ValueError(f"focus_soft_attention: 'gate' must be one of {SOFT_GATES}, got "
                         f"{gate!r}")
    if gate == "straight_through":
        if groups is None:
            raise ValueError("focus_soft_attention: gate='straight_through' needs the hard "
                             "'groups' [N, top_k]")
        soft = straight_through_membership(soft, groups)
    n, h, d = q.shape
    seq, nseq = seq_layout(batch, n, q.device)
    qd, kd, vd, valid = _padded_heads(q, k, v, batch)
    sd = to_dense_batch(soft, seq, batch_size=nseq)[0]
    t = qd.size(2)
    s = (qd @ kd.transpose(-1, -2)) / math.sqrt(d)  # [B, H, T, T]
    near = _near_pairs(t, window, num_sinks, q.device).unsqueeze(0)
    sim = (sd @ sd.transpose(1, 2)).to(s.dtype)  # [B, T, T]
    if gate == "multiplicative":
        factor = torch.where(near, torch.ones_like(sim), torch.sigmoid(gate_scale * sim))
        s = s * factor.unsqueeze(1)
    else:  # additive, straight_through
        s = s + _additive_log_gate(sim, near, gate_scale, gate_bias).unsqueeze(1)
    s = s.masked_fill(~_key_mask(valid, causal).unsqueeze(1), float("-inf"))
    out = torch.softmax(s, dim=-1) @ vd
    return out.transpose(1, 2)[valid]


def focus_far_bias_attention(q: Tensor, k: Tensor, v: Tensor, log_scale: Tensor,
                             far_bias: Tensor, window: int, batch: Optional[Tensor] = None,
                             causal: bool = True, num_sinks: int = 0) -> Tensor:
    r"""The content-free soft control: dense attention over all pairs with, per head
    :math:`h`, a learned inverse temperature :math:`e^{\theta_h}` on every logit and a
    learned bias :math:`\beta_h` on the pairs outside the window and the sinks,

    .. math::
        \tilde s^h_{ij} = e^{\theta_h} \frac{\mathbf{q}_i^{h\top}\mathbf{k}^h_j}{\sqrt{D}}
        + \beta_h \, [\, |i - j| > w \,\wedge\, \min(p_i, p_j) \ge s \,],

    (:math:`p` the position in the sequence, :math:`s` the sinks), softmax over the
    (causal) pairs of each sequence. At :math:`\theta = \beta = 0` it is full attention; it
    sees no content beyond the model's own logits (the router of
    :class:`~quest_geometric.nn.focus.far_bias_router.FarBiasRouter`).

    Args:
        q, k, v (torch.Tensor): ``[N, H, D]``.
        log_scale (torch.Tensor): :math:`\theta`, ``[H]``.
        far_bias (torch.Tensor): :math:`\beta`, ``[H]``.
        window (int): local window :math:`w \ge 0`.
        batch (torch.Tensor, optional): sorted sequence ids (default: :obj:`None`).
        causal (bool): causal attention (default: :obj:`True`).
        num_sinks (int): attention sinks :math:`s \ge 0`, never biased (default: :obj:`0`).

    Returns:
        torch.Tensor: ``[N, H, D]``.

    Raises:
        TypeError: for a non-tensor or non-floating-point input, or a non-int
            :obj:`window` or :obj:`num_sinks`.
        ValueError: for bad shapes or options.
    """
    where = "focus_far_bias_attention"
    check_qkv(q, k, v, where=where)
    check_window(window, where=where)
    check_num_sinks(num_sinks, where=where)
    check_batch(batch, q.size(0), where=where)
    n, h, d = q.shape
    for name, p in (("log_scale", log_scale), ("far_bias", far_bias)):
        check_tensor(p, name, where=where, floating=True)
        if p.shape != (h,):
            raise fail(ValueError, where, name, f"a [{h}] tensor (one per head)", p)
    check_all_finite((("log_scale", log_scale), ("far_bias", far_bias)), where=where)
    qd, kd, vd, valid = _padded_heads(q, k, v, batch)
    t = qd.size(2)
    wdt = torch.float32 if q.dtype in HALF_DTYPES else q.dtype
    s = (qd.to(wdt) @ kd.to(wdt).transpose(-1, -2)) / math.sqrt(d)  # [B, H, T, T]
    far = ~_near_pairs(t, window, num_sinks, q.device)
    s = s * log_scale.to(wdt).exp().view(1, h, 1, 1) \
        + far.to(wdt) * far_bias.to(wdt).view(1, h, 1, 1)
    s = s.masked_fill(~_key_mask(valid, causal).unsqueeze(1), float("-inf"))
    out = torch.softmax(s, dim=-1) @ vd.to(wdt)
    return out.transpose(1, 2)[valid].to(q.dtype)


def _padded_heads(q: Tensor, k: Tensor, v: Tensor, batch: Optional[Tensor]
                  ) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    r"""``[N, H, D]`` q, k, v as zero-padded ``[B, H, T, D]`` tensors and the ``[B, T]`` mask of
    real tokens."""
    n, h, d = q.shape
    seq, nseq = seq_layout(batch, n, q.device)
    qd, valid = to_dense_batch(q.reshape(n, h * d), seq, batch_size=nseq)
    kd = to_dense_batch(k.reshape(n, h * d), seq, batch_size=nseq)[0]
    vd = to_dense_batch(v.reshape(n, h * d), seq, batch_size=nseq)[0]
    t = qd.size(1)
    qd, kd, vd = (x.view(nseq, t, h, d).transpose(1, 2) for x in (qd, kd, vd))
    return qd, kd, vd, valid


def _key_mask(valid: Tensor, causal: bool) -> Tensor:
    r"""The real keys (and, causal, :math:`j \le i`) of each query, ``[B, T, T]``, with the
    diagonal kept so that no row (a padding query's) is empty."""
    t = valid.size(1)
    allowed = valid.unsqueeze(1).expand(-1, t, -1)
    if causal:
        allowed = allowed & (_pair_offsets(t, valid.device) >= 0)
    return allowed | torch.eye(t, dtype=torch.bool, device=valid.device)


def full_attention(q: Tensor, k: Tensor, v: Tensor, batch: Optional[Tensor] = None,
                   causal: bool = True) -> Tensor:
    r"""Plain (causal) multi-head attention per sequence, ``[N, H, D]`` in and out."""
    check_qkv(q, k, v, where="full_attention")
    n, h, d = q.shape
    if batch is None:
        # 4-D input: 3-D input makes CPU SDPA take the O(N^2)-memory math path
        out = F.scaled_dot_product_attention(q.transpose(0, 1).unsqueeze(0),
                                             k.transpose(0, 1).unsqueeze(0),
                                             v.transpose(0, 1).unsqueeze(0), is_causal=causal)
        return out[0].transpose(0, 1)
    qd, kd, vd, valid = _padded_heads(q, k, v, batch)
    out = F.scaled_dot_product_attention(qd, kd, vd,
                                         attn_mask=_key_mask(valid, causal).unsqueeze(1))
    return out.transpose(1, 2)[valid]

