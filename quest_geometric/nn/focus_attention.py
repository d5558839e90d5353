"""Focus sparse attention: learned grouping + local window, with three exact back-ends.

Reference: Yao et al., "Why Attend to Everything? Focus is the Key" /
"Composing Sparse Attention via Learned Grouping" (arXiv 2604.03260).
"""
from __future__ import annotations

import math
from typing import Callable, List, NamedTuple, Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric import EdgeIndex
from torch_geometric.nn import MessagePassing
from torch_geometric.utils import softmax as pyg_softmax
from torch_geometric.utils import to_dense_batch

from quest_geometric.nn._checks import check_qkv as _check_qkv
from quest_geometric.nn.focus_edge_index import (
    _check_groups,
    focus_edge_index,
    smallest_shared_group,
)
from quest_geometric.nn.focus_flex import FLEX_AVAILABLE, MAX_FLEX_GROUPS, focus_flex_attention
from quest_geometric.nn.focus_router import (
    FocusRouter,
    RouterOutput,
    check_batch,
    check_features,
    check_real,
)

BACKENDS = ("blocks", "edges", "dense", "flex")
GATES = ("additive", "multiplicative", None)

# --------------------------------------------------------------------------------------
# small helpers
# --------------------------------------------------------------------------------------


_HALF = (torch.float16, torch.bfloat16)


def _check_window(window: int) -> None:
    if not isinstance(window, int) or isinstance(window, bool) or window < 0:
        raise ValueError(f"'window' must be a non-negative int, got {window!r}")


def _check_hard_args(q: Tensor, k: Tensor, v: Tensor, groups: Tensor, window: int,
                     batch: Optional[Tensor], num_groups: Optional[int]
                     ) -> Tuple[Tensor, int]:
    """Validate the arguments of a hard back-end; return ``groups`` ``[N, top_k]`` and
    :math:`K` (``groups.max() + 1`` when :obj:`num_groups` is :obj:`None`)."""
    _check_qkv(q, k, v)
    groups = _check_groups(groups)
    n = q.size(0)
    if groups.size(0) != n:
        raise ValueError(f"'groups' must have {n} rows (one per token), got "
                         f"{list(groups.shape)}")
    if groups.device != q.device:
        raise ValueError(f"'groups' must be on {q.device}, got {groups.device}")
    _check_window(window)
    check_batch(batch, n)
    gmax = int(groups.max()) + 1 if n > 0 else 1
    if num_groups is None:
        return groups, gmax
    if not isinstance(num_groups, int) or isinstance(num_groups, bool) or num_groups < 1:
        raise ValueError(f"'num_groups' must be a positive int, got {num_groups!r}")
    if gmax > num_groups:
        raise ValueError(f"'groups' must hold ids in [0, num_groups={num_groups}), got id "
                         f"{gmax - 1}")
    return groups, num_groups


def _seq_layout(batch: Optional[Tensor], n: int, device: torch.device
                ) -> Tuple[Tensor, int]:
    """Sequence id per token (long) and number of sequences."""
    if batch is None:
        return torch.zeros(n, dtype=torch.long, device=device), 1
    seq = batch.long()
    return seq, (int(seq.max()) + 1 if n > 0 else 0)


def _masked_softmax_attention(s: Tensor, allowed: Tensor, v: Tensor) -> Tuple[Tensor, Tensor]:
    r"""Attention over the allowed keys of :obj:`s` (``[..., Lq, Lk]``), returning the output
    and the log-sum-exp; rows with no allowed key give ``lse = -inf`` (their output is
    finite and gets zero weight and zero gradient in :func:`_merge_parts`)."""
    row_any = allowed.any(-1)
    s = s.masked_fill(~allowed, float("-inf"))
    s = torch.where(row_any.unsqueeze(-1), s, torch.zeros_like(s))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse.unsqueeze(-1))
    o = p @ v
    return o, torch.where(row_any, lse, torch.full_like(lse, float("-inf")))


def _merge_parts(n: int, tok: Tensor, o: Tensor, lse: Tensor) -> Tuple[Tensor, Tensor]:
    r"""Exact merge of attention over disjoint key sets: rows :obj:`o` ``[R, H, D]`` with
    log-sum-exps :obj:`lse` ``[R, H]`` belonging to tokens :obj:`tok` ``[R]``:

    .. math::
        \mathbf{o}_i = \frac{\sum_p e^{\ell_p} \mathbf{o}_p}{\sum_p e^{\ell_p}}, \qquad
        L_i = \log \sum_p e^{\ell_p}.
    """
    wdt = torch.float32 if lse.dtype in _HALF else lse.dtype  # half: merge in float32
    lse = lse.to(wdt)
    m = torch.full((n, lse.size(1)), float("-inf"), dtype=wdt, device=lse.device)
    m = m.scatter_reduce(0, tok.unsqueeze(1).expand_as(lse), lse.detach(), "amax")
    w = torch.exp(lse - m[tok])
    den = torch.zeros_like(m).index_add(0, tok, w)
    mdt = torch.promote_types(wdt, o.dtype)
    num = torch.zeros(n, o.size(1), o.size(2), dtype=mdt, device=o.device).index_add(
        0, tok, w.unsqueeze(-1).to(mdt) * o.to(mdt))
    return (num / den.unsqueeze(-1).to(mdt)).to(o.dtype), m + den.log()


class _Buckets:
    """Members of each non-empty (sequence, group) bucket, in position order."""

    def __init__(self, groups: Tensor, seq: Tensor, num_groups: int) -> None:
        n, kk = groups.shape
        dev = groups.device
        tok = torch.arange(n, device=dev).repeat_interleave(kk)
        key = (seq.repeat_interleave(kk) * num_groups + groups.reshape(-1)) * n + tok
        key = torch.unique(key)
        bucket = torch.div(key, n, rounding_mode="floor")
        self.members = key - bucket * n
        ub, counts = torch.unique_consecutive(bucket, return_counts=True)
        self.group = (ub % num_groups).tolist()
        self.counts = counts.tolist()
        self.starts = [0]
        for c in self.counts[:-1]:
            self.starts.append(self.starts[-1] + c)

    def __iter__(self):
        for s, c, g in zip(self.starts, self.counts, self.group):
            yield self.members[s:s + c], g


# --------------------------------------------------------------------------------------
# hard (inference) back-ends
# --------------------------------------------------------------------------------------


def _dense_allowed(groups: Tensor, seq: Tensor, nseq: int, window: int, causal: bool,
                   num_groups: int) -> Tuple[Tensor, Tensor]:
    """Dense boolean Focus mask ``[B, T, T]`` (query, key) and the valid-token mask."""
    member = torch.zeros(groups.size(0), num_groups, device=groups.device)
    member.scatter_(1, groups, 1.0)
    md, valid = to_dense_batch(member, seq, batch_size=nseq)
    t = md.size(1)
    i = torch.arange(t, device=groups.device)
    dist = i.view(-1, 1) - i.view(1, -1)
    near = dist.abs() <= window
    shared = (md @ md.transpose(1, 2)) > 0
    allowed = (near | shared) & valid.unsqueeze(1)
    if causal:
        allowed = allowed & (dist >= 0)
    return allowed | torch.eye(t, dtype=torch.bool, device=groups.device), valid


def focus_dense_attention(q: Tensor, k: Tensor, v: Tensor, groups: Tensor, window: int,
                          batch: Optional[Tensor] = None, causal: bool = True,
                          num_groups: Optional[int] = None) -> Tensor:
    r"""Focus attention with an explicit boolean mask and
    :func:`~torch.nn.functional.scaled_dot_product_attention` (the small-:math:`N` oracle).

    Args:
        q, k, v (torch.Tensor): ``[N, H, D]``.
        groups (torch.Tensor): ``[N, top_k]`` hard group ids.
        window (int): local window :math:`w`.
        batch (torch.Tensor, optional): sorted sequence ids (default: :obj:`None`).
        causal (bool): causal attention (default: :obj:`True`).
        num_groups (int, optional): :math:`K` (default: ``groups.max() + 1``).

    Returns:
        torch.Tensor: ``[N, H, D]``.

    Raises:
        TypeError: for non-floating :obj:`q`, :obj:`k`, :obj:`v` or non-long :obj:`groups`.
        ValueError: for bad shapes, a negative :obj:`window`, a bad :obj:`batch` or group
            ids outside :math:`[0, K)`.
    """
    groups, kgroups = _check_hard_args(q, k, v, groups, window, batch, num_groups)
    n, h, d = q.shape
    if n == 0:
        return q.new_empty(0, h, d)
    seq, nseq = _seq_layout(batch, n, q.device)
    allowed, valid = _dense_allowed(groups, seq, nseq, window, causal, kgroups)
    qd, kd, vd = (to_dense_batch(x.reshape(n, h * d), seq, batch_size=nseq)[0]
                  .view(nseq, -1, h, d).transpose(1, 2) for x in (q, k, v))
    out = F.scaled_dot_product_attention(qd, kd, vd, attn_mask=allowed.unsqueeze(1))
    return out.transpose(1, 2)[valid]


class FocusEdgeAttention(MessagePassing):
    r"""Multi-head scaled dot-product attention over an arbitrary :obj:`edge_index`
    (the general-graph Focus reference; target :math:`i`, source :math:`j`):

    .. math::
        \alpha_{ij}^{h} = \operatorname{softmax}_{j \in \mathcal{N}(i)}
        \frac{\mathbf{q}_i^{h\top} \mathbf{k}_j^{h}}{\sqrt{D}}, \qquad
        \mathbf{o}_i^{h} = \sum_{j \in \mathcal{N}(i)} \alpha_{ij}^{h} \mathbf{v}_j^{h}.

    Shapes:
        - **input:** :obj:`q, k, v` :math:`(|V|, H, D)`, :obj:`edge_index` :math:`(2, |E|)`
        - **output:** :math:`(|V|, H, D)`
    """

    def __init__(self) -> None:
        super().__init__(aggr="add", node_dim=0)

    def forward(self, q: Tensor, k: Tensor, v: Tensor, edge_index: Tensor) -> Tensor:
        """Attend along :obj:`edge_index` (row = source, col = target).

        An edge set sorted by target (as :func:`~quest_geometric.nn.focus_edge_index`
        returns it) is passed to PyG as an :class:`~torch_geometric.EdgeIndex` with
        ``sort_order='col'``, so the softmax and the sum run over contiguous segments
        (CSR pointers) instead of scatters: about 6% faster at 2K tokens, the same result.
        Half precision scores, softmax and sums run in float32 (cast back at the end).

        Raises:
            TypeError: for non-floating :obj:`q`, :obj:`k`, :obj:`v` or a non-integer
                :obj:`edge_index`.
            ValueError: for bad shapes or node ids outside :math:`[0, |V|)`.
        """
        _check_qkv(q, k, v)
        n = q.size(0)
        if isinstance(edge_index, Tensor):
            if edge_index.is_floating_point() or edge_index.is_complex() \
                    or edge_index.dtype == torch.bool:
                raise TypeError(f"'edge_index' must be an integer (long) tensor, got "
                                f"{edge_index.dtype}")
            if edge_index.dim() != 2 or edge_index.size(0) != 2:
                raise ValueError(f"'edge_index' must have shape [2, E], got "
                                 f"{list(edge_index.shape)}")
            if edge_index.numel() > 0 and (int(edge_index.min()) < 0
                                           or int(edge_index.max()) >= n):
                raise ValueError(f"'edge_index' must hold node ids in [0, {n}), got "
                                 f"[{int(edge_index.min())}, {int(edge_index.max())}]")
        if q.dtype in _HALF:
            return self.forward(q.float(), k.float(), v.float(), edge_index).to(q.dtype)
        if (type(edge_index) is Tensor and edge_index.dim() == 2 and edge_index.size(1) > 1
                and bool((edge_index[1, 1:] >= edge_index[1, :-1]).all())):
            edge_index = EdgeIndex(edge_index, sparse_size=(n, n), sort_order="col")
        return self.propagate(edge_index, q=q, k=k, v=v, size=(n, n))

    def message(self, q_i: Tensor, k_j: Tensor, v_j: Tensor, index: Tensor,
                ptr: Optional[Tensor], size_i: Optional[int]) -> Tensor:
        alpha = (q_i * k_j).sum(-1) / math.sqrt(q_i.size(-1))
        alpha = pyg_softmax(alpha, index, ptr, size_i)
        return alpha.unsqueeze(-1) * v_j


def focus_blocks_reference(q: Tensor, k: Tensor, v: Tensor, groups: Tensor, window: int,
                           batch: Optional[Tensor] = None, causal: bool = True,
                           num_groups: Optional[int] = None) -> Tensor:
    r"""Plain-PyTorch reference of the paper's decomposition (autograd, no fused kernel).

    Part A: for each (sequence, group) bucket, attention among its members in position
    order (causal if asked); a pair whose group sets share several groups is kept only in the
    bucket of its *smallest* shared group. Part B: the window band restricted to pairs with
    *disjoint* group sets, gathered explicitly as ``[N, #offsets]``. A and B partition the
    Focus pattern, so merging their log-sum-exps (:func:`_merge_parts`) is exact. Half
    precision input is computed in float32 and cast back. The arguments are those of
    :func:`focus_blocks_attention` (without ``fused``).
    """
    groups, kgroups = _check_hard_args(q, k, v, groups, window, batch, num_groups)
    if q.dtype in _HALF:
        return focus_blocks_reference(q.float(), k.float(), v.float(), groups, window, batch,
                                      causal, kgroups).to(q.dtype)
    n, h, d = q.shape
    if n == 0:
        return q.new_empty(0, h, d)
    scale = 1.0 / math.sqrt(d)
    seq, _ = _seq_layout(batch, n, q.device)
    toks: List[Tensor] = []
    outs: List[Tensor] = []
    lses: List[Tensor] = []
    multi = groups.size(1) > 1
    for idx, g in _Buckets(groups, seq, kgroups):
        qb, kb, vb = q[idx].transpose(0, 1), k[idx].transpose(0, 1), v[idx].transpose(0, 1)
        c = idx.numel()
        allowed = torch.ones(c, c, dtype=torch.bool, device=q.device)
        if causal:
            allowed = allowed.tril()
        if multi:
            gi = groups[idx]
            ssg = smallest_shared_group(gi.repeat_interleave(c, 0), gi.repeat(c, 1), kgroups)
            allowed = allowed & (ssg.view(c, c) == g)
        o, lse = _masked_softmax_attention((qb @ kb.transpose(1, 2)) * scale, allowed, vb)
        toks.append(idx)
        outs.append(o.transpose(0, 1))
        lses.append(lse.transpose(0, 1))
    # band: j = i - off, off in [lo, window]
    lo = 0 if causal else -window
    offs = torch.arange(lo, window + 1, device=q.device)
    i = torch.arange(n, device=q.device)
    j = i.view(-1, 1) - offs.view(1, -1)
    jc = j.clamp(0, max(n - 1, 0))
    ok = (j >= 0) & (j < n) & (seq[jc] == seq.view(-1, 1))
    disjoint = smallest_shared_group(groups.repeat_interleave(offs.numel(), 0),
                                     groups[jc.reshape(-1)], kgroups) == kgroups
    ok = ok & disjoint.view(n, -1)
    s = torch.einsum("nhd,nmhd->nhm", q, k[jc]) * scale
    o, lse = _masked_softmax_attention(s.unsqueeze(2), ok.view(n, 1, 1, -1),
                                       v[jc].permute(0, 2, 1, 3))
    toks.append(i)
    outs.append(o.squeeze(2))
    lses.append(lse.squeeze(2))
    out, _ = _merge_parts(n, torch.cat(toks), torch.cat(outs), torch.cat(lses))
    return out


# ---- fast CPU path: fused flash kernels returning the log-sum-exp ------------------------

_FLASH_FWD = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
_FLASH_BWD = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu_backward",
                     None)
#: Query block of the fused band: each block of ``BAND_BLOCK`` queries attends to its
#: ``BAND_BLOCK + w`` (causal) or ``BAND_BLOCK + 2w`` keys, read through an overlapping
#: strided view of the key/value tensors (no copy). Small blocks waste few band pairs.
BAND_BLOCK = 16
_MASK_BUDGET = 1 << 22  # elements of one top_k > 1 bucket mask chunk
#: Largest padding overhead :math:`B \, c_{\max}^2 / \sum_b c_b^2` at which the :math:`B`
#: buckets of causal top-:math:`k = 1` attention run as *one* batched flash call, each bucket
#: padded to the largest one :math:`c_{\max}` (padded keys come after every real query, so
#: causality hides them); above it, one call per bucket. Measured on one thread (torch
#: 2.13), padding by 10% was slower than one call per bucket at every size tried (8 to 128
#: buckets of 64 to 4K tokens, 10-25% slower), so only equal-sized buckets are batched.
PAD_RATIO = 1.0


def _windows(x: Tensor, start: int, nb: int, step: int, length: int) -> Tensor:
    """Overlapping row windows ``x[start + b * step : start + b * step + length]``,
    ``b < nb``, of a contiguous ``[N, ...]`` tensor as one ``[nb, length, ...]`` view."""
    return x[start:].as_strided((nb, length, *x.shape[1:]), (step * x.stride(0), *x.stride()))


class _BandSegment(NamedTuple):
    """``nb`` blocks of ``bq`` queries from ``q0`` and ``lk`` keys from ``k0`` (step ``bq``),
    with the additive mask ``[nb, 1, bq, lk]`` and whether each query row keeps any key."""
    q0: int
    k0: int
    nb: int
    bq: int
    lk: int
    bias: Tensor
    row_any: Tensor


class _BlocksPlan:
    """The routing plan of the fused path, built once per call (no N x N object): the
    bucket order (a stable sort by (sequence, group)), the bucket spans in that order, and
    the band split into a head, a body of equal query blocks read as strided views, and a
    tail, each with its additive mask."""

    def __init__(self, groups: Tensor, seq: Tensor, nseq: int, num_groups: int, window: int,
                 causal: bool, dtype: torch.dtype) -> None:
        n, kk = groups.shape
        self.groups, self.seq = groups.contiguous(), seq.contiguous()
        self.n, self.kk, self.nseq, self.num_groups = n, kk, nseq, num_groups
        self.causal, self.window, self.dtype = causal, window, dtype
        self.right = 0 if causal else window
        # buckets: for top_k = 1 one stable sort; each bucket a contiguous span of `order`
        if kk == 1:
            key = self.seq * num_groups + self.groups[:, 0]
            self.order = torch.argsort(key, stable=True)
            counts = torch.bincount(key, minlength=max(nseq, 1) * num_groups).tolist()
            self.spans: List[Tuple[int, int, int]] = []
            st = 0
            for b, c in enumerate(counts):
                if c:
                    self.spans.append((st, c, b % num_groups))
                st += c
            self.padded: Optional[Tuple[int, int, Tensor, Tensor]] = None
            cs = [c for _, c, _ in self.spans]
            nbk, cmax = len(cs), max(cs, default=0)
            if causal and nbk > 1 and nbk * cmax * cmax <= PAD_RATIO * sum(c * c for c in cs):
                dev = self.groups.device
                bid = torch.repeat_interleave(torch.arange(nbk, device=dev),
                                              torch.tensor(cs, device=dev))
                first = torch.tensor([s for s, _, _ in self.spans], device=dev)
                slot = bid * cmax + torch.arange(n, device=dev) - first[bid]
                src = torch.zeros(nbk * cmax, dtype=torch.long, device=dev)  # pad reads row 0
                src[slot] = self.order
                dst = torch.full((nbk * cmax,), n, dtype=torch.long, device=dev)  # pad -> row n
                dst[slot] = self.order
                self.padded = (nbk, cmax, src, dst)
        else:
            self.padded = None
            buckets = _Buckets(self.groups, self.seq, num_groups)
            self.order = buckets.members
            self.spans = list(zip(buckets.starts, buckets.counts, buckets.group))
        # band: head [0, w), body [w, w + nb * bq), tail; together exactly [0, n)
        self.segments: List[_BandSegment] = []
        if kk == 1:
            self.band_any = self._band_any_single()
        bq, h0 = BAND_BLOCK, min(window, n)
        if h0 > 0:
            self._add_segment(0, 0, 1, h0, min(n, h0 + self.right))
        nb = max(0, (n - window - self.right) // bq)
        if nb > 0:
            self._add_segment(window, 0, nb, bq, bq + window + self.right)
        t0 = max(h0, window + nb * bq)
        if t0 < n:
            k0 = max(0, t0 - window)
            self._add_segment(t0, k0, 1, n - t0, n - k0)

    def _band_any_single(self) -> Tensor:
        """top_k = 1: whether each query keeps any band key, from runs of equal
        (sequence, group) in O(N): the nearest earlier (later) token of another run is the
        nearest candidate key, valid when it is in the same sequence and within the window."""
        n, dev = self.n, self.groups.device
        g, sq = self.groups[:, 0], self.seq
        pos = torch.arange(n, device=dev)
        cut = torch.ones(n, dtype=torch.bool, device=dev)  # run starts
        cut[1:] = (g[1:] != g[:-1]) | (sq[1:] != sq[:-1])
        start = torch.cummax(torch.where(cut, pos, 0), 0).values
        prev = (start - 1).clamp(min=0)
        keep = (start > 0) & (sq[prev] == sq) & (pos - prev <= self.window)
        if not self.causal:
            last = torch.ones(n, dtype=torch.bool, device=dev)  # run ends
            last[:-1] = cut[1:]
            end = torch.cummin(torch.where(last, pos, n - 1).flip(0), 0).values.flip(0)
            nxt = (end + 1).clamp(max=n - 1)
            keep |= (end < n - 1) & (sq[nxt] == sq) & (nxt - pos <= self.window)
        return keep

    def _add_segment(self, q0: int, k0: int, nb: int, bq: int, lk: int) -> None:
        dev, kk = self.groups.device, self.kk
        off = (q0 - k0) + torch.arange(bq, device=dev).view(-1, 1) \
            - torch.arange(lk, device=dev).view(1, -1)  # i - j, the same in every block
        outside = (off > self.window) | (off < -self.right)  # [bq, lk]
        gq = self.groups[q0:q0 + nb * bq].view(nb, bq, kk)
        gk = _windows(self.groups, k0, nb, bq, lk)  # [nb, lk, kk]
        if kk == 1:
            same = gq[:, :, :1] == gk[:, :, 0].unsqueeze(1)
        else:
            same = (gq.view(nb, bq, 1, kk, 1) == gk.view(nb, 1, lk, 1, kk)).flatten(-2).any(-1)
        if self.nseq > 1:  # keys of another sequence count as excluded too
            sq = self.seq[q0:q0 + nb * bq].view(nb, bq, 1)
            same |= sq != _windows(self.seq, k0, nb, bq, lk).unsqueeze(1)
        ninf = torch.tensor(float("-inf"), dtype=self.dtype, device=dev)
        static = torch.where(outside, ninf, torch.tensor(0.0, dtype=self.dtype, device=dev))
        bias = torch.where(same, ninf, static)  # one pass: [nb, bq, lk]
        if kk == 1:
            row_any = self.band_any[q0:q0 + nb * bq]
        else:
            row_any = ~(same | outside).all(-1).view(-1)
        self.segments.append(_BandSegment(q0, k0, nb, bq, lk, bias.unsqueeze(1), row_any))

    def bucket_chunks(self, idx: Tensor, g: int, dtype: torch.dtype):
        """Query chunks ``(s, e, lk, bias, row_any)`` of one bucket; for top_k > 1 with the
        mask keeping only pairs whose smallest shared group is ``g``."""
        c = idx.numel()
        if self.kk == 1:
            yield 0, c, c, None, None
            return
        step = max(1, _MASK_BUDGET // max(c, 1))
        gi = self.groups[idx]
        for s in range(0, c, step):
            e = min(c, s + step)
            lk = e if self.causal else c
            ssg = smallest_shared_group(gi[s:e].repeat_interleave(lk, 0), gi[:lk].repeat(e - s, 1),
                                        self.num_groups).view(e - s, lk)
            allowed = ssg == g
            if self.causal:
                allowed = allowed & (torch.arange(lk, device=idx.device).view(1, -1)
                                     <= torch.arange(s, e, device=idx.device).view(-1, 1))
            bias = torch.zeros(allowed.shape, dtype=dtype, device=idx.device).masked_fill_(
                ~allowed, float("-inf"))
            yield s, e, lk, bias.view(1, 1, e - s, lk), allowed.any(-1)


def _lse_to_rows(lse: Tensor, mask_any: Optional[Tensor]) -> Tensor:
    """``lse`` ``[c, H]`` with ``-inf`` in the rows that keep no key."""
    if mask_any is None:
        return lse
    return lse.masked_fill(~mask_any.unsqueeze(-1), float("-inf"))


def _heads_first(x: Tensor) -> Tensor:
    """``[L, H, ...]`` -> ``[1, H, L, ...]`` (a view)."""
    return x.transpose(0, 1).unsqueeze(0)


class _FocusBlocksFunction(torch.autograd.Function):
    """Fused forward/backward of the decomposition with the CPU flash kernels.

    The backward of every part reuses the kernels' own backward with the *merged* output and
    log-sum-exp, which gives each part's exact contribution to the gradient of the whole
    softmax (as in split-KV FlashAttention)."""

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, plan: _BlocksPlan,
                scale: float) -> Tensor:
        n, h, d = q.shape
        order = plan.order
        single = plan.kk == 1
        toks, outs, lses = [], [], []
        spans = plan.spans
        ldt = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype  # lse
        if plan.padded is not None:  # one batched causal call over padded buckets
            nbk, cmax, src, dst = plan.padded
            o, lse = _FLASH_FWD(*(x.view(n, h * d).index_select(0, src).view(nbk, cmax, h, d)
                                  .transpose(1, 2) for x in (q, k, v)),
                                0.0, True, scale=scale)
            out = q.new_empty(n + 1, h, d).index_copy_(
                0, dst, o.transpose(1, 2).reshape(-1, h, d))[:n]
            la = lse.new_empty(n + 1, h).index_copy_(0, dst,
                                                     lse.transpose(1, 2).reshape(-1, h))[:n]
            spans = []
        else:
            # one gather per tensor into bucket order; each bucket is then a contiguous span
            qs, ks, vs = (x.view(n, h * d).index_select(0, order).view(-1, h, d)
                          for x in (q, k, v))
            if single:  # each token in exactly one bucket: part A lands directly in `out`
                out, la = q.new_empty(n, h, d), q.new_empty(n, h, dtype=ldt)
        for st, c, g in spans:
            sl = slice(st, st + c)
            idx = order[sl]
            qb, kb, vb = _heads_first(qs[sl]), _heads_first(ks[sl]), _heads_first(vs[sl])
            for s, e, lk, bias, row_any in plan.bucket_chunks(idx, g, q.dtype):
                o, lse = _FLASH_FWD(qb[:, :, s:e], kb[:, :, :lk], vb[:, :, :lk], 0.0,
                                    plan.causal and bias is None, attn_mask=bias, scale=scale)
                o, lse = o[0].transpose(0, 1), lse[0].transpose(0, 1)  # [c, H, D], [c, H]
                if single:
                    out.index_copy_(0, idx, o)
                    la.index_copy_(0, idx, lse)
                else:
                    toks.append(idx[s:e])
                    outs.append(o)
                    lses.append(_lse_to_rows(lse, row_any))
        lse_all = q.new_empty(n, h, dtype=ldt) if single else None
        for seg in plan.segments:
            rows = slice(seg.q0, seg.q0 + seg.nb * seg.bq)
            qw = q[rows].view(seg.nb, seg.bq, h, d).transpose(1, 2)
            kw = _windows(k, seg.k0, seg.nb, seg.bq, seg.lk).transpose(1, 2)
            vw = _windows(v, seg.k0, seg.nb, seg.bq, seg.lk).transpose(1, 2)
            ob, lb = _FLASH_FWD(qw, kw, vw, 0.0, False, attn_mask=seg.bias, scale=scale)
            ob = ob.transpose(1, 2).reshape(-1, h, d)
            lb = lb.transpose(1, 2).reshape(-1, h).masked_fill(~seg.row_any.unsqueeze(-1),
                                                               float("-inf"))
            if single:  # exact in-place merge: o = o_A + w_B (o_B - o_A), w_B = e^{lB - L}
                lr = torch.logaddexp(la[rows], lb)
                lse_all[rows] = lr
                out[rows].lerp_(ob, torch.exp(lb - lr).unsqueeze(-1).to(out.dtype))
            else:
                toks.append(torch.arange(seg.q0, rows.stop, device=q.device))
                outs.append(ob)
                lses.append(lb)
        if not single:
            out, lse_all = _merge_parts(n, torch.cat(toks), torch.cat(outs), torch.cat(lses))
        ctx.save_for_backward(q, k, v, out, lse_all)
        ctx.plan, ctx.scale = plan, scale
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out: Tensor):
        q, k, v, out, lse = ctx.saved_tensors
        plan, scale = ctx.plan, ctx.scale
        n, h, d = q.shape
        grad_out = grad_out.contiguous()
        order = plan.order
        qs, ks, vs, os, gs = (x.reshape(n, h * d).index_select(0, order).view(-1, h, d)
                              for x in (q, k, v, out, grad_out))
        ls = lse.index_select(0, order)
        dqs, dks, dvs = torch.zeros_like(qs), torch.zeros_like(ks), torch.zeros_like(vs)
        for st, c, g in plan.spans:
            sl = slice(st, st + c)
            qb, kb, vb, ob, gb = (_heads_first(x[sl]) for x in (qs, ks, vs, os, gs))
            lb = ls[sl].t().unsqueeze(0)
            for s, e, lk, bias, _ in plan.bucket_chunks(order[sl], g, q.dtype):
                gq, gk, gv = _FLASH_BWD(gb[:, :, s:e], qb[:, :, s:e], kb[:, :, :lk],
                                        vb[:, :, :lk], ob[:, :, s:e],
                                        lb[:, :, s:e].contiguous(), 0.0,
                                        plan.causal and bias is None, attn_mask=bias,
                                        scale=scale)
                dqs[sl][s:e] += gq[0].transpose(0, 1)
                dks[sl][:lk] += gk[0].transpose(0, 1)
                dvs[sl][:lk] += gv[0].transpose(0, 1)
        dq = torch.zeros_like(q).index_add_(0, order, dqs)
        dk = torch.zeros_like(k).index_add_(0, order, dks)
        dv = torch.zeros_like(v).index_add_(0, order, dvs)
        for seg in plan.segments:
            rows = slice(seg.q0, seg.q0 + seg.nb * seg.bq)

            def blk(x: Tensor) -> Tensor:
                return x[rows].view(seg.nb, seg.bq, h, d).transpose(1, 2)

            kw = _windows(k, seg.k0, seg.nb, seg.bq, seg.lk).transpose(1, 2)
            vw = _windows(v, seg.k0, seg.nb, seg.bq, seg.lk).transpose(1, 2)
            lb = lse[rows].view(seg.nb, seg.bq, h).transpose(1, 2).contiguous()
            gq, gk, gv = _FLASH_BWD(blk(grad_out), blk(q), kw, vw, blk(out), lb, 0.0, False,
                                    attn_mask=seg.bias, scale=scale)
            dq[rows] += gq.transpose(1, 2).reshape(-1, h, d)
            kidx = (seg.k0 + seg.bq * torch.arange(seg.nb, device=q.device).view(-1, 1)
                    + torch.arange(seg.lk, device=q.device).view(1, -1)).view(-1)
            dk.index_add_(0, kidx, gk.transpose(1, 2).reshape(-1, h, d))
            dv.index_add_(0, kidx, gv.transpose(1, 2).reshape(-1, h, d))
        return dq, dk, dv, None, None


def focus_blocks_attention(q: Tensor, k: Tensor, v: Tensor, groups: Tensor, window: int,
                           batch: Optional[Tensor] = None, causal: bool = True,
                           num_groups: Optional[int] = None,
                           fused: Optional[bool] = None) -> Tensor:
    r"""The paper's decomposition (same-group attention + cross-group window band, merged
    through log-sum-exps), exact for any top-:math:`k` and any batch of sequences.

    On CPU it runs the fused flash-attention kernels (which return the log-sum-exp) once per
    non-empty (sequence, group) bucket on group-sorted tokens, with ``is_causal`` and no mask
    for top-:math:`k = 1` (causal, with buckets of similar size: all buckets in one batched
    call padded to the largest, see :data:`PAD_RATIO`), and the band as one batched call over query blocks of
    :data:`BAND_BLOCK` tokens against their ``BAND_BLOCK + w`` keys (overlapping strided
    views, no copy) with an additive mask, plus two small calls for the first :math:`w` and
    the last few queries. For top-:math:`k = 1` the two parts are merged in place,
    :math:`\mathbf{o} = \mathbf{o}_A + e^{\ell_B - L} (\mathbf{o}_B - \mathbf{o}_A)` with
    :math:`L = \log(e^{\ell_A} + e^{\ell_B})`. On CUDA (with ``fused`` left to
    :obj:`None`) it runs :func:`~quest_geometric.nn.focus_flex.focus_flex_attention`, one
    block-sparse FlexAttention call on group-sorted tokens with the same semantics, when
    FlexAttention is available and :math:`K \le 62`; elsewhere (or with ``fused=False``) it
    runs :func:`focus_blocks_reference`.

    Args:
        q, k, v (torch.Tensor): ``[N, H, D]``.
        groups (torch.Tensor): ``[N, top_k]`` hard group ids.
        window (int): local window :math:`w`.
        batch (torch.Tensor, optional): sorted sequence ids (default: :obj:`None`).
        causal (bool): causal attention (default: :obj:`True`).
        num_groups (int, optional): :math:`K` (default: ``groups.max() + 1``).
        fused (bool, optional): force (``True``) or forbid (``False``) the fused kernels
            (default: :obj:`None`, fused when available on the device and dtype).

    Returns:
        torch.Tensor: ``[N, H, D]``.

    Raises:
        TypeError: for non-floating :obj:`q`, :obj:`k`, :obj:`v` or non-long :obj:`groups`.
        ValueError: for bad shapes, a negative :obj:`window`, a bad :obj:`batch` or group
            ids outside :math:`[0, K)` (which would otherwise fall into another sequence's
            buckets).
    """
    groups, kgroups = _check_hard_args(q, k, v, groups, window, batch, num_groups)
    n = q.size(0)
    can_fuse = (_FLASH_FWD is not None and _FLASH_BWD is not None and q.device.type == "cpu"
                and q.dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16))
    if (fused is None and n > 0 and q.device.type == "cuda" and FLEX_AVAILABLE
            and kgroups <= MAX_FLEX_GROUPS):
        return focus_flex_attention(q, k, v, groups, window, batch, causal, kgroups)
    if fused is None:
        fused = can_fuse
    elif fused and not can_fuse:
        raise ValueError("focus_blocks_attention: the fused path needs CPU tensors and the "
                         "aten flash kernels of this PyTorch build")
    if not fused or n == 0:
        return focus_blocks_reference(q, k, v, groups, window, batch, causal, kgroups)
    seq, nseq = _seq_layout(batch, n, q.device)
    plan = _BlocksPlan(groups.long(), seq, nseq, kgroups, window, causal, q.dtype)
    return _FocusBlocksFunction.apply(q.contiguous(), k.contiguous(), v.contiguous(), plan,
                                      1.0 / math.sqrt(q.size(-1)))


# --------------------------------------------------------------------------------------
# soft (training) and full attention
# --------------------------------------------------------------------------------------


def focus_soft_attention(q: Tensor, k: Tensor, v: Tensor, soft: Tensor, window: int,
                         batch: Optional[Tensor] = None, causal: bool = True,
                         gate: str = "additive", gate_scale: float = 10.0,
                         gate_bias: float = 0.5) -> Tensor:
    r"""Soft-gated dense attention over all pairs (training mode).

    With :math:`s_{ij} = \mathbf{q}_i^{\top}\mathbf{k}_j/\sqrt{D}`, :math:`\lambda` the gate
    scale and :math:`b` the gate bias, pairs outside the window
    (:math:`|i - j| > w`) are gated by the soft memberships:

    .. math::
        \text{multiplicative (paper, Eq. 2):}\quad
        \tilde s_{ij} = s_{ij} \cdot \sigma(\lambda\, \mathbf{g}_i^{\top}\mathbf{g}_j),
        \qquad
        \text{additive:}\quad
        \tilde s_{ij} = s_{ij} + \log \sigma\bigl(\lambda (\mathbf{g}_i^{\top}\mathbf{g}_j
        - b)\bigr).

    The additive gate is a log-barrier: as :math:`\lambda \to \infty` it tends to
    :math:`0` where :math:`\mathbf{g}_i^{\top}\mathbf{g}_j > b` and to :math:`-\infty`
    below, i.e. to the hard mask for one-hot memberships, whereas the multiplicative gate
    only rescales a logit (a zero logit keeps its weight, and a negative logit is even
    *raised*), so soft training and hard inference disagree.

    Args:
        q, k, v (torch.Tensor): ``[N, H, D]``.
        soft (torch.Tensor): soft memberships ``[N, K]``.
        window (int): local window :math:`w \ge 0`.
        batch (torch.Tensor, optional): sorted sequence ids (default: :obj:`None`).
        causal (bool): causal attention (default: :obj:`True`).
        gate (str): ``'additive'`` or ``'multiplicative'`` (default: :obj:`'additive'`).
        gate_scale (float): :math:`\lambda`, finite (default: :obj:`10.0`).
        gate_bias (float): :math:`b`, finite (default: :obj:`0.5`).

    Returns:
        torch.Tensor: ``[N, H, D]``.
    """
    _check_qkv(q, k, v)
    _check_window(window)
    if not isinstance(soft, Tensor) or not soft.is_floating_point() or soft.dim() != 2 \
            or soft.size(0) != q.size(0):
        raise ValueError(f"'soft' must be a floating-point [{q.size(0)}, K] tensor, got "
                         f"{getattr(soft, 'dtype', type(soft).__name__)} "
                         f"{list(getattr(soft, 'shape', []))}")
    check_batch(batch, q.size(0))
    gate_scale = check_real(gate_scale, "gate_scale")
    gate_bias = check_real(gate_bias, "gate_bias")
    if gate not in ("additive", "multiplicative"):
        raise ValueError(f"'gate' must be 'additive' or 'multiplicative', got {gate!r}")
    n, h, d = q.shape
    seq, nseq = _seq_layout(batch, n, q.device)
    qd, valid = to_dense_batch(q.reshape(n, h * d), seq, batch_size=nseq)
    kd = to_dense_batch(k.reshape(n, h * d), seq, batch_size=nseq)[0]
    vd = to_dense_batch(v.reshape(n, h * d), seq, batch_size=nseq)[0]
    sd = to_dense_batch(soft, seq, batch_size=nseq)[0]
    t = qd.size(1)
    qd, kd, vd = (x.view(nseq, t, h, d).transpose(1, 2) for x in (qd, kd, vd))
    s = (qd @ kd.transpose(-1, -2)) / math.sqrt(d)  # [B, H, T, T]
    i = torch.arange(t, device=q.device)
    dist = i.view(-1, 1) - i.view(1, -1)
    near = (dist.abs() <= window).unsqueeze(0)
    sim = (sd @ sd.transpose(1, 2)).to(s.dtype)  # [B, T, T]
    if gate == "multiplicative":
        factor = torch.where(near, torch.ones_like(sim), torch.sigmoid(gate_scale * sim))
        s = s * factor.unsqueeze(1)
    elif gate == "additive":
        add = torch.where(near, torch.zeros_like(sim),
                          F.logsigmoid(gate_scale * (sim - gate_bias)))
        s = s + add.unsqueeze(1)
    else:
        raise ValueError(f"'gate' must be 'additive' or 'multiplicative', got {gate!r}")
    allowed = valid.unsqueeze(1).expand(-1, t, -1)
    if causal:
        allowed = allowed & (dist >= 0)
    allowed = allowed | torch.eye(t, dtype=torch.bool, device=q.device)
    s = s.masked_fill(~allowed.unsqueeze(1), float("-inf"))
    out = torch.softmax(s, dim=-1) @ vd
    return out.transpose(1, 2)[valid]


def full_attention(q: Tensor, k: Tensor, v: Tensor, batch: Optional[Tensor] = None,
                   causal: bool = True) -> Tensor:
    r"""Plain (causal) multi-head attention per sequence, ``[N, H, D]`` in and out."""
    n, h, d = q.shape
    if batch is None:
        # 4-D input: 3-D input makes CPU SDPA take the O(N^2)-memory math path
        out = F.scaled_dot_product_attention(q.transpose(0, 1).unsqueeze(0),
                                             k.transpose(0, 1).unsqueeze(0),
                                             v.transpose(0, 1).unsqueeze(0), is_causal=causal)
        return out[0].transpose(0, 1)
    seq, nseq = _seq_layout(batch, n, q.device)
    qd, valid = to_dense_batch(q.reshape(n, h * d), seq, batch_size=nseq)
    kd = to_dense_batch(k.reshape(n, h * d), seq, batch_size=nseq)[0]
    vd = to_dense_batch(v.reshape(n, h * d), seq, batch_size=nseq)[0]
    t = qd.size(1)
    qd, kd, vd = (x.view(nseq, t, h, d).transpose(1, 2) for x in (qd, kd, vd))
    allowed = valid.unsqueeze(1).expand(-1, t, -1)
    if causal:
        allowed = allowed.tril()
    allowed = allowed | torch.eye(t, dtype=torch.bool, device=q.device)
    out = F.scaled_dot_product_attention(qd, kd, vd, attn_mask=allowed.unsqueeze(1))
    return out.transpose(1, 2)[valid]


# --------------------------------------------------------------------------------------
# the module
# --------------------------------------------------------------------------------------


class FocusAttention(nn.Module):
    r"""Focus multi-head self-attention with learned grouping, from
    `"Why Attend to Everything? Focus is the Key" <https://arxiv.org/abs/2604.03260>`_
    (Yao et al.).

    A :class:`~quest_geometric.nn.focus_router.FocusRouter` (shared by all heads) assigns every
    token a soft membership :math:`\mathbf{g}_i` and a hard group set :math:`G_i`. In
    inference (``eval()`` or ``hard=True``) token :math:`i` attends to

    .. math::
        \mathcal{N}(i) = \{\, j \text{ of the same sequence} : (j \le i \text{ if causal})
        \wedge (|i - j| \le w \vee G_i \cap G_j \ne \emptyset) \,\},

    computed by one of four back-ends with one semantics (they agree in outputs and
    gradients): ``'blocks'`` (the paper's decomposition, fast; on CUDA one FlexAttention
    call, see :func:`focus_blocks_attention`), ``'edges'`` (PyG message
    passing over :func:`~quest_geometric.nn.focus_edge_index.focus_edge_index`, general
    graphs), ``'dense'`` (masked SDPA, the small-:math:`N` oracle) and ``'flex'``
    (:func:`~quest_geometric.nn.focus_flex.focus_flex_attention` on any device; on CPU
    forward only and :math:`O(N^2)` memory, a check rather than a fast path). In training mode all
    pairs are computed densely with a soft gate (:func:`focus_soft_attention`). With
    ``gate=None`` or ``enabled = False`` the layer is plain full (causal) attention, in both
    modes, with the same projections.

    The options :attr:`top_k` (shared with the router), :attr:`window`, :attr:`backend`,
    :attr:`gate`, :attr:`gate_scale` and :attr:`gate_bias` may be assigned after
    construction: the value is validated and used from the next call on. :attr:`num_groups`
    is fixed (assigning it raises :class:`AttributeError`). Every back-end accepts
    :obj:`float16` and :obj:`bfloat16` (routing, log-sum-exps and merges run in
    :obj:`float32`).

    Args:
        embed_dim (int): model width :math:`C` (input, query/key/value and output).
        num_heads (int): heads :math:`H`; :math:`C` must be divisible by :math:`H`.
        num_groups (int): groups :math:`K` (default: :obj:`8`).
        group_dim (int): routing dimension :math:`d_g` (default: :obj:`16`).
        top_k (int): hard groups per token, :math:`1..K` (default: :obj:`1`).
        window (int): local window :math:`w \ge 0` (default: :obj:`128`).
        backend (str): ``'blocks'``, ``'edges'``, ``'dense'`` or ``'flex'``
            (default: :obj:`'blocks'`).
        gate (str, optional): ``'additive'``, ``'multiplicative'`` or :obj:`None`
            (no Focus: full attention) (default: :obj:`'additive'`).
        causal (bool): causal attention and prefix-causal routing (default: :obj:`True`).
        tau (float): Sinkhorn temperature, finite and positive (default: :obj:`0.1`).
        sinkhorn_iters (int): Sinkhorn iterations (default: :obj:`10`).
        gate_scale (float): :math:`\lambda` of the soft gate, finite (default: :obj:`10.0`).
        gate_bias (float): :math:`b` of the additive gate, finite (default: :obj:`0.5`).
        bias (bool): biases in the own projections (default: :obj:`True`).

    Shapes:
        - **input:** :obj:`x` :math:`(B, T, C)`, or :math:`(N, C)` with optional sorted
          :obj:`batch` :math:`(N)`
        - **output:** same shape as :obj:`x`; with ``return_router=True`` a tuple
          ``(out, RouterOutput)``
    """

    def __init__(self, embed_dim: int, num_heads: int, num_groups: int = 8,
                 group_dim: int = 16, top_k: int = 1, window: int = 128,
                 backend: str = "blocks", gate: Optional[str] = "additive",
                 causal: bool = True, tau: float = 0.1, sinkhorn_iters: int = 10,
                 gate_scale: float = 10.0, gate_bias: float = 0.5, bias: bool = True) -> None:
        super().__init__()
        if not isinstance(embed_dim, int) or isinstance(embed_dim, bool) or embed_dim < 1:
            raise ValueError(f"'embed_dim' must be a positive int, got {embed_dim!r}")
        if not isinstance(num_heads, int) or num_heads < 1 or embed_dim % num_heads:
            raise ValueError(f"'embed_dim' ({embed_dim}) must be divisible by 'num_heads' "
                             f"({num_heads!r})")
        if not isinstance(num_groups, int) or isinstance(num_groups, bool) or num_groups < 1:
            raise ValueError(f"'num_groups' must be a positive int, got {num_groups!r}")
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.router = FocusRouter(embed_dim, num_groups, group_dim, tau, sinkhorn_iters, top_k,
                                  causal)
        self.window = window
        self.backend = backend
        self.gate = gate
        self.causal = causal
        self.gate_scale = gate_scale
        self.gate_bias = gate_bias
        self.enabled = True
        self.q_proj: Optional[nn.Module] = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj: Optional[nn.Module] = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.v_proj: Optional[nn.Module] = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.out_proj: nn.Module = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.qkv: Optional[Callable[[Tensor], Tuple[Tensor, Tensor, Tensor]]] = None
        self.edge_attention = FocusEdgeAttention()

    # ---- validated options: assigning them takes effect at the next call or is refused ----

    @property
    def num_groups(self) -> int:
        r"""The number of groups :math:`K`, fixed at construction (the router's centroids)."""
        return self.router.num_groups

    @num_groups.setter
    def num_groups(self, value: int) -> None:
        raise AttributeError(f"'num_groups' of {self.__class__.__name__} is fixed at "
                             f"construction (the router has {self.router.num_groups} "
                             f"centroids); build a new layer for another number of groups")

    @property
    def top_k(self) -> int:
        r"""Hard groups per token, :math:`1..K`; the router's :obj:`top_k` (assigning either
        validates the value and sets both)."""
        return self.router.top_k

    @top_k.setter
    def top_k(self, value: int) -> None:
        self.router.top_k = value

    @property
    def window(self) -> int:
        r"""The local window :math:`w \ge 0`; assigning validates the value."""
        return self._window

    @window.setter
    def window(self, value: int) -> None:
        _check_window(value)
        self._window = value

    @property
    def backend(self) -> str:
        r"""The hard back-end, one of ``'blocks'``, ``'edges'``, ``'dense'``, ``'flex'``;
        assigning validates the value."""
        return self._backend

    @backend.setter
    def backend(self, value: str) -> None:
        if not isinstance(value, str) or value not in BACKENDS:
            raise ValueError(f"'backend' must be one of {BACKENDS}, got {value!r}")
        self._backend = value

    @property
    def gate(self) -> Optional[str]:
        r"""The soft gate, ``'additive'``, ``'multiplicative'`` or :obj:`None` (full
        attention); assigning validates the value."""
        return self._gate

    @gate.setter
    def gate(self, value: Optional[str]) -> None:
        if value is not None and (not isinstance(value, str) or value not in GATES):
            raise ValueError(f"'gate' must be one of {GATES}, got {value!r}")
        self._gate = value

    @property
    def gate_scale(self) -> float:
        r"""The gate scale :math:`\lambda`, finite; assigning validates the value."""
        return self._gate_scale

    @gate_scale.setter
    def gate_scale(self, value: float) -> None:
        self._gate_scale = check_real(value, "gate_scale")

    @property
    def gate_bias(self) -> float:
        r"""The additive gate's bias :math:`b`, finite; assigning validates the value."""
        return self._gate_bias

    @gate_bias.setter
    def gate_bias(self, value: float) -> None:
        self._gate_bias = check_real(value, "gate_bias")

    def reset_parameters(self) -> None:
        r"""Reset the router and the own projections."""
        self.router.reset_parameters()
        for m in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):
            if hasattr(m, "reset_parameters"):
                m.reset_parameters()

    @classmethod
    def from_projections(cls, q_proj: Optional[Callable[[Tensor], Tensor]] = None,
                         k_proj: Optional[Callable[[Tensor], Tensor]] = None,
                         v_proj: Optional[Callable[[Tensor], Tensor]] = None,
                         out_proj: Optional[Callable[[Tensor], Tensor]] = None, *,
                         num_heads: int, embed_dim: Optional[int] = None,
                         qkv: Optional[Callable[[Tensor], Tuple[Tensor, Tensor, Tensor]]]
                         = None, **kwargs) -> "FocusAttention":
        r"""Build Focus attention around *existing* projections (e.g. of a frozen model).

        The given modules are used as they are (not copied); their parameters stay
        registered, so freezing them stays the caller's choice.

        Args:
            q_proj, k_proj, v_proj (callable, optional): ``x -> [.., C]`` each; or pass
                :obj:`qkv` instead (default: :obj:`None`).
            out_proj (callable, optional): output projection (default: :obj:`None`,
                identity).
            num_heads (int): number of heads.
            embed_dim (int, optional): :math:`C` (default: inferred from
                ``q_proj.in_features`` / ``out_proj.in_features``).
            qkv (callable, optional): fused ``x -> (q, k, v)`` (default: :obj:`None`).
            **kwargs: the other :class:`FocusAttention` arguments.
        """
        if qkv is None and (q_proj is None or k_proj is None or v_proj is None):
            raise ValueError("from_projections: give q_proj, k_proj and v_proj, or qkv")
        if embed_dim is None:
            for m in (q_proj, out_proj):
                if isinstance(m, nn.Linear):
                    embed_dim = m.in_features
                    break
        if embed_dim is None:
            raise ValueError("from_projections: cannot infer 'embed_dim'; pass it")
        self = cls(embed_dim, num_heads, **kwargs)
        if qkv is not None:
            self.q_proj = self.k_proj = self.v_proj = None
            self.qkv = qkv
        else:
            self.q_proj, self.k_proj, self.v_proj = q_proj, k_proj, v_proj
        self.out_proj = out_proj if out_proj is not None else nn.Identity()
        return self

    def _project(self, x: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        if self.qkv is not None:
            q, k, v = self.qkv(x)
        else:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        n = x.size(0)
        for name, t in (("q", q), ("k", k), ("v", v)):
            if t.shape != (n, self.embed_dim):
                raise ValueError(f"FocusAttention: projected {name} must have shape "
                                 f"[{n}, {self.embed_dim}], got {list(t.shape)}")
        h, d = self.num_heads, self.head_dim
        return q.view(n, h, d), k.view(n, h, d), v.view(n, h, d)

    def forward(self, x: Tensor, batch: Optional[Tensor] = None, return_router: bool = False,
                hard: Optional[bool] = None
                ) -> Union[Tensor, Tuple[Tensor, Optional[RouterOutput]]]:
        r"""Apply Focus attention.

        Args:
            x (torch.Tensor): ``[B, T, C]`` or ``[N, C]``.
            batch (torch.Tensor, optional): sorted sequence/graph id per token, with
                ``[N, C]`` input only (default: :obj:`None`).
            return_router (bool): also return the :class:`RouterOutput` (default:
                :obj:`False`; :obj:`None` in its place when Focus is disabled).
            hard (bool, optional): hard top-k sets (inference) or soft gates (training)
                (default: :obj:`None`, hard in ``eval()`` mode).

        Raises:
            TypeError: if :obj:`x` is not a floating-point tensor.
            ValueError: for a wrong shape, no token, or a bad :obj:`batch`.
        """
        check_features(x, "x")
        if x.size(-1) != self.embed_dim:
            raise ValueError(f"'x' must have {self.embed_dim} channels, got {x.size(-1)}")
        shape = x.shape
        if x.dim() == 3:
            if batch is not None:
                raise ValueError("'batch' is only accepted with [N, C] input")
            bsz, t = shape[:2]
            flat = x.reshape(bsz * t, -1)
            if bsz > 1:
                batch = torch.arange(bsz, device=x.device).repeat_interleave(t)
        else:
            flat = x
            check_batch(batch, x.size(0))
        q, k, v = self._project(flat)
        router_out: Optional[RouterOutput] = None
        if self.gate is None or not self.enabled:
            if x.dim() == 3:
                bsz, t = shape[:2]
                qd, kd, vd = (a.view(bsz, t, self.num_heads, self.head_dim).transpose(1, 2)
                              for a in (q, k, v))
                o = F.scaled_dot_product_attention(qd, kd, vd, is_causal=self.causal)
                o = o.transpose(1, 2).reshape(bsz * t, self.num_heads, self.head_dim)
            else:
                o = full_attention(q, k, v, batch, self.causal)
        else:
            o, router_out = self.attend(flat, q, k, v, batch, hard)
        out = self.out_proj(o.reshape(flat.size(0), self.embed_dim)).reshape(*shape[:-1], -1)
        if return_router:
            if router_out is not None:
                router_out = RouterOutput(*(a.reshape(*shape[:-1], -1) for a in router_out))
            return out, router_out
        return out

    def attend(self, x: Tensor, q: Tensor, k: Tensor, v: Tensor,
               batch: Optional[Tensor] = None, hard: Optional[bool] = None
               ) -> Tuple[Tensor, RouterOutput]:
        r"""Route :obj:`x` and attend with given per-head queries, keys and values (the
        Focus part of :meth:`forward`, without the projections; used by
        :func:`~quest_geometric.nn.compose_focus.compose_focus`, whose adapters supply
        :obj:`q`, :obj:`k`, :obj:`v` from a pretrained module).

        Args:
            x (torch.Tensor): hidden states the router sees, ``[N, C]``.
            q, k, v (torch.Tensor): ``[N, H, D]`` (keys and values already expanded to the
                query heads for grouped-query attention), queries scaled so that
                :math:`1/\sqrt{D}` gives the intended softmax scale.
            batch (torch.Tensor, optional): sorted sequence id per token (default:
                :obj:`None`, one sequence).
            hard (bool, optional): hard top-k sets or soft gates (default: :obj:`None`,
                hard in ``eval()`` mode).

        Returns:
            ``(o, router_out)``: the attention output ``[N, H, D]`` and the
            :class:`RouterOutput` of :obj:`x`.
        """
        router_out = self.router(x, batch)
        hard = (not self.training) if hard is None else hard
        if hard:
            o = self._hard(q, k, v, router_out.groups, batch)
        else:
            o = focus_soft_attention(q, k, v, router_out.soft, self.window, batch,
                                     self.causal, self.gate, self.gate_scale, self.gate_bias)
        return o, router_out

    def _hard(self, q: Tensor, k: Tensor, v: Tensor, groups: Tensor,
              batch: Optional[Tensor]) -> Tensor:
        if self.backend == "dense":
            return focus_dense_attention(q, k, v, groups, self.window, batch, self.causal,
                                         self.num_groups)
        if self.backend == "edges":
            ei = focus_edge_index(groups, self.window, batch, self.causal)
            return self.edge_attention(q, k, v, ei)
        if self.backend == "flex":
            return focus_flex_attention(q, k, v, groups, self.window, batch, self.causal,
                                        self.num_groups)
        return focus_blocks_attention(q, k, v, groups, self.window, batch, self.causal,
                                      self.num_groups)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.embed_dim}, num_heads={self.num_heads}, "
                f"num_groups={self.num_groups}, top_k={self.top_k}, window={self.window}, "
                f"backend={self.backend!r}, gate={self.gate!r})")


__all__ = ["FocusAttention", "FocusEdgeAttention", "focus_blocks_attention",
           "focus_blocks_reference", "focus_dense_attention", "focus_soft_attention",
           "full_attention"]
