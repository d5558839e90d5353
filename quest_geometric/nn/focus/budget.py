r"""A differentiable count of the pairs hard Focus keeps, for a pair budget in training, and
how much of the pairs the soft additive gate keeps (:func:`additive_gate_share`).

Soft training does not see how many pairs the hard top-:math:`k` pattern will keep: with
:math:`K = 4` and top-2, uniformly random balanced groups already share a group for
:math:`5/6` of the pairs, and training the soft gate leaves the kept share there.
:func:`straight_through_pair_share` gives that share in value, with a gradient through the
soft memberships, so a training loss can charge for it.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor
from torch_geometric.utils import to_dense_batch

from quest_geometric._utils.checks import check_batch, check_real, check_soft, check_window
from quest_geometric.nn.focus._layout import seq_layout
from quest_geometric.nn.focus.dense import (
    _additive_log_gate,
    _pair_offsets,
    straight_through_membership,
)

__all__ = ["straight_through_pair_share", "additive_gate_share"]


def straight_through_pair_share(soft: Tensor, groups: Tensor, window: int,
                                batch: Optional[Tensor] = None, causal: bool = True
                                ) -> Tensor:
    r"""Share of the far pairs that share a hard group, with a straight-through gradient.

    With :math:`\tilde{\mathbf{m}}_i` the hard membership carrying the soft gradient
    (:func:`~quest_geometric.nn.focus.dense.straight_through_membership`) and
    :math:`\mathcal{F}` the far pairs of every sequence (:math:`i - j > w` if causal,
    :math:`|i - j| > w` otherwise),

    .. math::
        r = \frac{1}{|\mathcal{F}|} \sum_{(i, j) \in \mathcal{F}}
        \min\bigl(1, \tilde{\mathbf{m}}_i^{\top}\tilde{\mathbf{m}}_j\bigr),

    which in value is :math:`|\{(i, j) \in \mathcal{F} : G_i \cap G_j \ne \emptyset\}| /
    |\mathcal{F}|`. The window pairs are always kept, so the share of causal pairs kept is
    :math:`(P_w + r |\mathcal{F}|) / P`.

    Args:
        soft (torch.Tensor): soft memberships ``[N, K]``.
        groups (torch.Tensor): hard group ids ``[N, top_k]``, long.
        window (int): local window :math:`w \ge 0`.
        batch (torch.Tensor, optional): sorted sequence id per token (default: :obj:`None`,
            one sequence).
        causal (bool): causal pairs only (default: :obj:`True`).

    Returns:
        torch.Tensor: a scalar in :math:`[0, 1]` (NaN-free: 0 when there is no far pair).

    Raises:
        ValueError: for a bad :obj:`soft`, :obj:`groups`, :obj:`window` or :obj:`batch`.
    """
    check_soft(soft, where="straight_through_pair_share")
    check_window(window, where="straight_through_pair_share")
    check_batch(batch, soft.size(0), where="straight_through_pair_share")
    m = straight_through_membership(soft, groups)
    seq, nseq = seq_layout(batch, soft.size(0), soft.device)
    md, valid = to_dense_batch(m, seq, batch_size=nseq)
    t = md.size(1)
    dist = _pair_offsets(t, soft.device)
    far = (dist > window) if causal else (dist.abs() > window)
    far = far.unsqueeze(0) & valid.unsqueeze(1) & valid.unsqueeze(2)
    count = far.sum()
    if int(count) == 0:
        return soft.sum() * 0.0
    keep = (md @ md.transpose(1, 2)).clamp(max=1.0)
    return keep[far].sum() / count


def additive_gate_share(soft: Tensor, window: int, gate_scale: float = 10.0,
                        gate_bias: float = 0.5, batch: Optional[Tensor] = None,
                        causal: bool = True) -> Tensor:
    r"""How much of the causal pairs the soft additive gate keeps: the mean factor by which
    it scales a pair's unnormalised attention weight.

    The additive gate adds :math:`a_{ij} = \log\sigma\bigl(\lambda(\mathbf{g}_i^{\top}
    \mathbf{g}_j - b)\bigr)` to the logit of a pair beyond the window
    (:func:`~quest_geometric.nn.focus.dense.focus_soft_attention`), i.e. multiplies its
    weight :math:`e^{s_{ij}}` by :math:`e^{a_{ij}} \in (0, 1)`; window pairs keep factor 1.
    Over the pairs :math:`\mathcal{P}` (causal: :math:`j \le i`),

    .. math::
        \rho = \frac{1}{|\mathcal{P}|} \sum_{(i, j) \in \mathcal{P}}
        \begin{cases} 1 & |i - j| \le w \\
        \sigma\bigl(\lambda(\mathbf{g}_i^{\top}\mathbf{g}_j - b)\bigr) & \text{else,}
        \end{cases}

    1 for full attention; for a gate whose factors are 0 or 1 (one-hot memberships,
    :math:`\lambda \to \infty`) it is the share of pairs the hard pattern keeps, so it puts
    a soft model on the same axis as the hard rows' pairs kept.

    Args:
        soft (torch.Tensor): soft memberships ``[N, K]``.
        window (int): local window :math:`w \ge 0`.
        gate_scale (float): :math:`\lambda` (default: :obj:`10.0`).
        gate_bias (float): :math:`b` (default: :obj:`0.5`).
        batch (torch.Tensor, optional): sorted sequence id per token (default: :obj:`None`,
            one sequence).
        causal (bool): causal pairs only (default: :obj:`True`).

    Returns:
        torch.Tensor: a scalar in :math:`(0, 1]`.

    Raises:
        ValueError: for a bad :obj:`soft`, :obj:`window`, :obj:`batch`, or a non-finite
            :obj:`gate_scale` / :obj:`gate_bias`.
    """
    check_soft(soft, where="additive_gate_share")
    check_window(window, where="additive_gate_share")
    check_batch(batch, soft.size(0), where="additive_gate_share")
    gate_scale = check_real(gate_scale, "gate_scale", where="additive_gate_share")
    gate_bias = check_real(gate_bias, "gate_bias", where="additive_gate_share")
    seq, nseq = seq_layout(batch, soft.size(0), soft.device)
    sd, valid = to_dense_batch(soft, seq, batch_size=nseq)
    dist = _pair_offsets(sd.size(1), soft.device)
    pairs = (dist >= 0) if causal else torch.ones_like(dist, dtype=torch.bool)
    pairs = pairs.unsqueeze(0) & valid.unsqueeze(1) & valid.unsqueeze(2)
    factor = _additive_log_gate(sd @ sd.transpose(1, 2), (dist.abs() <= window).unsqueeze(0),
                                gate_scale, gate_bias).exp()
    return factor[pairs].sum() / pairs.sum()
