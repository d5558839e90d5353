"""Silence the Hugging Face Hub's and transformers' progress bars (the model loader's) for a while.

A ``--no-progress`` flag that only reaches the project's own bars still lets the model
loader draw its own. Both libraries keep a module switch: the Hub's is read when each bar is
made, and transformers copies the Hub's when it is imported.
"""
from __future__ import annotations

import contextlib
import importlib
import sys
from typing import Iterator


_SWITCHES = {  # library: (module, query, enable, disable)
    "hub": ("huggingface_hub.utils", "are_progress_bars_disabled", "enable_progress_bars",
            "disable_progress_bars"),
    "transformers": ("transformers.utils.logging", "is_progress_bar_enabled",
                     "enable_progress_bar", "disable_progress_bar"),
}


def _switches() -> dict[str, tuple[object, str, str, str]]:
    """:data:`_SWITCHES` of the libraries imported, with their module."""
    modules = {name: sys.modules.get(spec[0]) for name, spec in _SWITCHES.items()}
    return {name: (m, *_SWITCHES[name][1:]) for name, m in modules.items()
            if m is not None and hasattr(m, _SWITCHES[name][3])}


def _enabled(module: object, query: str) -> bool:
    value = bool(getattr(module, query)())
    return not value if query.endswith("disabled") else value


@contextlib.contextmanager
def quiet_progress(active: bool = True) -> Iterator[None]:
    """Within the block, the Hub's and transformers' progress bars are off; on leaving, both
    are restored (transformers, if imported within the block, to the Hub's earlier state).

    Args:
        active (bool): whether to silence (a caller can write
            ``with quiet_progress(not progress):``). (default: :obj:`True`)

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
