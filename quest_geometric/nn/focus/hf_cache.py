r"""The Focus decoding states kept on a Hugging Face KV cache object, and the two cache
methods patched for them (``reorder_cache`` reorders the states, ``crop`` is refused: the
router's prefix statistics cannot be rewound)."""
from __future__ import annotations

from typing import Any, Dict

from torch import Tensor

from quest_geometric.nn.focus.decode import FocusDecodeState

__all__ = ["focus_cache_states"]

_CACHE_ATTR = "_quest_focus_states"


def focus_cache_states(cache: Any) -> Dict[int, FocusDecodeState]:
    r"""The Focus decoding states kept on a KV cache object, one
    :class:`~quest_geometric.nn.focus.decode.FocusDecodeState` per composed layer keyed by
    ``id(layer)`` (created on first use).

    Args:
        cache: a Hugging Face ``Cache`` (or any object accepting attributes).

    Returns:
        dict: ``id(layer) -> FocusDecodeState``, the live mapping.
    """
    states = getattr(cache, _CACHE_ATTR, None)
    if states is None:
        states = {}
        setattr(cache, _CACHE_ATTR, states)
        if hasattr(cache, "reorder_cache"):
            inner = cache.reorder_cache

            def reorder_cache(beam_idx: Tensor, *a: Any, **kw: Any) -> Any:
                for key in list(states):
                    states[key] = states[key].select(beam_idx.to(states[key].pos.device))
                return inner(beam_idx, *a, **kw)

            cache.reorder_cache = reorder_cache
        if hasattr(cache, "crop"):
            def crop(*a: Any, **kw: Any) -> Any:
                raise NotImplementedError(
                    "compose_focus: cropping a KV cache (assisted or speculative decoding) is "
                    "not supported with Focus enabled: the router's prefix statistics cannot "
                    "be rewound; disable Focus or use plain generate()")

            cache.crop = crop
    return states
