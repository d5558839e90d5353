"""Deprecated location: moved to :mod:`quest_geometric.nn.focus.decode`.

A thin re-export kept so that old imports keep working; import from
:mod:`quest_geometric.nn.focus.decode` instead.
"""
from quest_geometric.nn.focus.decode import (  # noqa: F401
    FocusDecodeState,
    focus_decode_attention,
    route_step,
    sinkhorn_prefix_state,
    sinkhorn_step,
)

__all__ = ["FocusDecodeState", "sinkhorn_prefix_state", "sinkhorn_step", "route_step",
           "focus_decode_attention"]
