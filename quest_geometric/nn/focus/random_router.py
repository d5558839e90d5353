r"""Random balanced groups: an untrained, content-free
:class:`~quest_geometric.nn.focus.router.Router`, a baseline for learned routing."""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional

import torch
from torch import Tensor, nn

from quest_geometric._utils.checks import check_batch, check_features, check_int
from quest_geometric.nn.focus.router import RouterOutput, config_kwargs, register_router

__all__ = ["RandomGroupsRouter", "random_balanced_groups"]


def random_balanced_groups(positions: Tensor, num_groups: int, top_k: int, seed: int = 0
                           ) -> Tensor:
    r"""The groups of the tokens at :obj:`positions` (0-based within their sequence) under the
    seeded random balanced assignment: positions are cut into blocks of :math:`K`; block
    :math:`b` draws a permutation :math:`\pi_b` of the :math:`K` group ids from a generator
    seeded with ``seed * 1000003 + b``, and the token at position :math:`p = bK + r` gets

    .. math::
        G_p = \{\pi_b((r + c) \bmod K) : c = 0, \dots, k - 1\}

    (in this order). Every group holds exactly :math:`k` of the :math:`K` tokens of a block
    (perfect balance), and a token's groups depend on its position and the seed alone.

    Args:
        positions (torch.Tensor): long positions ``[...]``, :math:`\ge 0`.
        num_groups (int): :math:`K`.
        top_k (int): :math:`k`, :math:`1..K`.
        seed (int): the seed (default: :obj:`0`).

    Returns:
        torch.Tensor: ``[..., top_k]``, :obj:`torch.long`, on the device of :obj:`positions`.
    """
    check_int(num_groups, "num_groups", 1, where="random_balanced_groups")
    check_int(top_k, "top_k", 1, where="random_balanced_groups", maximum=num_groups)
    k = num_groups
    pos = positions.reshape(-1).cpu()
    if pos.numel() == 0:
        return torch.empty(*positions.shape, top_k, dtype=torch.long, device=positions.device)
    # only the blocks the positions fall in: a decoding step at position p draws one
    # permutation, not the p / K of every block before it
    blocks, inv = torch.unique(pos // k, return_inverse=True)
    perms = torch.stack([torch.randperm(k, generator=torch.Generator().manual_seed(
        seed * 1000003 + b)) for b in blocks.tolist()])  # [blocks, K]
    cols = (pos % k).unsqueeze(1) + torch.arange(top_k)  # [n, top_k]
    out = perms[inv.unsqueeze(1), cols % k]
    return out.view(*positions.shape, top_k).to(positions.device)


@register_router("random_groups")
class RandomGroupsRouter(nn.Module):
    r"""Random balanced groups: each token's hard groups are :func:`random_balanced_groups` at
    its position within its sequence (no parameters, content-free, deterministic given the
    seed and the position; causal, so cached decoding routes a new token exactly as the whole
    sequence does); the soft membership spreads :math:`1/k` over them.

    Args:
        num_groups (int): :math:`K` (default: :obj:`8`).
        top_k (int): groups per token, :math:`1..K` (default: :obj:`1`).
        seed (int): the assignment's seed (default: :obj:`0`).
        causal (bool): the layer's causality (the groups are causal either way)
            (default: :obj:`True`).

    Shapes:
        - **input:** :obj:`h` :math:`(B, T, d)`, or :math:`(N, d)` with optional sorted
          :obj:`batch` :math:`(N)`
        - **output:** :class:`~quest_geometric.nn.focus.router.RouterOutput`

    Example:
        >>> from quest_geometric.nn.focus import FocusAttention
        >>> layer = FocusAttention(32, 4, window=4, router=RandomGroupsRouter(4, top_k=2))
        >>> layer.eval()(torch.randn(1, 16, 32)).shape
        torch.Size([1, 16, 32])
    """

    def __init__(self, num_groups: int = 8, top_k: int = 1, seed: int = 0,
                 causal: bool = True) -> None:
        super().__init__()
        check_int(num_groups, "'num_groups'", 1, where="RandomGroupsRouter")
        check_int(seed, "'seed'", 0, where="RandomGroupsRouter")
        self._num_groups = num_groups
        self.top_k = top_k
        self.seed = seed
        self.causal = bool(causal)

    @property
    def num_groups(self) -> int:
        r"""The number of groups :math:`K`, fixed at construction."""
        return self._num_groups

    @property
    def top_k(self) -> int:
        r"""Groups per token, :math:`1..K`; assigning validates the value."""
        return self._top_k

    @top_k.setter
    def top_k(self, value: int) -> None:
        check_int(value, "'top_k'", 1, where=f"RandomGroupsRouter(num_groups={self._num_groups})",
                  maximum=self._num_groups)
        self._top_k = value

    def _output(self, groups: Tensor, dtype: torch.dtype) -> RouterOutput:
        soft = torch.zeros(*groups.shape[:-1], self.num_groups, device=groups.device)
        soft.scatter_(-1, groups, 1.0 / self.top_k)
        lt = torch.float64 if dtype == torch.float64 else torch.float32
        return RouterOutput(soft.to(dtype), groups, soft.to(lt).log())

    def forward(self, h: Tensor, batch: Optional[Tensor] = None,
                col_totals: Optional[List[Tensor]] = None) -> RouterOutput:
        r"""Route tokens by position (:obj:`col_totals` receives nothing)."""
        check_features(h, "h", where="RandomGroupsRouter")
        if h.dim() == 3:
            if batch is not None:
                raise ValueError("RandomGroupsRouter: 'batch' must be None with [B, T, C] input")
            b, t = h.shape[:2]
            pos = torch.arange(t, device=h.device).expand(b, t)
        else:
            check_batch(batch, h.size(0), where="RandomGroupsRouter")
            n = h.size(0)
            if batch is None:
                pos = torch.arange(n, device=h.device)
            else:
                counts = torch.bincount(batch)
                start = counts.cumsum(0) - counts
                pos = torch.arange(n, device=h.device) - start[batch]
        return self._output(random_balanced_groups(pos, self.num_groups, self.top_k,
                                                   self.seed), h.dtype)

    def step(self, x: Tensor, state: Any, valid: Optional[Tensor] = None,
             return_groups: bool = True) -> Optional[Tensor]:
        r"""Route new tokens ``x [B, T, d]`` after :obj:`state`'s prefix."""
        b, t = x.shape[:2]
        count = state.count.to(x.device)
        if valid is None:
            pos = count.unsqueeze(1) + torch.arange(t, device=x.device)
        else:
            pos = (count.unsqueeze(1) + valid.long().cumsum(1) - 1).clamp_min(0)
        groups = random_balanced_groups(pos, self.num_groups, self.top_k, self.seed)
        state.append(groups, valid)
        if not return_groups:
            return None
        return groups if valid is None else groups.masked_fill(~valid.unsqueeze(-1), -1)

    def config(self) -> Dict[str, Any]:
        r"""The keyword arguments that rebuild this router."""
        return {"num_groups": self.num_groups, "top_k": self.top_k, "seed": self.seed,
                "causal": self.causal}

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> RandomGroupsRouter:
        r"""The router of :meth:`config`'s arguments, checked."""
        return cls(**config_kwargs(f"{cls.__name__}.from_config", config,
                                   ("num_groups", "top_k", "seed", "causal")))

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(num_groups={self.num_groups}, top_k={self.top_k}, "
                f"seed={self.seed})")
