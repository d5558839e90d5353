r"""Hard top-:math:`k` group ids with the deterministic tie rule every router and cached
decoding share (:func:`topk_groups`), and its twin on Python floats
(:func:`topk_groups_host`)."""
from __future__ import annotations

import math
import struct
from typing import List

import torch
from torch import Tensor

from quest_geometric._utils.checks import check_int

__all__ = ["topk_groups", "topk_groups_host", "float32_host", "TIE_RTOL"]


#: Relative tolerance under which two memberships count as tied in :func:`topk_groups`.
TIE_RTOL = 1e-5
_SLACK = math.log1p(-TIE_RTOL)


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
    check_int(top_k, "'top_k'", 1, maximum=k, where="topk_groups")
    vals = log_soft.detach()
    taken = torch.zeros(vals.shape, dtype=torch.bool, device=vals.device)
    ninf = torch.tensor(float("-inf"), dtype=vals.dtype, device=vals.device)
    out = []
    for _ in range(top_k):
        rest = torch.where(taken, ninf, vals)
        best = rest.amax(-1, keepdim=True)
        tied = ~taken & (rest >= best + _SLACK)
        idx = tied.to(torch.uint8).argmax(-1, keepdim=True)  # the first (lowest) tied id
        taken.scatter_(-1, idx, True)
        out.append(idx)
    return torch.cat(out, -1)


def float32_host(x: float) -> float:
    """``x`` rounded to the nearest float32 (as a Python float)."""
    return struct.unpack("f", struct.pack("f", x))[0]


_SLACK32 = float32_host(_SLACK)


def topk_groups_host(vals: List[float], top_k: int, single: bool) -> List[int]:
    r""":func:`topk_groups` of one token's log memberships on Python floats, with the same
    arithmetic (the fast path of cached decoding).

    Args:
        vals (list of float): log memberships, :math:`K` numbers, already rounded to the
            dtype of the scores (float32 for ``single``).
        top_k (int): groups to pick.
        single (bool): compare in float32, as :func:`topk_groups` does on a float32 tensor
            (a float32 sum of two float32 numbers is the float64 sum rounded once).

    Returns:
        list of int: the :obj:`top_k` group ids, in the order :func:`topk_groups` gives.
    """
    taken = [False] * len(vals)
    out = []
    for _ in range(top_k):
        best = max((v for v, tk in zip(vals, taken) if not tk), default=-math.inf)
        thr = float32_host(best + _SLACK32) if single else best + _SLACK
        idx = next(j for j, (v, tk) in enumerate(zip(vals, taken)) if not tk and v >= thr)
        taken[idx] = True
        out.append(idx)
    return out
