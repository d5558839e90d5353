r"""Prefix-causal log-space Sinkhorn: the balancing maths of
:class:`~quest_geometric.nn.focus.router.FocusRouter`, whole sequences at once
(:func:`sinkhorn_log`) and one new token at a time from the running column statistics
(:func:`sinkhorn_step`, and its host-side twin :func:`sinkhorn_step_host` on Python floats,
which cached decoding uses for one sequence).

With :math:`S^{(0)}_t = \mathbf{z}_t^\top \mathbf{C} / \tau` and, for iteration
:math:`n = 1..I`,

.. math::
    \Lambda^{(n)}_{t,k} = \log \sum_{j \le t} e^{\log Q^{(n-1)}_{j,k}}, \qquad
    \log Q^{(n)}_t = \operatorname{rownorm}\bigl(\log Q^{(n-1)}_t - \Lambda^{(n)}_t\bigr),

token :math:`t`'s memberships depend on the prefix only through the :math:`I` running column
log-sums :math:`\Lambda^{(n)}` (:func:`sinkhorn_prefix_state`, :func:`prefix_statistics`), so
a new token is routed in :math:`O(I K)` exactly as the full-sequence Sinkhorn routes it.
"""
from __future__ import annotations

import math
from typing import List, Optional, Tuple

import torch
from torch import Tensor
from torch_geometric.utils import to_dense_batch

from quest_geometric._utils.checks import check_all_finite, check_int, check_tensor

__all__ = ["sinkhorn_log", "sinkhorn_prefix_state", "prefix_statistics", "sinkhorn_step",
           "sinkhorn_step_host", "LCSE_TINY"]


#: Smallest prefix sum (after shifting by the column maximum, in float64) that the fast
#: path of :func:`_logcumsumexp` accepts; below it the prefix may have underflowed and the
#: exact :func:`torch.logcumsumexp` is used instead.
LCSE_TINY = 1e-280


def _logcumsumexp(x: Tensor, dim: int) -> Tensor:
    r"""Prefix log-sum-exp along :obj:`dim`, the same as :func:`torch.logcumsumexp` but faster
    on CPU.

    .. math::
        \mathrm{out}_i = m + \log \sum_{j \le i} e^{x_j - m}, \qquad m = \max_j x_j,

    the usual max-shift of log-sum-exp, with the exponentials and the running sum taken in
    float64 (whose range, :math:`e^{-708}`, keeps every prefix of realistic scores) and cast
    back to the input's dtype. Where a prefix sum falls below :data:`LCSE_TINY` (a prefix
    whose every term is :math:`e^{-640}` times smaller than the column maximum) the result
    is taken from :func:`torch.logcumsumexp`, so the function is exact for any finite input.
    Gradients are those of the formula (the shift :math:`m` is a constant).

    Args:
        x (torch.Tensor): finite values.
        dim (int): the scan dimension.

    Returns:
        torch.Tensor: same shape and dtype as :obj:`x`.
    """
    if x.numel() == 0:
        return x.clone()
    m = x.detach().amax(dim, keepdim=True).double()
    c = (x.double() - m).exp().cumsum(dim)
    out = (c.log() + m).to(x.dtype)
    if not bool(c.amin() >= LCSE_TINY):
        out = torch.where(c >= LCSE_TINY, out, torch.logcumsumexp(x, dim))
    return out


def _row_step(logq: Tensor, it: int, causal: bool) -> Tensor:
    """The row normalisation of Sinkhorn iteration ``it`` (shared by the full Sinkhorn and
    the one-token step of cached decoding, so both run the same operations)."""
    if causal and it > 0:
        # rows were log-distributions before this column step (largest entry >= -log K)
        # and a prefix of N tokens adds at most log N, so each row's largest entry is
        # >= -log(K N): the row sum needs no max-shift, and terms that underflow are
        # < e^-700 of it
        return logq - logq.exp().sum(-1, keepdim=True).log()
    return logq - torch.logsumexp(logq, dim=-1, keepdim=True)


def _sinkhorn_dense(logq: Tensor, valid: Optional[Tensor], num_iters: int,
                    causal: bool, col_totals: Optional[List[Tensor]] = None) -> Tensor:
    """Sinkhorn on ``[B, T, K]`` log-scores; ``valid`` ``[B, T]`` marks real tokens (the
    padding sits at the end of each sequence, so it never enters a real token's prefix).
    With ``col_totals`` (a list), each iteration appends the log-sum over every real token
    of its column-step input, ``[B, K]`` (the state cached decoding continues from)."""
    pad = None if valid is None or bool(valid.all()) else ~valid.unsqueeze(-1)
    dtype = logq.dtype
    if causal:  # float64 throughout, so logcumsumexp converts nothing
        logq = logq.double()
    for it in range(num_iters):
        col = logq if pad is None else logq.masked_fill(pad, float("-inf"))
        if col_totals is not None:
            col_totals.append(torch.logsumexp(col, dim=1))
        if causal:  # padding only after real tokens: it never enters a real prefix
            logq = logq - _logcumsumexp(logq, dim=1)
        else:
            logq = logq - torch.logsumexp(col, dim=1, keepdim=True)
        logq = _row_step(logq, it, causal)
    if num_iters == 0:
        logq = logq - torch.logsumexp(logq, dim=-1, keepdim=True)
    return logq.to(dtype)


def sinkhorn_log(scores: Tensor, batch: Optional[Tensor] = None, num_segments: int = 1,
                 num_iters: int = 10, causal: bool = True,
                 col_totals: Optional[List[Tensor]] = None) -> Tensor:
    r"""Log-space Sinkhorn balancing of token-to-group scores, per sequence/graph.

    With :math:`\log Q^{(0)} = S` (scores already divided by :math:`\tau`), every iteration
    normalises columns (over tokens) and then rows (over groups):

    .. math::
        \log Q_{ik} &\leftarrow \log Q_{ik} - \log \sum_{j \in \mathcal{C}(i)} Q_{jk},\\
        \log Q_{ik} &\leftarrow \log Q_{ik} - \log \sum_{k'} Q_{ik'},

    where :math:`\mathcal{C}(i)` is every token of :math:`i`'s sequence (``causal=False``, the
    paper's Sinkhorn) or only the tokens :math:`j \le i` of it (``causal=True``, a
    prefix-causal Sinkhorn, through a prefix log-cumsum-exp). The constant column target
    :math:`1/K` and row target :math:`1/N` of textbook Sinkhorn only rescale a row, so the
    final row step removes them. Sequences of a batch are laid out densely once
    (``[B, T_max, K]``, padding at the end), so no normalisation crosses sequences.

    Args:
        scores (torch.Tensor): :math:`S/\tau`, shape :obj:`[N, K]` (or :obj:`[B, T, K]`
            for :math:`B` sequences of equal length, without :obj:`batch`), finite.
        batch (torch.Tensor, optional): sorted sequence id per token, with :obj:`[N, K]`
            scores (default: :obj:`None`, one sequence).
        num_segments (int): number of sequences (default: :obj:`1`).
        num_iters (int): iterations (default: :obj:`10`).
        causal (bool): prefix-causal column normalisation (default: :obj:`True`).
        col_totals (list, optional): when given, each iteration appends the log-sum over
            every real token of its column-step input, ``[B, K]`` per sequence (the
            statistics cached decoding continues from). (default: :obj:`None`)

    Returns:
        torch.Tensor: :math:`\log \mathbf{g}`, the shape of :obj:`scores`, each row a
        log-distribution.

    Raises:
        ValueError: negative ``num_iters``, ``num_segments`` below 1, or non-finite scores
            (a NaN would spread through the column sums to every token of its sequence).
    """
    check_tensor(scores, "scores", where="sinkhorn_log", floating=True)
    check_int(num_iters, "num_iters", 0, where="sinkhorn_log")
    check_int(num_segments, "num_segments", 1, where="sinkhorn_log")
    check_all_finite((("scores", scores),), where="sinkhorn_log")
    if scores.dim() == 3:
        if batch is not None:
            raise ValueError("sinkhorn_log: 'batch' must be None with [B, T, K] scores")
        return _sinkhorn_dense(scores, None, num_iters, causal, col_totals)
    if batch is None:
        return _sinkhorn_dense(scores.unsqueeze(0), None, num_iters, causal, col_totals)[0]
    dense, valid = to_dense_batch(scores, batch, fill_value=0.0, batch_size=num_segments)
    return _sinkhorn_dense(dense, valid, num_iters, causal, col_totals)[valid]


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


def prefix_statistics(col_totals: List[Tensor], num_seqs: int, num_groups: int,
                      device: Optional[torch.device] = None) -> Tensor:
    r"""The running column log-sums :math:`\Lambda^{(n)}` ``[B, I, K]`` (float64, detached)
    from the per-iteration totals a routing collected (``col_totals`` of
    :meth:`~quest_geometric.nn.focus.router.FocusRouter.forward`); sequences past the last
    one with a real token (all padding) get :math:`-\infty`, an empty prefix.

    Args:
        col_totals (list of Tensor): ``I`` tensors ``[B', K]``, :math:`B' \le B`.
        num_seqs (int): number of sequences :math:`B`.
        num_groups (int): :math:`K`.
        device (torch.device, optional): where the result lives when there are no totals
            (zero iterations). (default: :obj:`None`)
    """
    if not col_totals:
        return torch.empty(num_seqs, 0, num_groups, dtype=torch.float64, device=device)
    col = torch.stack(col_totals, 1).detach().double()
    if col.size(0) < num_seqs:
        col = torch.cat([col, col.new_full((num_seqs - col.size(0), *col.shape[1:]),
                                           float("-inf"))])
    return col


def sinkhorn_step(scores: Tensor, col_lse: Tensor, valid: Optional[Tensor] = None
                  ) -> Tuple[Tensor, Tensor]:
    r"""Route one new token per sequence from the prefix statistics (non-finite scores are
    passed through, not refused: this runs at every decoding step, see
    :func:`~quest_geometric.nn.focus.decode.route_step`; :func:`sinkhorn_log` refuses them).

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


def _logsumexp(x: List[float]) -> float:
    m = max(x)
    if math.isinf(m):
        return m
    return m + math.log(sum([math.exp(v - m) for v in x]))


def sinkhorn_step_host(logq: List[float], rows: List[List[float]]) -> List[float]:
    r""":func:`sinkhorn_step` of one token of one sequence on Python floats: the same float64
    formulas (``logaddexp(a, b) = max(a, b) + log1p(exp(-|a - b|))``), without the some
    hundred tiny tensor operations of the tensor step (the fast path of cached decoding).

    Args:
        logq (list of float): the token's scores :math:`S_t/\tau`, :math:`K` numbers.
        rows (list of list of float): the statistics :math:`\Lambda^{(n)}`, :math:`I` lists
            of :math:`K`; updated in place.

    Returns:
        list of float: the token's log memberships (float64).
    """
    exp, log, log1p, ninf = math.exp, math.log, math.log1p, -math.inf
    for it, row in enumerate(rows):
        c = [a if a == b == ninf else (a if a > b else b) + log1p(exp(-abs(a - b)))
             for a, b in zip(row, logq)]
        rows[it] = c
        x = [q - ci for q, ci in zip(logq, c)]
        # _row_step: no max-shift after the first iteration (see there)
        z = log(sum([exp(v) for v in x])) if it > 0 else _logsumexp(x)
        logq = [v - z for v in x]
    if not rows:
        z = _logsumexp(logq)
        logq = [v - z for v in logq]
    return logq
