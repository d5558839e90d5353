"""Deprecated location: moved to :mod:`quest_geometric.nn.focus` (split by concern).

A thin re-export kept so that old imports (and pickles) keep working. The names now live in

- :mod:`quest_geometric.nn.focus.module`: :class:`FocusAttention`, ``BACKENDS``, ``GATES``;
- :mod:`quest_geometric.nn.focus.dense`: :func:`focus_dense_attention`,
  :func:`focus_soft_attention`, :func:`full_attention`;
- :mod:`quest_geometric.nn.focus.edges`: :class:`FocusEdgeAttention`;
- :mod:`quest_geometric.nn.focus.blocks`: :func:`focus_blocks_attention`,
  :func:`focus_blocks_reference`, ``BAND_BLOCK``, ``PAD_RATIO`` (read from there: change
  them there, not here);
- :mod:`quest_geometric.nn.focus._aten`: the private flash-attention kernels.

Import from those modules (or :mod:`quest_geometric.nn`) instead.
"""
from quest_geometric.nn.focus._checks import check_batch, check_features, check_real  # noqa: F401
from quest_geometric.nn.focus.blocks import (  # noqa: F401
    BAND_BLOCK,
    PAD_RATIO,
    focus_blocks_attention,
    focus_blocks_reference,
)
from quest_geometric.nn.focus.dense import (  # noqa: F401
    focus_dense_attention,
    focus_soft_attention,
    full_attention,
)
from quest_geometric.nn.focus.edge_index import (  # noqa: F401
    focus_edge_index,
    smallest_shared_group,
)
from quest_geometric.nn.focus.edges import FocusEdgeAttention  # noqa: F401
from quest_geometric.nn.focus.flex import (  # noqa: F401
    FLEX_AVAILABLE,
    MAX_FLEX_GROUPS,
    focus_flex_attention,
)
from quest_geometric.nn.focus.module import BACKENDS, GATES, FocusAttention  # noqa: F401
from quest_geometric.nn.focus.router import FocusRouter, RouterOutput  # noqa: F401

__all__ = ["FocusAttention", "FocusEdgeAttention", "focus_blocks_attention",
           "focus_blocks_reference", "focus_dense_attention", "focus_soft_attention",
           "full_attention"]
