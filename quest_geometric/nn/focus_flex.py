"""Deprecated location: moved to :mod:`quest_geometric.nn.focus.flex`.

A thin re-export kept so that old imports keep working; import from
:mod:`quest_geometric.nn.focus.flex` (or :mod:`quest_geometric.nn`) instead. The constants
are read from :mod:`quest_geometric.nn.focus.flex`: change them there, not here.
"""
from quest_geometric.nn.focus.flex import (  # noqa: F401
    CUDA_BLOCK_MULTIPLE,
    EAGER_MAX_PAIRS,
    FLEX_AVAILABLE,
    MAX_FLEX_GROUPS,
    BlockMask,
    flex_attention,
    focus_block_mask,
    focus_flex_attention,
)

__all__ = ["FLEX_AVAILABLE", "focus_block_mask", "focus_flex_attention"]
