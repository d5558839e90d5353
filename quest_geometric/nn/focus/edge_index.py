"""The Focus sparse attention pattern as a PyG ``edge_index`` (memory O(E), never O(N^2))."""
from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor

from quest_geometric._utils.checks import check_batch, check_groups, check_num_sinks, check_window
from quest_geometric.nn.focus._layout import seq_layout


def _seq_info(batch: Optional[Tensor], n: int, device: torch.device
              ) -> Tuple[Tensor, Tensor, Tensor]:
    """Per token: sequence id, start and end (exclusive) of its sequence."""
    seq, nseg = seq_layout(batch, n, device)
    counts = torch.bincount(seq, minlength=nseg)
    ptr = torch.zeros(nseg + 1, dtype=torch.long, device=device)
    ptr[1:] = counts.cumsum(0)
    return seq, ptr[seq], ptr[seq + 1]


def smallest_shared_group(gi: Tensor, gj: Tensor, num_groups: int) -> Tensor:
    r"""For pairs of group sets :obj:`gi`, :obj:`gj` (each :obj:`[E, k]`), the smallest group
    id in both, or :obj:`num_groups` if they are disjoint (always for ``k = 0``). Memory
    :math:`O(E k^2)`."""
    if gi.size(-1) == 0 or gj.size(-1) == 0:
        return torch.full(gi.shape[:1], num_groups, dtype=torch.long, device=gi.device)
    eq = gi.unsqueeze(-1) == gj.unsqueeze(-2)
    val = torch.where(eq, gi.unsqueeze(-1), torch.full_like(gi.unsqueeze(-1), num_groups))
    return val.flatten(1).min(dim=1).values


def sink_pairs(groups: Tensor, window: int, num_sinks: int, seq: Tensor, start: Tensor,
               end: Tensor, causal: bool, num_groups: int) -> Tuple[Tensor, Tensor]:
    r"""The pairs the attention sinks add to the window and the groups: ``(tgt, src)``, query
    :math:`i` and key :math:`j` of one sequence (positions :math:`p_i, p_j` in it) with

    .. math::
        \min(p_i, p_j) < s \;\wedge\; |i - j| > w \;\wedge\; G_i \cap G_j = \emptyset
        \;\wedge\; (j \le i \text{ if causal}),

    i.e. exactly the sink pairs that neither the window band nor a shared group holds (so
    the three parts are disjoint). Memory :math:`O(N \min(s, L))`.

    Args:
        groups (Tensor): ``[N, top_k]`` (``top_k`` may be 0).
        window (int): :math:`w`.
        num_sinks (int): :math:`s`.
        seq, start, end (Tensor): per token its sequence id and its sequence's start and end
            (exclusive), ``[N]`` long each.
        causal (bool): keep only :math:`j \le i`.
        num_groups (int): :math:`K` (an id above every group id).

    Returns:
        ``(tgt, src)``: long ``[E]`` each, not sorted.
    """
    n = groups.size(0)
    dev = groups.device
    if n == 0 or num_sinks == 0:
        e = torch.empty(0, dtype=torch.long, device=dev)
        return e, e
    s = min(num_sinks, int((end - start).max()))
    tgt = torch.arange(n, device=dev).repeat_interleave(s)
    r = torch.arange(s, device=dev).repeat(n)
    src = start[tgt] + r
    pos = tgt - start[tgt]
    ok = src < end[tgt]
    ok &= (pos - r > window) if causal else ((pos - r).abs() > window)
    tgt, src = tgt[ok], src[ok]
    if not causal:  # the sink queries: the mirror of the pairs of a non-sink query
        mirror = (tgt - start[tgt]) >= num_sinks
        tgt, src = torch.cat([tgt, src[mirror]]), torch.cat([src, tgt[mirror]])
    disjoint = smallest_shared_group(groups[tgt], groups[src], num_groups) == num_groups
    return tgt[disjoint], src[disjoint]


def focus_edge_index(groups: Tensor, window: int, batch: Optional[Tensor] = None,
                     causal: bool = True, num_sinks: int = 0) -> Tensor:
    r"""The Focus attention pattern of `"Why Attend to Everything? Focus is the Key"
    <https://arxiv.org/abs/2604.03260>`_ as an :obj:`edge_index`.

    Token :math:`i` attends to token :math:`j` (edge :math:`j \to i`) iff both lie in the same
    sequence/graph and

    .. math::
        (j \le i \text{ if causal}) \;\wedge\;
        \bigl(|i - j| \le w \;\vee\; G_i \cap G_j \neq \emptyset
        \;\vee\; \min(p_i, p_j) < s\bigr),

    with :math:`G_i` the hard group set of token :math:`i` (empty for ``top_k = 0``),
    :math:`w` the window, :math:`p_i` the position of token :math:`i` in its sequence and
    :math:`s` the number of attention sinks (the first :math:`s` tokens of a sequence see and
    are seen by every token; causal: every token attends to them). Every pair
    appears once, sorted by target then source, so any PyG attention layer (for example
    :class:`~torch_geometric.nn.conv.TransformerConv`) can consume it.

    Built without any :math:`N \times N` object, in memory :math:`O(E)`: for every
    (sequence, group) bucket, all pairs of its member list (sorted by position); with
    :math:`|G_i| > 1` a pair sharing several groups is kept only under its smallest shared
    group; plus the window band restricted to pairs with disjoint group sets, plus the sink
    pairs neither holds (:func:`sink_pairs`). The parts are disjoint by construction and
    merged by sorting the linear key :math:`i \cdot N + j`.

    Args:
        groups (torch.Tensor): hard group ids, shape :obj:`[N, top_k]` (or :obj:`[N]`), long.
        window (int): local window :math:`w \ge 0` (offsets :math:`0..w` always attend);
            any :math:`w` at least the longest sequence's length minus one means the whole
            sequence (memory stays bounded by the length).
        batch (torch.Tensor, optional): sorted sequence/graph id per token
            (default: :obj:`None`, one sequence).
        causal (bool): keep only :math:`j \le i`; otherwise both directions
            (default: :obj:`True`).
        num_sinks (int): attention sinks :math:`s \ge 0` (default: :obj:`0`).

    Returns:
        torch.Tensor: :obj:`edge_index` of shape :obj:`[2, E]`, row = source :math:`j`,
        col = target :math:`i`.
    """
    check_window(window, where="focus_edge_index")
    check_num_sinks(num_sinks, where="focus_edge_index")
    groups = check_groups(groups, where="focus_edge_index")
    n, kk = groups.shape
    device = groups.device
    check_batch(batch, n, where="focus_edge_index")
    if n == 0:
        return torch.empty(2, 0, dtype=torch.long, device=device)
    num_groups = int(groups.max()) + 1 if kk > 0 else 1
    seq, start, end = _seq_info(batch, n, device)

    # group part: all pairs inside each (sequence, group) bucket
    tok = torch.arange(n, device=device).repeat_interleave(kk)
    key = (seq.repeat_interleave(kk) * num_groups + groups.reshape(-1)) * n + tok
    key = torch.unique(key)  # sorted; drops duplicate ids inside one token's set
    bucket = torch.div(key, n, rounding_mode="floor")
    mtok = key - bucket * n
    _, bcount = torch.unique_consecutive(bucket, return_counts=True)
    bstart = torch.zeros_like(bcount)
    bstart[1:] = bcount.cumsum(0)[:-1]
    bid = torch.repeat_interleave(torch.arange(bcount.numel(), device=device), bcount)
    pos = torch.arange(mtok.numel(), device=device)
    first = bstart[bid]
    cnt = (pos - first + 1) if causal else bcount[bid]
    tgt_pos = torch.repeat_interleave(pos, cnt)
    off = torch.arange(tgt_pos.numel(), device=device) - \
        torch.repeat_interleave(cnt.cumsum(0) - cnt, cnt)
    src_pos = first[tgt_pos] + off
    g_src, g_tgt = mtok[src_pos], mtok[tgt_pos]
    if kk > 1:
        gid = bucket[tgt_pos] % num_groups
        keep = smallest_shared_group(groups[g_tgt], groups[g_src], num_groups) == gid
        g_src, g_tgt = g_src[keep], g_tgt[keep]

    # window band, pairs with disjoint group sets only. Offsets beyond the longest sequence
    # reach no token: bound the band by the length so that memory is O(N min(w, L)),
    # whatever the window (same edge set).
    window = min(window, int((end - start).max()) - 1)
    lo = 0 if causal else -window
    offs = torch.arange(lo, window + 1, device=device)  # j = i - d
    b_tgt = torch.arange(n, device=device).repeat_interleave(offs.numel())
    b_src = b_tgt - offs.repeat(n)
    valid = (b_src >= start[b_tgt]) & (b_src < end[b_tgt])
    b_src, b_tgt = b_src[valid], b_tgt[valid]
    disjoint = smallest_shared_group(groups[b_tgt], groups[b_src], num_groups) == num_groups
    b_src, b_tgt = b_src[disjoint], b_tgt[disjoint]

    s_tgt, s_src = sink_pairs(groups, window, num_sinks, seq, start, end, causal, num_groups)

    lin = torch.cat([g_tgt * n + g_src, b_tgt * n + b_src, s_tgt * n + s_src]).sort().values
    tgt = torch.div(lin, n, rounding_mode="floor")
    return torch.stack([lin - tgt * n, tgt], dim=0)


__all__ = ["focus_edge_index", "smallest_shared_group"]
