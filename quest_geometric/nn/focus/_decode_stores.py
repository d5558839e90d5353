r"""The key/value stores of the fast decoding step (private; see
:mod:`quest_geometric.nn.focus.decode`): copies of the keys and values that have left the
window, so that a new token reads the keys it attends to without a gather.
:class:`GroupSetStores` keeps one store per group set (with the count of each set's
out-of-window tokens, the cost model's input), :class:`GroupStores` one per group (with
each stored token's set code). Both are filled lazily, only when a step reads them."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch
from torch import Tensor

from quest_geometric.nn.focus.group_sets import members

#: First capacity of a store (tokens); stores grow by doubling.
FIRST_CAPACITY = 64


@dataclass
class GrowingBuffers:
    r"""Tensors grown together by doubling, each along its own axis in :attr:`axes`, the first
    :attr:`size` rows filled."""
    tensors: List[Tensor]
    axes: Tuple[int, ...]
    size: int = 0

    @property
    def capacity(self) -> int:
        return self.tensors[0].size(self.axes[0])

    def filled(self, i: int) -> Tensor:
        """The filled rows of tensor :obj:`i` (a view)."""
        return self.tensors[i].narrow(self.axes[i], 0, self.size)

    def append(self, new: Sequence[Tensor]) -> None:
        """Append ``new[i]`` along ``axes[i]`` to tensor ``i`` (all with as many rows)."""
        n, n_new = self.size, new[0].size(self.axes[0])
        if n + n_new > self.capacity:
            cap = max(n + n_new, 2 * self.capacity)
            for i, (buf, ax) in enumerate(zip(self.tensors, self.axes)):
                shape = list(buf.shape)
                shape[ax] = cap
                grown = buf.new_empty(shape)
                grown.narrow(ax, 0, n).copy_(buf.narrow(ax, 0, n))
                self.tensors[i] = grown
        for buf, x, ax in zip(self.tensors, new, self.axes):
            buf.narrow(ax, n, n_new).copy_(x)
        self.size = n + n_new


class Part(NamedTuple):
    r"""One part of a step's keys: ``keys`` ``[H_kv, D, n]`` (transposed), ``values``
    ``[H_kv, n, D]`` and the keys to exclude, ``masked`` ``[n]`` bool (:obj:`None`: none)."""
    keys: Tensor
    values: Tensor
    masked: Optional[Tensor] = None


@dataclass
class KVStore:
    r"""Out-of-window keys and values of one store in cache order (and, per-group stores, each
    token's set code). Keys are stored transposed, ``[1, H_kv, D, cap]``, so the scores
    :math:`q K^{\top}` are a plain row-major product."""
    buffers: GrowingBuffers

    @classmethod
    def like(cls, kp: Tensor, vp: Tensor, codes: Optional[Tensor] = None) -> "KVStore":
        """An empty store for keys and values like ``kp, vp [1, H_kv, n, D]``."""
        b, hkv, n_new, d = kp.shape
        cap = max(FIRST_CAPACITY, 2 * n_new)
        tensors = [kp.new_empty(b, hkv, d, cap), vp.new_empty(b, hkv, cap, d)]
        if codes is not None:
            tensors.append(codes.new_empty(cap))
        return cls(GrowingBuffers(tensors, (3, 2, 0)[:len(tensors)]))

    @property
    def size(self) -> int:
        return self.buffers.size

    @property
    def capacity(self) -> int:
        return self.buffers.capacity

    @property
    def codes(self) -> Tensor:
        """The stored tokens' group-set codes ``[n]`` (per-group stores only)."""
        return self.buffers.filled(2)

    def push(self, kp: Tensor, vp: Tensor, codes: Optional[Tensor] = None) -> None:
        """Append the keys and values ``kp, vp [1, H_kv, n, D]`` (and their codes)."""
        new = (kp.transpose(2, 3), vp) if codes is None else (kp.transpose(2, 3), vp, codes)
        self.buffers.append(new)

    def part(self, masked: Optional[Tensor] = None) -> Part:
        """The store as a :class:`Part` (views)."""
        n = self.size
        return Part(self.buffers.tensors[0][0, :, :, :n], self.buffers.tensors[1][0, :, :n],
                    masked)


def _push(sets: Dict[int, KVStore], key: int, kp: Tensor, vp: Tensor,
          codes: Optional[Tensor] = None) -> None:
    """Append ``kp, vp`` (and their codes) to the store :obj:`key`, new if need be."""
    store = sets.get(key)
    if store is None:
        store = sets[key] = KVStore.like(kp, vp, codes)
    store.push(kp, vp, codes)


def _segments(keys: Tensor, slots: Tensor) -> Tuple[List[int], List[int], Tensor]:
    r"""``slots`` stably sorted by ``keys``: the distinct keys ascending, their slot counts and
    the sorted slots."""
    sk, order = keys.sort(stable=True)
    uniq, n = torch.unique_consecutive(sk, return_counts=True)
    return uniq.tolist(), n.tolist(), slots[order]


def _gathered(k: Tensor, v: Tensor, slots: Tensor, counts: List[int]
              ) -> List[Tuple[Tensor, Tensor]]:
    r"""The keys and values of the cache ``slots``, gathered once and cut into pieces of
    ``counts`` slots (views)."""
    return list(zip(k.index_select(2, slots).split(counts, 2),
                    v.index_select(2, slots).split(counts, 2)))


@dataclass
class GroupSetStores:
    r"""The group-set stores of a one-sequence cache, from cache slot :attr:`base` on (the sinks
    are read directly): per group-set code, the number of its out-of-window tokens and the
    store of their keys and values."""
    base: int = 0
    counts: Dict[int, int] = field(default_factory=dict)
    counted: int = -1  # slots [base, counted) are in counts
    done: int = -1  # slots [base, done) are in their stores
    sets: Dict[int, KVStore] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.counted = max(self.counted, self.base)
        self.done = max(self.done, self.base)

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

    def meeting(self, mine: int) -> List[int]:
        """The codes of the counted group sets that meet the code :obj:`mine`."""
        return [c for c, n in self.counts.items() if n and c & mine]

    def fill(self, codes: Tensor, k: Tensor, v: Tensor, upto: int) -> None:
        r"""Copy the cache slots ``[done, upto)`` of ``k, v [1, H_kv, S', D]`` into their stores."""
        a = self.done
        if upto <= a:
            return
        if upto - a == 1:  # the usual step: one token leaves the window
            _push(self.sets, int(codes[a]), k[:, :, a:a + 1], v[:, :, a:a + 1])
        else:
            slots = torch.arange(a, upto, device=k.device)
            keys, counts, slots = _segments(codes[a:upto], slots)
            for c, (kp, vp) in zip(keys, _gathered(k, v, slots, counts)):
                _push(self.sets, c, kp, vp)
        self.done = upto


@dataclass
class GroupStores:
    r"""The per-group stores of a one-sequence cache, from cache slot :attr:`base` on: per group
    :math:`g`, the out-of-window keys, values and set codes of every token whose set holds
    :math:`g`."""
    base: int = 0
    done: int = -1  # slots [base, done) are in their stores
    sets: Dict[int, KVStore] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.done = max(self.done, self.base)

    def fill(self, codes: Tensor, k: Tensor, v: Tensor, upto: int) -> None:
        r"""Copy the cache slots ``[done, upto)`` into the stores of their groups."""
        a = self.done
        if upto <= a:
            return
        if upto - a == 1:  # the usual step: one token leaves the window
            for g in members(int(codes[a])):
                _push(self.sets, g, k[:, :, a:a + 1], v[:, :, a:a + 1], codes[a:a + 1])
        else:
            seg = codes[a:upto]
            width = max(int(seg.max()).bit_length(), 1)
            member = seg.unsqueeze(1).bitwise_right_shift(
                torch.arange(width, device=seg.device)).bitwise_and(1).bool()
            rows, groups = member.nonzero(as_tuple=True)  # slot-major, groups ascending
            keys, counts, slots = _segments(groups, rows + a)
            sids = codes.index_select(0, slots).split(counts)
            for g, (kp, vp), sid in zip(keys, _gathered(k, v, slots, counts), sids):
                _push(self.sets, g, kp, vp, sid)
        self.done = upto

    def parts(self, mine: int) -> List[Part]:
        r"""The stores of the groups :math:`g_1 < \dots < g_k` of the code :obj:`mine`, store
        :math:`g_i` masking the tokens whose set also holds an earlier :math:`g_j`, so every
        allowed key counts once."""
        out, earlier = [], 0  # the bits of the groups whose stores were read
        for g in members(mine):
            store = self.sets.get(g)
            if store is not None and store.size:
                masked = store.codes.bitwise_and(earlier).ne(0) if earlier else None
                out.append(store.part(masked))
            earlier |= 1 << g
        return out
