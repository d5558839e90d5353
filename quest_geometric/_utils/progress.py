"""Silence the Hugging Face Hub's and transformers' progress bars (the model loader's) for a while.

A ``--no-progress`` flag that only reaches the project's own bars still lets the model
loader draw its own (transformers' weight loading, the Hub's downloads). Both keep a module
switch: the Hub's is read when each bar is made, and transformers copies the Hub's when it
is imported. :func:`quiet_progress` turns the Hub's off (importing its small ``utils``
module if installed) and transformers' if already imported, and, on leaving, restores
both as they were (transformers, if imported within the block, to the Hub's earlier state).
"""
from __future__ import annotations

import contextlib
import importlib
import sys
from typing import Iterator


def _switches() -> dict[str, tuple[object, str, str, str]]:
    """``{library: (module, query, enable, disable)}`` of the imported libraries with a
    progress-bar switch."""
    found = {}
    hub = sys.modules.get("huggingface_hub.utils")
    if hub is not None and hasattr(hub, "disable_progress_bars"):
        found["hub"] = (hub, "are_progress_bars_disabled", "enable_progress_bars",
                        "disable_progress_bars")
    tf = sys.modules.get("transformers.utils.logging")
    if tf is not None and hasattr(tf, "disable_progress_bar"):
        found["transformers"] = (tf, "is_progress_bar_enabled", "enable_progress_bar",
                                 "disable_progress_bar")
    return found


def _enabled(module: object, query: str) -> bool:
    value = bool(getattr(module, query)())
    return not value if query.endswith("disabled") else value


@contextlib.contextmanager
def quiet_progress(active: bool = True) -> Iterator[None]:
    """Within the block, the Hub's and transformers' progress bars are off (when
    ``active``); the project's own bars follow each function's ``progress`` argument.

    Args:
        active (bool): whether to silence; :obj:`False` makes this a no-op, so that a caller
            can write ``with quiet_progress(not progress):``. (default: :obj:`True`)

    Example:
        >>> with quiet_progress():
        ...     pass  # load a model, run a benchmark: no bars
    """
    if not active:
        yield
        return
    try:  # the Hub's switch is read by transformers at import: turn it off first
        importlib.import_module("huggingface_hub.utils")
    except ImportError:
        pass
    before = {name: _enabled(m, query) for name, (m, query, _, off) in _switches().items()}
    for module, _, _, off in _switches().values():
        getattr(module, off)()
    try:
        yield
    finally:
        hub_was_on = before.get("hub", True)
        for name, (module, _, on, off) in _switches().items():
            getattr(module, on if before.get(name, hub_was_on) else off)()
