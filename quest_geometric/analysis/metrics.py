r"""Geometry metrics of queries, keys and attention: participation ratio, effective and stable
rank, attention entropy.

All metrics accumulate in float64 and return float64 tensors with the leading (batch)
dimensions of their input, so per-head values come from one call on ``[..., H, n, d]``.
Undefined cases (fewer than two samples, zero variance, a zero matrix) raise a
:class:`ValueError` that says why, never a silent NaN.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import torch
from torch import Tensor

from quest_geometric._utils.checks import check_finite, check_tensor, describe, fail


__all__ = [
    "participation_ratio", "participation_ratio_from_covariance", "effective_rank", "stable_rank",
    "attention_entropy", "mean_attention_entropy", "AttentionEntropy",
]

def _as_tensor(x: Tensor, name: str, fn: str, min_dim: int) -> Tensor:
    check_tensor(x, name, where=fn)
    ints = (torch.int32, torch.int64, torch.int16, torch.int8, torch.uint8)
    if x.is_complex() or not (x.is_floating_point() or x.dtype in ints):
        raise fail(TypeError, fn, name, "a real tensor", x)
    if x.dim() < min_dim:
        raise fail(ValueError, fn, name, f"a tensor of at least {min_dim} dimensions", x)
    return check_finite(x.detach().to(torch.float64), name, where=fn)


def participation_ratio_from_covariance(cov: Tensor) -> Tensor:
    r"""Participation ratio of covariance matrices ``[..., dim, dim]``.

    .. math::
        \mathrm{PR} = \frac{(\sum_i \lambda_i)^2}{\sum_i \lambda_i^2}
        = \frac{\operatorname{tr}(\Sigma)^2}{\lVert \Sigma \rVert_F^2},

    (the identity holds for symmetric :math:`\Sigma`, so no eigendecomposition is needed).

    Args:
        cov (Tensor): symmetric positive semi-definite matrices ``[..., dim, dim]``.

    Returns:
        Tensor: float64, shape ``[...]``, values in ``[1, dim]``.

    Raises:
        ValueError: for a non-square input or a zero covariance (no variance: PR undefined).
    """
    fn = "participation_ratio_from_covariance"
    cov = _as_tensor(cov, "cov", fn, 2)
    if cov.size(-1) != cov.size(-2):
        raise fail(ValueError, fn, "cov", "square [..., dim, dim]", cov)
    tr = torch.diagonal(cov, dim1=-2, dim2=-1).sum(-1)
    fro2 = cov.square().sum((-2, -1))
    dead = (tr <= 0) | (fro2 == 0)
    if dead.any():
        raise fail(ValueError, fn, "cov", "of non-zero trace (the participation ratio is "
                   "undefined for constant data)", got_text=f"zero variance for "
                   f"{int(dead.sum())} of {dead.numel()} entries")
    return tr.square() / fro2


def participation_ratio(z: Tensor) -> Tensor:
    r"""Participation ratio (effective dimension) of samples ``z [..., n, dim]``.

    The samples are centred over ``n``; with :math:`\lambda_i` the eigenvalues of their
    covariance :math:`\Sigma`,

    .. math::
        \mathrm{PR}(Z) = \frac{(\sum_i \lambda_i)^2}{\sum_i \lambda_i^2}
        = \frac{(\sum_k s_k^2)^2}{\sum_k s_k^4},

    with :math:`s_k` the singular values of the centred sample. It lies in ``[1, dim]``:
    1 when the data vary along one direction only, ``dim`` for isotropic data. It does not
    depend on the normalisation of :math:`\Sigma` (``n`` or ``n - 1``).

    Args:
        z (Tensor): samples ``[..., n, dim]`` (tokens as samples, e.g. ``[B, H, T, d]``
            gives one value per sequence and head).

    Returns:
        Tensor: float64, shape ``[...]``.

    Raises:
        ValueError: for fewer than two samples (no covariance: PR undefined), zero variance,
            non-finite values or fewer than two dimensions.
    """
    fn = "participation_ratio"
    z = _as_tensor(z, "z", fn, 2)
    n, dim = z.size(-2), z.size(-1)
    if n < 2:
        raise fail(ValueError, fn, "z", "of at least 2 samples along dim -2 (to define a "
                   "covariance)", z)
    if dim < 1:
        raise fail(ValueError, fn, "z", "of at least one feature (dim -1)", z)
    zc = z - z.mean(dim=-2, keepdim=True)
    # Gram form is cheaper when n < dim; both give the same non-zero spectrum.
    if n < dim:
        m = zc @ zc.transpose(-2, -1)
    else:
        m = zc.transpose(-2, -1) @ zc
    try:
        return participation_ratio_from_covariance(m / (n - 1))
    except ValueError:
        raise fail(ValueError, fn, "z", "non-constant along dim -2 for every leading index "
                   "(the participation ratio is undefined for constant data)",
                   got_text=f"zero variance in {describe(z)}") from None


def _singular_values(m: Tensor, fn: str) -> Tensor:
    m = _as_tensor(m, "m", fn, 2)
    if m.size(-1) == 0 or m.size(-2) == 0:
        raise fail(ValueError, fn, "m", "non-empty", m)
    s = torch.linalg.svdvals(m)
    zero = s[..., 0] <= 0
    if zero.any():
        raise fail(ValueError, fn, "m", "non-zero (the rank measure of an all-zero matrix is "
                   "undefined)", got_text=f"{int(zero.sum())} of {zero.numel()} matrices all "
                   "zero")
    return s


def effective_rank(m: Tensor) -> Tensor:
    r"""Effective rank (Roy & Vetterli, 2007) of matrices ``m [..., a, b]``.

    .. math::
        \mathrm{erank}(M) = \exp\Big(-\sum_k p_k \log p_k\Big), \qquad
        p_k = \frac{\sigma_k}{\sum_l \sigma_l},

    with :math:`\sigma_k` the singular values and :math:`0 \log 0 = 0`. It lies in
    ``[1, min(a, b)]``: 1 for rank one, ``r`` for ``r`` equal non-zero singular values.

    Args:
        m (Tensor): matrices ``[..., a, b]`` (e.g. the logits :math:`QK^\top/\sqrt{d}`).

    Returns:
        Tensor: float64, shape ``[...]``.

    Raises:
        ValueError: for a zero matrix, non-finite values or fewer than two dimensions.
    """
    s = _singular_values(m, "effective_rank")
    p = s / s.sum(-1, keepdim=True)
    return (-torch.special.xlogy(p, p).sum(-1)).exp()


def stable_rank(m: Tensor) -> Tensor:
    r"""Stable rank of matrices ``m [..., a, b]``.

    .. math::
        \mathrm{srank}(M) = \frac{\lVert M \rVert_F^2}{\lVert M \rVert_2^2}
        = \frac{\sum_k \sigma_k^2}{\sigma_1^2} \in [1, \operatorname{rank} M].

    Args:
        m (Tensor): matrices ``[..., a, b]``.

    Returns:
        Tensor: float64, shape ``[...]``.

    Raises:
        ValueError: for a zero matrix, non-finite values or fewer than two dimensions.
    """
    s = _singular_values(m, "stable_rank")
    return s.square().sum(-1) / s[..., 0].square()


class AttentionEntropy(NamedTuple):
    """Per-row attention entropies and which rows they are defined for.

    Attributes:
        entropy (Tensor): float64 ``[..., T]``; ``0.0`` where ``valid`` is :obj:`False`.
        valid (Tensor): bool ``[..., T]``; :obj:`False` for rows whose entropy is undefined
            (no unmasked key; with ``normalized=True`` also exactly one key).
    """

    entropy: Tensor
    valid: Tensor

    def mean(self) -> Tensor:
        """Mean entropy over the valid rows (a float64 scalar); raises if no row is valid."""
        n = int(self.valid.sum())
        if n == 0:
            raise ValueError("AttentionEntropy.mean: no row has a defined entropy")
        return self.entropy[self.valid].mean()


def attention_entropy(attn: Tensor, mask: Optional[Tensor] = None, normalized: bool = True,
                      atol: float = 1e-3) -> AttentionEntropy:
    r"""Entropy of each query row of attention probabilities ``attn [..., T, S]``.

    .. math::
        H_i = -\sum_{j \in \mathcal{S}_i} a_{ij} \log a_{ij}, \qquad
        \tilde H_i = \frac{H_i}{\log |\mathcal{S}_i|} \in [0, 1],

    with :math:`\mathcal{S}_i` the support of row :math:`i` (its unmasked keys; all ``S``
    keys when ``mask`` is :obj:`None`) and :math:`0 \log 0 = 0`. For a causal attention
    matrix pass the causal mask, so row ``i`` is normalised by ``log(i + 1)``.

    Rows with a single key have no uncertainty to normalise (:math:`0/0`), and rows with no
    key have no distribution. Rather than NaN, or a silent 0 that would bias averages, the
    result carries a ``valid`` mask: such rows get ``entropy == 0`` and ``valid == False``,
    and :meth:`AttentionEntropy.mean` averages the valid rows only. With
    ``normalized=False`` a single-key row has the well-defined entropy 0 and is valid.

    Args:
        attn (Tensor): non-negative attention ``[..., T, S]`` whose rows sum to one over
            their support.
        mask (Tensor, optional): bool, broadcastable to ``attn``; :obj:`True` marks a key the
            query may attend to (the convention of
            :func:`torch.nn.functional.scaled_dot_product_attention`). (default: :obj:`None`)
        normalized (bool): divide by :math:`\log |\mathcal{S}_i|`. (default: :obj:`True`)
        atol (float): tolerance on each row's sum over its support. (default: ``1e-3``)

    Returns:
        AttentionEntropy: ``(entropy [..., T] float64, valid [..., T] bool)``.

    Raises:
        ValueError: for negative or non-finite weights, rows that do not sum to one over
            their support (e.g. weight on masked keys), or a mask of the wrong shape.
        TypeError: for weights that are not a real tensor, or a mask that is not a bool
            tensor.
    """
    fn = "attention_entropy"
    a = _as_tensor(attn, "attn", fn, 2)
    if (a < 0).any():
        raise fail(ValueError, fn, "attn", "non-negative (probabilities)",
                   got_text="negative entries")
    if mask is None:
        support = torch.full(a.shape[:-1], a.size(-1), dtype=torch.long, device=a.device)
        am = a
    else:
        if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
            raise fail(TypeError, fn, "mask", "a bool tensor (True = key attended)", mask)
        try:
            mask = torch.broadcast_to(mask.to(a.device), a.shape)
        except RuntimeError:
            raise fail(ValueError, fn, "mask", f"broadcastable to 'attn' {list(a.shape)}",
                       mask) from None
        support = mask.sum(-1)
        am = a.masked_fill(~mask, 0.0)
    rowsum = am.sum(-1)
    has_keys = support > 0
    bad = has_keys & ((rowsum - 1.0).abs() > atol)
    if bad.any():
        raise fail(ValueError, fn, "attn", "rows that sum to 1 over their unmasked keys "
                   "(probabilities, and a mask that matches them)",
                   got_text=f"{int(bad.sum())} row(s) that do not (e.g. "
                   f"{rowsum[bad][0].item():.6g})")
    h = -torch.special.xlogy(am, am).sum(-1)
    if normalized:
        valid = support > 1
        denom = torch.log(support.clamp_min(2).to(torch.float64))
        h = torch.where(valid, h / denom, torch.zeros_like(h))
    else:
        valid = has_keys
        h = torch.where(valid, h, torch.zeros_like(h))
    return AttentionEntropy(h, valid)


def mean_attention_entropy(attn: Tensor, mask: Optional[Tensor] = None,
                           normalized: bool = True) -> Tensor:
    """Mean of :func:`attention_entropy` over all valid rows (a float64 scalar).

    Args:
        attn (Tensor): attention ``[..., T, S]``.
        mask (Tensor, optional): bool key mask. (default: :obj:`None`)
        normalized (bool): normalise each row by ``log(support)``. (default: :obj:`True`)
    """
    return attention_entropy(attn, mask=mask, normalized=normalized).mean()
