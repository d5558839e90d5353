r"""The content-free trained control of soft Focus: a per-head temperature and far-pair bias,
as a :class:`~quest_geometric.nn.focus.router.Router`."""
from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

import torch
from torch import Tensor, nn

from quest_geometric._utils.checks import check_int, check_qkv, fail
from quest_geometric.nn.focus.dense import focus_far_bias_attention
from quest_geometric.nn.focus.router import config_kwargs, register_router
from quest_geometric.nn.focus.window_router import WindowOnlyRouter

__all__ = ["FarBiasRouter"]


@register_router("far_bias")
class FarBiasRouter(WindowOnlyRouter):
    r"""A content-free control for the soft rows of Focus: per head :math:`h`, an inverse
    temperature :math:`e^{\theta_h}` on every logit and a bias :math:`\beta_h` on the pairs
    outside the window and the sinks,

    .. math::
        \tilde s^h_{ij} = e^{\theta_h} s^h_{ij}
        + \beta_h \, [\, |i - j| > w \,\wedge\, \min(p_i, p_j) \ge s \,]

    (:func:`~quest_geometric.nn.focus.dense.focus_far_bias_attention`), so a layer with
    :math:`H` heads has :math:`2H` parameters (:attr:`log_scale` :math:`\theta` and
    :attr:`far_bias` :math:`\beta`, both 0 at construction: full attention). It sees no
    content: it only learns how much each head should prefer the window, the baseline a
    learned routing's soft rows must beat with the same objective, data and steps.

    :class:`~quest_geometric.nn.focus.module.FocusAttention` runs this attention on its
    soft path (training mode, or ``hard=False``: the soft rows), whatever its ``gate``;
    the hard path has no group (``top_k = 0``, as
    :class:`~quest_geometric.nn.focus.window_router.WindowOnlyRouter`): the window and the
    sinks. The parameters are the router's, so they train and are saved as a learned
    router's. One router per layer: pass a factory to
    :func:`~quest_geometric.nn.focus.compose.compose_focus`, e.g.
    ``router=lambda d: FarBiasRouter(9)``.

    Args:
        num_heads (int): the query heads :math:`H` of the layer.
        causal (bool): the layer's causality (default: :obj:`True`).

    Example:
        >>> from quest_geometric.nn.focus import FocusAttention
        >>> layer = FocusAttention(32, 4, window=4, router=FarBiasRouter(4))
        >>> layer.train()(torch.randn(1, 16, 32)).shape
        torch.Size([1, 16, 32])
    """

    def __init__(self, num_heads: int, causal: bool = True) -> None:
        super().__init__(causal)
        check_int(num_heads, "'num_heads'", 1, where="FarBiasRouter")
        self.num_heads = num_heads
        self.log_scale = nn.Parameter(torch.zeros(num_heads))
        self.far_bias = nn.Parameter(torch.zeros(num_heads))

    def reset_parameters(self) -> None:
        r"""Back to full attention: :math:`\theta = \beta = 0`."""
        with torch.no_grad():
            self.log_scale.zero_()
            self.far_bias.zero_()

    def soft_attention(self, q: Tensor, k: Tensor, v: Tensor, window: int,
                       batch: Optional[Tensor] = None, causal: bool = True,
                       num_sinks: int = 0) -> Tensor:
        r"""The soft rows: :func:`~quest_geometric.nn.focus.dense.focus_far_bias_attention` with
        this router's parameters (``q, k, v`` ``[N, H, D]``)."""
        check_qkv(q, k, v, where="FarBiasRouter")
        if q.size(1) != self.num_heads:
            raise fail(ValueError, "FarBiasRouter", "q", f"a [N, {self.num_heads}, D] tensor "
                       f"(the router was built for {self.num_heads} heads)", q)
        return focus_far_bias_attention(q, k, v, self.log_scale, self.far_bias, window,
                                        batch, causal, num_sinks)

    def config(self) -> Dict[str, Any]:
        r"""The keyword arguments that rebuild this router (the parameters are its state dict)."""
        return {"num_heads": self.num_heads, "causal": self.causal}

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> FarBiasRouter:
        r"""The router of :meth:`config`'s arguments, checked before any allocation."""
        return cls(**config_kwargs(f"{cls.__name__}.from_config", config,
                                   ("num_heads", "causal")))

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.num_heads}, causal={self.causal})"
