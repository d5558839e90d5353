"""Deprecated location: moved to :mod:`quest_geometric.nn.focus.edge_index`.

A thin re-export kept so that old imports keep working; import from
:mod:`quest_geometric.nn.focus.edge_index` (or :mod:`quest_geometric.nn`) instead.
"""
from quest_geometric.nn.focus.edge_index import (  # noqa: F401
    focus_edge_index,
    smallest_shared_group,
)

__all__ = ["focus_edge_index", "smallest_shared_group"]
