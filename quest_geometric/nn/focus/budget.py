r"""A differentiable count of the pairs hard Focus keeps, for a pair budget in training, and
how much of the pairs the soft additive gate keeps (:func:`additive_gate_share`); the
measured share of pairs a hard pattern keeps (:func:`focus_pair_share`); and the
content-free sliding window plus attention sinks at the same budget
(:func:`pattern_share`, :func:`window_for_share`).

Soft training does not see how many pairs the hard top-:math:`k` pattern will keep: with
:math:`K = 4` and top-2, uniformly random balanced groups already share a group for
:math:`5/6` of the pairs, and training the soft gate leaves the kept share there.
:func:`straight_through_pair_share` gives that share in value, with a gradient through the
soft memberships, so a training loss can charge for it.
"""
from __future__ import annotations

import numbers
from typing import Optional, Tuple

import torch
from torch import Tensor
from torch_geometric.utils import to_dense_batch

from quest_geometric._utils.checks import (check_batch, check_groups, check_int, check_num_sinks,
                                           check_real, check_soft, check_window, fail)
from quest_geometric.nn.focus._layout import seq_layout
from quest_geometric.nn.focus.dense import (_additive_log_gate, _near_pairs, _pair_offsets,
                                            straight_through_membership)

__all__ = ["straight_through_pair_share", "additive_gate_share", "focus_pair_share",
           "pattern_share", "window_for_share"]


def straight_through_pair_share(soft: Tensor, groups: Tensor, window: int,
                                batch: Optional[Tensor] = None, causal: bool = True,
                                num_sinks: int = 0) -> Tensor:
    r"""Share of the far pairs that share a hard group, with a straight-through gradient.

    With :math:`\tilde{\mathbf{m}}_i` the hard membership carrying the soft gradient
    (:func:`~quest_geometric.nn.focus.dense.straight_through_membership`) and
    :math:`\mathcal{F}` the far pairs of every sequence (:math:`i - j > w` if causal,
    :math:`|i - j| > w` otherwise, and not a sink pair, :math:`\min(p_i, p_j) \ge s`),

    .. math::
        r = \frac{1}{|\mathcal{F}|} \sum_{(i, j) \in \mathcal{F}}
        \min\bigl(1, \tilde{\mathbf{m}}_i^{\top}\tilde{\mathbf{m}}_j\bigr),

    which in value is :math:`|\{(i, j) \in \mathcal{F} : G_i \cap G_j \ne \emptyset\}| /
    |\mathcal{F}|`. The window and sink pairs are always kept, so the share of causal pairs
    kept is :math:`(P_w + r |\mathcal{F}|) / P`, :math:`P_w` the window and sink pairs.

    Args:
        soft (torch.Tensor): soft memberships ``[N, K]``.
        groups (torch.Tensor): hard group ids ``[N, top_k]``, long.
        window (int): local window :math:`w \ge 0`.
        batch (torch.Tensor, optional): sorted sequence id per token (default: :obj:`None`,
            one sequence).
        causal (bool): causal pairs only (default: :obj:`True`).
        num_sinks (int): attention sinks :math:`s \ge 0` (default: :obj:`0`).

    Returns:
        torch.Tensor: a scalar in :math:`[0, 1]` (NaN-free: 0 when there is no far pair).

    Raises:
        ValueError: for a bad :obj:`soft`, :obj:`groups`, :obj:`window`, :obj:`num_sinks`
            or :obj:`batch`.
    """
    check_soft(soft, where="straight_through_pair_share")
    check_window(window, where="straight_through_pair_share")
    check_num_sinks(num_sinks, where="straight_through_pair_share")
    check_batch(batch, soft.size(0), where="straight_through_pair_share")
    m = straight_through_membership(soft, groups)
    seq, nseq = seq_layout(batch, soft.size(0), soft.device)
    md, valid = to_dense_batch(m, seq, batch_size=nseq)
    t = md.size(1)
    dist = _pair_offsets(t, soft.device)
    far = ~_near_pairs(t, window, num_sinks, soft.device)
    if causal:
        far = far & (dist >= 0)
    far = far.unsqueeze(0) & valid.unsqueeze(1) & valid.unsqueeze(2)
    count = far.sum()
    if int(count) == 0:
        return soft.sum() * 0.0
    keep = (md @ md.transpose(1, 2)).clamp(max=1.0)
    return keep[far].sum() / count


def additive_gate_share(soft: Tensor, window: int, gate_scale: float = 10.0,
                        gate_bias: float = 0.5, batch: Optional[Tensor] = None,
                        causal: bool = True, num_sinks: int = 0) -> Tensor:
    r"""How much of the causal pairs the soft additive gate keeps: the mean factor by which
    it scales a pair's unnormalised attention weight.

    The additive gate adds :math:`a_{ij} = \log\sigma\bigl(\lambda(\mathbf{g}_i^{\top}
    \mathbf{g}_j - b)\bigr)` to the logit of a pair beyond the window
    (:func:`~quest_geometric.nn.focus.dense.focus_soft_attention`), i.e. multiplies its
    weight :math:`e^{s_{ij}}` by :math:`e^{a_{ij}} \in (0, 1)`; window and sink pairs
    (:math:`|i - j| \le w` or :math:`\min(p_i, p_j) < s`) keep factor 1.
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
        num_sinks (int): attention sinks :math:`s \ge 0` (default: :obj:`0`).

    Returns:
        torch.Tensor: a scalar in :math:`(0, 1]`.

    Raises:
        ValueError: for a bad :obj:`soft`, :obj:`window`, :obj:`batch`, or a non-finite
            :obj:`gate_scale` / :obj:`gate_bias`.
    """
    check_soft(soft, where="additive_gate_share")
    check_window(window, where="additive_gate_share")
    check_num_sinks(num_sinks, where="additive_gate_share")
    check_batch(batch, soft.size(0), where="additive_gate_share")
    gate_scale = check_real(gate_scale, "gate_scale", where="additive_gate_share")
    gate_bias = check_real(gate_bias, "gate_bias", where="additive_gate_share")
    seq, nseq = seq_layout(batch, soft.size(0), soft.device)
    sd, valid = to_dense_batch(soft, seq, batch_size=nseq)
    dist = _pair_offsets(sd.size(1), soft.device)
    pairs = (dist >= 0) if causal else torch.ones_like(dist, dtype=torch.bool)
    pairs = pairs.unsqueeze(0) & valid.unsqueeze(1) & valid.unsqueeze(2)
    near = _near_pairs(sd.size(1), window, num_sinks, soft.device).unsqueeze(0)
    factor = _additive_log_gate(sd @ sd.transpose(1, 2), near, gate_scale, gate_bias).exp()
    return factor[pairs].sum() / pairs.sum()


def focus_pair_share(groups: Tensor, window: int, batch: Optional[Tensor] = None,
                     causal: bool = True, num_sinks: int = 0, chunk: int = 1024) -> float:
    r"""The measured share of pairs a hard Focus pattern keeps: over the pairs
    :math:`\mathcal{P}` of every sequence (causal: :math:`j \le i`, else all ordered pairs),

    .. math::
        \rho = \frac{|\{(i, j) \in \mathcal{P} : |i - j| \le w \,\vee\,
        G_i \cap G_j \ne \emptyset \,\vee\, \min(p_i, p_j) < s\}|}{|\mathcal{P}|},

    the pattern of :func:`~quest_geometric.nn.focus.edge_index.focus_edge_index` (window,
    shared group, attention sinks), counted in query chunks (memory :math:`O(L)` per query
    row, never :math:`N^2`). Sequences weigh by their number of pairs. With no group
    (``top_k = 0``) it equals :func:`pattern_share` of each sequence.

    Args:
        groups (torch.Tensor): hard group ids ``[N, top_k]`` (``top_k`` may be 0), long.
        window (int): local window :math:`w \ge 0`.
        batch (torch.Tensor, optional): sorted sequence id per token (default: :obj:`None`,
            one sequence).
        causal (bool): causal pairs only (default: :obj:`True`).
        num_sinks (int): attention sinks :math:`s \ge 0` (default: :obj:`0`).
        chunk (int): query rows counted at once (memory: rows times the sequence length;
            the result does not depend on it) (default: :obj:`1024`).

    Returns:
        float: :math:`\rho \in (0, 1]` (``nan`` for no token).

    Raises:
        TypeError: for non-long :obj:`groups` or a non-int :obj:`num_sinks`.
        ValueError: for bad shapes, a negative :obj:`window` or :obj:`num_sinks`, or a bad
            :obj:`batch`.
    """
    groups = check_groups(groups, where="focus_pair_share")
    check_window(window, where="focus_pair_share")
    check_num_sinks(num_sinks, where="focus_pair_share")
    check_int(chunk, "chunk", 1, where="focus_pair_share")
    n = groups.size(0)
    check_batch(batch, n, where="focus_pair_share")
    if n == 0:
        return float("nan")
    seq, nseq = seq_layout(batch, n, groups.device)
    kg = int(groups.max()) + 1 if groups.numel() else 1
    member = torch.zeros(n, kg, device=groups.device)
    member.scatter_(1, groups, 1.0)
    counts = torch.bincount(seq, minlength=nseq).tolist()
    kept = total = 0
    start = 0
    for length in counts:
        m = member[start:start + length]
        start += length
        pos = torch.arange(length, device=groups.device)
        total += length * (length + 1) // 2 if causal else length * length
        for a in range(0, length, chunk):
            rows = pos[a:a + chunk].view(-1, 1)
            d = rows - pos.view(1, -1)
            keep = (d.abs() <= window) | (torch.minimum(rows, pos.view(1, -1)) < num_sinks)
            keep |= (m[a:a + chunk] @ m.t()) > 0
            if causal:
                keep &= d >= 0
            kept += int(keep.sum())
    return kept / total


def _pattern_pairs(seq_len: int, window: int, num_sinks: int, causal: bool
                   ) -> Tuple[int, int]:
    """(kept, total) pairs of the window-plus-sinks pattern of one sequence (closed form)."""
    n, w = seq_len, min(window, seq_len - 1)
    band = (w + 1) * (w + 2) // 2 + (n - 1 - w) * (w + 1)  # causal pairs with i - j <= w
    m, s = n - 1 - w, min(num_sinks, n)  # sink key j: queries i = j + w + 1 .. n - 1
    t = max(0, min(s, m))
    sinks = t * m - t * (t - 1) // 2
    if causal:
        return band + sinks, n * (n + 1) // 2
    return 2 * (band + sinks) - n, n * n


def pattern_share(seq_len: int, window: int, num_sinks: int = 0, causal: bool = True
                  ) -> float:
    r"""The exact share of pairs that the content-free sliding window plus attention sinks
    keeps in a sequence of :math:`L` tokens (the Focus pattern without groups, e.g. under
    :class:`~quest_geometric.nn.focus.window_router.WindowOnlyRouter`).

    With :math:`w' = \min(w, L - 1)`, :math:`m = L - 1 - w'` and
    :math:`t = \min(s, L, m)`, the causal pairs (:math:`j \le i`) kept are the band and the
    sink pairs beyond it,

    .. math::
        P_w = \frac{(w' + 1)(w' + 2)}{2} + m (w' + 1), \qquad
        P_s = t\, m - \frac{t (t - 1)}{2}, \qquad
        \rho = \frac{P_w + P_s}{L (L + 1) / 2};

    non-causal (the symmetric pattern, all :math:`L^2` ordered pairs),
    :math:`\rho = (2 (P_w + P_s) - L) / L^2`.

    Args:
        seq_len (int): :math:`L \ge 1`.
        window (int): :math:`w \ge 0` (pairs with :math:`|i - j| \le w` are kept).
        num_sinks (int): :math:`s \ge 0` (pairs with :math:`\min(i, j) < s` are kept)
            (default: :obj:`0`).
        causal (bool): causal pairs (default: :obj:`True`).

    Returns:
        float: :math:`\rho \in (0, 1]`.

    Raises:
        TypeError: for a non-int :obj:`seq_len`, :obj:`window` or :obj:`num_sinks`.
        ValueError: for :obj:`seq_len` below 1 or a negative :obj:`window` or
            :obj:`num_sinks`.

    Example:
        >>> pattern_share(4, 0)  # the diagonal: 4 of the 10 causal pairs
        0.4
        >>> pattern_share(4, 0, num_sinks=1)  # and the first column: 7 of 10
        0.7
    """
    where = "pattern_share"
    seq_len = check_int(seq_len, "seq_len", 1, where=where)
    window = check_int(window, "window", 0, where=where)
    num_sinks = check_num_sinks(num_sinks, where=where)
    kept, total = _pattern_pairs(seq_len, window, num_sinks, bool(causal))
    return kept / total


def window_for_share(seq_len: int, share: float, num_sinks: int = 0, causal: bool = True
                     ) -> int:
    r"""The smallest window :math:`w` whose sliding window plus :math:`s` attention sinks
    keeps at least the share :math:`\rho^*` of the pairs of a sequence of :math:`L`
    tokens (:func:`pattern_share`): the content-free baseline at the budget of a Focus
    configuration whose measured share (:func:`focus_pair_share`) is :math:`\rho^*`,

    .. math::
        w^* = \min\{\, w \in \{0, \dots, L - 1\} : \rho(L, w, s) \ge \rho^* \,\},

    found by bisection (:math:`\rho` grows with :math:`w` and :math:`\rho(L, L - 1, s) =
    1`, so :math:`w^*` exists) on the floats :func:`pattern_share` returns, so
    ``window_for_share(L, pattern_share(L, w, s), s) == w``.

    Args:
        seq_len (int): :math:`L \ge 1`.
        share (float): :math:`\rho^* \in [0, 1]`.
        num_sinks (int): :math:`s \ge 0` (default: :obj:`0`).
        causal (bool): causal pairs (default: :obj:`True`).

    Returns:
        int: :math:`w^* \in [0, L - 1]` (0 for a share the sinks and the diagonal already
        reach, e.g. 0 or :math:`s \ge L`).

    Raises:
        TypeError: for a non-int :obj:`seq_len` or :obj:`num_sinks`, or a non-real
            :obj:`share`.
        ValueError: for :obj:`seq_len` below 1, a negative :obj:`num_sinks`, or a
            :obj:`share` outside :math:`[0, 1]` or NaN.

    Example:
        >>> window_for_share(4, 0.7)  # the diagonal and offset 1: 7 of 10
        1
        >>> window_for_share(4, 0.7, num_sinks=1)
        0
    """
    where = "window_for_share"
    seq_len = check_int(seq_len, "seq_len", 1, where=where)
    num_sinks = check_num_sinks(num_sinks, where=where)
    if isinstance(share, bool) or not isinstance(share, numbers.Real):
        raise fail(TypeError, where, "share", "a real number in [0, 1]", share)
    if not 0.0 <= float(share) <= 1.0:  # NaN fails too
        raise fail(ValueError, where, "share", "a real number in [0, 1]", share)
    target = float(share)
    lo, hi = 0, seq_len - 1
    while lo < hi:
        mid = (lo + hi) // 2
        kept, total = _pattern_pairs(seq_len, mid, num_sinks, bool(causal))
        if kept / total >= target:  # correctly rounded: monotone in kept
            hi = mid
        else:
            lo = mid + 1
    return lo
