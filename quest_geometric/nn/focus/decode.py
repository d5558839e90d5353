r"""Cached incremental decoding with Focus: the routing state carried beside a KV cache.

The router is causal (e.g. :class:`~quest_geometric.nn.focus.router.FocusRouter` with
``causal=True``): with :math:`S^{(0)}_t = \mathbf{z}_t^\top \mathbf{C} / \tau` and, for
iteration :math:`n = 1..I`,

.. math::
    \Lambda^{(n)}_{t,k} = \log \sum_{j \le t} e^{\log Q^{(n-1)}_{j,k}}, \qquad
    \log Q^{(n)}_t = \operatorname{rownorm}\bigl(\log Q^{(n-1)}_t - \Lambda^{(n)}_t\bigr),

token :math:`t`'s memberships depend on the prefix only through the :math:`I` running column
log-sums :math:`\Lambda^{(n)}`. :class:`FocusDecodeState` keeps them (``[B, I, K]``, float64)
with every cached token's hard groups and position, so a new token is routed in
:math:`O(I K)` (:func:`~quest_geometric.nn.focus.sinkhorn.sinkhorn_step`, through the
router's ``step``, see :class:`~quest_geometric.nn.focus.router.Router`) exactly as the
full-sequence Sinkhorn routes it, and attends only to the cached keys it may see, its window
plus the tokens sharing one of its groups (:func:`focus_decode_attention`): the attention
cost grows with :math:`w + |\{j : G_j \cap G_t \neq \emptyset\}|`, not with the context.

**The decoding step of one sequence** (one new token, no padding) takes a fast path:

* routing: the :math:`I` Sinkhorn updates of
  :func:`~quest_geometric.nn.focus.sinkhorn.sinkhorn_step` and the top-:math:`k` tie rule of
  :func:`~quest_geometric.nn.focus.topk.topk_groups` on :math:`K` numbers are done
  on Python floats (the same float64 formulas; the memberships are rounded to the scores'
  float32 before the top-:math:`k`, as the full path does), instead of some hundred tiny
  tensor operations;
* attention (with ``FocusDecodeState(..., store=True)``): the cached tokens that have
  left the window are copied once, in order, into one contiguous key/value store per
  *group set* :math:`G_j` (with :math:`K = 4`: four stores for top-1, six for top-2). The
  new token at position :math:`p` then attends to the window, a slice of the cache, plus the
  stores whose group set meets :math:`G_t`,

  .. math::
      \mathcal{N}(t) = \{j : p - j \le w\} \;\cup \bigcup_{G :\, G \cap G_t \neq
      \emptyset} \{j \in \mathrm{store}(G) : j < p - w\},

  a disjoint union (every token sits in exactly one store), so the softmax runs over the
  concatenated score rows of these views and nothing is gathered: the step reads exactly the
  keys and values it attends to, once;
* or, when most cached keys are kept (top-2 of :math:`K = 4` keeps about 5/6), one masked
  SDPA over the whole cache: the mask is the new token's group set against every cached
  token's, :math:`\mathbf{1}[G_j \cap G_t \neq \emptyset]`, one ``&`` of bitmasks
  (each cached token's group set is kept as one int64 code :math:`c_j = \sum_{g \in G_j}
  2^g`, so :math:`G_j \cap G_t \neq \emptyset \iff c_j \,\&\, c_t \neq 0`; for
  :math:`K \le` :data:`~quest_geometric.nn.focus.group_sets.MAX_SET_GROUPS`, see
  :mod:`~quest_geometric.nn.focus.group_sets`), or'ed with the window, and the
  :math:`H / H_{kv}` query heads of a key head sit on the query axis of one
  ``[1, H_{kv}, H / H_{kv}, D]`` call (no repeated keys; with
  more threads than divide :math:`H_{kv}` evenly, one query per head with ``enable_gqa``
  instead, which splits into more work items). It
  reads every cached key, but in one fused kernel instead of a few products per store.
  The step takes whichever is cheaper by a rough cost model
  (:class:`~quest_geometric.nn.focus.config.DecodeConfig`: ``masked_share``,
  ``part_work``); the stores are filled only when they are read (catching up on the tokens
  that left the window meanwhile);
* or, with many group sets (more than ``DecodeConfig.max_store_parts`` meet :math:`G_t`, e.g.
  top-2 of :math:`K = 16`: 29 of 120), one store per *group*: store :math:`g` holds the
  out-of-window tokens whose set contains :math:`g` (a top-:math:`k` token sits in
  :math:`k` stores, so these keep :math:`k` more copies of the out-of-window cache), and
  the new token of groups :math:`g_1 < \dots < g_k` reads the window, the sinks and the
  :math:`k` stores of its groups, store :math:`g_i` masking the tokens that also hold one
  of :math:`g_1, \dots, g_{i-1}` (read in an earlier store): :math:`k` parts instead of
  dozens, every allowed key counted once, when the cost model prefers it to the masked
  SDPA.

Either kind of store is read only once the state has taken more than
``DecodeConfig.store_after`` fast steps: the first read fills the stores with every
out-of-window key and value, a cost only a long generation pays back, so a short one runs
the masked SDPA throughout.

The bookkeeping of a step is vectorised where a prefix is involved: the first step after a
prefill codes the prefix's group sets in one pass over the groups tensor and counts its
out-of-window tokens per set with one ``unique`` (so the first step costs about what a later
one does); each later step codes and counts the one new token on the host.

With window-only routing (:class:`~quest_geometric.nn.focus.window_router.WindowOnlyRouter`,
``top_k = 0``, the sliding window plus sinks baseline) no token shares a group: the step
reads the window and the sinks, two slices of the cache, and records no group set and keeps
no store (so its first step after a prefill costs what a later one does).

The plain gather path (:func:`focus_decode_attention_reference`) is the reference of both
ways and serves every other case (several sequences, several new tokens, padding).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from quest_geometric._utils.checks import check_num_sinks
from quest_geometric.nn.focus._decode_stores import (GroupSetStores, GroupStores, GrowingBuffers,
                                                     Part)
from quest_geometric.nn.focus._layout import HALF_DTYPES
from quest_geometric.nn.focus.config import DecodeConfig, current_decode_config
from quest_geometric.nn.focus.group_sets import MAX_SET_GROUPS, code_of, group_set_codes
from quest_geometric.nn.focus.router import Router, RouterOutput
from quest_geometric.nn.focus.sinkhorn import prefix_statistics

__all__ = ["FocusDecodeState", "route_step", "route_prefix", "focus_decode_attention",
           "focus_decode_attention_reference", "masked_decode_attention", "packed_layout"]


def packed_layout(hkv: int) -> bool:
    r"""Whether the masked SDPA packs the query heads of a key head on its query axis
    (``H_kv`` work items for PyTorch's CPU kernel) rather than one query per head with
    ``enable_gqa`` (``H`` items): packed at one thread or when the threads divide ``H_kv``
    evenly (the rule ``python -m benchmarks.focus.masked_layout`` measures)."""
    t = torch.get_num_threads()
    return t == 1 or hkv % t == 0


def masked_decode_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, scale: float,
                      packed: bool) -> Tensor:
    """One new token ``q [1, H, 1, D]`` attending to the keys ``k, v [1, H_kv, S, D]`` that
    the bool ``mask [S]`` allows, in one SDPA: the query heads of a key head on the query
    axis (``packed``) or one query per head with ``enable_gqa``."""
    _, h, _, d = q.shape
    hkv, s = k.size(1), k.size(2)
    m = mask.view(1, 1, 1, s)
    if packed:  # [1, H_kv, H / H_kv, D]
        o = F.scaled_dot_product_attention(q.reshape(1, hkv, h // hkv, d), k, v,
                                           attn_mask=m, scale=scale)
        return o.view(1, h, 1, d)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=scale,
                                          enable_gqa=h != hkv)


@dataclass
class _Statistics:
    r"""The running column log-sums :math:`\Lambda^{(n)}` of a state: a tensor, or Python
    floats (:attr:`host`, authoritative while :attr:`stale`) after fast routing steps."""
    tensor: Tensor
    host: Optional[List[List[float]]] = None
    stale: bool = False

    def read(self) -> Tensor:
        if self.stale:
            self.tensor = torch.tensor(self.host, dtype=torch.float64,
                                       device=self.tensor.device).view(self.tensor.shape)
            self.stale = False
        return self.tensor

    def host_rows(self) -> List[List[float]]:
        if self.host is None:
            self.host = self.tensor[0].tolist()
        self.stale = True
        return self.host


@dataclass
class _FastData:
    r"""What the fast decoding step derives from a one-sequence cache: the steps taken, every
    slot's group-set code (:attr:`codable` turns false once a group past
    :data:`~quest_geometric.nn.focus.group_sets.MAX_SET_GROUPS` was met) and the stores."""
    codes: GrowingBuffers
    steps: int = 0
    codable: bool = True
    stores: Optional[GroupSetStores] = None
    group_stores: Optional[GroupStores] = None


class FocusDecodeState:
    r"""Routing state of one Focus layer for the tokens of a KV cache (buffers grown by doubling).

    Args:
        groups (Tensor): hard groups of the cached tokens, ``[B, S, top_k]``, long; ``-1``
            for padding.
        pos (Tensor): their positions among their sequence's real tokens, ``[B, S]``, long;
            ``-1`` for padding.
        col_lse (Tensor): running column log-sums :math:`\Lambda^{(n)}`, ``[B, I, K]``,
            float64.
        count (Tensor): real tokens per sequence so far, ``[B]``, long.
        store (bool): keep the key/value stores of the fast step (a second copy of the
            out-of-window cache); the keys and values passed to :func:`focus_decode_attention`
            must then be those of the same cache, grown by appending (default: :obj:`False`).

    Attributes:
        groups (Tensor): ``[B, S, top_k]``, as above.
        pos (Tensor): ``[B, S]``, as above.
        col_lse (Tensor): ``[B, I, K]``, as above.
        count (Tensor): ``[B]``, as above.
        store (bool): as above.
        fast_steps (int): the fast decoding steps taken (read-only).
    """

    def __init__(self, groups: Tensor, pos: Tensor, col_lse: Tensor, count: Tensor,
                 store: bool = False) -> None:
        self._groups, self._pos, self._count = groups, pos, count
        self._len = self._flushed = groups.size(1)
        # groups of the tokens [_flushed, _len), appended by the fast routing step and
        # written into the tensors when they are read (one sequence, no padding)
        self._pending: List[List[int]] = []
        self._stats = _Statistics(col_lse)
        self.store = bool(store)
        self._fast = _FastData(GrowingBuffers([groups.new_empty(0)], (0,)))
        # one sequence whose every cached token is real: positions are the cache slots
        self._simple = groups.size(0) == 1 and int(count[0]) == self._len and (
            self._len == 0 or bool((pos[0] == torch.arange(self._len, device=pos.device))
                                   .all()))

    @property
    def groups(self) -> Tensor:
        self._flush()
        return self._groups[:, :self._len]

    @property
    def pos(self) -> Tensor:
        self._flush()
        return self._pos[:, :self._len]

    @property
    def count(self) -> Tensor:
        self._flush()
        return self._count

    @count.setter
    def count(self, value: Tensor) -> None:
        self._flush()
        self._count = value

    @property
    def col_lse(self) -> Tensor:
        return self._stats.read()

    @col_lse.setter
    def col_lse(self, value: Tensor) -> None:
        self._stats = _Statistics(value)

    def host_statistics(self) -> List[List[float]]:
        """The statistics of a one-sequence state as Python floats, ``I`` rows of ``K``,
        for a router's fast step to update in place (they are then authoritative:
        :attr:`col_lse` is rebuilt from them when next read)."""
        return self._stats.host_rows()

    @property
    def fast_steps(self) -> int:
        """The fast decoding steps this state has taken (see
        :attr:`~quest_geometric.nn.focus.config.DecodeConfig.store_after`)."""
        return self._fast.steps

    @property
    def top_k(self) -> int:
        """Groups per cached token (the ``top_k`` the cache was filled with)."""
        return self._groups.size(2)

    def __len__(self) -> int:
        return self._len

    def _grow(self, need: int) -> None:
        if need > self._groups.size(1):  # grow by doubling
            b, _, kk = self._groups.shape
            cap = max(need, 2 * self._groups.size(1), 16)
            g = self._groups.new_full((b, cap, kk), -1)
            p = self._pos.new_full((b, cap), -1)
            g[:, :self._flushed] = self._groups[:, :self._flushed]
            p[:, :self._flushed] = self._pos[:, :self._flushed]
            self._groups, self._pos = g, p

    def _flush(self) -> None:
        """Write the pending tokens of the fast routing step into the tensors."""
        if not self._pending:
            return
        a, b = self._flushed, self._len
        self._grow(b)
        dev = self._groups.device
        self._groups[0, a:b] = torch.tensor(self._pending, dtype=torch.long, device=dev)
        self._pos[0, a:b] = torch.arange(a, b, device=dev)  # one real sequence: pos = slot
        self._count = self._count + (b - a)
        self._pending, self._flushed = [], b

    def append(self, groups: Tensor, valid: Optional[Tensor] = None) -> None:
        """Append one step of new tokens (``groups [B, T, top_k]``, ``valid [B, T]``;
        :obj:`None`: all real)."""
        self._flush()
        b, t, kk = groups.shape
        need = self._len + t
        self._grow(need)
        count = self._count
        if valid is None:
            pos = count.unsqueeze(1) + torch.arange(t, device=count.device)
            self._groups[:, self._len:need] = groups
            self._pos[:, self._len:need] = pos
            self._count = count + t
        else:
            pos = count.unsqueeze(1) + valid.long().cumsum(1) - 1
            self._groups[:, self._len:need] = groups.masked_fill(~valid.unsqueeze(-1), -1)
            self._pos[:, self._len:need] = pos.masked_fill(~valid, -1)
            self._count = count + valid.long().sum(1)
            if self._simple and not bool(valid.all()):
                self._simple = False
        self._len = self._flushed = need

    def append_one(self, groups: List[int]) -> None:
        """Append the one real token of a one-sequence step (its groups, in order; the fast
        routing step's call, which builds no tensor)."""
        if not self._simple:
            self.append(torch.tensor(groups, dtype=torch.long,
                                     device=self._groups.device).view(1, 1, -1))
            return
        self._pending.append(groups)
        self._len += 1
        if len(self._pending) >= 1024:
            self._flush()

    def _set_codes(self, upto: int) -> Optional[Tensor]:
        r"""The group-set codes of cache slots ``[0, upto)`` of a one-sequence state, ``[upto]``
        long; :obj:`None` if a group is :data:`MAX_SET_GROUPS` or more."""
        fast = self._fast
        done = fast.codes.size
        if not fast.codable:
            return None
        if done < upto:
            if done >= self._flushed:  # tokens of the fast routing step: host groups
                rows = self._pending[done - self._flushed:upto - self._flushed]
                if any(g >= MAX_SET_GROUPS for row in rows for g in row):
                    fast.codable = False
                    return None
                new = torch.tensor([code_of(row) for row in rows], dtype=torch.long,
                                   device=self._groups.device)
            else:
                self._flush()
                rows = self._groups[0, done:upto]
                if rows.numel() and int(rows.max()) >= MAX_SET_GROUPS:
                    fast.codable = False
                    return None
                new = group_set_codes(rows)
            fast.codes.append((new,))
        return fast.codes.tensors[0][:upto]

    def takes_fast_step(self, q: Tensor) -> bool:
        """Whether attending with queries ``q [B, H, T, D]`` is a fast step: one new token
        of one sequence without padding, in a state with ``store=True``."""
        return self.store and self._simple and q.size(0) == 1 and q.size(2) == 1

    def fast_step(self, q: Tensor, k: Tensor, v: Tensor, window: int, scale: float,
                  num_sinks: int, cfg: DecodeConfig) -> Tensor:
        r"""The decoding step of one sequence (:meth:`takes_fast_step`), by the ways of the module
        docstring; the arguments are those of :func:`focus_decode_attention`."""
        s = self._len
        lo = max(0, s - 1 - window)  # the window: slots [lo, s); the stores hold [ns, lo)
        ns = min(num_sinks, lo)  # the sinks: slots [0, ns) (those not in the window)
        fast = self._fast
        fast.steps += 1
        if self.top_k == 0:  # window-only routing: no token shares a group
            if s - lo + ns >= cfg.masked_share * s:  # the window and sinks: most keys
                none = torch.zeros(s, dtype=torch.bool, device=q.device)
                return _masked_local(q, k, v, none, lo, ns, scale)
            return _softmax_parts(q, _local_parts(k, v, lo, s, ns), scale)
        codes = self._set_codes(s)
        if codes is None:  # a group past MAX_SET_GROUPS: the plain path
            return focus_decode_attention_reference(q, k, v, self, window, scale, num_sinks)
        mine = int(codes[s - 1])  # the new token's group-set code
        if fast.stores is None or fast.stores.base != num_sinks:
            fast.stores = GroupSetStores(num_sinks)
        fast.stores.count(codes, lo)
        way, meets = _choose_way(fast.stores, mine, s - lo + ns, s, k.size(1) * k.size(-1),
                                 fast.steps > cfg.store_after, cfg)
        if way == "masked":
            return _masked_local(q, k, v, codes.bitwise_and(mine).ne(0), lo, ns, scale)
        parts = _local_parts(k, v, lo, s, ns)
        if way == "groups":
            if fast.group_stores is None or fast.group_stores.base != num_sinks:
                fast.group_stores = GroupStores(num_sinks)
            fast.group_stores.fill(codes, k, v, lo)
            return _softmax_parts(q, parts + fast.group_stores.parts(mine), scale)
        fast.stores.fill(codes, k, v, lo)
        return _softmax_parts(q, parts + [fast.stores.sets[c].part() for c in meets], scale)

    def select(self, index: Tensor) -> "FocusDecodeState":
        r"""The state of sequences :obj:`index` (beam search reorders the cache this way; the
        stores are rebuilt at the next fast step)."""
        return FocusDecodeState(self.groups[index], self.pos[index], self.col_lse[index],
                                self.count[index], store=self.store)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(batch={self._groups.size(0)}, tokens={self._len}, "
                f"top_k={self._groups.size(2)}, store={self.store})")


def route_prefix(router: Router, x: Tensor, batch: Optional[Tensor] = None, num_seqs: int = 1
                 ) -> Tuple[RouterOutput, Tensor]:
    r"""Route whole sequences once: ``router(x, batch)`` and the statistics
    :math:`\Lambda^{(n)}` ``[B, I, K]`` (float64, detached) that start a
    :class:`FocusDecodeState`.

    Args:
        router (Router): a prefix-causal router (its ``forward`` takes ``col_totals``).
        x (Tensor): hidden states of the real tokens, ``[N, C]``.
        batch (Tensor, optional): sorted sequence id per token (default: :obj:`None`).
        num_seqs (int): number of sequences :math:`B` (default: :obj:`1`).

    Returns:
        ``(RouterOutput, col_lse)``.
    """
    totals: List[Tensor] = []
    out = router(x, batch, col_totals=totals)
    return out, prefix_statistics(totals, num_seqs, router.num_groups, x.device)


def route_step(router: Router, x: Tensor, state: FocusDecodeState, valid: Optional[Tensor] = None,
               return_groups: bool = True) -> Optional[Tensor]:
    r"""Route new tokens ``x [B, T, C]`` through ``router.step``, updating :obj:`state`; returns
    their groups ``[B, T, top_k]`` (``-1`` for padding). Non-finite hidden states pass through.

    Args:
        router (Router): the layer's causal router.
        x (Tensor): hidden states of the new tokens, ``[B, T, C]``.
        state (FocusDecodeState): the layer's state, updated in place.
        valid (Tensor, optional): bool ``[B, T]``, :obj:`False` for padding (default:
            :obj:`None`, all real).
        return_groups (bool): return the groups (default: :obj:`True`).

    Raises:
        ValueError: if the router's :obj:`top_k` is not the one the state was filled with.
    """
    kk = state.top_k
    if router.top_k != kk:
        raise ValueError(f"route_step: the cache was filled with top_k={kk} but the router "
                         f"now has top_k={router.top_k}; set top_k before filling the cache "
                         f"(start a new one)")
    return router.step(x, state, valid, return_groups)


def focus_decode_attention(q: Tensor, k: Tensor, v: Tensor, state: FocusDecodeState,
                           window: int, scale: float, fast: bool = True,
                           num_sinks: int = 0, config: Optional[DecodeConfig] = None
                           ) -> Tensor:
    r"""Attention of the newest :math:`T` tokens of a cache to the keys Focus lets them see:
    query :math:`t` (slot :math:`c_t`) attends to the real cached keys :math:`j \le c_t` with
    :math:`p_t - p_j \le w`, :math:`G_j \cap G_t \ne \emptyset` or :math:`p_j < s`
    (positions :math:`p` count real tokens only). With :obj:`fast`, the step of one sequence
    without padding and a ``store=True`` state takes the fast path; every other call is
    :func:`focus_decode_attention_reference`. Non-finite entries are passed through: a check
    would add a host read to every generated token, and the prefix was checked when the cache
    was filled.

    Args:
        q (Tensor): queries ``[B, H, T, D]`` of the new tokens.
        k, v (Tensor): every cached key/value ``[B, H_kv, S', D]`` (``S' >= S``; slots past
            the state's length are ignored).
        state (FocusDecodeState): the state *after* the new tokens were appended.
        window (int): :math:`w`.
        scale (float): softmax scale.
        fast (bool): allow the fast path (default: :obj:`True`).
        num_sinks (int): attention sinks :math:`s \ge 0` (default: :obj:`0`).
        config (DecodeConfig, optional): the fast step's tuning (default: :obj:`None`, the
            one in force).

    Returns:
        Tensor: ``[B, H, T, D]``; zeros for padding queries.
    """
    check_num_sinks(num_sinks, where="focus_decode_attention")
    if fast and state.takes_fast_step(q):
        cfg = current_decode_config() if config is None else config
        return state.fast_step(q, k, v, window, scale, num_sinks, cfg)
    return focus_decode_attention_reference(q, k, v, state, window, scale, num_sinks)


def _choose_way(stores: GroupSetStores, mine: int, local: int, s: int, row: int,
                paid: bool, cfg: DecodeConfig) -> Tuple[str, List[int]]:
    r"""The fast step's way for the new token of group-set code :obj:`mine` over :obj:`s`
    cached keys, :obj:`local` of them in the window and the sinks: ``'sets'``, ``'groups'``
    or ``'masked'``, with the codes of the sets that meet it. Reading :math:`P` parts of
    :math:`n` keys costs about :math:`n + P \cdot` ``part_work`` / :obj:`row` key reads
    (:obj:`row` = :math:`H_{kv} D`), the masked SDPA ``masked_share`` :math:`\cdot s`; no
    store is read before the state has paid its fill (:obj:`paid`)."""
    meets = stores.meeting(mine)
    part = cfg.part_work / row
    many = len(meets) > cfg.max_store_parts
    if many and paid:  # per-group stores: the tokens of several groups read once per group
        read = local + sum(stores.counts[c] * (c & mine).bit_count() for c in meets)
        if read + part * mine.bit_count() < cfg.masked_share * s:
            return "groups", meets
    kept = local + sum(stores.counts[c] for c in meets)
    if not paid or many or kept + part * len(meets) >= cfg.masked_share * s:
        return "masked", meets
    return "sets", meets


def _local_parts(k: Tensor, v: Tensor, lo: int, s: int, ns: int) -> List[Part]:
    r"""The window ``[lo, s)`` and the sinks ``[0, ns)`` of a one-sequence cache as parts."""
    parts = [Part(k[0, :, lo:s].transpose(1, 2), v[0, :, lo:s])]
    if ns:
        parts.append(Part(k[0, :, :ns].transpose(1, 2), v[0, :, :ns]))
    return parts


def _masked_local(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, lo: int, ns: int,
                  scale: float) -> Tensor:
    r"""One masked SDPA over the cache slots ``[0, s)``: the keys :obj:`mask` keeps, the window
    ``[lo, s)`` and the sinks ``[0, ns)`` (set in :obj:`mask` in place)."""
    s = mask.numel()
    mask[lo:] = True  # the window
    mask[:ns] = True  # the sinks
    return masked_decode_attention(q, k[:, :, :s], v[:, :, :s], mask, scale,
                                   packed_layout(k.size(1)))


def _softmax_parts(q: Tensor, parts: List[Part], scale: float) -> Tensor:
    r"""One query per head ``q [1, H, 1, D]`` over the disjoint :class:`Part` s, their
    ``masked`` keys excluded."""
    _, h, _, d = q.shape
    hkv = parts[0].keys.size(0)
    qg = q.reshape(hkv, h // hkv, d) * scale  # query head h reads key head h // (H / H_kv)
    rows = []
    for kt, _, masked in parts:
        sc = torch.bmm(qg, kt)
        rows.append(sc if masked is None else sc.masked_fill(masked, float("-inf")))
    scores = torch.cat(rows, -1)
    if q.dtype in HALF_DTYPES:
        p = torch.softmax(scores, -1, dtype=torch.float32).to(q.dtype)
    else:
        p = torch.softmax(scores, -1)
    o, a = None, 0
    for _, vp, _ in parts:
        n = vp.size(1)
        o = torch.bmm(p[:, :, a:a + n], vp) if o is None else \
            torch.baddbmm(o, p[:, :, a:a + n], vp)
        a += n
    return o.view(1, h, 1, d)


def focus_decode_attention_reference(q: Tensor, k: Tensor, v: Tensor,
                                     state: FocusDecodeState, window: int, scale: float,
                                     num_sinks: int = 0) -> Tensor:
    r"""The plain path of :func:`focus_decode_attention` (the same pattern and arguments): the
    allowed keys gathered for one new token, one masked SDPA for several.

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
    if num_sinks > 0:
        near = near | (pos.unsqueeze(1) < num_sinks)
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
