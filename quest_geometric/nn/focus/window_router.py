r"""Window-only routing: a content-free :class:`~quest_geometric.nn.focus.router.Router` under
which no two tokens share a group (the sliding window plus sinks baseline)."""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional

import torch
from torch import Tensor, nn

from quest_geometric._utils.checks import check_batch, check_features, check_int, fail
from quest_geometric.nn.focus.router import RouterOutput, config_kwargs, register_router

__all__ = ["WindowOnlyRouter"]


@register_router("window_only")
class WindowOnlyRouter(nn.Module):
    r"""Window-only routing: every token gets the *empty* group set (:obj:`top_k` is 0), so a
    layer keeps exactly the sliding window plus sinks,

    .. math::
        \mathcal{N}(i) = \{\, j : (j \le i \text{ if causal}) \wedge
        (|i - j| \le w \vee \min(p_i, p_j) < s) \,\},

    in training too (no far pair, no soft gate to relax); its share of pairs is
    :func:`~quest_geometric.nn.focus.budget.pattern_share`. The soft membership is one group
    with weight 1, read by no back-end.

    Args:
        causal (bool): the layer's causality (default: :obj:`True`).

    Shapes:
        - **input:** :obj:`h` :math:`(B, T, d)`, or :math:`(N, d)` with optional sorted
          :obj:`batch` :math:`(N)`
        - **output:** :class:`~quest_geometric.nn.focus.router.RouterOutput` with
          :obj:`groups` :math:`(\dots, 0)`

    Example:
        >>> from quest_geometric.nn.focus import FocusAttention
        >>> layer = FocusAttention(32, 4, window=4, num_sinks=2, router=WindowOnlyRouter())
        >>> layer.eval()(torch.randn(1, 16, 32)).shape
        torch.Size([1, 16, 32])
    """

    def __init__(self, causal: bool = True) -> None:
        super().__init__()
        self.causal = bool(causal)

    @property
    def num_groups(self) -> int:
        r"""The number of groups, :math:`K = 1` (of which no token is a hard member)."""
        return 1

    @property
    def top_k(self) -> int:
        r"""Hard groups per token: 0. Assigning any other value is refused."""
        return 0

    @top_k.setter
    def top_k(self, value: int) -> None:
        if check_int(value, "top_k", where="WindowOnlyRouter") != 0:
            raise fail(ValueError, "WindowOnlyRouter", "top_k", "0 (window-only routing keeps "
                       "no group)", value)

    @staticmethod
    def _output(shape: torch.Size, dtype: torch.dtype, device: torch.device) -> RouterOutput:
        lt = torch.float64 if dtype == torch.float64 else torch.float32
        return RouterOutput(torch.ones(*shape, 1, dtype=dtype, device=device),
                            torch.empty(*shape, 0, dtype=torch.long, device=device),
                            torch.zeros(*shape, 1, dtype=lt, device=device))

    def forward(self, h: Tensor, batch: Optional[Tensor] = None,
                col_totals: Optional[List[Tensor]] = None) -> RouterOutput:
        r"""The empty group set for every token (:obj:`col_totals` receives nothing)."""
        where = type(self).__name__  # also FarBiasRouter's forward
        check_features(h, "h", where=where)
        if h.dim() == 3:
            if batch is not None:
                raise fail(ValueError, where, "batch", "None with [B, T, C] "
                           "input 'h' (a batch vector goes with [N, C] input)", batch)
        else:
            check_batch(batch, h.size(0), where=where)
        return self._output(h.shape[:-1], h.dtype, h.device)

    def step(self, x: Tensor, state: Any, valid: Optional[Tensor] = None,
             return_groups: bool = True) -> Optional[Tensor]:
        r"""Append the new tokens ``x [B, T, d]`` (empty group sets) to :obj:`state`."""
        b, t = x.shape[:2]
        groups = torch.empty(b, t, 0, dtype=torch.long, device=x.device)
        state.append(groups, valid)
        return groups if return_groups else None

    def config(self) -> Dict[str, Any]:
        r"""The keyword arguments that rebuild this router."""
        return {"causal": self.causal}

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> WindowOnlyRouter:
        r"""The router of :meth:`config`'s arguments, checked."""
        return cls(**config_kwargs(f"{cls.__name__}.from_config", config, ("causal",)))

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(causal={self.causal})"
