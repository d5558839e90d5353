r"""Group sets as bit codes, the one encoding of the blocks, decoding and FlexAttention paths.

A token's hard group set :math:`G \subseteq \{0, \dots, K - 1\}` is coded as

.. math::
    c(G) = \sum_{g \in G} 2^g,

so that two tokens share a group exactly when their codes have a common bit,
:math:`G_i \cap G_j \ne \emptyset \iff c_i \mathbin{\&} c_j \ne 0`: one AND per pair instead of
:math:`k^2` comparisons of group ids. A code is held in an ``int64`` and must stay
non-negative, so that a tensor's code and the same code as a Python ``int`` (the decoding
step's host bookkeeping) are the same number: groups :math:`0 \dots 62`, i.e.
:math:`K \le` :data:`MAX_SET_GROUPS`. A larger :math:`K` has no code; every caller then
keeps its plain path (group-id comparisons), which gives the same result.

Example:
    >>> import torch
    >>> group_set_codes(torch.tensor([[0, 2], [1, 1]])).tolist()
    [5, 2]
    >>> code_of([2, 0]), members(5)
    (5, [0, 2])
"""
from __future__ import annotations

from typing import Iterable, List

import torch
from torch import Tensor

__all__ = ["MAX_SET_GROUPS", "codable", "group_set_codes", "membership_codes", "code_of",
           "members"]

#: Largest number of groups :math:`K` whose group sets have a code: bits ``0 .. K - 1`` of a
#: non-negative ``int64`` (bit 63 is the sign bit).
MAX_SET_GROUPS = 63


def codable(num_groups: int) -> bool:
    """Whether group sets of :obj:`num_groups` groups have a code
    (:math:`K \\le` :data:`MAX_SET_GROUPS`)."""
    return num_groups <= MAX_SET_GROUPS


def _check_ids(groups: Tensor, where: str) -> None:
    if groups.numel() and (int(groups.min()) < 0 or int(groups.max()) >= MAX_SET_GROUPS):
        raise ValueError(f"{where}: group ids must be in [0, {MAX_SET_GROUPS}) to be coded "
                         f"(MAX_SET_GROUPS), got ids in [{int(groups.min())}, "
                         f"{int(groups.max())}]")


def group_set_codes(groups: Tensor) -> Tensor:
    r"""The code :math:`c(G_i)` of each row of ``groups`` ``[N, k]`` (long group ids in
    :math:`[0, 63)`; a group repeated in a row counts once; ``k = 0`` gives 0), ``[N]``
    ``int64``.

    Raises:
        ValueError: for a group id outside :math:`[0,` :data:`MAX_SET_GROUPS` :math:`)`.
    """
    _check_ids(groups, "group_set_codes")
    codes = torch.zeros(groups.size(0), dtype=torch.long, device=groups.device)
    for col in groups.long().unbind(1):
        codes |= torch.ones_like(col) << col
    return codes


def membership_codes(member: Tensor) -> Tensor:
    r"""The code of each membership row ``member`` ``[..., K]`` (bool, :math:`K \le`
    :data:`MAX_SET_GROUPS`): :math:`\sum_g [\text{member}_g] 2^g`, ``[...]`` ``int64``."""
    k = member.size(-1)
    if not codable(k):
        raise ValueError(f"membership_codes: at most {MAX_SET_GROUPS} groups have a code "
                         f"(MAX_SET_GROUPS), got {k}")
    shifts = torch.arange(k, device=member.device)
    return (member.long() << shifts).sum(-1)  # distinct powers: the sum is the OR


def code_of(groups: Iterable[int]) -> int:
    """:func:`group_set_codes` of one token's groups, as a Python ``int`` (no tensor)."""
    return sum(1 << g for g in set(groups))


def members(code: int) -> List[int]:
    """The groups of a code, ascending (the inverse of :func:`code_of`)."""
    return [g for g in range(code.bit_length()) if code >> g & 1]
