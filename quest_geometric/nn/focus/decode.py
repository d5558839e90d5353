r"""Cached incremental decoding with Focus: the routing state carried beside a KV cache.

The router is prefix-causal (:class:`~quest_geometric.nn.focus.router.FocusRouter` with
``causal=True``): with :math:`S^{(0)}_t = \mathbf{z}_t^\top \mathbf{C} / \tau` and, for
iteration :math:`n = 1..I`,

.. math::
    \Lambda^{(n)}_{t,k} = \log \sum_{j \le t} e^{\log Q^{(n-1)}_{j,k}}, \qquad
    \log Q^{(n)}_t = \operatorname{rownorm}\bigl(\log Q^{(n-1)}_t - \Lambda^{(n)}_t\bigr),

token :math:`t`'s memberships depend on the prefix only through the :math:`I` running column
log-sums :math:`\Lambda^{(n)}`. :class:`FocusDecodeState` keeps them (``[B, I, K]``, float64)
with every cached token's hard groups and position, so a new token is routed in
:math:`O(I K)` (:func:`sinkhorn_step`) exactly as the full-sequence Sinkhorn routes it, and
attends only to the cached keys it may see, its window plus the tokens sharing one of its
groups (:func:`focus_decode_attention`): the attention cost grows with
:math:`w + |\{j : G_j \cap G_t \neq \emptyset\}|`, not with the context (selecting those keys
is one boolean pass over the cached group ids).
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from quest_geometric.nn.focus.router import _row_step, _sinkhorn_dense, topk_groups

__all__ = ["FocusDecodeState", "sinkhorn_prefix_state", "sinkhorn_step", "route_step",
           "focus_decode_attention"]


class FocusDecodeState:
    r"""Routing state of one Focus layer for the tokens of a KV cache.

    The per-token buffers grow by doubling (amortised :math:`O(1)` per appended token, no
    copy of the whole history at each step).

    Attributes:
        groups (Tensor): hard groups of every cached token, ``[B, S, top_k]``, long;
            ``-1`` for padding.
        pos (Tensor): position of every cached token among its sequence's real tokens,
            ``[B, S]``, long; ``-1`` for padding.
        col_lse (Tensor): running column log-sums :math:`\Lambda^{(n)}`, ``[B, I, K]``,
            float64.
        count (Tensor): real tokens per sequence so far, ``[B]``, long.
    """

    def __init__(self, groups: Tensor, pos: Tensor, col_lse: Tensor, count: Tensor) -> None:
        self._groups, self._pos, self._len = groups, pos, groups.size(1)
        self.col_lse, self.count = col_lse, count

    @property
    def groups(self) -> Tensor:
        return self._groups[:, :self._len]

    @property
    def pos(self) -> Tensor:
        return self._pos[:, :self._len]

    def __len__(self) -> int:
        return self._len

    def append(self, groups: Tensor, valid: Tensor) -> None:
        """Append one step of new tokens (``groups [B, T, top_k]``, ``valid [B, T]``)."""
        b, t, kk = groups.shape
        need = self._len + t
        if need > self._groups.size(1):  # grow by doubling
            cap = max(need, 2 * self._groups.size(1), 16)
            g = self._groups.new_full((b, cap, kk), -1)
            p = self._pos.new_full((b, cap), -1)
            g[:, :self._len] = self.groups
            p[:, :self._len] = self.pos
            self._groups, self._pos = g, p
        pos = self.count.unsqueeze(1) + valid.long().cumsum(1) - 1
        self._groups[:, self._len:need] = groups.masked_fill(~valid.unsqueeze(-1), -1)
        self._pos[:, self._len:need] = pos.masked_fill(~valid, -1)
        self._len = need
        self.count = self.count + valid.long().sum(1)

    def select(self, index: Tensor) -> "FocusDecodeState":
        """The state of sequences :obj:`index` (beam search reorders the cache this way)."""
        return FocusDecodeState(self.groups[index], self.pos[index], self.col_lse[index],
                                self.count[index])

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(batch={self._groups.size(0)}, tokens={self._len}, "
                f"top_k={self._groups.size(2)})")


def sinkhorn_prefix_state(scores: Tensor, valid: Optional[Tensor], num_iters: int) -> Tensor:
    r"""The running column log-sums :math:`\Lambda^{(n)}` after a whole prefix (recorded by
    the full prefix-causal Sinkhorn itself, so the state matches its routing).

    Args:
        scores (Tensor): :math:`S/\tau` of the prefix, ``[B, T, K]`` (real tokens first in
            each row, padding after them, as :func:`~torch_geometric.utils.to_dense_batch`
            lays them out).
        valid (Tensor, optional): bool ``[B, T]`` (default: :obj:`None`, all real).
        num_iters (int): Sinkhorn iterations :math:`I`.

    Returns:
        Tensor: ``[B, I, K]``, float64 (:math:`-\infty` for an empty prefix).
    """
    b, _, k = scores.shape
    totals: list = []
    _sinkhorn_dense(scores, valid, num_iters, True, col_totals=totals)
    if not totals:
        return scores.new_empty(b, 0, k, dtype=torch.float64)
    return torch.stack(totals, 1)


def sinkhorn_step(scores: Tensor, col_lse: Tensor, valid: Optional[Tensor] = None
                  ) -> Tuple[Tensor, Tensor]:
    r"""Route one new token per sequence from the prefix statistics.

    .. math::
        \Lambda^{(n)} \leftarrow \log\bigl(e^{\Lambda^{(n)}} + e^{\log Q^{(n-1)}_t}\bigr),
        \qquad \log Q^{(n)}_t = \operatorname{rownorm}\bigl(\log Q^{(n-1)}_t -
        \Lambda^{(n)}\bigr).

    Args:
        scores (Tensor): :math:`S_t/\tau`, ``[B, K]``.
        col_lse (Tensor): ``[B, I, K]`` from :func:`sinkhorn_prefix_state` or an earlier
            step.
        valid (Tensor, optional): bool ``[B]``; a padding token leaves the statistics as they
            are (default: :obj:`None`, all real).

    Returns:
        ``(log_soft, col_lse)``: the token's log memberships ``[B, K]`` (float64) and the
        updated statistics.
    """
    logq = scores.double()
    num_iters = col_lse.size(1)
    new = col_lse.clone()
    for it in range(num_iters):
        c = torch.logaddexp(col_lse[:, it], logq)
        new[:, it] = c if valid is None else torch.where(valid.unsqueeze(-1), c, col_lse[:, it])
        logq = _row_step(logq - c, it, True)
    if num_iters == 0:
        logq = logq - torch.logsumexp(logq, dim=-1, keepdim=True)
    return logq, new


def route_step(router, x: Tensor, state: FocusDecodeState, valid: Tensor) -> Tensor:
    r"""Route new tokens ``x [B, T, C]`` (one at a time, in order) with :obj:`router`,
    updating :obj:`state` (statistics, groups, positions). Returns their groups
    ``[B, T, top_k]`` (``-1`` for padding)."""
    b, t, _ = x.shape
    s = router.scores(x.reshape(b * t, -1)).view(b, t, -1)
    out = []
    for i in range(t):
        log_soft, state.col_lse = sinkhorn_step(s[:, i], state.col_lse, valid[:, i])
        # the full path casts the log memberships back to the scores' dtype before top-k
        out.append(topk_groups(log_soft.to(s.dtype), router.top_k))
    groups = torch.stack(out, 1)
    state.append(groups, valid)
    return groups.masked_fill(~valid.unsqueeze(-1), -1)


def focus_decode_attention(q: Tensor, k: Tensor, v: Tensor, state: FocusDecodeState,
                           window: int, scale: float) -> Tensor:
    r"""Attention of the newest :math:`T` tokens of a cache to the keys Focus lets them see.

    Query :math:`t` (cache slot :math:`c_t`) attends to the real cached keys :math:`j \le
    c_t` with :math:`p_t - p_j \le w` or :math:`G_j \cap G_t \ne \emptyset` (positions
    :math:`p` count real tokens only, so padding never enters a window). For one new token
    (the decoding step) the allowed keys are gathered first, so the attention costs
    :math:`O(H D (w + |\text{shared}|))`; several new tokens use one masked SDPA.

    Args:
        q (Tensor): queries ``[B, H, T, D]`` of the new tokens.
        k, v (Tensor): every cached key/value ``[B, H_kv, S', D]`` (``S' >= S``, the
            cache's capacity; slots past the state's length are ignored).
        state (FocusDecodeState): the state *after* the new tokens were appended.
        window (int): :math:`w`.
        scale (float): softmax scale.

    Returns:
        Tensor: ``[B, H, T, D]``; zeros for padding queries.
    """
    b, h, t, d = q.shape
    s = state.groups.size(1)
    hkv = k.size(1)
    rep = h // hkv
    g, pos = state.groups, state.pos
    gq, pq = g[:, s - t:], pos[:, s - t:]  # [B, T, k], [B, T]
    real = pos >= 0
    shared = (g.unsqueeze(1).unsqueeze(-1) == gq.unsqueeze(2).unsqueeze(-2)).flatten(-2).any(-1)
    slot = torch.arange(s, device=q.device)
    causal = slot.view(1, 1, -1) <= (slot[s - t:]).view(1, -1, 1)
    near = (pq.unsqueeze(-1) - pos.unsqueeze(1)) <= window
    allowed = real.unsqueeze(1) & causal & (near | shared) & (pq >= 0).unsqueeze(-1)  # [B,T,S]
    qreal = pq >= 0
    if t == 1 and b == 1:  # the decoding step of one sequence: gather the allowed keys
        idx = allowed[0, 0].nonzero().squeeze(1)
        if idx.numel() == 0:  # a padding query: any one key, zeroed below
            idx = idx.new_zeros(1)
        kg, vg = k.index_select(2, idx), v.index_select(2, idx)
        o = F.scaled_dot_product_attention(q, kg, vg, scale=scale, enable_gqa=rep > 1)
        return o.masked_fill(~qreal.view(b, 1, t, 1), 0.0)
    if t == 1:
        a = allowed[:, 0]
        counts = a.sum(1)
        width = max(int(counts.max()), 1)
        nz = a.nonzero()
        rank = torch.arange(nz.size(0), device=q.device) - (counts.cumsum(0) - counts)[nz[:, 0]]
        idx = torch.zeros(b, width, dtype=torch.long, device=q.device)
        keep = torch.zeros(b, width, dtype=torch.bool, device=q.device)
        idx[nz[:, 0], rank] = nz[:, 1]
        keep[nz[:, 0], rank] = True
        ix = idx.view(b, 1, width, 1).expand(b, hkv, width, d)
        kg, vg = k.gather(2, ix), v.gather(2, ix)
        mask = keep.view(b, 1, 1, width)
    else:
        kg, vg = k[:, :, :s], v[:, :, :s]
        mask = allowed.unsqueeze(1)
    # a padding query keeps one key (so no row is empty) and is zeroed afterwards
    first = torch.arange(mask.size(-1), device=q.device) == 0
    mask = mask | ((~qreal).view(b, 1, t, 1) & first)
    o = F.scaled_dot_product_attention(q, kg, vg, attn_mask=mask, scale=scale,
                                       enable_gqa=rep > 1)
    return o.masked_fill(~qreal.view(b, 1, t, 1), 0.0)
