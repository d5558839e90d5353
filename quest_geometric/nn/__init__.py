"""Neural-network layers, one operator per file.

- :class:`QSVConv`: quaternion attention with sandwich-product transport (QSV).
- :class:`QuaternionLinear`: Hamilton-product linear layer.
- :class:`FocusRouter`, :func:`focus_edge_index`, :class:`FocusAttention`: Focus sparse
  attention (router, PyG edge sets, attention with ``'edges'``/``'dense'``/``'blocks'``/
  ``'flex'`` back-ends).
- :func:`compose_focus`, :func:`decompose`: Focus composed onto frozen pretrained models.
"""
from quest_geometric.nn.compose_focus import (
    FocusComposed,
    compose_focus,
    decompose,
    focus_disabled,
    focus_layers,
    router_parameters,
    set_focus_enabled,
    set_focus_options,
)
from quest_geometric.nn.focus_attention import (
    FocusAttention,
    FocusEdgeAttention,
    focus_blocks_attention,
    focus_blocks_reference,
    focus_dense_attention,
    focus_soft_attention,
    full_attention,
)
from quest_geometric.nn.focus_edge_index import focus_edge_index, smallest_shared_group
from quest_geometric.nn.focus_flex import FLEX_AVAILABLE, focus_block_mask, focus_flex_attention
from quest_geometric.nn.focus_router import (
    FocusRouter,
    RouterOutput,
    group_balance,
    logcumsumexp,
    sinkhorn_log,
)
from quest_geometric.nn.qsv_conv import QSVConv
from quest_geometric.nn.quaternion_linear import QuaternionLinear

__all__ = [
    "QSVConv",
    "QuaternionLinear",
    "FocusRouter",
    "RouterOutput",
    "group_balance",
    "sinkhorn_log",
    "logcumsumexp",
    "focus_edge_index",
    "smallest_shared_group",
    "FocusAttention",
    "FocusEdgeAttention",
    "focus_dense_attention",
    "focus_blocks_attention",
    "focus_blocks_reference",
    "focus_soft_attention",
    "full_attention",
    "focus_flex_attention",
    "focus_block_mask",
    "FLEX_AVAILABLE",
    "compose_focus",
    "decompose",
    "FocusComposed",
    "focus_layers",
    "router_parameters",
    "set_focus_enabled",
    "focus_disabled",
    "set_focus_options",
]
