r"""Focus hard attention on PyTorch's FlexAttention, one block-sparse call.

Token :math:`i` (position :math:`p_i` in sequence :math:`s_i`, hard group set
:math:`G_i \subseteq \{0, \dots, K - 1\}`) attends to

.. math::
    \mathcal{N}(i) = \{\, j : s_j = s_i \,\wedge\, (p_j \le p_i \text{ if causal}) \,\wedge\,
    (|p_i - p_j| \le w \,\vee\, G_i \cap G_j \ne \emptyset) \,\},

exactly as :func:`~quest_geometric.nn.focus.dense.focus_dense_attention`.

**Token order.** Tokens are stably sorted by the key
:math:`(s_i,\ \min G_i,\ p_i)`; the permutation is :math:`\pi`. Members of one
(sequence, smallest group) run are contiguous, so same-group pairs fill a few diagonal-ish
block regions and most block pairs are empty.

**Element mask.** On the permuted indices :math:`a = \pi^{-1}(i)`, :math:`b = \pi^{-1}(j)`
the ``mask_mod`` looks up :math:`s, p` and the group bitmask
:math:`\beta_i = \sum_{g \in G_i} 2^g` (the code of
:mod:`~quest_geometric.nn.focus.group_sets`, hence :math:`K \le 63`):

.. math::
    M_{ab} = [s_a = s_b] \wedge [p_b \le p_a]_{\text{causal}} \wedge
    \bigl(|p_a - p_b| \le w \,\vee\, \beta_a \mathbin{\&} \beta_b \ne 0\bigr).

The diagonal is always allowed, so no row is empty.

**Block table, without any** :math:`N \times N` **object.** With blocks of :math:`B`
permuted tokens, every block :math:`Q` keeps :math:`s^{\min}, s^{\max}, p^{\min}, p^{\max}`,
the OR :math:`\beta^{\vee}` and the AND :math:`\beta^{\wedge}` of its bitmasks. A block pair
:math:`(Q, K)` is listed (may hold an allowed pair) iff

.. math::
    [s^{\min}_K \le s^{\max}_Q] \wedge [s^{\min}_Q \le s^{\max}_K]
    \wedge [p^{\min}_K \le p^{\max}_Q]_{\text{causal}} \wedge
    \bigl(\max(p^{\min}_K - p^{\max}_Q,\ p^{\min}_Q - p^{\max}_K) \le w
    \,\vee\, \beta^{\vee}_Q \mathbin{\&} \beta^{\vee}_K \ne 0\bigr),

each a necessary condition of an allowed pair (a conservative superset). It is *full*
(every pair allowed, ``mask_mod`` skipped) iff both blocks are complete (not the ragged last
block), hold one and the same sequence, :math:`[p^{\max}_K \le p^{\min}_Q]_{\text{causal}}`
and

.. math::
    \max(p^{\max}_Q - p^{\min}_K,\ p^{\max}_K - p^{\min}_Q) \le w
    \;\vee\; \beta^{\wedge}_Q \mathbin{\&} \beta^{\wedge}_K \ne 0,

i.e. every pair is in the window, or every token of both blocks shares one group. The table
costs :math:`O((N/B)^2)` booleans, built in chunks of query blocks, and is handed to
:meth:`BlockMask.from_kv_blocks` with ``seq_lengths = (N, N)``: FlexAttention masks the keys
past :math:`N` of a ragged last block itself.

**Kernel.** One ``flex_attention`` call on ``[1, H, N, D]`` permuted tensors, scale
:math:`1/\sqrt{D}`, output un-permuted; autograd is FlexAttention's own. Heads narrower than
:data:`FLEX_MIN_HEAD_DIM` (the compiled kernel's minimum) are zero-padded to it: the zero
columns change no dot product, and the output's padded columns are cut off. On CUDA a cached
``torch.compile(flex_attention, dynamic=False)`` (block-sparse fused kernel); elsewhere
FlexAttention's eager path, which has no backward on CPU and materialises the dense
:math:`H \times N \times N` scores (and evaluates ``mask_mod`` on all :math:`N^2` pairs,
ignoring the block table), so it is a small-:math:`N` reference only.
"""
from __future__ import annotations

import math
import warnings
from typing import Callable, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from quest_geometric._utils.checks import (check_batch, check_groups, check_int, check_num_sinks,
                                           check_qkv, check_window, fail)
from quest_geometric.nn.focus.group_sets import MAX_SET_GROUPS, codable, membership_codes

try:  # pragma: no cover - depends on the PyTorch build
    from torch.nn.attention.flex_attention import BlockMask, flex_attention

    #: Whether :mod:`torch.nn.attention.flex_attention` (with
    #: :meth:`BlockMask.from_kv_blocks`) is available in this PyTorch build.
    FLEX_AVAILABLE: bool = hasattr(BlockMask, "from_kv_blocks")
except ImportError:  # pragma: no cover
    BlockMask = None  # type: ignore[assignment,misc]
    flex_attention = None  # type: ignore[assignment]
    FLEX_AVAILABLE = False

#: On CUDA the block size must be a multiple of this: the default Triton tiles of
#: FlexAttention (at most 128 x 128) must divide the sparse block.
CUDA_BLOCK_MULTIPLE = 128
#: Largest :math:`H N^2` that the eager (non-CUDA) path accepts: it materialises every score
#: (several float32 and mask tensors of :math:`H N^2` elements at once), so this caps that
#: memory.
EAGER_MAX_PAIRS = 1 << 28
#: Smallest head dimension of FlexAttention's compiled kernel; narrower heads are zero-padded
#: to it, on every device so that the CPU tests run the same code.
FLEX_MIN_HEAD_DIM = 16
#: The dtypes FlexAttention's compiled kernel takes: Triton does not compile it for float64,
#: so ``backend='auto'`` runs ``'blocks'``
#: (:func:`~quest_geometric.nn.focus.blocks.focus_blocks_attention`, its exact reference on
#: CUDA) for other dtypes.
FLEX_COMPILED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_BLOCK_MULTIPLE = 16  # smallest tile of a tensor-core dot
_CHUNK_BUDGET = 1 << 22  # block pairs per chunk of the block table
_COMPILED: Optional[Callable] = None


def _compiled_flex() -> Callable:
    """The module-level cached ``torch.compile(flex_attention, dynamic=False)``."""
    global _COMPILED
    if _COMPILED is None:
        _COMPILED = torch.compile(flex_attention, dynamic=False)
    return _COMPILED


def _require_flex() -> None:
    if not FLEX_AVAILABLE:
        raise ImportError("focus_flex needs torch.nn.attention.flex_attention with "
                          "BlockMask.from_kv_blocks (PyTorch >= 2.5)")


def _check_args(groups: Tensor, window: int, batch: Optional[Tensor], causal: bool,
                num_groups: Optional[int], block_size: int, n: Optional[int] = None,
                where: str = "focus_block_mask") -> Tuple[Tensor, int]:
    """Validate the pattern arguments; return ``groups`` as ``[N, top_k]`` and :math:`K`."""
    groups = check_groups(groups, where=where)
    if n is not None and groups.size(0) != n:
        raise fail(ValueError, where, "groups", f"of {n} rows (one per token)", groups)
    n = groups.size(0)
    check_window(window, where=where)
    if not isinstance(causal, bool):
        raise fail(TypeError, where, "causal", "a bool", causal)
    check_int(block_size, "block_size", 1, where=where)
    if block_size % _BLOCK_MULTIPLE:
        raise fail(ValueError, where, "block_size", f"a positive multiple of {_BLOCK_MULTIPLE}",
                   block_size)
    if groups.device.type == "cuda" and block_size % CUDA_BLOCK_MULTIPLE:
        raise fail(ValueError, where, "block_size", f"a multiple of {CUDA_BLOCK_MULTIPLE} on "
                   "CUDA (FlexAttention's kernel tiles must divide it)", block_size)
    check_batch(batch, n, where=where)
    if batch is not None and batch.device != groups.device:
        raise fail(ValueError, where, "batch", f"on {groups.device}", got_text=str(batch.device))
    gmax = int(groups.max()) + 1 if groups.numel() > 0 else 1
    if num_groups is None:
        num_groups = gmax
    else:
        check_int(num_groups, "'num_groups'", 1, where=where)
        if gmax > num_groups:
            raise fail(ValueError, where, "groups", f"group ids in [0, {num_groups})",
                       got_text=f"id {gmax - 1}")
    if not codable(num_groups):
        raise fail(ValueError, where, "num_groups", f"at most {MAX_SET_GROUPS} (group sets "
                   "are int64 codes, see quest_geometric.nn.focus.group_sets)", num_groups)
    return groups, num_groups


def _layout(groups: Tensor, batch: Optional[Tensor], num_groups: int
            ) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    r"""Permutation and, in permuted order, sequence id, position and membership ``[N, K]``."""
    n = groups.size(0)
    dev = groups.device
    seq = torch.zeros(n, dtype=torch.long, device=dev) if batch is None else batch.long()
    nseq = int(seq[-1]) + 1 if n > 0 else 0
    counts = torch.bincount(seq, minlength=nseq)
    start = torch.cumsum(counts, 0) - counts
    pos = torch.arange(n, device=dev) - start[seq]
    first = groups.min(1).values if groups.size(1) > 0 else torch.zeros_like(seq)
    perm = torch.argsort(seq * num_groups + first, stable=True)
    member = torch.zeros(n, num_groups, dtype=torch.bool, device=dev)
    member.scatter_(1, groups, True)
    return perm, seq[perm], pos[perm], member[perm]


def _block_summaries(seq: Tensor, pos: Tensor, member: Tensor, block_size: int):
    """Per block of permuted tokens: min/max sequence and position, OR/AND of bitmasks."""
    n = seq.numel()
    nb = -(-n // block_size)
    pad = nb * block_size - n
    big = torch.iinfo(torch.long).max // 4

    def blocks(x: Tensor, fill) -> Tensor:
        if pad:
            x = torch.cat([x, x.new_full((pad, *x.shape[1:]), fill)])
        return x.view(nb, block_size, *x.shape[1:])

    smin, smax = blocks(seq, big).amin(1), blocks(seq, -1).amax(1)
    pmin, pmax = blocks(pos, big).amin(1), blocks(pos, -1).amax(1)
    bor = membership_codes(blocks(member, False).any(1))
    band = membership_codes(blocks(member, True).all(1))
    complete = torch.ones(nb, dtype=torch.bool, device=seq.device)
    if pad:
        complete[-1] = False
    return smin, smax, pmin, pmax, bor, band, complete


def _ordered(dense: Tensor) -> Tuple[Tensor, Tensor]:
    r"""Bool block rows ``[R, C]`` -> (count ``[R]``, column indices ``[R, C]``, listed first
    in increasing order), both ``int32``."""
    num = dense.sum(-1, dtype=torch.int32)
    idx = torch.argsort(dense.to(torch.int8), dim=-1, descending=True, stable=True)
    return num, idx.to(torch.int32)


def _block_tables(seq: Tensor, pos: Tensor, member: Tensor, window: int, causal: bool,
                  block_size: int, num_sinks: int = 0) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(kv_num_blocks, kv_indices, full_kv_num_blocks, full_kv_indices)`` of shape
    ``[1, 1, nb]`` / ``[1, 1, nb, nb]`` (partial blocks exclude full ones)."""
    smin, smax, pmin, pmax, bor, band, complete = _block_summaries(seq, pos, member,
                                                                   block_size)
    nb = smin.numel()
    dev = seq.device
    kv_num = torch.empty(nb, dtype=torch.int32, device=dev)
    kv_idx = torch.empty(nb, nb, dtype=torch.int32, device=dev)
    full_num = torch.empty_like(kv_num)
    full_idx = torch.empty_like(kv_idx)
    single = smin == smax
    step = max(1, _CHUNK_BUDGET // max(nb, 1))
    for a in range(0, nb, step):
        e = min(nb, a + step)
        sq_lo, sq_hi = smin[a:e, None], smax[a:e, None]
        pq_lo, pq_hi = pmin[a:e, None], pmax[a:e, None]
        listed = (smin[None] <= sq_hi) & (sq_lo <= smax[None])
        near = torch.maximum(pmin[None] - pq_hi, pq_lo - pmax[None]) <= window
        reach = near | ((bor[a:e, None] & bor[None]) != 0)
        if num_sinks > 0:  # a sink key (or, non-causal, a sink query) in the blocks
            reach |= pmin[None] < num_sinks
            if not causal:
                reach |= pq_lo < num_sinks
        listed &= reach
        full = (single[a:e, None] & single[None] & (sq_lo == smin[None])
                & complete[a:e, None] & complete[None])
        inside = torch.maximum(pq_hi - pmin[None], pmax[None] - pq_lo) <= window
        full &= inside | ((band[a:e, None] & band[None]) != 0)
        if causal:
            listed &= pmin[None] <= pq_hi
            full &= pmax[None] <= pq_lo
        full &= listed
        kv_num[a:e], kv_idx[a:e] = _ordered(listed & ~full)
        full_num[a:e], full_idx[a:e] = _ordered(full)
    return (kv_num.view(1, 1, nb), kv_idx.view(1, 1, nb, nb),
            full_num.view(1, 1, nb), full_idx.view(1, 1, nb, nb))


def _make_mask_mod(seq: Tensor, pos: Tensor, bits: Tensor, window: int, causal: bool,
                   num_sinks: int = 0):
    r"""The element ``mask_mod`` on permuted indices (see the module docstring); with sinks,
    also the pairs with :math:`\min(p_a, p_b) < s`."""
    def mask_mod(b, h, qi, ki):
        pq, pk = pos[qi], pos[ki]
        ok = seq[qi] == seq[ki]
        dist = pq - pk
        if causal:
            ok = ok & (pk <= pq)
        else:
            dist = dist.abs()
        keep = (dist <= window) | ((bits[qi] & bits[ki]) != 0)
        if num_sinks > 0:  # causal: a sink key; else either end a sink
            keep = keep | ((pk if causal else torch.minimum(pq, pk)) < num_sinks)
        return ok & keep

    return mask_mod


def _build(groups: Tensor, window: int, batch: Optional[Tensor], causal: bool,
           num_groups: int, block_size: int, num_sinks: int = 0
           ) -> Tuple["BlockMask", Tensor]:
    n = groups.size(0)
    perm, seq, pos, member = _layout(groups, batch, num_groups)
    bits = membership_codes(member)
    tables = _block_tables(seq, pos, member, window, causal, block_size, num_sinks)
    mask_mod = _make_mask_mod(seq, pos, bits, window, causal, num_sinks)
    bm = BlockMask.from_kv_blocks(*tables, BLOCK_SIZE=block_size, mask_mod=mask_mod,
                                  seq_lengths=(n, n))
    return bm, perm


def focus_block_mask(groups: Tensor, window: int, batch: Optional[Tensor] = None,
                     causal: bool = True, num_groups: Optional[int] = None,
                     block_size: int = 128, num_sinks: int = 0) -> Tuple["BlockMask", Tensor]:
    r"""The Focus pattern as a FlexAttention
    :class:`~torch.nn.attention.flex_attention.BlockMask` in a block-sparse token order.

    Tokens are reordered by :math:`(s_i, \min G_i, p_i)` (stable); row :math:`a` and column
    :math:`b` of the mask :math:`M_{ab}` of the module docstring are the tokens ``perm[a]``
    and ``perm[b]``. The block table is built from per-block summaries in
    :math:`O((N / B)^2)` (never :math:`N^2`): a conservative superset of the blocks holding an
    allowed pair, with the blocks whose pairs are all allowed marked full.

    Args:
        groups (torch.Tensor): hard group ids, ``[N, top_k]`` (or ``[N]``), long, in
            :math:`[0, K)`.
        window (int): local window :math:`w \ge 0`.
        batch (torch.Tensor, optional): sorted sequence id per token (default: :obj:`None`,
            one sequence).
        causal (bool): keep only :math:`p_b \le p_a` (default: :obj:`True`).
        num_groups (int, optional): :math:`K \le 63` (default: ``groups.max() + 1``).
        block_size (int): sparse block size :math:`B`, a positive multiple of 16 (of 128 on
            CUDA) (default: :obj:`128`).
        num_sinks (int): attention sinks :math:`s \ge 0`: also the pairs with
            :math:`\min(p_a, p_b) < s` (default: :obj:`0`).

    Returns:
        (BlockMask, torch.Tensor): the mask for ``[1, H, N, D]`` tensors in permuted order,
        and ``perm`` ``[N]`` (long), a permutation of :math:`0..N-1`: use
        ``q[perm]`` and scatter the output back with ``out[perm] = out_perm``.
    """
    _require_flex()
    groups, kgroups = _check_args(groups, window, batch, causal, num_groups, block_size)
    check_num_sinks(num_sinks)
    if groups.size(0) == 0:
        raise ValueError("focus_block_mask: 'groups' must hold at least one token")
    return _build(groups, window, batch, causal, kgroups, block_size, num_sinks)


def focus_flex_attention(q: Tensor, k: Tensor, v: Tensor, groups: Tensor, window: int,
                         batch: Optional[Tensor] = None, causal: bool = True,
                         num_groups: Optional[int] = None, block_size: int = 128,
                         num_sinks: int = 0) -> Tensor:
    r"""Focus hard attention as one block-sparse FlexAttention call.

    .. math::
        \mathbf{o}_i^{h} = \sum_{j \in \mathcal{N}(i)}
        \operatorname{softmax}_{j \in \mathcal{N}(i)}\Bigl(
        \frac{\mathbf{q}_i^{h\top} \mathbf{k}_j^{h}}{\sqrt{D}}\Bigr) \mathbf{v}_j^{h},

    with :math:`\mathcal{N}(i)` of the module docstring (the semantics of
    :func:`~quest_geometric.nn.focus.dense.focus_dense_attention`), on the tokens reordered by
    :func:`focus_block_mask`. Off CUDA the eager path is a small-:math:`N` check, not a fast
    path (use :func:`~quest_geometric.nn.focus.blocks.focus_blocks_attention` on CPU).

    Args:
        q, k, v (torch.Tensor): ``[N, H, D]``, same shape, dtype and device.
        groups (torch.Tensor): hard group ids ``[N, top_k]``, long, in :math:`[0, K)`.
        window (int): local window :math:`w \ge 0`.
        batch (torch.Tensor, optional): sorted sequence id per token (default: :obj:`None`).
        causal (bool): causal attention (default: :obj:`True`).
        num_groups (int, optional): :math:`K \le 63` (default: ``groups.max() + 1``).
        block_size (int): sparse block size, a positive multiple of 16 (of 128 on CUDA)
            (default: :obj:`128`).
        num_sinks (int): attention sinks :math:`s \ge 0`: also the pairs with
            :math:`\min(p_i, p_j) < s` (default: :obj:`0`).

    Returns:
        torch.Tensor: ``[N, H, D]``.

    Raises:
        ValueError: on bad shapes or arguments, :math:`K > 63`, or when gradients are
            required on a device without a FlexAttention backward (CPU).
        TypeError: on CUDA, for a dtype outside :data:`FLEX_COMPILED_DTYPES` (float64).
    """
    _require_flex()
    check_qkv(q, k, v, where="focus_flex_attention")
    n, h, d = q.shape
    groups, kgroups = _check_args(groups, window, batch, causal, num_groups, block_size, n,
                                   where="focus_flex_attention")
    check_num_sinks(num_sinks, where="focus_flex_attention")
    if k.device != q.device or v.device != q.device or groups.device != q.device:
        raise ValueError("'q', 'k', 'v' and 'groups' must be on one device")
    if n == 0:
        return q.new_empty(0, h, d)
    needs_grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad
                                              or v.requires_grad)
    compiled = q.device.type == "cuda"
    if compiled and q.dtype not in FLEX_COMPILED_DTYPES:
        raise TypeError(f"focus_flex_attention: the compiled FlexAttention kernel on "
                        f"{q.device.type} takes 'q', 'k', 'v' of dtype float16, bfloat16 or "
                        f"float32, got {q.dtype} (Triton does not compile it); use "
                        f"focus_blocks_attention, which runs its reference path for it")
    if needs_grad and not compiled:
        raise ValueError(f"focus_flex_attention: FlexAttention has no backward on "
                         f"{q.device.type}; use backend='blocks' "
                         f"(focus_blocks_attention) there, or run under torch.no_grad()")
    if not compiled and n * n * h > EAGER_MAX_PAIRS:
        raise ValueError(f"focus_flex_attention: FlexAttention's eager path on "
                         f"{q.device.type} materialises all H x N x N = {h} x {n} x {n} "
                         f"scores (several bytes each), above EAGER_MAX_PAIRS = "
                         f"{EAGER_MAX_PAIRS}; use backend='blocks' (focus_blocks_attention) "
                         f"there")
    if not needs_grad:
        q, k, v = q.detach(), k.detach(), v.detach()
    bm, perm = _build(groups, window, batch, causal, kgroups, block_size, num_sinks)
    # the compiled kernel needs D >= 16: zero columns change no dot product, and the
    # output's extra columns (zero values) are cut off below
    pad = max(0, FLEX_MIN_HEAD_DIM - d)
    qp, kp, vp = ((F.pad(x[perm], (0, pad)) if pad else x[perm]).transpose(0, 1).unsqueeze(0)
                  for x in (q, k, v))
    scale = 1.0 / math.sqrt(d)
    if compiled:
        out = _compiled_flex()(qp, kp, vp, block_mask=bm, scale=scale)
    else:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*flex_attention called without "
                                    "torch.compile.*")
            out = flex_attention(qp, kp, vp, block_mask=bm, scale=scale)
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(n, device=perm.device)
    return out[0, ..., :d].transpose(0, 1)[inv]


__all__ = ["FLEX_AVAILABLE", "FLEX_COMPILED_DTYPES", "FLEX_MIN_HEAD_DIM", "focus_block_mask",
           "focus_flex_attention"]
