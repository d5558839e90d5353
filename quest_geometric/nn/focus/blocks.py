r"""The paper's decomposition of Focus attention: same-group attention per (sequence, group)
bucket plus the cross-group window band, merged exactly through their log-sum-exps:
:func:`focus_blocks_reference` (plain PyTorch) and :func:`focus_blocks_attention` (fused
CPU flash kernels of :mod:`quest_geometric.nn.focus._aten`)."""
from __future__ import annotations

import itertools
import math
from typing import List, NamedTuple, Optional, Tuple, Union

import torch
from torch import Tensor

from quest_geometric.nn.focus import _aten
from quest_geometric._utils.checks import check_hard_args, check_num_sinks
from quest_geometric.nn.focus._layout import HALF_DTYPES, seq_layout
from quest_geometric.nn.focus.config import BlocksConfig, current_blocks_config
from quest_geometric.nn.focus.edge_index import _seq_info, sink_pairs, smallest_shared_group
from quest_geometric.nn.focus.group_sets import codable, group_set_codes
from quest_geometric.nn.focus.window_chunks import window_chunks_attention

__all__ = ["focus_blocks_attention", "focus_blocks_reference"]


def _masked_softmax_attention(s: Tensor, allowed: Tensor, v: Tensor) -> Tuple[Tensor, Tensor]:
    r"""Attention over the allowed keys of :obj:`s` ``[..., Lq, Lk]``: output and log-sum-exp,
    ``lse = -inf`` for rows with no allowed key."""
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
    wdt = torch.float32 if lse.dtype in HALF_DTYPES else lse.dtype  # half: merge in float32
    lse = lse.to(wdt)
    m = torch.full((n, lse.size(1)), float("-inf"), dtype=wdt, device=lse.device)
    m = m.scatter_reduce(0, tok.unsqueeze(1).expand_as(lse), lse.detach(), "amax")
    w = torch.exp(lse - m[tok])
    den = torch.zeros_like(m).index_add(0, tok, w)
    mdt = torch.promote_types(wdt, o.dtype)
    num = torch.zeros(n, o.size(1), o.size(2), dtype=mdt, device=o.device).index_add(
        0, tok, w.unsqueeze(-1).to(mdt) * o.to(mdt))
    return (num / den.unsqueeze(-1).to(mdt)).to(o.dtype), m + den.log()


#: A part's rows for :func:`_merge_part_list`: a token index tensor, or a slice of
#: consecutive tokens (a band segment), accumulated without an index.
Rows = Union[Tensor, slice]


def _merge_part_list(n: int, parts: List[Tuple[Rows, Tensor, Tensor]]
                     ) -> Tuple[Tensor, Tensor]:
    r""":func:`_merge_parts` over parts ``(rows, o, lse)``, accumulated in place without
    concatenating them (no ``[R, H, D]`` tensor over all parts at once)."""
    lse0, o0 = parts[0][2], parts[0][1]
    h, d = o0.size(1), o0.size(2)
    wdt = torch.float32 if lse0.dtype in HALF_DTYPES else lse0.dtype
    mdt = torch.promote_types(wdt, o0.dtype)
    dev = o0.device
    m = torch.full((n, h), float("-inf"), dtype=wdt, device=dev)
    for rows, _, lse in parts:
        lse = lse.detach().to(wdt)
        if isinstance(rows, slice):
            torch.maximum(m[rows], lse, out=m[rows])
        else:
            m.scatter_reduce_(0, rows.unsqueeze(1).expand_as(lse), lse, "amax")
    den = torch.zeros_like(m)
    num = torch.zeros(n, h, d, dtype=mdt, device=dev)
    for rows, o, lse in parts:
        w = torch.exp(lse.to(wdt) - m[rows])
        wo = w.unsqueeze(-1).to(mdt) * o.to(mdt)
        if isinstance(rows, slice):
            den[rows] += w
            num[rows] += wo
        else:
            den.index_add_(0, rows, w)
            num.index_add_(0, rows, wo)
    num /= den.unsqueeze(-1).to(mdt)
    return num.to(o0.dtype), m + den.log()


def _sink_part(groups: Tensor, batch: Optional[Tensor], window: int, num_sinks: int,
               causal: bool, num_groups: int) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    r"""Part C, the sink pairs that neither the band nor a group holds
    (:func:`~quest_geometric.nn.focus.edge_index.sink_pairs`), sorted by query:
    ``(rows, tgt, src, is_sink)``, ``is_sink`` ``[N]`` marking the first ``num_sinks`` tokens
    of each sequence."""
    n = groups.size(0)
    seq, start, end = _seq_info(batch, n, groups.device)
    tgt, src = sink_pairs(groups, window, num_sinks, seq, start, end, causal, num_groups)
    order = torch.argsort(tgt * n + src)
    tgt, src = tgt[order], src[order]
    is_sink = torch.arange(n, device=groups.device) - start < num_sinks
    return torch.unique_consecutive(tgt), tgt, src, is_sink


class _PairPart(NamedTuple):
    r"""Part C as explicit pairs ``(tgt, src)`` of the queries ``rows``."""
    rows: Tensor
    tgt: Tensor
    src: Tensor

    def forward(self, q: Tensor, k: Tensor, v: Tensor, scale: float) -> Tuple[Tensor, Tensor]:
        r"""Output ``[R, H, D]`` and log-sum-exp ``[R, H]`` of the pairs, differentiable."""
        tgt, src, rows = self.tgt, self.src, self.rows
        n, h, _ = q.shape
        wdt = torch.float32 if q.dtype in HALF_DTYPES else q.dtype
        s = (q[tgt].to(wdt) * k[src].to(wdt)).sum(-1) * scale  # [E, H]
        m = torch.full((n, h), float("-inf"), dtype=wdt, device=q.device)
        m = m.scatter_reduce(0, tgt.unsqueeze(1).expand_as(s), s.detach(), "amax")
        p = torch.exp(s - m[tgt])
        den = torch.zeros(n, h, dtype=wdt, device=q.device).index_add(0, tgt, p)
        o = torch.zeros(n, h, v.size(2), dtype=wdt, device=q.device).index_add(
            0, tgt, p.unsqueeze(-1) * v[src].to(wdt))
        den, m, o = den[rows], m[rows], o[rows]
        return (o / den.unsqueeze(-1)).to(q.dtype), m + den.log()

    def backward(self, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
                 grad: Tensor, scale: float, dq: Tensor, dk: Tensor, dv: Tensor) -> None:
        r"""Adds the pairs' gradient given the *merged* :obj:`out` and :obj:`lse`:
        :math:`p_{ij} = e^{s_{ij} - L_i}`, :math:`\mathrm{d}v_j \mathrel{+}= p_{ij}
        \mathbf{g}_i`, :math:`\mathrm{d}s_{ij} = p_{ij}(\mathbf{g}_i^{\top}\mathbf{v}_j -
        \mathbf{g}_i^{\top}\mathbf{o}_i)`."""
        tgt, src = self.tgt, self.src
        wdt = torch.float32 if q.dtype in HALF_DTYPES else q.dtype
        qt, ks, vs = q[tgt].to(wdt), k[src].to(wdt), v[src].to(wdt)
        gt = grad[tgt].to(wdt)
        p = torch.exp((qt * ks).sum(-1) * scale - lse[tgt].to(wdt))  # [E, H]
        delta = (grad.to(wdt) * out.to(wdt)).sum(-1)  # [N, H]
        ds = p * ((gt * vs).sum(-1) - delta[tgt]) * scale
        dq += torch.zeros_like(q, dtype=wdt).index_add_(0, tgt, ds.unsqueeze(-1) * ks).to(q.dtype)
        dk += torch.zeros_like(k, dtype=wdt).index_add_(0, src, ds.unsqueeze(-1) * qt).to(k.dtype)
        dv += torch.zeros_like(v, dtype=wdt).index_add_(0, src, p.unsqueeze(-1) * gt).to(v.dtype)


class _DensePart(NamedTuple):
    r"""Part C as dense attention of the queries ``rows`` over the keys ``keys`` (:obj:`None`:
    every token) with the additive mask ``bias`` ``[R, C]``; every row keeps a key."""
    rows: Tensor
    keys: Optional[Tensor]
    bias: Tensor

    def scores(self, q: Tensor, k: Tensor, v: Tensor, scale: float
               ) -> Tuple[Tensor, Tensor, Tensor, Tensor, torch.dtype]:
        r"""``(qr, kc, vc, scores, dtype)``: the scores :math:`s\,Q_R K_C^{\top} + B`
        (float32 for half precision)."""
        wdt = torch.float32 if q.dtype in HALF_DTYPES else q.dtype
        qr = q.index_select(0, self.rows).to(wdt).transpose(0, 1)
        kc, vc = ((x if self.keys is None else x.index_select(0, self.keys)).to(wdt)
                  .transpose(0, 1) for x in (k, v))
        sc = torch.baddbmm(self.bias.to(wdt).unsqueeze(0), qr, kc.transpose(1, 2), alpha=scale)
        return qr, kc, vc, sc, wdt

    def forward(self, q: Tensor, k: Tensor, v: Tensor, scale: float) -> Tuple[Tensor, Tensor]:
        r""":math:`\mathrm{softmax}(s\,Q_R K_C^{\top} + B) V_C` ``[R, H, D]`` and its
        log-sum-exp ``[R, H]``."""
        _, _, vc, sc, _ = self.scores(q, k, v, scale)
        lse = torch.logsumexp(sc, -1)  # [H, R]: finite, every row keeps a key
        o = torch.exp(sc - lse.unsqueeze(-1)) @ vc
        return o.transpose(0, 1).to(q.dtype), lse.t()

    def backward(self, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
                 grad: Tensor, scale: float, dq: Tensor, dk: Tensor, dv: Tensor) -> None:
        r"""Adds the gradient given the *merged* output and log-sum-exp:
        :math:`P = e^{s Q K^{\top} + B - L}`, :math:`dV \mathrel{+}= P^{\top} G`,
        :math:`dS = P \circ (G V^{\top} - \delta)\,s` with
        :math:`\delta_i = \mathbf{g}_i^{\top} \mathbf{o}_i`, :math:`dQ \mathrel{+}= dS\,K`,
        :math:`dK \mathrel{+}= dS^{\top} Q`."""
        rows = self.rows
        qr, kc, vc, sc, wdt = self.scores(q, k, v, scale)
        gr, orr = (x.index_select(0, rows).to(wdt).transpose(0, 1) for x in (grad, out))
        lr = lse.index_select(0, rows).to(wdt).t().unsqueeze(-1)  # [H, R, 1]
        p = torch.exp(sc - lr)  # [H, R, C]
        delta = (gr * orr).sum(-1, keepdim=True)  # [H, R, 1]
        ds = p * (gr @ vc.transpose(1, 2) - delta) * scale
        dq.index_add_(0, rows, (ds @ kc).transpose(0, 1).to(dq.dtype))
        gk = (ds.transpose(1, 2) @ qr).transpose(0, 1)
        gv = (p.transpose(1, 2) @ gr).transpose(0, 1)
        if self.keys is None:
            dk += gk.to(dk.dtype)
            dv += gv.to(dv.dtype)
        else:
            dk.index_add_(0, self.keys, gk.to(dk.dtype))
            dv.index_add_(0, self.keys, gv.to(dv.dtype))


def _dense_sink_parts(tgt: Tensor, src: Tensor, is_sink: Tensor, n: int, dtype: torch.dtype
                      ) -> List[_DensePart]:
    r"""The sink pairs as at most two disjoint dense parts: every query against the sink keys,
    and, non-causal, the sink queries against the other keys."""
    dev = tgt.device
    parts = []
    key_sink = is_sink[src]
    for sel, keys in ((key_sink, torch.nonzero(is_sink).view(-1)), (~key_sink, None)):
        t, sr = tgt[sel], src[sel]
        if t.numel() == 0:
            continue
        rows = torch.unique(t)
        rpos = torch.empty(n, dtype=torch.long, device=dev)
        rpos[rows] = torch.arange(rows.numel(), device=dev)
        if keys is None:
            col, width = sr, n
        else:
            kpos = torch.empty(n, dtype=torch.long, device=dev)
            kpos[keys] = torch.arange(keys.numel(), device=dev)
            col, width = kpos[sr], keys.numel()
        bias = torch.full((rows.numel(), width), float("-inf"), dtype=dtype, device=dev)
        bias[rpos[t], col] = 0.0
        parts.append(_DensePart(rows, keys, bias))
    return parts


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
        self.starts = [0, *itertools.accumulate(self.counts[:-1])]

    def __iter__(self):
        for s, c, g in zip(self.starts, self.counts, self.group):
            yield self.members[s:s + c], g


def focus_blocks_reference(q: Tensor, k: Tensor, v: Tensor, groups: Tensor, window: int,
                           batch: Optional[Tensor] = None, causal: bool = True,
                           num_groups: Optional[int] = None, num_sinks: int = 0) -> Tensor:
    r"""Plain-PyTorch reference of the decomposition (autograd, no fused kernel): part A,
    attention within each (sequence, group) bucket, a pair sharing several groups only in its
    *smallest* shared group's; part B, the window band over pairs with *disjoint* group sets;
    part C, the other sink pairs. They partition the pattern, so merging their log-sum-exps
    (:func:`_merge_parts`) is exact. Arguments as :func:`focus_blocks_attention`."""
    groups, kgroups = check_hard_args(q, k, v, groups, window, batch, num_groups,
                                      where="focus_blocks_reference")
    check_num_sinks(num_sinks, where="focus_blocks_reference")
    if q.dtype in HALF_DTYPES:
        return focus_blocks_reference(q.float(), k.float(), v.float(), groups, window, batch,
                                      causal, kgroups, num_sinks).to(q.dtype)
    n, h, d = q.shape
    if n == 0:
        return q.new_empty(0, h, d)
    scale = 1.0 / math.sqrt(d)
    seq, _ = seq_layout(batch, n, q.device)
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
    if num_sinks > 0:
        rows, tgt, src, _ = _sink_part(groups, batch, window, num_sinks, causal, kgroups)
        if rows.numel():
            o, lse = _PairPart(rows, tgt, src).forward(q, k, v, scale)
            toks.append(rows)
            outs.append(o)
            lses.append(lse)
    out, _ = _merge_parts(n, torch.cat(toks), torch.cat(outs), torch.cat(lses))
    return out


def _windows(x: Tensor, start: int, nb: int, step: int, length: int) -> Tensor:
    r"""Overlapping row windows ``x[start + b * step :][:length]``, ``b < nb``, of a contiguous
    ``[N, ...]`` tensor as one ``[nb, length, ...]`` view."""
    return x[start:].as_strided((nb, length, *x.shape[1:]), (step * x.stride(0), *x.stride()))


class _BandSegment(NamedTuple):
    r"""``nb`` blocks of ``bq`` queries from ``q0`` and ``lk`` keys from ``k0`` (step ``bq``),
    with the additive mask and whether each query row keeps any key."""
    q0: int
    k0: int
    nb: int
    bq: int
    lk: int
    bias: Tensor
    row_any: Tensor


class _BandCall(NamedTuple):
    r"""One unmasked flash call of the split band: chunk ``c < nb`` the queries
    ``[q0 + c lq, ...)`` against the keys ``[k0 + c lk, ...)``, all pairs, the causal triangle,
    or with ``flip`` the reversed one (keys ``b >= a``)."""
    q0: int
    k0: int
    nb: int
    lq: int
    lk: int
    causal: bool
    flip: bool


def _split_band_calls(n: int, window: int) -> List[_BandCall]:
    r"""The causal band :math:`0 \le i - j \le w` of one sequence as disjoint unmasked calls over
    chunks of :math:`B = w` tokens: query :math:`i = cB + a` reads its own chunk's causal
    triangle and the reversed triangle :math:`b \ge a` of the chunk before
    (:math:`i - j = B + a - b \le w`); a last partial chunk of :math:`r` queries also reads
    that chunk's other :math:`B - r` keys whole. No pair is masked; :math:`w \ge 1`."""
    if window < 1:
        raise ValueError(f"_split_band_calls: window must be at least 1, got {window}")
    b = window
    nf, r = divmod(n, b)
    calls = []
    if nf:
        calls.append(_BandCall(0, 0, nf, b, b, True, False))
    if nf > 1:
        calls.append(_BandCall(b, 0, nf - 1, b, b, True, True))
    if r:
        t0 = nf * b
        calls.append(_BandCall(t0, t0, 1, r, r, True, False))
        if nf:
            calls.append(_BandCall(t0, t0 - b, 1, r, r, True, True))
            if b > r:
                calls.append(_BandCall(t0, t0 - b + r, 1, r, b - r, False, False))
    return calls


def _band_chunks(x: Tensor, start: int, nb: int, step: int, length: int,
                 flip: bool = False) -> Tensor:
    r""":func:`_windows` in the kernels' layout ``[nb, H, length, ...]`` (reversed with ``flip``).
    """
    c = _windows(x, start, nb, step, length)
    return (c.flip(1) if flip else c).transpose(1, 2)


def _from_chunks(x: Tensor, flip: bool) -> Tensor:
    """``[nb, H, L, ...]`` kernel output back to rows ``[nb L, H, ...]`` (unreversed)."""
    if flip:
        x = x.flip(2)
    return x.transpose(1, 2).reshape(-1, *x.shape[1:2], *x.shape[3:])


def _band_call_forward(q: Tensor, k: Tensor, v: Tensor, call: _BandCall, scale: float
                       ) -> Tuple[slice, Tensor, Tensor]:
    r"""``(rows, o, lse)`` of one :class:`_BandCall`."""
    qc = _band_chunks(q, call.q0, call.nb, call.lq, call.lq, call.flip)
    kc, vc = (_band_chunks(x, call.k0, call.nb, call.lk, call.lk, call.flip) for x in (k, v))
    o, lse = _aten.flash_forward(qc, kc, vc, call.causal, scale=scale)
    return (slice(call.q0, call.q0 + call.nb * call.lq), _from_chunks(o, call.flip),
            _from_chunks(lse, call.flip))


def _band_call_backward(q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
                        grad: Tensor, call: _BandCall, scale: float, dq: Tensor, dk: Tensor,
                        dv: Tensor) -> None:
    r"""Adds one :class:`_BandCall`'s gradient, given the *merged* output and log-sum-exp."""
    qc, gc, oc, lc = (_band_chunks(x, call.q0, call.nb, call.lq, call.lq, call.flip)
                      for x in (q, grad, out, lse))
    kc, vc = (_band_chunks(x, call.k0, call.nb, call.lk, call.lk, call.flip) for x in (k, v))
    gq, gk, gv = _aten.flash_backward(gc, qc, kc, vc, oc, lc.contiguous(), call.causal,
                                      scale=scale)
    dq[call.q0:call.q0 + call.nb * call.lq] += _from_chunks(gq, call.flip)
    keys = slice(call.k0, call.k0 + call.nb * call.lk)
    dk[keys] += _from_chunks(gk, call.flip)
    dv[keys] += _from_chunks(gv, call.flip)


class _BlocksPlan:
    r"""The fused path's routing plan (no N x N object): the bucket order and spans, and the band
    as a head, a body of equal query blocks read as strided views and a tail, with masks."""

    def __init__(self, groups: Tensor, seq: Tensor, nseq: int, num_groups: int, window: int,
                 causal: bool, dtype: torch.dtype, config: Optional[BlocksConfig] = None
                 ) -> None:
        n, kk = groups.shape
        self.config = current_blocks_config() if config is None else config
        self.groups, self.seq = groups.contiguous(), seq.contiguous()
        self.n, self.kk, self.nseq, self.num_groups = n, kk, nseq, num_groups
        self.causal, self.window, self.dtype = causal, window, dtype
        self.right = 0 if causal else window
        #: part C (:class:`_PairPart` or :class:`_DensePart` s), set by the caller
        self.sink: List[Union[_PairPart, _DensePart]] = []
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
            pad = self.config.pad_ratio
            if causal and nbk > 1 and nbk * cmax * cmax <= pad * sum(c * c for c in cs):
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
            #: top_k > 1: each token's group-set code (None when K has no code)
            self.bits = group_set_codes(self.groups) if codable(num_groups) else None
            buckets = _Buckets(self.groups, self.seq, num_groups)
            self.order = buckets.members
            self.spans = list(zip(buckets.starts, buckets.counts, buckets.group))
        # band: head [0, w), body [w, w + nb * bq), tail; together exactly [0, n); or, with
        # no groups to exclude (causal, one sequence, a wide window), split unmasked calls
        self.segments: List[_BandSegment] = []
        self.band_calls: List[_BandCall] = []
        if kk == 0 and causal and nseq == 1 and self.config.band_splits(window):
            self.band_calls = _split_band_calls(n, window)
            return
        if kk == 1:
            self.band_any = self._band_any_single()
        bq, h0 = self.config.band_block_size(window), min(window, n)
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
        r"""top_k = 1: whether each query keeps any band key, in O(N): the nearest token of another
        (sequence, group) run is the nearest candidate key."""
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
        elif self.bits is not None:  # the sets meet iff their bit sets share a bit
            bk = _windows(self.bits, k0, nb, bq, lk)  # [nb, lk]
            same = (self.bits[q0:q0 + nb * bq].view(nb, bq, 1) & bk.unsqueeze(1)) != 0
        else:
            same = (gq.view(nb, bq, 1, kk, 1) == gk.view(nb, 1, lk, 1, kk)).flatten(-2).any(-1)
        if self.nseq > 1:  # keys of another sequence count as excluded too
            sq = self.seq[q0:q0 + nb * bq].view(nb, bq, 1)
            same |= sq != _windows(self.seq, k0, nb, bq, lk).unsqueeze(1)
        ninf = torch.tensor(float("-inf"), dtype=self.dtype, device=dev)
        static = torch.where(outside, ninf, torch.tensor(0.0, dtype=self.dtype, device=dev))
        bias = torch.where(same, ninf, static)  # [nb, bq, lk] in one pass over the blocks
        if kk == 1:
            row_any = self.band_any[q0:q0 + nb * bq]
        else:
            row_any = ~(same | outside).all(-1).view(-1)
        self.segments.append(_BandSegment(q0, k0, nb, bq, lk, bias.unsqueeze(1), row_any))

    def bucket_chunks(self, idx: Tensor, g: int, dtype: torch.dtype):
        r"""Query chunks ``(s, e, lk, bias, row_any)`` of one bucket; for top_k > 1 the mask keeps
        only pairs whose smallest shared group is ``g``."""
        c = idx.numel()
        if self.kk == 1:
            yield 0, c, c, None, None
            return
        step = max(1, self.config.mask_budget // max(c, 1))
        if self.causal:  # chunk i reads keys [0, e): the masked kernel skips no block itself
            step = min(step, self.config.bucket_query_block)
        dev = idx.device
        if self.bits is not None:  # the members' groups below g, as bits of the fewest bytes
            low = (self.bits[idx] & ((1 << g) - 1)).to(_bits_dtype(self.num_groups))
        else:
            gi = self.groups[idx]
        zero = torch.zeros((), dtype=dtype, device=dev)
        ninf = torch.full((), float("-inf"), dtype=dtype, device=dev)
        for s in range(0, c, step):
            e = min(c, s + step)
            lk = e if self.causal else c
            if self.bits is not None:
                # g is the smallest shared group iff the pair shares no group below g
                allowed = (low[s:e].unsqueeze(1) & low[:lk].unsqueeze(0)) == 0
            else:
                allowed = smallest_shared_group(
                    gi[s:e].repeat_interleave(lk, 0), gi[:lk].repeat(e - s, 1),
                    self.num_groups).view(e - s, lk) == g
            if self.causal:
                allowed &= (torch.arange(lk, device=dev).view(1, -1)
                            <= torch.arange(s, e, device=dev).view(-1, 1))
            bias = torch.where(allowed, zero, ninf)
            yield s, e, lk, bias.view(1, 1, e - s, lk), allowed.any(-1)


def _bits_dtype(num_groups: int) -> torch.dtype:
    r"""The narrowest integer type holding bits ``0 .. num_groups - 2`` below the sign bit."""
    for most, dtype in ((9, torch.uint8), (16, torch.int16), (32, torch.int32)):
        if num_groups <= most:
            return dtype
    return torch.long


def _gather_batches(spans: List[Tuple[int, int, int]], row: int, budget: int
                    ) -> List[Tuple[int, int, list]]:
    r"""Consecutive bucket spans in batches ``(b0, b1, spans)`` of at most :obj:`budget`
    elements (:obj:`row` a token), each gathered at once: one gather of all ``top_k * N`` rows
    would pass the allocator's ``mmap`` threshold and fault its pages in at every call."""
    out: List[Tuple[int, int, list]] = []
    for st, c, g in spans:
        if out and (st + c - out[-1][0]) * row <= budget:
            b0, _, batch = out[-1]
            batch.append((st, c, g))
            out[-1] = (b0, st + c, batch)
        else:
            out.append((st, st + c, [(st, c, g)]))
    return out


def _gather_rows(x: Tensor, idx: Tensor) -> Tensor:
    """Rows :obj:`idx` of ``x`` ``[N, ...]`` as a new contiguous tensor."""
    return x.reshape(x.size(0), -1).index_select(0, idx).view(idx.numel(), *x.shape[1:])


def _heads_first(x: Tensor) -> Tensor:
    """``[L, H, ...]`` -> ``[1, H, L, ...]`` (a view)."""
    return x.transpose(0, 1).unsqueeze(0)


def _buckets_forward(q: Tensor, k: Tensor, v: Tensor, plan: "_BlocksPlan", scale: float,
                     parts: List[Tuple[Rows, Tensor, Tensor]]
                     ) -> Tuple[Optional[Tensor], Optional[Tensor]]:
    r"""Part A, the same-group buckets. top_k = 1: the output ``[N, H, D]`` and log-sum-exp
    ``[N, H]``, written in place; top_k > 1: ``(None, None)``, each chunk's ``(rows, o, lse)``
    appended to :obj:`parts`."""
    n, h, d = q.shape
    order, spans, single = plan.order, plan.spans, plan.kk == 1
    ldt = torch.float32 if q.dtype in HALF_DTYPES else q.dtype
    out = la = None
    if plan.padded is not None:  # one batched causal call over padded buckets
        nbk, cmax, src, dst = plan.padded
        o, lse = _aten.flash_forward(
            *(_gather_rows(x, src).view(nbk, cmax, h, d).transpose(1, 2)
              for x in (q, k, v)), True, scale=scale)
        out = q.new_empty(n + 1, h, d).index_copy_(
            0, dst, o.transpose(1, 2).reshape(-1, h, d))[:n]
        la = lse.new_empty(n + 1, h).index_copy_(0, dst,
                                                 lse.transpose(1, 2).reshape(-1, h))[:n]
        spans = []
    elif single:  # part A lands directly in `out`
        out, la = q.new_empty(n, h, d), q.new_empty(n, h, dtype=ldt)
    for b0, b1, batch in _gather_batches(spans, h * d, plan.config.gather_budget):
        # the batch's buckets gathered into bucket order: each is a contiguous span
        qs, ks, vs = (_gather_rows(x, order[b0:b1]) for x in (q, k, v))
        for st, c, g in batch:
            sl = slice(st - b0, st - b0 + c)
            idx = order[st:st + c]
            qb, kb, vb = _heads_first(qs[sl]), _heads_first(ks[sl]), _heads_first(vs[sl])
            for s, e, lk, bias, row_any in plan.bucket_chunks(idx, g, q.dtype):
                o, lse = _aten.flash_forward(qb[:, :, s:e], kb[:, :, :lk], vb[:, :, :lk],
                                             plan.causal and bias is None, attn_mask=bias,
                                             scale=scale)
                o, lse = o[0].transpose(0, 1), lse[0].transpose(0, 1)  # [c, H, D], [c, H]
                if single:
                    out.index_copy_(0, idx, o)
                    la.index_copy_(0, idx, lse)
                else:
                    parts.append((idx[s:e], o,
                                  lse.masked_fill(~row_any.unsqueeze(-1), float("-inf"))))
    return out, la


class _FocusBlocksFunction(torch.autograd.Function):
    r"""Fused forward/backward with the CPU flash kernels. Each part's backward is the kernels'
    backward given the *merged* output and log-sum-exp: its exact share of the gradient of the
    whole softmax (as in split-KV FlashAttention)."""

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, plan: _BlocksPlan,
                scale: float) -> Tensor:
        n, h, _ = q.shape
        single = plan.kk == 1
        parts: List[Tuple[Rows, Tensor, Tensor]] = []  # top_k > 1: (rows, o, lse) to merge
        out, la = _buckets_forward(q, k, v, plan, scale, parts)
        ldt = torch.float32 if q.dtype in HALF_DTYPES else q.dtype  # the log-sum-exps
        lse_all = q.new_empty(n, h, dtype=ldt) if single else None
        for seg in plan.segments:
            rows = slice(seg.q0, seg.q0 + seg.nb * seg.bq)
            qw = _band_chunks(q, seg.q0, seg.nb, seg.bq, seg.bq)
            kw, vw = (_band_chunks(x, seg.k0, seg.nb, seg.bq, seg.lk) for x in (k, v))
            ob, lb = _aten.flash_forward(qw, kw, vw, False, attn_mask=seg.bias, scale=scale)
            ob = _from_chunks(ob, False)
            lb = _from_chunks(lb, False).masked_fill(~seg.row_any.unsqueeze(-1), float("-inf"))
            if single:  # exact in-place merge: o = o_A + w_B (o_B - o_A), w_B = e^{lB - L}
                lr = torch.logaddexp(la[rows], lb)
                lse_all[rows] = lr
                out[rows].lerp_(ob, torch.exp(lb - lr).unsqueeze(-1).to(out.dtype))
            else:
                parts.append((rows, ob, lb))
        for call in plan.band_calls:  # the split band (no groups: never `single`)
            parts.append(_band_call_forward(q, k, v, call, scale))
        for part in plan.sink:  # part C: the sink pairs outside the band and the groups
            rows = part.rows
            oc, lc = part.forward(q, k, v, scale)
            if single:
                lr = torch.logaddexp(lse_all[rows], lc)
                cur = out[rows]
                out.index_copy_(0, rows, cur + torch.exp(lc - lr).unsqueeze(-1).to(out.dtype)
                                * (oc - cur))
                lse_all[rows] = lr
            else:
                parts.append((rows, oc, lc))
        if not single:
            out, lse_all = _merge_part_list(n, parts)
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
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        for b0, b1, batch in _gather_batches(plan.spans, h * d, plan.config.gather_budget):
            bidx = order[b0:b1]
            qs, ks, vs, os, gs = (_gather_rows(x, bidx) for x in (q, k, v, out, grad_out))
            ls = lse.index_select(0, bidx)
            dqs, dks, dvs = torch.zeros_like(qs), torch.zeros_like(ks), torch.zeros_like(vs)
            for st, c, g in batch:
                sl = slice(st - b0, st - b0 + c)
                qb, kb, vb, ob, gb = (_heads_first(x[sl]) for x in (qs, ks, vs, os, gs))
                lb = ls[sl].t().unsqueeze(0)
                for s, e, lk, bias, _ in plan.bucket_chunks(order[st:st + c], g, q.dtype):
                    gq, gk, gv = _aten.flash_backward(gb[:, :, s:e], qb[:, :, s:e],
                                                      kb[:, :, :lk], vb[:, :, :lk],
                                                      ob[:, :, s:e], lb[:, :, s:e].contiguous(),
                                                      plan.causal and bias is None,
                                                      attn_mask=bias, scale=scale)
                    dqs[sl][s:e] += gq[0].transpose(0, 1)
                    dks[sl][:lk] += gk[0].transpose(0, 1)
                    dvs[sl][:lk] += gv[0].transpose(0, 1)
            dq.index_add_(0, bidx, dqs)
            dk.index_add_(0, bidx, dks)
            dv.index_add_(0, bidx, dvs)
        for seg in plan.segments:
            rows = slice(seg.q0, seg.q0 + seg.nb * seg.bq)
            gw, qw, ow, lb = (_band_chunks(x, seg.q0, seg.nb, seg.bq, seg.bq)
                              for x in (grad_out, q, out, lse))
            kw, vw = (_band_chunks(x, seg.k0, seg.nb, seg.bq, seg.lk) for x in (k, v))
            gq, gk, gv = _aten.flash_backward(gw, qw, kw, vw, ow, lb.contiguous(), False,
                                              attn_mask=seg.bias, scale=scale)
            dq[rows] += _from_chunks(gq, False)
            kidx = (seg.k0 + seg.bq * torch.arange(seg.nb, device=q.device).view(-1, 1)
                    + torch.arange(seg.lk, device=q.device).view(1, -1)).view(-1)
            dk.index_add_(0, kidx, _from_chunks(gk, False))
            dv.index_add_(0, kidx, _from_chunks(gv, False))
        for call in plan.band_calls:
            _band_call_backward(q, k, v, out, lse, grad_out, call, scale, dq, dk, dv)
        for part in plan.sink:
            part.backward(q, k, v, out, lse, grad_out, scale, dq, dk, dv)
        return dq, dk, dv, None, None


def focus_blocks_attention(q: Tensor, k: Tensor, v: Tensor, groups: Tensor, window: int,
                           batch: Optional[Tensor] = None, causal: bool = True,
                           num_groups: Optional[int] = None,
                           fused: Optional[bool] = None, num_sinks: int = 0,
                           config: Optional[BlocksConfig] = None) -> Tensor:
    r"""The paper's decomposition (same-group attention + cross-group window band, merged
    exactly through log-sum-exps) for any top-:math:`k` and any batch of sequences.

    On CPU it runs the fused flash kernels once per (sequence, group) bucket (similar-sized
    causal top-1 buckets in one padded call, :attr:`BlocksConfig.pad_ratio`) and the band as
    one masked call over query blocks read as strided views; without groups the pattern runs as
    :func:`~quest_geometric.nn.focus.window_chunks.window_chunks_attention` or, for one causal
    sequence and a wide window, :func:`_split_band_calls`. Top-1 parts merge in place,
    :math:`\mathbf{o} = \mathbf{o}_A + e^{\ell_B - L} (\mathbf{o}_B - \mathbf{o}_A)`. The sink
    pairs outside band and groups are a third part (dense products while the sink keys number
    at most :attr:`BlocksConfig.sink_dense_max_keys`, else explicit pairs). Elsewhere, or with
    ``fused=False``, it runs :func:`focus_blocks_reference`.

    Args:
        q, k, v (torch.Tensor): ``[N, H, D]``.
        groups (torch.Tensor): ``[N, top_k]`` hard group ids.
        window (int): local window :math:`w`.
        batch (torch.Tensor, optional): sorted sequence ids (default: :obj:`None`).
        causal (bool): causal attention (default: :obj:`True`).
        num_groups (int, optional): :math:`K` (default: ``groups.max() + 1``).
        fused (bool, optional): force (``True``) or forbid (``False``) the fused kernels
            (default: :obj:`None`, fused when available).
        num_sinks (int): attention sinks :math:`s \ge 0` (default: :obj:`0`).
        config (BlocksConfig, optional): the fused path's tuning (default: :obj:`None`, the
            one in force).

    Returns:
        torch.Tensor: ``[N, H, D]``.

    Raises:
        TypeError: for non-floating :obj:`q`, :obj:`k`, :obj:`v` or non-long :obj:`groups`.
        ValueError: for bad shapes, a negative :obj:`window`, a bad :obj:`batch` or group
            ids outside :math:`[0, K)`.
    """
    groups, kgroups = check_hard_args(q, k, v, groups, window, batch, num_groups,
                                      where="focus_blocks_attention")
    check_num_sinks(num_sinks, where="focus_blocks_attention")
    n = q.size(0)
    can_fuse = (_aten.FLASH_AVAILABLE and q.device.type == "cpu"
                and q.dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16))
    if fused is None:
        fused = can_fuse
    elif fused and not can_fuse:
        raise ValueError("focus_blocks_attention: the fused path needs CPU tensors and the "
                         "aten flash kernels of this PyTorch build")
    if not fused or n == 0:
        return focus_blocks_reference(q, k, v, groups, window, batch, causal, kgroups,
                                      num_sinks)
    seq, nseq = seq_layout(batch, n, q.device)
    config = current_blocks_config() if config is None else config
    if groups.size(1) == 0 and config.window_in_chunks(nseq, window, causal):  # window + sinks
        sizes = torch.bincount(seq, minlength=nseq).tolist()
        return window_chunks_attention(q, k, v, window, sizes, causal, num_sinks, config,
                                       1.0 / math.sqrt(q.size(-1)))
    plan = _BlocksPlan(groups.long(), seq, nseq, kgroups, window, causal, q.dtype, config)
    if num_sinks > 0:
        rows, tgt, src, is_sink = _sink_part(groups.long(), batch, window, num_sinks, causal,
                                             kgroups)
        if rows.numel():
            plan.sink = (_dense_sink_parts(tgt, src, is_sink, n, q.dtype)
                         if int(is_sink.sum()) <= config.sink_dense_max_keys
                         else [_PairPart(rows, tgt, src)])
    return _FocusBlocksFunction.apply(q.contiguous(), k.contiguous(), v.contiguous(), plan,
                                      1.0 / math.sqrt(q.size(-1)))

