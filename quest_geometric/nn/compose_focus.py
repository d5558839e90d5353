"""Deprecated location: moved to :mod:`quest_geometric.nn.focus.compose`.

A thin re-export kept so that old imports keep working; import from
:mod:`quest_geometric.nn.focus.compose` (or :mod:`quest_geometric.nn`) instead. The private
functions below are re-exported only because models pickled (``torch.save(model)``) before
the move refer to them by this module's name.
"""
from quest_geometric.nn.focus.compose import (  # noqa: F401  (old pickles)
    ROUTERS_FILE,
    SUPPORTED_ATTENTION,
    FocusComposed,
    _add_original_prefix,
    _drop_original_prefix,
    _new_typed,
    _no_projection,
    compose_focus,
    decompose,
    focus_disabled,
    focus_layers,
    load_routers,
    router_parameters,
    save_routers,
    set_focus_enabled,
    set_focus_options,
)

__all__ = ["compose_focus", "decompose", "FocusComposed", "set_focus_enabled", "focus_disabled",
           "set_focus_options", "focus_layers", "router_parameters", "save_routers",
           "load_routers", "SUPPORTED_ATTENTION", "ROUTERS_FILE"]
