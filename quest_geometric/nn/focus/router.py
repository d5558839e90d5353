"""Focus router: learned centroids with (prefix-causal) log-space Sinkhorn balancing.

Reference: Yao et al., "Why Attend to Everything? Focus is the Key" /
"Composing Sparse Attention via Learned Grouping" (arXiv 2604.03260).
"""
from __future__ import annotations

import math
from typing import List, NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.utils import to_dense_batch

from quest_geometric._utils.checks import check_int
from quest_geometric.nn.focus._checks import check_batch, check_features, check_real


class RouterOutput(NamedTuple):
    r"""The result of :class:`FocusRouter`.

    Attributes:
        soft (torch.Tensor): soft group memberships :math:`\mathbf{g}_i`, rows sum to one,
            shape :obj:`[..., K]`, in the input's dtype.
        groups (torch.Tensor): hard top-:math:`k` group ids, shape :obj:`[..., top_k]`,
            :obj:`torch.long`, ordered by decreasing membership (ties within a relative
            :data:`TIE_RTOL` go to the lowest group id, see :func:`topk_groups`).
        log_soft (torch.Tensor): :math:`\log \mathbf{g}_i` in :obj:`float32` (or
            :obj:`float64` for double input), shape :obj:`[..., K]`.
    """

    soft: Tensor
    groups: Tensor
    log_soft: Tensor



#: Smallest prefix sum (after shifting by the column maximum, in float64) that the fast
#: path of :func:`_logcumsumexp` accepts; below it the prefix may have underflowed and the
#: exact :func:`torch.logcumsumexp` is used instead.
LCSE_TINY = 1e-280


def _logcumsumexp(x: Tensor, dim: int) -> Tensor:
    r"""Prefix log-sum-exp along :obj:`dim`, the same as :func:`torch.logcumsumexp` but about
    3x faster on CPU.

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
        if causal:
            # padding only after real tokens: it never enters a real prefix
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
    """
    if scores.dim() == 3:
        if batch is not None:
            raise ValueError("'batch' is only accepted with [N, K] scores")
        return _sinkhorn_dense(scores, None, num_iters, causal, col_totals)
    if batch is None:
        return _sinkhorn_dense(scores.unsqueeze(0), None, num_iters, causal, col_totals)[0]
    dense, valid = to_dense_batch(scores, batch, fill_value=0.0, batch_size=num_segments)
    return _sinkhorn_dense(dense, valid, num_iters, causal, col_totals)[valid]


#: Relative tolerance under which two memberships count as tied in :func:`topk_groups`.
TIE_RTOL = 1e-5


def topk_groups(log_soft: Tensor, top_k: int) -> Tensor:
    r"""Hard top-:math:`k` group ids of log memberships ``[..., K]``, ordered by decreasing
    membership, with ties broken deterministically (the rule :class:`FocusRouter` and the
    cached decoding share).

    **Tie rule.** The groups are picked greedily: at each of the :obj:`top_k` steps, among
    the groups not yet picked, every group whose membership is within the relative
    tolerance :data:`TIE_RTOL` of the largest remaining membership :math:`g^{\max}`,

    .. math::
        g_{ik} \ge (1 - \varepsilon)\, g^{\max}_i, \qquad \varepsilon = 10^{-5},

    counts as tied, and the *lowest group id* among them wins. Memberships that differ by
    rounding only (for example the exactly uniform membership of a sequence's first token
    under prefix-causal balancing, whose last bits depend on the other sequences of a
    batch) thus always give the same groups; memberships farther apart than
    :math:`\varepsilon` keep the plain top-:math:`k` order.

    Args:
        log_soft (torch.Tensor): log memberships ``[..., K]``.
        top_k (int): groups per token, :math:`1..K`.

    Returns:
        torch.Tensor: ``[..., top_k]``, :obj:`torch.long`.
    """
    k = log_soft.size(-1)
    check_int(top_k, "'top_k'", 1, maximum=k)
    vals = log_soft.detach()
    taken = torch.zeros(vals.shape, dtype=torch.bool, device=vals.device)
    slack = math.log1p(-TIE_RTOL)
    ninf = torch.tensor(float("-inf"), dtype=vals.dtype, device=vals.device)
    out = []
    for _ in range(top_k):
        rest = torch.where(taken, ninf, vals)
        best = rest.amax(-1, keepdim=True)
        tied = ~taken & (rest >= best + slack)
        idx = tied.to(torch.uint8).argmax(-1, keepdim=True)  # the first (lowest) tied id
        taken.scatter_(-1, idx, True)
        out.append(idx)
    return torch.cat(out, -1)


def group_balance(groups: Tensor, num_groups: int, batch: Optional[Tensor] = None) -> Tensor:
    r"""Largest group share: the fraction of all (token, group) memberships held by the most
    popular group (:math:`1/K` is perfect balance, :math:`1` is collapse).

    .. math::
        \mathrm{balance} = \max_k \frac{|\{(i, c) : G_{ic} = k\}|}{N \cdot \mathrm{top\_k}}

    Args:
        groups (torch.Tensor): hard group ids, shape :obj:`[..., top_k]`, long.
        num_groups (int): number of groups :math:`K`.
        batch (torch.Tensor, optional): sorted sequence id per token for PyG input
            :obj:`[N, top_k]`; then one share per sequence is returned (default: :obj:`None`).

    Returns:
        torch.Tensor: a scalar (float32), or shape :obj:`[B]` when :obj:`batch` is given.
    """
    if groups.dtype != torch.long:
        raise TypeError(f"'groups' must be a long tensor, got {groups.dtype}")
    g = groups.reshape(-1, groups.size(-1))
    if g.numel() > 0 and (int(g.min()) < 0 or int(g.max()) >= num_groups):
        raise ValueError(f"'groups' must lie in [0, {num_groups - 1}]")
    if batch is None:
        counts = torch.bincount(g.reshape(-1), minlength=num_groups).float()
        return counts.max() / counts.sum().clamp_min(1.0)
    check_batch(batch, g.size(0))
    nseg = int(batch.max()) + 1 if batch.numel() > 0 else 0
    key = batch.repeat_interleave(g.size(1)) * num_groups + g.reshape(-1)
    counts = torch.bincount(key, minlength=nseg * num_groups).float().view(nseg, num_groups)
    return counts.max(dim=1).values / counts.sum(dim=1).clamp_min(1.0)


#: The error of :meth:`FocusRouter.scores` for NaN or infinite scores.
NONFINITE_SCORES = ("FocusRouter: routing scores contain NaN or inf (check the input hidden "
                    "states and the router weights)")


class FocusRouter(nn.Module):
    r"""The Focus router: tokens are softly assigned to :math:`K` learned centroids with
    Sinkhorn balancing, from `"Why Attend to Everything? Focus is the Key"
    <https://arxiv.org/abs/2604.03260>`_ (Yao et al.).

    .. math::
        \mathbf{z}_i = \mathbf{W}_g \mathbf{h}_i, \qquad
        S_{ik} = \frac{\mathbf{z}_i^{\top} \mathbf{c}_k}{\tau}, \qquad
        \mathbf{g}_i = \mathrm{Sinkhorn}(S)_i, \qquad
        G_i = \operatorname{top-k}(\mathbf{g}_i).

    The projection, the scores and Sinkhorn (in log space, :func:`sinkhorn_log`) run in
    :obj:`float32` even for half precision input (:obj:`float64` for double input; the soft
    memberships are cast back to the input's dtype), so routing is stable at small
    :math:`\tau` and a half precision input gets the groups of its float32 upcast up to
    rounding. Normalisation over tokens never crosses sequences/graphs of a batch. The
    hard top-:math:`k` breaks ties deterministically (:func:`topk_groups`: memberships
    within a relative :data:`TIE_RTOL` are tied, the lowest group id wins), so a token's
    groups never depend on rounding noise from the other sequences of a batch.

    **Causality.** The paper's column step sums over the whole sequence, so a token's group
    depends on later tokens. With ``causal=True`` the column sum for token :math:`t` runs over
    the prefix :math:`j \le t` of its sequence only (prefix log-cumsum-exp). By induction over
    iterations, every iterate :math:`Q^{(n)}_t` is a function of
    :math:`\mathbf{h}_1, \dots, \mathbf{h}_t` alone, hence so are :math:`\mathbf{g}_t` and
    :math:`G_t`: future tokens never change past memberships. This is an online Sinkhorn: token
    :math:`t` is balanced against the groups' mass so far, which approaches the full-sequence
    balancing as the prefix grows. The first token of a sequence holds all of every group's
    prefix mass, so its membership is uniform: its top-:math:`k` is a tie, which the tie rule
    resolves to groups :math:`0, \dots, k - 1`; this matters little because the local
    window always covers the first tokens' neighbours.

    Args:
        in_channels (int): size :math:`d` of the hidden states :math:`\mathbf{h}_i`.
        num_groups (int): number of groups :math:`K` (default: :obj:`8`).
        group_dim (int): routing dimension :math:`d_g` (default: :obj:`16`).
        tau (float): temperature :math:`\tau > 0`, finite (default: :obj:`0.1`).
        sinkhorn_iters (int): Sinkhorn iterations (default: :obj:`10`).
        top_k (int): hard groups per token, in :math:`1..K` (default: :obj:`1`).
        causal (bool): prefix-causal balancing (default: :obj:`True`).

    Shapes:
        - **input:** :obj:`h` :math:`(B, T, d)`, or :math:`(N, d)` with optional
          :obj:`batch` :math:`(N)`
        - **output:** :class:`RouterOutput` with :obj:`soft` :math:`(\dots, K)`,
          :obj:`groups` :math:`(\dots, \mathrm{top\_k})`, :obj:`log_soft` :math:`(\dots, K)`
    """

    def __init__(self, in_channels: int, num_groups: int = 8, group_dim: int = 16,
                 tau: float = 0.1, sinkhorn_iters: int = 10, top_k: int = 1,
                 causal: bool = True) -> None:
        super().__init__()
        for name, val in (("in_channels", in_channels), ("num_groups", num_groups),
                          ("group_dim", group_dim)):
            check_int(val, f"'{name}'", 1, where="FocusRouter")
        check_int(sinkhorn_iters, "'sinkhorn_iters'", 0, where="FocusRouter")
        self.in_channels = in_channels
        self._num_groups = num_groups
        self.group_dim = group_dim
        self.tau = tau
        self.sinkhorn_iters = sinkhorn_iters
        self.top_k = top_k
        self.causal = causal
        self.lin = nn.Linear(in_channels, group_dim, bias=False)
        self.centroids = nn.Parameter(torch.empty(num_groups, group_dim))
        self.reset_parameters()

    @property
    def num_groups(self) -> int:
        r"""The number of groups :math:`K`, fixed at construction (the centroids' rows)."""
        return self._num_groups

    @num_groups.setter
    def num_groups(self, value: int) -> None:
        raise AttributeError(f"'num_groups' of {self.__class__.__name__} is fixed at "
                             f"construction (the centroids have {self._num_groups} rows); "
                             f"build a new router for another number of groups")

    @property
    def top_k(self) -> int:
        r"""Hard groups per token, :math:`1..K`; assigning validates the value."""
        return self._top_k

    @top_k.setter
    def top_k(self, value: int) -> None:
        check_int(value, "'top_k'", 1, where=f"FocusRouter(num_groups={self._num_groups})",
                  maximum=self._num_groups)
        self._top_k = value

    @property
    def tau(self) -> float:
        r"""The temperature :math:`\tau > 0`; assigning validates the value."""
        return self._tau

    @tau.setter
    def tau(self, value: float) -> None:
        self._tau = check_real(value, "tau", positive=True)

    def reset_parameters(self) -> None:
        r"""Reset :math:`\mathbf{W}_g` (Kaiming-uniform) and the centroids (unit-norm rows)."""
        self.lin.reset_parameters()
        with torch.no_grad():
            c = torch.randn(self.num_groups, self.group_dim)
            self.centroids.copy_(c / c.norm(dim=-1, keepdim=True))

    def scores(self, h: Tensor, check: bool = True) -> Tensor:
        r"""Scores :math:`S/\tau = \mathbf{z}\mathbf{C}^{\top}/\tau` in float32 (float64 for
        double input), shape :obj:`[..., K]`; the projection :math:`\mathbf{z}` is computed
        in that dtype too, so half precision input is routed like its float32 upcast.

        Args:
            h (Tensor): hidden states ``[..., d]``.
            check (bool): refuse NaN or infinite scores (default: :obj:`True`; the cached
                decoding step passes :obj:`False` and checks the few numbers it copies to
                the host instead, sparing a device synchronisation).

        Raises:
            ValueError: if any score is NaN or infinite (with :obj:`check`).
        """
        dtype = torch.float64 if h.dtype == torch.float64 else torch.float32
        z = F.linear(h.to(dtype), self.lin.weight.to(dtype))
        s = (z @ self.centroids.to(dtype).t()) / self.tau
        if check and not bool(torch.isfinite(s).all()):
            raise ValueError(NONFINITE_SCORES)
        return s

    def forward(self, h: Tensor, batch: Optional[Tensor] = None,
                col_totals: Optional[List[Tensor]] = None) -> RouterOutput:
        r"""Route tokens to groups.

        Args:
            h (torch.Tensor): hidden states :obj:`[B, T, d]` or :obj:`[N, d]`.
            batch (torch.Tensor, optional): sorted sequence/graph id per token, only with
                :obj:`[N, d]` input (default: :obj:`None`).
            col_totals (list, optional): collects the Sinkhorn column statistics of each
                iteration (see :func:`sinkhorn_log`), for starting cached decoding from
                this routing. (default: :obj:`None`)

        Returns:
            RouterOutput: soft memberships, hard top-k groups, log memberships.

        Raises:
            TypeError: if :obj:`h` is not a floating-point tensor.
            ValueError: for a wrong shape, no token, or a bad :obj:`batch`.
        """
        check_features(h, "h")
        if h.size(-1) != self.in_channels:
            raise ValueError(f"'h' must have {self.in_channels} channels, got {h.size(-1)}")
        if h.dim() == 3:
            if batch is not None:
                raise ValueError("'batch' is only accepted with [N, C] input")
            log_soft = sinkhorn_log(self.scores(h), None, 1, self.sinkhorn_iters, self.causal,
                                    col_totals)
        else:
            check_batch(batch, h.size(0))
            nseg = (int(batch.max()) + 1 if batch.numel() > 0 else 0) if batch is not None \
                else 1
            log_soft = sinkhorn_log(self.scores(h), batch, nseg, self.sinkhorn_iters,
                                    self.causal, col_totals)
        groups = topk_groups(log_soft, self.top_k)
        soft = log_soft.exp().to(h.dtype)
        shape = h.shape[:-1]
        return RouterOutput(soft.view(*shape, -1), groups.view(*shape, -1),
                            log_soft.view(*shape, -1))

    @staticmethod
    def balance(out: RouterOutput, num_groups: Optional[int] = None) -> Tensor:
        r"""Largest group share of a :class:`RouterOutput` (see :func:`group_balance`)."""
        k = num_groups if num_groups is not None else out.soft.size(-1)
        return group_balance(out.groups.reshape(-1, out.groups.size(-1)), k)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.in_channels}, num_groups={self.num_groups}, "
                f"group_dim={self.group_dim}, top_k={self.top_k}, causal={self.causal})")


__all__ = ["FocusRouter", "RouterOutput", "group_balance", "sinkhorn_log", "topk_groups",
           "TIE_RTOL", "NONFINITE_SCORES"]
