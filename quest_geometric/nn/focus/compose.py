r"""Compose Focus sparse attention onto a pretrained model (centroid-only retrofit).

:func:`compose_focus` wraps every attention layer an adapter of
:mod:`quest_geometric.adapters` recognises
(:func:`~quest_geometric.adapters.supported_attention_types`) in a :class:`FocusComposed`
that keeps the layer's own projections and adds a router; the original weights are frozen,
so only the routers train (the paper's "composable" setting). Composed models take padded
batches (padding is dropped before routing), cached generation
(:mod:`quest_geometric.nn.focus.decode`) and saving: the state dict keeps the original
names, a Hugging Face ``save_pretrained`` leaves the routers out (so ``from_pretrained``
reloads the original exactly) and :func:`save_routers` stores them. :func:`decompose`
puts the original modules back.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator, List, Optional, Tuple

from torch import nn

from quest_geometric._utils.checks import (check_choice, check_int, check_num_sinks, check_window,
                                           fail)
from quest_geometric.adapters import supported_attention_types
from quest_geometric.nn.focus.composed import FocusComposed, _composable, _wrapper_class
from quest_geometric.nn.focus.module import BACKENDS, FocusAttention
from quest_geometric.nn.focus.router import router_name

__all__ = ["compose_focus", "decompose", "set_focus_enabled", "focus_disabled",
           "set_focus_options", "focus_layers", "router_parameters", "SUPPORTED_ATTENTION"]

#: The attention module types recognised at import (the live list:
#: :func:`quest_geometric.adapters.supported_attention_types`).
SUPPORTED_ATTENTION: Tuple[str, ...] = tuple(supported_attention_types())
_STATE_ATTR = "_focus_composition"


def compose_focus(model: nn.Module, num_groups: int = 4, top_k: int = 2, window: int = 128,
                  group_dim: int = 16, tau: float = 0.1, sinkhorn_iters: int = 10,
                  gate: Optional[str] = "additive", backend: str = "auto",
                  freeze: bool = True, causal: Optional[bool] = None,
                  router: Any = None, num_sinks: int = 0, **focus_kwargs: Any) -> nn.Module:
    r"""Compose Focus sparse attention onto every supported attention layer of
    :obj:`model`, in place (centroid-only retrofit of Yao et al., arXiv 2604.03260).

    Each attention layer becomes a :class:`FocusComposed` that reuses the layer's own
    projections and adds a router with :math:`d \cdot d_g + K d_g` parameters, so a model of
    :math:`L` attention layers gains

    .. math::
        L \, (d \, d_g + K \, d_g)

    trainable parameters. In inference token :math:`i` attends to the causal pairs with
    :math:`i - j \le w`, a shared hard group or :math:`j < s` (the attention sinks); in
    training the soft gate of ``gate`` applies (see
    :class:`~quest_geometric.nn.focus.module.FocusAttention`). Routing is prefix-causal.

    **Why the defaults differ from** :class:`~quest_geometric.nn.focus.module.FocusAttention`
    **(K = 8, top-1).** A native layer trains with its model, which adapts to a sparse
    pattern: one group of eight keeps few far pairs. Here every original weight stays
    frozen and only the routers learn, so the pattern must keep what the pretrained heads
    rely on: :math:`K = 4`, top-2 (half of the groups) is the paper's composable retrofit,
    while a top-1 pattern on a frozen model loses much of its quality (``docs/focus.md``).
    Pass ``num_groups`` / ``top_k`` to choose otherwise.

    Args:
        model (torch.nn.Module): a model containing recognised attention modules.
        num_groups (int): groups :math:`K` (default: :obj:`4`).
        top_k (int): hard groups per token, :math:`1..K` (default: :obj:`2`).
        window (int): local window :math:`w \ge 0` (default: :obj:`128`).
        group_dim (int): routing dimension :math:`d_g` (default: :obj:`16`).
        tau (float): Sinkhorn temperature (default: :obj:`0.1`).
        sinkhorn_iters (int): Sinkhorn iterations (default: :obj:`10`).
        gate (str, optional): training gate (default: :obj:`'additive'`).
        backend (str): hard back-end or ``'auto'`` (default: :obj:`'auto'`).
        freeze (bool): freeze every parameter :obj:`model` had (default: :obj:`True`).
        causal (bool, optional): causal attention and routing; decoder attention refuses
            ``False``, :class:`torch.nn.MultiheadAttention` needs it (default: :obj:`None`,
            each module's own).
        router (Router or callable, optional): a :class:`~quest_geometric.nn.focus.router.Router`
            shared by every layer or a factory ``embed_dim -> Router``, instead of a learned
            router per layer (registered classes can be saved) (default: :obj:`None`).
        num_sinks (int): attention sinks :math:`s \ge 0` (default: :obj:`0`).
        **focus_kwargs: further :class:`FocusAttention` arguments (``gate_scale``,
            ``gate_bias``).

    Returns:
        torch.nn.Module: :obj:`model` itself.

    Raises:
        ValueError: if :obj:`model` holds no supported attention layer (the message lists the
            supported types), is already composed, or an argument has a wrong value.
        TypeError: if :obj:`model` is not a module, or an argument has a wrong type.
    """
    if not isinstance(model, nn.Module):
        raise fail(TypeError, "compose_focus", "model", "a torch.nn.Module", model)
    if getattr(model, _STATE_ATTR, None) is not None or any(
            isinstance(m, FocusComposed) for m in model.modules()):
        raise fail(ValueError, "compose_focus", "model", "a model not composed yet",
                   got_text=f"an already composed {type(model).__name__}",
                   hint="; call decompose(model) first")
    check_int(num_groups, "'num_groups'", 1, where="compose_focus")
    if router is None:
        check_int(top_k, "top_k", 1, where="compose_focus", maximum=num_groups)
    targets: List[Tuple[nn.Module, str, nn.Module]] = []
    for parent in model.modules():
        for name, child in parent.named_children():
            if _composable(child) is not None and not any(
                    child is t or _contains(t, child) for _, _, t in targets):
                targets.append((parent, name, child))
    if not targets:
        found = sorted({type(m).__name__ for m in model.modules() if "attn" in
                        type(m).__name__.lower() or "attention" in type(m).__name__.lower()})
        raise fail(ValueError, "compose_focus", "model", "a model with a supported attention "
                   f"layer (supported: {supported_attention_types()})",
                   got_text=f"a {type(model).__name__} without one (attention-like modules "
                   f"found: {found or 'none'})")
    flags = [(p, p.requires_grad) for p in model.parameters()]
    kwargs = dict(num_groups=num_groups, top_k=top_k, window=window, group_dim=group_dim,
                  tau=tau, sinkhorn_iters=sinkhorn_iters, gate=gate, backend=backend,
                  num_sinks=num_sinks, **focus_kwargs)
    if router is not None:
        kwargs["router"] = router
    ref = next(iter(model.parameters()), None)
    wrappers = []
    for parent, name, child in targets:
        w = _wrapper_class(_composable(child), child)(child, causal=causal, **kwargs)
        w.train(child.training)  # follow the model's current mode
        if ref is not None:
            w.focus.router.to(device=ref.device, dtype=ref.dtype if ref.is_floating_point()
                              else None)
        wrappers.append((parent, name, w))
    for parent, name, w in wrappers:  # all built (any refusal came first): swap them in
        setattr(parent, name, w)
    if freeze:
        for p, _ in flags:
            p.requires_grad_(False)
    hidden = _hide_router_keys(model, [w for _, _, w in wrappers], router)
    object.__setattr__(model, _STATE_ATTR, {"wrappers": wrappers, "flags": flags,
                                             "config": dict(kwargs, causal=causal),
                                             "hidden": hidden})
    return model


_SAVE_IGNORE = "_keys_to_ignore_on_save"
_UNSET = object()


def _hide_router_keys(model: nn.Module, wrappers: List[FocusComposed], router: Any
                      ) -> List[Tuple[nn.Module, Any]]:
    r"""Add the router keys (``<layer>.focus.*``) to the ``_keys_to_ignore_on_save`` of every
    Hugging Face model in :obj:`model`, unless a given ``router``'s class is not registered
    (:func:`save_routers` could not store it). Returns ``(module, value before)`` pairs for
    :func:`decompose`."""
    if router is not None and any(router_name(w.focus.router) is None for w in wrappers):
        return []
    path = {id(m): n for n, m in model.named_modules()}
    keys = [(path[id(w)] + "." if path[id(w)] else "") + "focus." + k
            for w in wrappers for k in w.focus.state_dict()]
    hidden: List[Tuple[nn.Module, Any]] = []
    for name, m in model.named_modules():
        if not hasattr(m, _SAVE_IGNORE) or not callable(getattr(m, "save_pretrained", None)):
            continue
        base = name + "." if name else ""
        mine = {k[len(base):] for k in keys if k.startswith(base)}
        if mine:
            hidden.append((m, m.__dict__.get(_SAVE_IGNORE, _UNSET)))
            setattr(m, _SAVE_IGNORE, set(getattr(m, _SAVE_IGNORE) or ()) | mine)
    return hidden


def _contains(outer: nn.Module, inner: nn.Module) -> bool:
    return any(m is inner for m in outer.modules())


def decompose(model: nn.Module) -> nn.Module:
    r"""Undo :func:`compose_focus`: the original modules, ``requires_grad`` flags and
    ``_keys_to_ignore_on_save`` back.

    Args:
        model (torch.nn.Module): a model returned by :func:`compose_focus`.

    Returns:
        torch.nn.Module: :obj:`model` itself.

    Raises:
        ValueError: if :obj:`model` was not composed.
    """
    state = getattr(model, _STATE_ATTR, None)
    if state is None:
        raise fail(ValueError, "decompose", "model", "a model composed with compose_focus",
                   got_text=f"a {type(model).__name__} that is not composed")
    for parent, name, w in state["wrappers"]:
        setattr(parent, name, w.original)
    for p, flag in state["flags"]:
        p.requires_grad_(flag)
    for m, before in state.get("hidden", []):
        if before is _UNSET:
            m.__dict__.pop(_SAVE_IGNORE, None)
        else:
            setattr(m, _SAVE_IGNORE, before)
    object.__delattr__(model, _STATE_ATTR)
    return model


def focus_layers(model: nn.Module) -> List[FocusAttention]:
    r"""Every :class:`FocusAttention` of :obj:`model`, composed or native."""
    return [m for m in model.modules() if isinstance(m, FocusAttention)]


def router_parameters(model: nn.Module) -> Iterator[nn.Parameter]:
    r"""The router parameters of every Focus layer, a router shared by several layers listed once.
    """
    seen = set()
    for f in focus_layers(model):
        for p in f.router.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                yield p


def set_focus_enabled(model: nn.Module, enabled: bool) -> nn.Module:
    r"""Switch Focus on or off in every Focus layer of :obj:`model`. Off, a composed layer calls
    its original module and a native :class:`FocusAttention` runs full attention."""
    if not isinstance(model, nn.Module):
        raise fail(TypeError, "set_focus_enabled", "model", "a torch.nn.Module", model)
    layers = focus_layers(model)
    if not layers:
        raise fail(ValueError, "set_focus_enabled", "model", "a model with a Focus layer",
                   got_text=f"a {type(model).__name__} without one")
    for f in layers:
        f.enabled = bool(enabled)
    return model


@contextlib.contextmanager
def focus_disabled(model: nn.Module) -> Iterator[nn.Module]:
    r"""Context manager: Focus off inside the block, the previous switches restored after."""
    layers = focus_layers(model)
    before = [f.enabled for f in layers]
    try:
        for f in layers:
            f.enabled = False
        yield model
    finally:
        for f, e in zip(layers, before):
            f.enabled = e


def set_focus_options(model: nn.Module, *, top_k: Optional[int] = None,
                      backend: Optional[str] = None, window: Optional[int] = None,
                      num_sinks: Optional[int] = None) -> nn.Module:
    r"""Change the hard top-:math:`k`, the back-end, the window or the number of sinks of every
    Focus layer, all or nothing.

    Raises:
        ValueError: for a :obj:`top_k` a layer's router refuses (the message names the
            layer), an unknown back-end or a negative window or number of sinks.
        TypeError: for an option of the wrong type.
    """
    where = "set_focus_options"
    layers = focus_layers(model)
    # the layer-wide options are checked before anything changes; top_k's rule is each
    # router's own (1..K, or 0 for window-only routing), so it is checked by assigning it
    if window is not None:
        check_window(window, where=where)
    if num_sinks is not None:
        check_num_sinks(num_sinks, where=where)
    if backend is not None:
        check_choice(backend, "'backend'", BACKENDS, where=where)
    if top_k is not None:
        before = [f.top_k for f in layers]
        for i, f in enumerate(layers):
            try:
                f.top_k = top_k
            except (ValueError, TypeError) as e:  # all or nothing
                for g, k in zip(layers[:i], before):
                    g.top_k = k
                raise type(e)(f"{where}: layer {i}'s {e}") from None
    for f in layers:
        if backend is not None:
            f.backend = backend
        if window is not None:
            f.window = window
        if num_sinks is not None:
            f.num_sinks = num_sinks
    return model

