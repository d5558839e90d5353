"""Test helpers for Focus attention (:mod:`quest_geometric.nn.focus`)."""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

__all__ = ["random_groups", "tiny_composed_llama"]


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


def tiny_composed_llama(gate="additive", top_k=1, seed=0, num_groups=4, window=2, **focus_kwargs):
    """A tiny random Llama (:func:`~quest_geometric.testing.hf.build_hf`) with Focus composed
    (``backend='blocks'``, routers seeded with ``seed``), every weight but the routers'
    frozen: the model of the router-training tests."""
    from quest_geometric.nn.focus import compose_focus, router_parameters
    from quest_geometric.testing.hf import build_hf

    model = build_hf("llama", seed=0)
    torch.manual_seed(seed)
    compose_focus(model, num_groups=num_groups, top_k=top_k, window=window, backend="blocks",
                  gate=gate, **focus_kwargs)
    for p in model.parameters():
        p.requires_grad_(False)
    for p in router_parameters(model):
        p.requires_grad_(True)
    return model
