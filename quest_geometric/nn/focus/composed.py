r"""The composed wrapper: :class:`FocusComposed`, a pretrained attention module with a
Focus router composed onto it (built by :func:`~quest_geometric.nn.focus.compose.compose_focus`),
its keep-type subclasses and its state-dict hooks."""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch import Tensor, nn

from quest_geometric._utils.checks import fail
from quest_geometric.adapters import (AttentionAdapter, AttentionCall, get_attention_adapter,
                                      register_attention_adapter, repeat_kv,
                                      supported_attention_types)
from quest_geometric.nn.focus.decode import FocusDecodeState, focus_decode_attention, route_step
from quest_geometric.nn.focus.hf_cache import focus_cache_states
from quest_geometric.nn.focus.module import FocusAttention
from quest_geometric.nn.focus.sinkhorn import prefix_statistics

__all__ = ["FocusComposed"]


def _composable(module: nn.Module) -> Optional[AttentionAdapter]:
    a = get_attention_adapter(module)
    if a is None or a.probe_only or not a.can_compose(module):
        return None
    return a


def _prescale(q: Tensor, scaling: float, d: int) -> Tensor:
    r"""Fold a module's softmax scaling into the queries: Focus divides by :math:`\sqrt{D}`."""
    factor = scaling * math.sqrt(d)
    return q if factor == 1.0 else q * factor


def _unflatten(rows: Tensor, valid: Optional[Tensor], b: int, t: int, fill: float) -> Tensor:
    """The rows of the real tokens back to ``[B, T, ...]``, :obj:`fill` at padding."""
    if valid is None:
        return rows.view(b, t, *rows.shape[1:])
    out = rows.new_full((b * t, *rows.shape[1:]), fill)
    out[valid.reshape(-1)] = rows
    return out.view(b, t, *rows.shape[1:])


class FocusComposed(nn.Module):
    r"""A pretrained attention module with a Focus router composed onto it.

    The wrapped module is :attr:`original`; its parameters keep their pre-composition names in
    the state dict, so a checkpoint loads into the base model. :attr:`focus` is a
    :class:`~quest_geometric.nn.focus.module.FocusAttention` whose only parameters are the
    router's. A call goes through the module's :class:`~quest_geometric.adapters.AttentionAdapter`:
    project as the module does (updating its cache), drop padding, route and attend
    (:meth:`FocusAttention.attend <quest_geometric.nn.focus.module.FocusAttention.attend>`, or
    :mod:`~quest_geometric.nn.focus.decode` after a cached prefix), apply the output projection.
    Attention dropout is not applied; with Focus disabled the call goes to :attr:`original`.

    Args:
        module (torch.nn.Module): the attention module to wrap (a recognised type).
        causal (bool, optional): causal attention and routing; must agree with a causal
            module, required for one that does either (default: :obj:`None`).
        **focus_kwargs: :class:`FocusAttention` arguments; ``router`` may be a factory
            ``embed_dim -> Router``.

    Shapes:
        - **input:** the original module's arguments (hidden states :math:`(B, T, C)`)
        - **output:** the original module's return structure
    """

    def __init__(self, module: nn.Module, causal: Optional[bool] = None,
                 **focus_kwargs: Any) -> None:
        nn.Module.__init__(self)  # not super(): see _wrapper_class
        adapter = _composable(module)
        name = type(module).__name__
        if adapter is None:
            raise fail(ValueError, "FocusComposed", "module", "a supported attention module "
                       f"({supported_attention_types()})", got_text=f"a {name}")
        if adapter.causal is None:
            if causal is None:
                raise fail(ValueError, "FocusComposed", "causal", f"True or False for a {name} "
                           "(it attends causally or not depending on its use); pass causal=True "
                           "or causal=False", None)
        elif causal is not None and bool(causal) != adapter.causal:
            raise fail(ValueError, "FocusComposed", "causal", f"{adapter.causal} or None for a "
                       f"{name} ({'causal' if adapter.causal else 'bidirectional'} attention)",
                       causal)
        causal = adapter.causal if adapter.causal is not None else bool(causal)
        lay = adapter.heads(module)
        if lay.num_heads % lay.num_kv_heads:
            raise fail(ValueError, "FocusComposed", "module", "an attention module whose "
                       "key/value heads divide its query heads", got_text=f"a {name} with "
                       f"{lay.num_kv_heads} key/value heads for {lay.num_heads} query heads")
        self.adapter = adapter
        self.layout = lay
        self.original = module
        # the router reads the hidden states; q, k, v come from the adapter (attend())
        router = focus_kwargs.get("router")
        if router is not None and not isinstance(router, nn.Module) and callable(router):
            focus_kwargs = dict(focus_kwargs, router=router(lay.embed_dim))  # a factory
        self.focus = FocusAttention.from_projections(
            qkv=_no_projection, out_proj=None, num_heads=lay.num_heads,
            embed_dim=lay.embed_dim, causal=causal, **focus_kwargs)
        self._register_state_dict_hook(_drop_original_prefix)
        self._register_load_state_dict_pre_hook(_add_original_prefix, with_module=True)

    @property
    def router(self) -> nn.Module:
        """The router of this layer (a :class:`~quest_geometric.nn.focus.router.Router`)."""
        return self.focus.router

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if not self.focus.enabled or self.focus.gate is None:
            return self.original(*args, **kwargs)
        a, m, lay = self.adapter, self.original, self.layout
        call = a.parse(m, args, kwargs)
        if call.causal is not None and bool(call.causal) != self.focus.causal:
            raise ValueError(
                f"compose_focus ({type(m).__name__}): the call asks for "
                f"{'causal' if call.causal else 'bidirectional'} attention (its attention "
                f"mask) but the layer was composed with causal={self.focus.causal}; compose "
                f"with causal={bool(call.causal)}")
        x = call.hidden
        if x.dim() != 3:
            raise fail(ValueError, f"compose_focus ({type(m).__name__})", "hidden_states",
                       "of shape [B, T, C]", x)
        q, k, v = a.project(m, call)
        k_all, v_all = a.update_cache(m, call, k, v)
        if call.cache_len == 0:
            o = self._prefix(x, q, k, v, call)
        else:
            o = self._continue(x, q, k_all, v_all, call)
        b, t = x.shape[:2]
        y = a.output(m, o.transpose(1, 2).reshape(b, t, lay.num_heads * lay.head_dim))
        return a.finish(m, y, call)

    def _prefix(self, x: Tensor, q: Tensor, k: Tensor, v: Tensor,
                call: AttentionCall) -> Tensor:
        """Focus over whole sequences (no cached prefix); padding dropped. ``[B, H, T, D]``."""
        lay = self.layout
        b, t, c = x.shape
        h, d = lay.num_heads, lay.head_dim
        rep = h // lay.num_kv_heads
        q = _prescale(q, self.adapter.scaling(self.original), d)
        k, v = repeat_kv(k, rep), repeat_kv(v, rep)
        flat = [z.transpose(1, 2).reshape(b * t, h, d) for z in (q, k, v)]
        valid = call.valid[:, -t:] if call.valid is not None else None
        seq = torch.arange(b, device=x.device).repeat_interleave(t)
        xf = x.reshape(b * t, c)
        if valid is not None:
            sel = valid.reshape(-1)
            xf, seq = xf[sel], seq[sel]
            flat = [z[sel] for z in flat]
        batch = seq if b > 1 else None
        # filling a cache: the routing also collects the statistics decoding continues from
        totals: Optional[List[Tensor]] = [] if call.cache is not None else None
        of, rout = self.focus.attend(xf, *flat, batch=batch, col_totals=totals)
        o = _unflatten(of, valid, b, t, 0.0)
        if call.cache is not None:
            col = prefix_statistics(totals, b, self.focus.num_groups, xf.device)
            self._start_state(call, rout.groups, valid, b, t, col)
        return o.transpose(1, 2)

    def _start_state(self, call: AttentionCall, groups: Tensor, valid: Optional[Tensor],
                     b: int, t: int, col: Tensor) -> None:
        kk = groups.size(-1)
        g = _unflatten(groups, valid, b, t, -1)
        state = FocusDecodeState(g.new_empty(b, 0, kk), g.new_empty(b, 0),
                                 col, torch.zeros(b, dtype=torch.long, device=g.device),
                                 store=True)
        state.append(g, valid)
        focus_cache_states(call.cache)[id(self)] = state

    def _continue(self, x: Tensor, q: Tensor, k_all: Tensor, v_all: Tensor,
                  call: AttentionCall) -> Tensor:
        r"""New tokens after a cached prefix, routed from the stored statistics. ``[B, H, T, D]``.
        """
        who = f"compose_focus ({type(self.original).__name__})"
        state = focus_cache_states(call.cache).get(id(self))
        if state is None:
            raise ValueError(f"{who}: the KV cache holds {call.cache_len} tokens that this "
                             f"Focus layer did not route (it was filled with Focus disabled or "
                             f"by another model); start from an empty cache with Focus enabled")
        if self.focus.training:
            raise ValueError(f"{who}: cached decoding with Focus runs the hard (inference) "
                             f"path; call model.eval() first")
        b, t = x.shape[:2]
        if len(state) != call.cache_len:
            raise ValueError(f"{who}: the cache holds {call.cache_len} tokens but the Focus "
                             f"state {len(state)}; was the cache cropped or reused?")
        valid = call.valid[:, -t:] if call.valid is not None else None
        route_step(self.focus.router, x, state, valid, return_groups=False)
        return focus_decode_attention(q, k_all, v_all, state, self.focus.window,
                                      self.adapter.scaling(self.original),
                                      num_sinks=self.focus.num_sinks)

    def __repr__(self) -> str:
        f = self.focus
        return (f"{self.__class__.__name__}({type(self.original).__name__}, "
                f"num_groups={f.num_groups}, top_k={f.router.top_k}, window={f.window}, "
                f"{f'num_sinks={f.num_sinks}, ' if f.num_sinks else ''}"
                f"backend={f.backend!r}, gate={f.gate!r}, enabled={f.enabled})")


_TYPED: Dict[type, type] = {}


def _read_through(self: nn.Module, name: str) -> Any:
    r"""``__getattr__`` of a keep-type wrapper: its own attributes, then the original module's."""
    try:
        return nn.Module.__getattr__(self, name)
    except AttributeError:
        original = self.__dict__.get("_modules", {}).get("original")
        if original is None:
            raise
        return getattr(original, name)


def _typed_class(cls: type) -> type:
    """The subclass of :class:`FocusComposed` and ``cls`` (created once per class)."""
    if cls not in _TYPED:
        name = f"FocusComposed{cls.__name__}"
        _TYPED[cls] = type(name, (FocusComposed, cls), {
            "__getattr__": _read_through, "__setstate__": nn.Module.__setstate__,
            "__reduce_ex__": _reduce_typed, "_keep_type_of": cls,
            "__module__": __name__, "__qualname__": name,
            "__doc__": f"A :class:`FocusComposed` that is also a ``{cls.__name__}``."})
    return _TYPED[cls]


def _new_typed(cls: type) -> nn.Module:
    return object.__new__(_typed_class(cls))


def _reduce_typed(self: nn.Module, protocol: int) -> Any:
    # pickled through the original's class, which pickles by reference
    return _new_typed, (type(self)._keep_type_of,), self.__dict__


def _wrapper_class(adapter: AttentionAdapter, module: nn.Module) -> type:
    r""":class:`FocusComposed`, or for an adapter with ``keep_type`` a subclass of it and of the
    module's class (so that ``isinstance(layer, type(module))`` still holds, e.g. for
    ``GPSConv``'s check on ``MultiheadAttention``)."""
    return _typed_class(type(module)) if adapter.keep_type else FocusComposed


class _ComposedProbeAdapter(AttentionAdapter):
    r"""Probe a composed layer through its original module's adapter (the same queries and keys)."""

    probe_only = True

    def qk_view(self, module: nn.Module, args: tuple, kwargs: Dict[str, Any]) -> Any:
        return module.adapter.qk_view(module.original, args, kwargs)


register_attention_adapter(FocusComposed, _ComposedProbeAdapter(), builtin=True)


def _no_projection(x: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    raise RuntimeError("FocusComposed: queries, keys and values come from the adapter; "
                       "call the composed module, not its FocusAttention")


def _drop_original_prefix(module: nn.Module, state_dict: Dict[str, Any], prefix: str,
                          local_metadata: Any) -> None:
    r"""State-dict hook: ``<prefix>original.<name>`` -> ``<prefix><name>``."""
    inner = prefix + "original."
    for key in [k for k in state_dict if k.startswith(inner)]:
        state_dict[prefix + key[len(inner):]] = state_dict.pop(key)


def _add_original_prefix(module: nn.Module, state_dict: Dict[str, Any], prefix: str,
                         *args: Any) -> None:
    r"""Load pre-hook, the inverse of :func:`_drop_original_prefix` (also accepts the
    ``original.``-prefixed names)."""
    for key in [k for k in state_dict if k.startswith(prefix)]:
        rest = key[len(prefix):]
        if rest.startswith("original.") or rest.startswith("focus."):
            continue
        state_dict[prefix + "original." + rest] = state_dict.pop(key)

