r"""The window plus sinks (no group to exclude) on CPU as a few masked flash calls over chunks
of queries, the fast path of :func:`~quest_geometric.nn.focus.blocks.focus_blocks_attention`
for empty group sets.

A chunk of :math:`B` queries from :math:`a` needs the band keys
:math:`[a - w, a + B + w_r)` (:math:`w_r = 0` causal, :math:`w` otherwise) and the sinks
below them, which all its queries keep, so only the band carries a mask, a function of
:math:`i - j` alone: the chunks away from the sequence's ends share it and run as one call
over strided key views, their sinks as one unmasked call merged through the log-sum-exps;
end chunks run alone with their sinks gathered. Causal, the queries :math:`i \le w + s`
keep every earlier key (each is in the window or a sink), so they run first as one call
under the kernel's own causal mask: no mask to build or read, and the tiles above the
diagonal skipped, where chunks would each compute a masked rectangle (with a window as wide
as most of the sequence, these queries are most of its pairs). Non-causal, one more call
overwrites the sink queries' rows. :func:`window_chunks_reference` is the plain loop this batches.

Example:
    >>> import torch
    >>> from quest_geometric.nn.focus import focus_blocks_attention
    >>> q, k, v = (torch.randn(300, 2, 8) for _ in range(3))
    >>> out = focus_blocks_attention(q, k, v, torch.zeros(300, 0, dtype=torch.long), 50,
    ...                              num_sinks=4)  # runs here: empty group sets
    >>> ref = window_chunks_reference(q, k, v, 50, 128, num_sinks=4)
    >>> bool(torch.allclose(out, ref, atol=1e-5))
    True
"""
from __future__ import annotations

from typing import List, NamedTuple, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from quest_geometric.nn.focus import _aten
from quest_geometric.nn.focus._layout import HALF_DTYPES
from quest_geometric.nn.focus.config import BlocksConfig

__all__ = ["window_chunks_attention", "window_chunks_reference"]


def window_chunks_reference(q: Tensor, k: Tensor, v: Tensor, window: int, chunk: int,
                            causal: bool = True, num_sinks: int = 0) -> Tensor:
    r"""The plain loop the fast path batches, for one sequence ``q, k, v`` ``[N, H, D]``: each
    chunk of :obj:`chunk` queries attends to its sinks and band keys in one masked SDPA call;
    non-causal, the sink queries then attend to every key. Returns ``[N, H, D]``."""
    n = q.size(0)
    qh, kh, vh = (x.transpose(0, 1) for x in (q, k, v))
    out = torch.empty_like(qh)
    pos = torch.arange(n, device=q.device)
    right = 0 if causal else window
    for a in range(0, n, chunk):
        e = min(n, a + chunk)
        lo, hi = max(0, a - window), min(n, e + right)
        keys = torch.cat([pos[:min(num_sinks, lo)], pos[lo:hi]])
        off = pos[a:e, None] - keys[None]
        ok = (off <= window) & (off >= -right) | (keys[None] < num_sinks)
        out[:, a:e] = F.scaled_dot_product_attention(qh[:, a:e], kh[:, keys], vh[:, keys],
                                                     attn_mask=ok & ((off >= 0) | (not causal)))
    s = min(num_sinks, n)
    if not causal and s:
        out[:, :s] = F.scaled_dot_product_attention(qh[:, :s], kh, vh)
    return out.transpose(0, 1)


class _ChunkCall(NamedTuple):
    r"""One flash call: ``nb`` chunks of ``bq`` queries from row ``q0``, chunk ``c`` reading the
    ``ns`` sinks from row ``s0`` and the ``lk - ns`` band keys from row ``k0 + c bq``, under
    the additive mask ``bias`` (:obj:`None`: every pair), or, ``causal``, the kernel's own
    causal mask (a square call, ``bq == lk``)."""
    q0: int
    nb: int
    bq: int
    s0: int
    ns: int
    k0: int
    lk: int
    bias: Optional[Tensor]
    causal: bool = False

    def keys(self, device: torch.device) -> Tensor:
        """The key rows ``[nb, lk]`` of each chunk."""
        band = (self.k0 + self.bq * torch.arange(self.nb, device=device).view(-1, 1)
                + torch.arange(self.lk - self.ns, device=device).view(1, -1))
        sinks = (self.s0 + torch.arange(self.ns, device=device)).expand(self.nb, -1)
        return torch.cat([sinks, band], 1)


def _band_bias(bq: int, lk: int, ns: int, first: int, lo: int, window: int, right: int,
               sinks: int, dtype: torch.dtype, device: torch.device) -> Optional[Tensor]:
    r"""The additive mask ``[1, 1, bq, lk]`` of a chunk whose first query is ``first`` rows after
    its first band key ``lo``: sink columns kept, band column :math:`j` kept iff
    :math:`-w_r \le i - j \le w` or :math:`j < s`; :obj:`None` when every pair is kept."""
    off = (first + torch.arange(bq, device=device).view(-1, 1)
           - torch.arange(lk - ns, device=device).view(1, -1))
    keep = (off <= window) & (off >= -right)
    if lo < sinks:  # sink keys inside the band span
        sink = (lo + torch.arange(lk - ns, device=device) < sinks).view(1, -1)
        keep |= sink & (off >= -right if right == 0 else True)
    if bool(keep.all()):
        return None
    bias = torch.zeros(bq, lk, dtype=dtype, device=device)
    bias[:, ns:].masked_fill_(~keep, float("-inf"))
    return bias.view(1, 1, bq, lk)


class _SequenceCalls(NamedTuple):
    r"""The calls: ``chunks`` write their query rows, ``merges`` (the body's sinks) are merged into
    them, ``sinks`` (non-causal sink queries) overwrite theirs."""
    chunks: List[_ChunkCall]
    merges: List[_ChunkCall]
    sinks: List[_ChunkCall]


def _sequence_calls(start: int, n: int, window: int, chunk: int, causal: bool,
                    num_sinks: int, dtype: torch.dtype, device: torch.device,
                    calls: _SequenceCalls) -> None:
    r"""Appends the calls of one sequence of ``n`` tokens from row ``start``: causal, the prefix
    :math:`i \le w + s` as one call under the kernel's causal mask (every earlier key of such a
    query is in its window or a sink, so the call needs no mask and skips the tiles above the
    diagonal); the body (chunks from :math:`a \ge w + s` whose band ends inside the sequence)
    as one batched call and its sinks as one merged call; every other chunk alone; non-causal
    with sinks, the sink queries against every key."""
    right = 0 if causal else window
    s = min(num_sinks, n)
    first = min(n, window + s + 1) if causal else 0
    if first:
        calls.chunks.append(_ChunkCall(start, 1, first, start, 0, start, first, None, True))
    body = [a for a in range(first, n - chunk + 1, chunk)
            if a >= window + s and a + chunk + right <= n]
    for a in range(first, n, chunk):
        if body and a == body[0]:
            lk = window + chunk + right
            calls.chunks.append(_ChunkCall(
                start + a, len(body), chunk, start, 0, start + a - window, lk,
                _band_bias(chunk, lk, 0, window, a - window, window, right, s, dtype, device)))
            if s:
                calls.merges.append(_ChunkCall(start + a, 1, len(body) * chunk, start, 0,
                                               start, s, None))
        if body and body[0] <= a <= body[-1]:
            continue
        e = min(n, a + chunk)
        lo, hi = max(0, a - window), min(n, e + right)
        ns = min(s, lo)
        lk = ns + hi - lo
        calls.chunks.append(_ChunkCall(
            start + a, 1, e - a, start, ns, start + lo, lk,
            _band_bias(e - a, lk, ns, a - lo, lo, window, right, s, dtype, device)))
    if s and not causal:
        calls.sinks.append(_ChunkCall(start, 1, s, start, 0, start, n, None))


def _chunks(x: Tensor, call: _ChunkCall) -> Tensor:
    """Rows ``[q0, q0 + nb bq)`` of ``x`` ``[N, H, ...]`` as ``[nb, H, bq, ...]`` (a view)."""
    rows = x[call.q0:call.q0 + call.nb * call.bq]
    return rows.view(call.nb, call.bq, *x.shape[1:]).transpose(1, 2)


def _key_chunks(x: Tensor, call: _ChunkCall, kidx: Tensor) -> Tensor:
    r"""The keys (or values) of every chunk, ``[nb, H, lk, D]``: strided views without sinks, a
    gather with them."""
    if call.ns == 0:
        c = x[call.k0:].as_strided((call.nb, call.lk, *x.shape[1:]),
                                   (call.bq * x.stride(0), *x.stride()))
    else:
        c = x.index_select(0, kidx.view(-1)).view(call.nb, call.lk, *x.shape[1:])
    return c.transpose(1, 2)


def _rows(x: Tensor) -> Tensor:
    """``[nb, H, L, ...]`` -> ``[nb L, H, ...]``."""
    return x.transpose(1, 2).reshape(-1, *x.shape[1:2], *x.shape[3:])


def _call_forward(q: Tensor, k: Tensor, v: Tensor, call: _ChunkCall, kidx: Optional[Tensor],
                  scale: float) -> Tuple[slice, Tensor, Tensor]:
    """``(rows, o [R, H, D], lse [R, H])`` of one call."""
    o, lse = _aten.flash_forward(_chunks(q, call), _key_chunks(k, call, kidx),
                                 _key_chunks(v, call, kidx), call.causal, attn_mask=call.bias,
                                 scale=scale)
    return slice(call.q0, call.q0 + call.nb * call.bq), _rows(o), _rows(lse)


def _call_backward(q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, grad: Tensor,
                   call: _ChunkCall, kidx: Optional[Tensor], scale: float, dq: Tensor,
                   dk: Tensor, dv: Tensor) -> None:
    r"""Adds one call's gradient, given the *merged* output and log-sum-exp."""
    gq, gk, gv = _aten.flash_backward(
        _chunks(grad, call), _chunks(q, call), _key_chunks(k, call, kidx),
        _key_chunks(v, call, kidx), _chunks(out, call), _chunks(lse, call).contiguous(),
        call.causal, attn_mask=call.bias, scale=scale)
    dq[call.q0:call.q0 + call.nb * call.bq] += _rows(gq)
    if kidx is None and call.nb == 1:
        dk[call.k0:call.k0 + call.lk] += _rows(gk)
        dv[call.k0:call.k0 + call.lk] += _rows(gv)
    else:
        kidx = call.keys(q.device) if kidx is None else kidx
        dk.index_add_(0, kidx.view(-1), _rows(gk))
        dv.index_add_(0, kidx.view(-1), _rows(gv))


class _WindowChunksFunction(torch.autograd.Function):
    r"""The calls' forward and backward through the CPU flash kernels, the body's sinks merged as
    :math:`\mathbf{o} \mathrel{+}= e^{\ell_s - L} (\mathbf{o}_s - \mathbf{o})`."""

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, calls: _SequenceCalls,
                scale: float) -> Tensor:
        n, h, d = q.shape
        out = q.new_empty(n, h, d)
        lse = q.new_empty(n, h, dtype=torch.float32 if q.dtype in HALF_DTYPES else q.dtype)
        kidx = [c.keys(q.device) if c.ns else None for c in calls.chunks]
        for call, ki in zip(calls.chunks, kidx):
            rows, out[rows], lse[rows] = _call_forward(q, k, v, call, ki, scale)
        for call in calls.merges:
            rows, os_, ls = _call_forward(q, k, v, call, None, scale)
            lr = torch.logaddexp(lse[rows], ls)
            w = torch.exp(ls - lr).unsqueeze(-1)
            cur = out[rows].to(w.dtype)
            out[rows] = cur + w * (os_.to(w.dtype) - cur)
            lse[rows] = lr
        for call in calls.sinks:
            rows, out[rows], lse[rows] = _call_forward(q, k, v, call, None, scale)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.calls, ctx.kidx, ctx.scale = calls, kidx, scale
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: Tensor):
        q, k, v, out, lse = ctx.saved_tensors
        calls = ctx.calls
        grad = grad.contiguous()
        band_grad = grad
        if calls.sinks:  # the sink queries' rows come from their own call only
            band_grad = grad.clone()
            for call in calls.sinks:
                band_grad[call.q0:call.q0 + call.bq] = 0
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        todo = ([(c, ki, band_grad) for c, ki in zip(calls.chunks, ctx.kidx)]
                + [(c, None, band_grad) for c in calls.merges]
                + [(c, None, grad) for c in calls.sinks])
        for call, ki, g in todo:
            _call_backward(q, k, v, out, lse, g, call, ki, ctx.scale, dq, dk, dv)
        return dq, dk, dv, None, None


def window_chunks_attention(q: Tensor, k: Tensor, v: Tensor, window: int,
                            sizes: List[int], causal: bool, num_sinks: int,
                            config: BlocksConfig, scale: float) -> Tensor:
    r"""The window plus :obj:`num_sinks` sinks over consecutive sequences of :obj:`sizes` tokens
    (``q, k, v`` ``[N, H, D]`` CPU tensors), in chunks of
    :meth:`BlocksConfig.window_chunk_size` queries; differentiable, arguments checked by the
    caller. Returns ``[N, H, D]``."""
    chunk = config.window_chunk_size(window)
    calls = _SequenceCalls([], [], [])
    start = 0
    for n in sizes:
        if n:
            _sequence_calls(start, n, window, chunk, causal, num_sinks, q.dtype, q.device,
                            calls)
        start += n
    return _WindowChunksFunction.apply(q.contiguous(), k.contiguous(), v.contiguous(), calls,
                                       scale)
