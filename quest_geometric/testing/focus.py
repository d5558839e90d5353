"""Test helpers for Focus attention (:mod:`quest_geometric.nn.focus`)."""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

__all__ = ["random_groups"]


def random_groups(n: int, num_groups: int, top_k: int,
                  generator: Optional[torch.Generator] = None, seed: int = 0) -> Tensor:
    r"""Random hard group sets: for each of :obj:`n` tokens, the first :obj:`top_k` entries of
    a random permutation of the :obj:`num_groups` group ids (distinct groups per token,
    uniformly drawn), as a router's ``groups`` would hold them.

    Args:
        n (int): number of tokens.
        num_groups (int): :math:`K`.
        top_k (int): groups per token, :math:`1..K`.
        generator (torch.Generator, optional): the random source (default: :obj:`None`, a
            new CPU generator seeded with :obj:`seed`).
        seed (int): the seed when no :obj:`generator` is given (default: :obj:`0`).

    Returns:
        torch.Tensor: ``[n, top_k]``, :obj:`torch.long`.

    Example:
        >>> random_groups(3, 4, 2).shape
        torch.Size([3, 2])
    """
    g = generator if generator is not None else torch.Generator().manual_seed(seed)
    return torch.stack([torch.randperm(num_groups, generator=g)[:top_k] for _ in range(n)])
