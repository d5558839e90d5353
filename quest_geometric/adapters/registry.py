r"""One registry of attention adapters, keyed by qualified class name, so that optional
packages are never imported just to look for their classes."""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Union

from torch import nn

from quest_geometric._utils.checks import fail
from quest_geometric.adapters.base import AttentionAdapter, FunctionAdapter

__all__ = ["register_attention_adapter", "unregister_attention_adapter",
           "get_attention_adapter", "supported_attention_types", "qualified_name"]

_USER: Dict[str, AttentionAdapter] = {}
_BUILTIN: Dict[str, AttentionAdapter] = {}


def qualified_name(cls: type) -> str:
    """``module.QualName`` of a class, the registry's key."""
    return f"{cls.__module__}.{cls.__qualname__}"


def _key(cls: Union[type, str], who: str) -> str:
    if isinstance(cls, str):
        if "." not in cls:
            raise fail(ValueError, who, "cls", "a qualified class name "
                       "('package.module.Class') when a str", cls)
        return cls
    if isinstance(cls, type) and issubclass(cls, nn.Module):
        return qualified_name(cls)
    raise fail(TypeError, who, "cls", "an nn.Module subclass or its qualified name", cls)


def register_attention_adapter(cls: Union[type, str],
                               adapter: Optional[Union[AttentionAdapter, Callable]] = None,
                               *, builtin: bool = False) -> Any:
    """Teach :func:`~quest_geometric.nn.focus.compose.compose_focus` and
    :class:`~quest_geometric.analysis.probe.QKProbe` an attention class and its subclasses
    (a user adapter takes precedence over a built-in one). ``adapter`` is an
    :class:`~quest_geometric.adapters.AttentionAdapter`, or a function
    ``fn(module, args, kwargs)`` for the probe only, returning ``(q, k)`` (``[B, H, T, d]``,
    ``[B, H, S, d]``), a :class:`~quest_geometric.adapters.QKView` or :obj:`None` to skip the
    call, and changing nothing. Usable as a decorator::

        @register_attention_adapter(MyAttention)
        def my_qk(module, args, kwargs):
            x = args[0]
            q = module.to_q(x).unflatten(-1, (module.heads, -1)).transpose(1, 2)
            k = module.to_k(x).unflatten(-1, (module.heads, -1)).transpose(1, 2)
            return QKView(q, k, causal=True)

    Args:
        cls (type or str): an :class:`torch.nn.Module` subclass, or its qualified name.
        adapter (AttentionAdapter or callable, optional): the adapter. (default: :obj:`None`,
            return a decorator)
        builtin (bool): register as a library built-in (lower precedence than user adapters).
            (default: :obj:`False`)

    Returns:
        The adapter (or, without ``adapter``, a decorator that registers its argument).
    """
    key = _key(cls, "register_attention_adapter")
    if adapter is None:
        def deco(f: Any) -> Any:
            register_attention_adapter(cls, f, builtin=builtin)
            return f
        return deco
    if isinstance(adapter, type) and issubclass(adapter, AttentionAdapter):
        raise fail(TypeError, "register_attention_adapter", "adapter", "an adapter instance "
                   "(or a callable)", got_text=f"the class {adapter.__name__}")
    if not isinstance(adapter, AttentionAdapter) and not callable(adapter):
        raise fail(TypeError, "register_attention_adapter", "adapter", "an "
                   "AttentionAdapter or a callable", adapter)
    (_BUILTIN if builtin else _USER)[key] = (
        adapter if isinstance(adapter, AttentionAdapter) else FunctionAdapter(adapter))
    return adapter


def unregister_attention_adapter(cls: Union[type, str]) -> None:
    """Remove a user adapter registered with :func:`register_attention_adapter`.

    Raises:
        KeyError: if ``cls`` has no user adapter.
    """
    key = _key(cls, "unregister_attention_adapter")
    if key not in _USER:
        raise KeyError(f"unregister_attention_adapter: no user adapter registered for {cls!r}")
    del _USER[key]


def get_attention_adapter(module: nn.Module) -> Optional[AttentionAdapter]:
    """The adapter serving ``module`` (user adapters first, then built-ins, each along the
    class's MRO), or :obj:`None`."""
    mro = [qualified_name(c) for c in type(module).__mro__]
    return next((table[n] for table in (_USER, _BUILTIN) for n in mro if n in table), None)


def supported_attention_types() -> List[str]:
    """Qualified names of the recognised attention classes (built-in and registered)."""
    return sorted(_BUILTIN) + sorted(k for k in _USER if k not in _BUILTIN)
