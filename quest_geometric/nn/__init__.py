"""Neural-network layers, one operator per file.

- :class:`QSVConv`: quaternion attention with sandwich-product transport (QSV);
  :func:`qsv_native_status` and :func:`set_qsv_native_enabled` report and switch its native
  CPU kernels.
- :class:`QuaternionLinear`: Hamilton-product linear layer.
- :class:`Router` (the routing protocol), :class:`FocusRouter`, :func:`focus_edge_index`,
  :class:`FocusAttention`: Focus sparse attention (router, PyG edge sets, attention with
  ``'edges'``/``'dense'``/``'blocks'``/``'flex'`` back-ends), from the subpackage
  :mod:`quest_geometric.nn.focus`.
- :func:`compose_focus`, :func:`decompose`: Focus composed onto frozen pretrained models.
"""
from quest_geometric.nn.focus import (
    FLEX_AVAILABLE, FocusAttention, FocusComposed, FocusEdgeAttention, FocusRouter, Router,
    RouterOutput, additive_gate_share, compose_focus, decompose, focus_block_mask,
    focus_blocks_attention, focus_blocks_reference, focus_dense_attention, focus_disabled,
    focus_edge_index, focus_flex_attention, focus_layers, focus_soft_attention, full_attention,
    group_balance, router_parameters, set_focus_enabled, set_focus_options, sinkhorn_log,
    smallest_shared_group, straight_through_pair_share,
)
from quest_geometric.nn._qsv_native import (
    qsv_native_available, qsv_native_enabled, qsv_native_status, set_qsv_native_enabled,
)
from quest_geometric.nn.qsv_conv import QSVConv
from quest_geometric.nn.quaternion_linear import QuaternionLinear

__all__ = [
    "QSVConv", "qsv_native_available", "qsv_native_status", "qsv_native_enabled",
    "set_qsv_native_enabled", "QuaternionLinear", "Router", "FocusRouter", "RouterOutput",
    "group_balance", "sinkhorn_log", "focus_edge_index", "smallest_shared_group",
    "FocusAttention", "FocusEdgeAttention", "focus_dense_attention", "focus_blocks_attention",
    "focus_blocks_reference", "focus_soft_attention", "full_attention",
    "straight_through_pair_share", "additive_gate_share", "focus_flex_attention",
    "focus_block_mask", "FLEX_AVAILABLE", "compose_focus", "decompose", "FocusComposed",
    "focus_layers", "router_parameters", "set_focus_enabled", "focus_disabled",
    "set_focus_options",
]
