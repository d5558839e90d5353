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
full-sequence Sinkhorn routes it, and attends only to the cached keys it may see, its window plus
the tokens sharing one of its
groups (:func:`focus_decode_attention`): the attention cost grows with
:math:`w + |\{j : G_j \cap G_t \neq \emptyset\}|`, not with the context.

**The decoding step of one sequence** (one new token, no padding) takes a fast path:

* routing: the :math:`I` Sinkhorn updates of
  :func:`~quest_geometric.nn.focus.sinkhorn.sinkhorn_step` and the top-:math:`k` tie rule of
  :func:`~quest_geometric.nn.focus.topk.topk_groups` on :math:`K` numbers are done
  on Python floats (the same float64 formulas; the memberships are rounded to the scores'
  float32 before the top-:math:`k`, as the full path does), instead of some hundred tiny
  tensor operations;
* attention (with ``FocusDecodeState(..., store=True)``, which
  :func:`~quest_geometric.nn.focus.compose.compose_focus` sets): the cached tokens that have
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
  :math:`K \le` :data:`MAX_CODED_GROUPS`), or'ed with the window, and the
  :math:`H / H_{kv}` query heads of a key head sit on the query axis of one
  ``[1, H_{kv}, H / H_{kv}, D]`` call (no repeated keys; with
  more threads than divide :math:`H_{kv}` evenly, one query per head with ``enable_gqa``
  instead, which splits into more work items). It
  reads every cached key, but in one fused kernel instead of a few products per store.
  The step takes whichever is cheaper by a rough cost model (:data:`MASKED_SHARE`,
  :data:`PART_WORK`); the stores are filled only when they are read (catching up on the
  tokens that left the window meanwhile);
* or, with many group sets (more than :data:`MAX_STORE_PARTS` meet :math:`G_t`, e.g.
  top-2 of :math:`K = 16`: 29 of 120), one store per *group*: store :math:`g` holds the
  out-of-window tokens whose set contains :math:`g` (a top-:math:`k` token sits in
  :math:`k` stores, so these keep :math:`k` more copies of the out-of-window cache), and
  the new token of groups :math:`g_1 < \dots < g_k` reads the window, the sinks and the
  :math:`k` stores of its groups, store :math:`g_i` masking the tokens that also hold one
  of :math:`g_1, \dots, g_{i-1}` (read in an earlier store): :math:`k` parts instead of
  dozens, every allowed key counted once, when the cost model prefers it to the masked
  SDPA.

Either kind of store is read only once the state has taken more than :data:`STORE_AFTER`
fast steps: the first read fills the stores with every out-of-window key and value, a cost
only a long generation pays back, so a short one runs the masked SDPA throughout.

The bookkeeping of a step is vectorised where a prefix is involved: the first step after a
prefill codes the prefix's group sets in one pass over the groups tensor and counts its
out-of-window tokens per set with one ``unique`` (it used to build one Python tuple per
cached token, and that first step cost several times a later one); each later step codes
and counts the one new token on the host.

With window-only routing (:class:`~quest_geometric.nn.focus.window_router.WindowOnlyRouter`,
``top_k = 0``, the sliding window plus sinks baseline) no token shares a group: the step
reads the window and the sinks, two slices of the cache, and records no group set and keeps
no store (so its first step after a prefill costs what a later one does).

The plain gather path (:func:`focus_decode_attention_reference`) stays the reference the
tests compare both ways with, and serves every other case (several sequences, several new
tokens, padding).
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from quest_geometric._utils.checks import check_num_sinks
from quest_geometric.nn.focus._layout import HALF_DTYPES
from quest_geometric.nn.focus.router import RouterOutput
from quest_geometric.nn.focus.sinkhorn import prefix_statistics

__all__ = ["FocusDecodeState", "route_step", "route_prefix", "focus_decode_attention",
           "focus_decode_attention_reference", "masked_decode_attention", "packed_layout",
           "MAX_STORE_PARTS", "STORE_AFTER", "MASKED_SHARE", "PART_WORK",
           "MAX_CODED_GROUPS"]

#: Most group-set stores one fast decoding step may read (:math:`\binom{K}{k} -
#: \binom{K-k}{k}` of them meet a token's :math:`k` groups: 1 for top-1, 5 for top-2 of
#: :math:`K = 4`); beyond it (e.g. :math:`K = 16`, top-2: 29) the step reads the
#: per-group stores instead (:math:`k` parts), or the masked SDPA over the cache where that
#: is cheaper.
MAX_STORE_PARTS = 16
#: Fast steps a state takes (masked) before it may read either kind of store: a store's
#: first read copies every out-of-window key and value into the stores (:math:`k` times for
#: the per-group stores), which only the per-step saving of later steps pays back, so a short
#: generation keeps the masked SDPA and no second copy of the cache. Measured for one layer
#: at 8,192 cached tokens, SmolLM2's heads, one thread (2-core AMD EPYC VM, 2026-12-05, one
#: process, not a committed benchmark): the per-group fill (top-2 of K = 16, window 256)
#: costs 25-29 ms, most of it the first touch of the stores' fresh memory, and a per-group
#: step 0.35 ms saves about 0.67 ms against a masked step (1.02 ms); the group-set fill of
#: top-2 of K = 8 (window 64) costs 11-28 ms and its step saves 0.1-0.3 ms. Switching after
#: 40 steps (the ski-rental rule: rent until the rent paid, about 40 x 0.67 ms, equals the
#: price) costs at most about twice the best choice made knowing the generation's length;
#: until 2026-12-05 the group-set stores were filled at the first step, which made the K = 8
#: routers decode 16 tokens about 0.75x as fast as full attention at 8K.
STORE_AFTER = 40

#: The fast step's choice between its two exact ways of attending. Reading ``P`` parts (the
#: window and ``P - 1`` stores) of ``n`` keys in all costs about ``n + P_w (P - 1)`` key
#: reads, with ``P_w = PART_WORK / (H_kv D)`` the fixed cost of a part (a few tensor
#: operations) in key reads; one masked SDPA over all ``s`` cached keys costs about
#: ``MASKED_SHARE * s`` (PyTorch's fused kernel reads a key faster than the parts' matrix
#: products do). The step takes the cheaper (the values were fitted on a CPU, see the
#: benchmarks page). Both give the same values up to rounding.
MASKED_SHARE = 0.75
PART_WORK = 30000.0
#: Groups a fast decoding step can tell apart: it keeps each cached token's group set as one
#: int64 bitmask (:math:`\sum_{g \in G_j} 2^g`), so a router of more groups decodes on the
#: plain path (:func:`focus_decode_attention_reference`), which gives the same values.
MAX_CODED_GROUPS = 63


def packed_layout(hkv: int) -> bool:
    """Whether the masked SDPA packs the query heads of a key head on its query axis
    (``H_kv`` work items for PyTorch's CPU kernel) rather than one query per head with
    ``enable_gqa`` (``H`` items): packed at one thread or when the threads divide ``H_kv``
    evenly (the rule ``python -m benchmarks.focus.masked_layout`` measures; its numbers are on the
    benchmarks page)."""
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


def _append(entry: list, new: Tuple[Tensor, ...], axes: Tuple[int, ...]) -> None:
    """Append ``new[i]`` along ``axes[i]`` to the buffers ``entry[:-1]`` (a store's keys and
    values, or a state's group-set codes), which hold ``entry[-1]`` rows; the buffers grow by
    doubling."""
    n, n_new = entry[-1], new[0].size(axes[0])
    if n + n_new > entry[0].size(axes[0]):
        cap = max(n + n_new, 2 * entry[0].size(axes[0]))
        for i, (buf, ax) in enumerate(zip(entry[:-1], axes)):
            shape = list(buf.shape)
            shape[ax] = cap
            grown = buf.new_empty(shape)
            grown.narrow(ax, 0, n).copy_(buf.narrow(ax, 0, n))
            entry[i] = grown
    for buf, x, ax in zip(entry[:-1], new, axes):
        buf.narrow(ax, n, n_new).copy_(x)
    entry[-1] = n + n_new


def _group_set_codes(groups: Tensor) -> Tensor:
    r"""The group set :math:`G_j` of each row of ``groups [n, k]`` (long, each in ``[0,
    MAX_CODED_GROUPS)``) as one int64 bitmask :math:`\sum_{g \in G_j} 2^g`, ``[n]`` (a
    group repeated in a row counts once; ``k = 0`` gives 0). Two tokens share a group
    exactly when their codes have a common bit."""
    g = groups.sort(-1).values
    bits = torch.ones_like(g).bitwise_left_shift(g)
    if g.size(-1) > 1:
        bits[:, 1:].masked_fill_(g[:, 1:] == g[:, :-1], 0)
    return bits.sum(-1)


def _code(groups: List[int]) -> int:
    """:func:`_group_set_codes` of one token's groups, on the host."""
    return sum(1 << g for g in set(groups))


def _members(code: int) -> List[int]:
    """The groups of a group-set code, ascending."""
    return [g for g in range(code.bit_length()) if code >> g & 1]


def _segments(keys: Tensor, slots: Tensor) -> Tuple[List[int], List[int], Tensor]:
    """``slots`` sorted by ``keys`` (same length; a stable sort, so each key's slots stay in
    their order): the distinct keys ascending, their slot counts and the sorted slots."""
    sk, order = keys.sort(stable=True)
    uniq, n = torch.unique_consecutive(sk, return_counts=True)
    return uniq.tolist(), n.tolist(), slots[order]


def _gathered(k: Tensor, v: Tensor, slots: Tensor, counts: List[int]
              ) -> List[Tuple[Tensor, Tensor]]:
    """The keys and values of the cache ``slots``, gathered once (one ``index_select`` of
    each) and cut into consecutive pieces of ``counts`` slots (views)."""
    return list(zip(k.index_select(2, slots).split(counts, 2),
                    v.index_select(2, slots).split(counts, 2)))


class _GroupSetStores:
    """Derived data of a one-sequence cache for the fast step (rebuilt from the cache
    whenever a state is created or reordered), keyed by group-set code
    (:func:`_group_set_codes`):

    * per group set, the number of its tokens that have left the window (the choice between
      the paths), counted with one ``unique`` over the slots that left since the last step
      (all of the prefix at the first step, one slot at each later one);
    * the group-set stores: the out-of-window keys and values copied in cache order into
      one contiguous buffer per group set (buffers grow by doubling). They are filled
      lazily, only when the store path runs (catching up on the slots that left the window
      meanwhile), so a decoding that always takes the masked path keeps no second copy."""

    def __init__(self, base: int = 0) -> None:
        self.base = base  # the attention sinks: slots [0, base) are read directly, not stored
        self.counts: Dict[int, int] = {}  # group-set code -> its out-of-window tokens
        self.counted = base  # slots [base, counted) are in counts
        self.done = base  # cache slots [base, done) are in their stores
        self.sets: Dict[int, list] = {}  # group-set code -> [keys, values, count]

    def count(self, codes: Tensor, lo: int) -> None:
        """Count the slots ``[counted, lo)`` by group set (``codes``: every slot's code)."""
        a = self.counted
        if lo <= a:
            return
        if lo - a == 1:  # the usual step: one token leaves the window
            c = int(codes[a])
            self.counts[c] = self.counts.get(c, 0) + 1
        else:
            uniq, n = torch.unique(codes[a:lo], return_counts=True)
            for c, m in zip(uniq.tolist(), n.tolist()):
                self.counts[c] = self.counts.get(c, 0) + m
        self.counted = lo

    def fill(self, codes: Tensor, k: Tensor, v: Tensor, upto: int) -> None:
        """Copy the cache slots ``[done, upto)`` of ``k, v [1, H_kv, S', D]`` into their
        stores."""
        a = self.done
        if upto <= a:
            return
        if upto - a == 1:  # the usual step: one token leaves the window
            self._push(int(codes[a]), k[:, :, a:a + 1], v[:, :, a:a + 1])
        else:
            keys, counts, slots = _segments(codes[a:upto], torch.arange(a, upto,
                                                                       device=k.device))
            for c, (kp, vp) in zip(keys, _gathered(k, v, slots, counts)):
                self._push(c, kp, vp)
        self.done = upto

    def _push(self, key: int, kp: Tensor, vp: Tensor) -> None:
        # keys are stored transposed, [1, H_kv, D, cap]: the scores q K^T are then a plain
        # row-major product (about twice as fast on CPU as with transposed row-major keys)
        entry = self.sets.get(key)
        if entry is None:
            b, hkv, n_new, d = kp.shape
            cap = max(64, 2 * n_new)
            entry = self.sets[key] = [kp.new_empty(b, hkv, d, cap),
                                      vp.new_empty(b, hkv, cap, d), 0]
        _append(entry, (kp.transpose(2, 3), vp), (3, 2))


class _GroupStores:
    """Per-group stores of a one-sequence cache, for many groups (see :func:`_group_step`):
    per group :math:`g`, the out-of-window keys and values of every token whose group set
    contains :math:`g` (so a token of top-:math:`k` sits in :math:`k` stores), in cache
    order, with the code of each stored token's group set (:func:`_group_set_codes`).
    Filled lazily like those, from ``base`` (the sinks) on: the slots to add are sorted by
    group with one stable sort of their (slot, group) pairs and gathered with one
    ``index_select`` of the keys and one of the values."""

    def __init__(self, base: int = 0) -> None:
        self.base = base
        self.done = base  # cache slots [base, done) are in their stores
        self.sets: Dict[int, list] = {}  # group -> [keys, values, set codes, count]

    def fill(self, codes: Tensor, k: Tensor, v: Tensor, upto: int) -> None:
        """Copy the cache slots ``[done, upto)`` of ``k, v [1, H_kv, S', D]`` into the
        stores of their groups (``codes``: every slot's group-set code)."""
        a = self.done
        if upto <= a:
            return
        if upto - a == 1:  # the usual step: one token leaves the window
            for g in _members(int(codes[a])):
                self._push(g, k[:, :, a:a + 1], v[:, :, a:a + 1], codes[a:a + 1])
        else:
            seg = codes[a:upto]
            width = max(int(seg.max()).bit_length(), 1)
            member = seg.unsqueeze(1).bitwise_right_shift(
                torch.arange(width, device=seg.device)).bitwise_and(1).bool()
            rows, groups = member.nonzero(as_tuple=True)  # slot-major, groups ascending
            keys, counts, slots = _segments(groups, rows + a)
            sids = codes.index_select(0, slots).split(counts)
            for g, (kp, vp), sid in zip(keys, _gathered(k, v, slots, counts), sids):
                self._push(g, kp, vp, sid)
        self.done = upto

    def _push(self, g: int, kp: Tensor, vp: Tensor, sid: Tensor) -> None:
        entry = self.sets.get(g)
        if entry is None:
            b, hkv, n_new, d = kp.shape
            cap = max(64, 2 * n_new)
            entry = self.sets[g] = [kp.new_empty(b, hkv, d, cap), vp.new_empty(b, hkv, cap, d),
                                    sid.new_empty(cap), 0]
        _append(entry, (kp.transpose(2, 3), vp, sid), (3, 2, 0))


class FocusDecodeState:
    r"""Routing state of one Focus layer for the tokens of a KV cache.

    The per-token buffers grow by doubling (amortised :math:`O(1)` per appended token, no
    copy of the whole history at each step).

    Args:
        groups (Tensor): hard groups of the cached tokens, ``[B, S, top_k]``, long; ``-1``
            for padding.
        pos (Tensor): their positions among their sequence's real tokens, ``[B, S]``, long;
            ``-1`` for padding.
        col_lse (Tensor): running column log-sums :math:`\Lambda^{(n)}`, ``[B, I, K]``,
            float64.
        count (Tensor): real tokens per sequence so far, ``[B]``, long.
        store (bool): keep the group-set key/value stores of the fast decoding step (see
            the module docstring; a second copy of the out-of-window keys and values of a
            one-sequence cache). The keys and values then passed to
            :func:`focus_decode_attention` must always be those of the same cache, grown by
            appending (default: :obj:`False`).

    Attributes:
        groups (Tensor): ``[B, S, top_k]``, as above.
        pos (Tensor): ``[B, S]``, as above.
        col_lse (Tensor): ``[B, I, K]``, as above.
        count (Tensor): ``[B]``, as above.
        store (bool): as above.
    """

    def __init__(self, groups: Tensor, pos: Tensor, col_lse: Tensor, count: Tensor,
                 store: bool = False) -> None:
        self._groups, self._pos, self._count = groups, pos, count
        self._len = self._flushed = groups.size(1)
        # groups of the tokens [_flushed, _len), appended by the fast routing step and
        # written into the tensors when they are read (one sequence, no padding)
        self._pending: List[List[int]] = []
        self._col: Tensor = col_lse
        self._col_host: Optional[List[List[float]]] = None  # authoritative when set
        self._col_stale = False
        self.store = bool(store)
        self._stores: Optional[_GroupSetStores] = None
        self._group_stores: Optional[_GroupStores] = None
        self._fast_steps = 0  # fast decoding steps taken (STORE_AFTER)
        # group-set codes (_group_set_codes) of one sequence's first slots, as a buffer
        # grown by _append: [codes, slots coded]; _codable turns False once a group past
        # MAX_CODED_GROUPS was met (the fast step then gives way)
        self._codes: list = [groups.new_empty(0), 0]
        self._codable = True
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
        if self._col_stale:  # the fast routing step kept them on the host
            self._col = torch.tensor(self._col_host, dtype=torch.float64,
                                     device=self._col.device).view(self._col.shape)
            self._col_stale = False
        return self._col

    @col_lse.setter
    def col_lse(self, value: Tensor) -> None:
        self._col, self._col_host, self._col_stale = value, None, False

    def host_statistics(self) -> List[List[float]]:
        """The statistics of a one-sequence state as Python floats, ``I`` rows of ``K``,
        for a router's fast step to update in place (they are then authoritative:
        :attr:`col_lse` is rebuilt from them when next read)."""
        if self._col_host is None:
            self._col_host = self._col[0].tolist()
        self._col_stale = True
        return self._col_host

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
        """The group-set codes (:func:`_group_set_codes`) of cache slots ``[0, upto)`` of a
        one-sequence state, ``[upto]`` long; :obj:`None` if a group is
        :data:`MAX_CODED_GROUPS` or more (no bitmask holds it). The codes of a prefill are
        computed once, in one pass; those of decoded tokens from their host groups."""
        done = self._codes[-1]
        if not self._codable:
            return None
        if done < upto:
            if done >= self._flushed:  # tokens of the fast routing step: host groups
                rows = self._pending[done - self._flushed:upto - self._flushed]
                if any(g >= MAX_CODED_GROUPS for row in rows for g in row):
                    self._codable = False
                    return None
                new = torch.tensor([_code(row) for row in rows], dtype=torch.long,
                                   device=self._groups.device)
            else:
                self._flush()
                rows = self._groups[0, done:upto]
                if rows.numel() and int(rows.max()) >= MAX_CODED_GROUPS:
                    self._codable = False
                    return None
                new = _group_set_codes(rows)
            _append(self._codes, (new,), (0,))
        return self._codes[0][:upto]

    def select(self, index: Tensor) -> "FocusDecodeState":
        """The state of sequences :obj:`index` (beam search reorders the cache this way; the
        group-set stores are rebuilt from the reordered cache at the next fast step)."""
        return FocusDecodeState(self.groups[index], self.pos[index], self.col_lse[index],
                                self.count[index], store=self.store)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(batch={self._groups.size(0)}, tokens={self._len}, "
                f"top_k={self._groups.size(2)}, store={self.store})")


def route_prefix(router, x: Tensor, batch: Optional[Tensor] = None, num_seqs: int = 1
                 ) -> Tuple[RouterOutput, Tensor]:
    r"""Route whole sequences once: what ``router(x, batch)`` returns, and the statistics
    :func:`~quest_geometric.nn.focus.sinkhorn.sinkhorn_prefix_state` would record from a second pass
    (the same prefix-causal
    Sinkhorn run, with its column totals kept), for starting a :class:`FocusDecodeState`.

    Args:
        router (FocusRouter): a prefix-causal router.
        x (Tensor): hidden states of the real tokens, ``[N, C]``.
        batch (Tensor, optional): sorted sequence id per token (default: :obj:`None`, one
            sequence).
        num_seqs (int): number of sequences :math:`B` (default: :obj:`1`).

    Returns:
        ``(RouterOutput, col_lse)``: the routing of :obj:`x` (shapes ``[N, ...]``) and
        :math:`\Lambda^{(n)}` ``[B, I, K]`` (float64, detached).
    """
    totals: List[Tensor] = []
    out = router(x, batch, col_totals=totals)
    return out, prefix_statistics(totals, num_seqs, router.num_groups, x.device)


def route_step(router, x: Tensor, state: FocusDecodeState, valid: Optional[Tensor] = None,
               return_groups: bool = True) -> Optional[Tensor]:
    r"""Route new tokens ``x [B, T, C]`` with :obj:`router` (any
    :class:`~quest_geometric.nn.focus.router.Router`, through its ``step``), updating
    :obj:`state` (statistics, groups, positions). Returns their groups ``[B, T, top_k]``
    (``-1`` for padding).

    Args:
        router (Router): the layer's causal router.
        x (Tensor): hidden states of the new tokens, ``[B, T, C]``.
        state (FocusDecodeState): the layer's state, updated in place.
        valid (Tensor, optional): bool ``[B, T]``, :obj:`False` for padding (default:
            :obj:`None`, all real).
        return_groups (bool): return the groups (default: :obj:`True`; the composed
            layers pass :obj:`False` and skip building them).

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
                           num_sinks: int = 0) -> Tensor:
    r"""Attention of the newest :math:`T` tokens of a cache to the keys Focus lets them see.

    Query :math:`t` (cache slot :math:`c_t`) attends to the real cached keys :math:`j \le
    c_t` with :math:`p_t - p_j \le w`, :math:`G_j \cap G_t \ne \emptyset` or
    :math:`p_j < s` (the attention sinks: the first :math:`s` real tokens of the sequence)
    (positions :math:`p` count real tokens only, so padding never enters a window). With
    :obj:`fast`, the decoding step of one sequence without padding and a state with
    ``store=True`` reads the window (a slice of :obj:`k`, :obj:`v`) and the group-set
    stores that meet the new token's groups, views only (see the module docstring); every
    other call is :func:`focus_decode_attention_reference`, which gives the same values up
    to rounding.

    Args:
        q (Tensor): queries ``[B, H, T, D]`` of the new tokens.
        k, v (Tensor): every cached key/value ``[B, H_kv, S', D]`` (``S' >= S``, the
            cache's capacity; slots past the state's length are ignored).
        state (FocusDecodeState): the state *after* the new tokens were appended.
        window (int): :math:`w`.
        scale (float): softmax scale.
        fast (bool): allow the fast path (default: :obj:`True`).
        num_sinks (int): attention sinks :math:`s \ge 0` (default: :obj:`0`; the fast
            path reads them as one more slice of the cache, never from a store).

    Returns:
        Tensor: ``[B, H, T, D]``; zeros for padding queries.
    """
    check_num_sinks(num_sinks, where="focus_decode_attention")
    if fast and q.size(0) == 1 and q.size(2) == 1 and state.store and state._simple:
        return _fast_step(q, k, v, state, window, scale, num_sinks)
    return focus_decode_attention_reference(q, k, v, state, window, scale, num_sinks)


def _fast_step(q: Tensor, k: Tensor, v: Tensor, state: FocusDecodeState, window: int,
               scale: float, num_sinks: int = 0) -> Tensor:
    """The decoding step of one sequence: one masked SDPA over the cache or the group-set
    stores, whichever :data:`MASKED_SHARE` and :data:`PART_WORK` say is cheaper (the masked
    SDPA whenever more than :data:`MAX_STORE_PARTS` stores would be read); for window-only
    routing (``top_k = 0``) the window and the sinks by the same rule, with no group set
    recorded and no store kept."""
    _, h, _, d = q.shape
    hkv = k.size(1)
    s = state._len
    lo = max(0, s - 1 - window)  # the window: slots [lo, s); the stores hold [ns, lo)
    ns = min(num_sinks, lo)  # the sinks: slots [0, ns) (those not in the window)
    state._fast_steps += 1
    if state.top_k == 0:  # window-only routing: no token shares a group, nothing to record
        if s - lo + ns >= MASKED_SHARE * s:  # the window and sinks hold most of the cache
            return _masked_local(q, k, v, torch.zeros(s, dtype=torch.bool, device=q.device),
                                 lo, ns, scale)
        return _softmax_parts(q, _local_parts(k, v, lo, s, ns), scale)
    codes = state._set_codes(s)
    if codes is None:  # a group past MAX_CODED_GROUPS: the plain path
        return focus_decode_attention_reference(q, k, v, state, window, scale, num_sinks)
    mine = int(codes[s - 1])  # the new token's group set, as a bitmask
    if state._stores is None or state._stores.base != num_sinks:
        state._stores = _GroupSetStores(num_sinks)
    stores = state._stores
    stores.count(codes, lo)
    meets = [c for c, n in stores.counts.items() if n and c & mine]
    kept = s - lo + ns + sum(stores.counts[c] for c in meets)
    paid = state._fast_steps > STORE_AFTER  # a long generation: stores may pay their fill
    if len(meets) > MAX_STORE_PARTS and paid:
        # many group sets (e.g. K = 16, top-2): the per-group stores read k parts, the
        # tokens of several of the new token's groups once per such group (masked)
        read = s - lo + ns + sum(stores.counts[c] * (c & mine).bit_count() for c in meets)
        if read + PART_WORK / (hkv * d) * mine.bit_count() < MASKED_SHARE * s:
            return _group_step(q, k, v, state, codes, mine, lo, ns, scale)
    if not paid or len(meets) > MAX_STORE_PARTS or \
            kept + PART_WORK / (hkv * d) * len(meets) >= MASKED_SHARE * s:
        # a short generation so far, most keys kept, or too many stores to read (e.g. many
        # groups): one masked SDPA over the cache
        return _masked_local(q, k, v, codes.bitwise_and(mine).ne(0), lo, ns, scale)
    stores.fill(codes, k, v, lo)
    parts = _local_parts(k, v, lo, s, ns)
    for c in meets:
        kb, vb, n = stores.sets[c]
        parts.append((kb[0, :, :, :n], vb[0, :, :n], None))
    return _softmax_parts(q, parts, scale)


def _local_parts(k: Tensor, v: Tensor, lo: int, s: int, ns: int
                 ) -> List[Tuple[Tensor, Tensor, Optional[Tensor]]]:
    """The window ``[lo, s)`` and the sinks ``[0, ns)`` of a one-sequence cache as parts of
    :func:`_softmax_parts` (keys as ``[H_kv, D, n]``, views only)."""
    parts: List[Tuple[Tensor, Tensor, Optional[Tensor]]] = [
        (k[0, :, lo:s].transpose(1, 2), v[0, :, lo:s], None)]
    if ns:
        parts.append((k[0, :, :ns].transpose(1, 2), v[0, :, :ns], None))
    return parts


def _masked_local(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, lo: int, ns: int,
                  scale: float) -> Tensor:
    """One masked SDPA over the cache slots ``[0, s)`` (``s = mask.numel()``): the keys
    :obj:`mask` keeps, the window ``[lo, s)`` and the sinks ``[0, ns)`` (set in
    :obj:`mask` in place)."""
    s = mask.numel()
    mask[lo:] = True  # the window
    mask[:ns] = True  # the sinks
    return masked_decode_attention(q, k[:, :, :s], v[:, :, :s], mask, scale,
                                   packed_layout(k.size(1)))


def _softmax_parts(q: Tensor, parts: List[Tuple[Tensor, Tensor, Optional[Tensor]]],
                   scale: float) -> Tensor:
    """One query per head ``q [1, H, 1, D]`` over the concatenated parts ``(keys [H_kv, D,
    n], values [H_kv, n, D], masked [n] or None)``, ``masked`` keys excluded."""
    _, h, _, d = q.shape
    hkv = parts[0][0].size(0)
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


def _group_step(q: Tensor, k: Tensor, v: Tensor, state: FocusDecodeState, codes: Tensor,
                mine: int, lo: int, ns: int, scale: float) -> Tensor:
    r"""The decoding step over the per-group stores (:class:`_GroupStores`): the new
    token of groups :math:`g_1 < \dots < g_k` attends to the window, the sinks and the
    stores of :math:`g_1, \dots, g_k`, where store :math:`g_i` masks the tokens whose group
    set also holds one of :math:`g_1, \dots, g_{i-1}` (read already; one ``&`` of their
    set codes with those groups' bits), so every allowed key counts once:
    :math:`\bigcup_i \{j : g_i \in G_j\} = \{j : G_j \cap G_t \neq \emptyset\}`. It reads
    :math:`\sum_i |\text{store}(g_i)|` keys in :math:`k` parts where the group-set stores
    would read fewer keys in many more parts (``mine``: the new token's group-set code)."""
    s = state._len
    base = state._stores.base
    if state._group_stores is None or state._group_stores.base != base:
        state._group_stores = _GroupStores(base)
    gs = state._group_stores
    gs.fill(codes, k, v, lo)
    parts = _local_parts(k, v, lo, s, ns)
    earlier = 0  # the bits of the groups whose stores were read
    for g in _members(mine):
        entry = gs.sets.get(g)
        if entry is not None and entry[3]:
            kb, vb, ib, n = entry
            masked = ib[:n].bitwise_and(earlier).ne(0) if earlier else None
            parts.append((kb[0, :, :, :n], vb[0, :, :n], masked))
        earlier |= 1 << g
    return _softmax_parts(q, parts, scale)


def focus_decode_attention_reference(q: Tensor, k: Tensor, v: Tensor,
                                     state: FocusDecodeState, window: int, scale: float,
                                     num_sinks: int = 0) -> Tensor:
    r"""The plain path of :func:`focus_decode_attention` (the reference of its fast path):
    attention of the newest :math:`T` tokens of a cache to the keys Focus lets them see.

    Query :math:`t` (cache slot :math:`c_t`) attends to the real cached keys :math:`j \le
    c_t` with :math:`p_t - p_j \le w`, :math:`G_j \cap G_t \ne \emptyset` or :math:`p_j <
    s` (:obj:`num_sinks`, default :obj:`0`) (positions
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
