r"""Compose Focus sparse attention onto a pretrained model (centroid-only retrofit).

:func:`compose_focus` wraps every attention layer of a model that an adapter of
:mod:`quest_geometric.adapters` recognises in a :class:`FocusComposed` module that keeps the
layer's own query/key/value/output projections (the very same parameter objects, never
copies) and adds one :class:`~quest_geometric.nn.focus.router.FocusRouter` per layer, inside a
:class:`~quest_geometric.nn.focus.module.FocusAttention`. Every original weight is frozen,
so training touches only :math:`\mathbf{W}_g` and the centroids (the paper's "composable"
setting, Yao et al., arXiv 2604.03260). :func:`decompose` puts the original modules back (the
same objects) and restores their ``requires_grad`` flags.

Recognised attention classes (:func:`~quest_geometric.adapters.supported_attention_types`):
CharGPT's :class:`~quest_geometric.models.char_gpt.CausalSelfAttention`; Hugging Face
``GPT2Attention``, ``GPTNeoXAttention`` and the Llama family (``LlamaAttention``,
``MistralAttention``, ``Qwen2Attention``, e.g. SmolLM2); PyTorch's
:class:`torch.nn.MultiheadAttention` (e.g. inside PyG's ``GPSConv``). Another class is taught
with one :func:`~quest_geometric.adapters.register_attention_adapter` call.

What a composed model supports with Focus on:

* **padded batches** through ``attention_mask`` (left or right padding, with the model's
  ``position_ids``): padding tokens are dropped before routing (PyG style: the real tokens of
  all sequences are laid out flat with a ``batch`` vector), so they neither enter the router's
  prefix statistics nor are attended, and each sequence gives what it gives alone;
* **cached generation** (``generate(use_cache=True)``): each cached token's hard groups and
  the router's running Sinkhorn statistics are kept beside the cache
  (:mod:`quest_geometric.nn.focus.decode`), each new token is routed from the prefix only and
  attends to its window plus the cached tokens that share one of its groups (for one
  sequence without padding, each layer also keeps the out-of-window keys and values copied
  into one store per group set, a second copy of the cache, so that a step reads only what
  it attends to);
* **saving**: the state dict keeps the original module's parameter names (and holds the
  routers under ``<layer>.focus.router.*``); a Hugging Face model's ``save_pretrained`` leaves
  the router entries out (they are added to its ``_keys_to_ignore_on_save``, removed again by
  :func:`decompose`), so it writes exactly the original model's keys and ``from_pretrained``
  of the base class reloads the original weights exactly, with nothing unexpected;
  :func:`save_routers` / :func:`load_routers` store and restore the routers.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
from typing import Any, Dict, Iterator, List, Optional, Tuple

import torch
from torch import Tensor, nn

from quest_geometric._utils.checks import (
    all_finite,
    check_choice,
    check_int,
    check_num_sinks,
    check_window,
    fail,
)
from quest_geometric.adapters import (
    AttentionAdapter,
    AttentionCall,
    get_attention_adapter,
    register_attention_adapter,
    repeat_kv,
    supported_attention_types,
)
from quest_geometric.nn.focus.decode import (
    FocusDecodeState,
    focus_decode_attention,
    route_step,
)
from quest_geometric.nn.focus.far_bias_router import FarBiasRouter
from quest_geometric.nn.focus.module import BACKENDS, FocusAttention
from quest_geometric.nn.focus.random_router import RandomGroupsRouter
from quest_geometric.nn.focus.sinkhorn import prefix_statistics
from quest_geometric.nn.focus.window_router import WindowOnlyRouter

__all__ = ["compose_focus", "decompose", "FocusComposed", "set_focus_enabled", "focus_disabled",
           "set_focus_options", "focus_layers", "router_parameters", "save_routers",
           "load_routers", "focus_cache_states", "SUPPORTED_ATTENTION", "ROUTERS_FILE",
           "ROUTERS_CONFIG", "LEGACY_ROUTERS_FILE", "read_routers", "read_legacy_routers"]

#: Names of the attention module types recognised when this module was imported (the live
#: list, including user registrations, is
#: :func:`quest_geometric.adapters.supported_attention_types`).
SUPPORTED_ATTENTION: Tuple[str, ...] = tuple(supported_attention_types())
#: File :func:`save_routers` writes the router tensors to (safetensors, no pickle).
ROUTERS_FILE = "focus_routers.safetensors"
#: File :func:`save_routers` writes the composition, versions and tensor digest to.
ROUTERS_CONFIG = "focus_routers.json"
#: The pickle-based file of earlier versions (read with ``weights_only=True`` or refused).
LEGACY_ROUTERS_FILE = "focus_routers.pt"
_CACHE_ATTR = "_quest_focus_states"


def _composable(module: nn.Module) -> Optional[AttentionAdapter]:
    a = get_attention_adapter(module)
    if a is None or a.probe_only or not a.can_compose(module):
        return None
    return a


def _prescale(q: Tensor, scaling: float, d: int) -> Tensor:
    r"""Fold a module's softmax scaling into the queries: Focus divides by :math:`\sqrt{D}`."""
    factor = scaling * math.sqrt(d)
    return q if factor == 1.0 else q * factor


def focus_cache_states(cache: Any) -> Dict[int, FocusDecodeState]:
    """The Focus decoding states kept on a KV cache object, one
    :class:`~quest_geometric.nn.focus.decode.FocusDecodeState` per composed layer keyed by
    ``id(layer)`` (created on first use; beam search's ``reorder_cache`` reorders them too,
    ``crop`` is refused). A composed layer's prefill registers its state here; code that
    builds a state itself (e.g. a benchmark) registers it the same way.

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


# --------------------------------------------------------------------------------------
# the wrapper
# --------------------------------------------------------------------------------------


class FocusComposed(nn.Module):
    r"""A pretrained attention module with a Focus router composed onto it.

    The wrapped module is kept as :attr:`original`; its parameters are the model's own and,
    in the state dict, keep the names they had before composition (``<path>.q_proj.weight``,
    not ``<path>.original.q_proj.weight``), so a checkpoint of the composed model loads into
    the base model. :attr:`focus` is a :class:`~quest_geometric.nn.focus.module.FocusAttention`
    whose only parameters are the router's (``<path>.focus.router.*``). Each call goes through
    the module's :class:`~quest_geometric.adapters.AttentionAdapter`:

    1. parse the call (hidden states, padding mask, rotary embeddings, KV cache);
    2. project the new tokens to per-head queries, keys and values exactly as the module
       does (rotary embeddings applied; grouped-query keys and values repeated to the query
       heads; the module's own scaling folded into the queries) and store keys and values
       in the cache as the module would;
    3. drop padding tokens, route the real tokens of each sequence and attend with Focus
       (:meth:`FocusAttention.attend <quest_geometric.nn.focus.module.FocusAttention.attend>`);
       for a call that continues a cache, route the new tokens from the stored prefix
       statistics and attend to the keys Focus lets them see
       (:mod:`quest_geometric.nn.focus.decode`);
    4. apply the module's output projection and return what the module returns.

    Attention-probability dropout of the original is not applied on the Focus path. With
    Focus disabled (``focus.enabled = False``, see :func:`set_focus_enabled`) the call is
    forwarded to :attr:`original` unchanged, so the model is exactly the original one.

    Args:
        module (torch.nn.Module): the attention module to wrap (a recognised type).
        causal (bool, optional): causal attention and prefix-causal routing; must agree with
            a causal module, is required for a module that does either
            (:class:`torch.nn.MultiheadAttention`) (default: :obj:`None`, the module's own).
        **focus_kwargs: :class:`FocusAttention` arguments (``num_groups``, ``top_k``,
            ``window``, ``group_dim``, ``tau``, ``sinkhorn_iters``, ``gate``, ``backend``...);
            ``router`` may also be a factory ``embed_dim -> Router`` (see
            :func:`compose_focus`).

    Shapes:
        - **input:** the original module's forward arguments (hidden states
          :math:`(B, T, C)`)
        - **output:** the original module's return structure (a tensor for CharGPT, a tuple
          ``(out, None)`` for the Hugging Face modules and ``MultiheadAttention``)
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
        """The :class:`~quest_geometric.nn.focus.router.FocusRouter` of this layer."""
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
        if valid is None:
            o = of.view(b, t, h, d)
        else:
            o = of.new_zeros(b * t, h, d)
            o[valid.reshape(-1)] = of
            o = o.view(b, t, h, d)
        if call.cache is not None:
            col = prefix_statistics(totals, b, self.focus.num_groups, xf.device)
            self._start_state(call, rout.groups, valid, b, t, col)
        return o.transpose(1, 2)

    def _start_state(self, call: AttentionCall, groups: Tensor, valid: Optional[Tensor],
                     b: int, t: int, col: Tensor) -> None:
        kk = groups.size(-1)
        if valid is None:
            g = groups.view(b, t, kk)
        else:
            g = groups.new_full((b * t, kk), -1)
            g[valid.reshape(-1)] = groups
            g = g.view(b, t, kk)
        state = FocusDecodeState(g.new_empty(b, 0, kk), g.new_empty(b, 0),
                                 col, torch.zeros(b, dtype=torch.long, device=g.device),
                                 store=True)
        state.append(g, valid)
        focus_cache_states(call.cache)[id(self)] = state

    def _continue(self, x: Tensor, q: Tensor, k_all: Tensor, v_all: Tensor,
                  call: AttentionCall) -> Tensor:
        """New tokens after a cached prefix: route from the stored statistics, attend to the
        keys Focus lets them see. ``[B, H, T, D]``."""
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
    """``__getattr__`` of a keep-type wrapper: its own parameters, buffers and submodules,
    then the original module's attributes (``batch_first``, ``in_proj_weight``...)."""
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
    """:class:`FocusComposed`, or for an adapter with ``keep_type`` a subclass of it and of
    the module's class (so that ``isinstance(layer, type(module))`` still holds, e.g. for
    ``GPSConv``'s check on ``MultiheadAttention``); :class:`FocusComposed` comes first in its
    MRO, the original's attributes are read through."""
    return _typed_class(type(module)) if adapter.keep_type else FocusComposed


class _ComposedProbeAdapter(AttentionAdapter):
    """Probe a composed layer through its original module's adapter: the same queries and
    keys (the Focus path projects them the same way); the logit ranks and the entropy are
    those of the original dense attention over them."""

    probe_only = True

    def qk_view(self, module: nn.Module, args: tuple, kwargs: Dict[str, Any]) -> Any:
        return module.adapter.qk_view(module.original, args, kwargs)


register_attention_adapter(FocusComposed, _ComposedProbeAdapter(), builtin=True)


def _no_projection(x: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    raise RuntimeError("FocusComposed: queries, keys and values come from the adapter; "
                       "call the composed module, not its FocusAttention")


def _drop_original_prefix(module: nn.Module, state_dict: Dict[str, Any], prefix: str,
                          local_metadata: Any) -> None:
    """State-dict hook: ``<prefix>original.<name>`` -> ``<prefix><name>`` (the names the
    module's parameters had before composition)."""
    inner = prefix + "original."
    for key in [k for k in state_dict if k.startswith(inner)]:
        state_dict[prefix + key[len(inner):]] = state_dict.pop(key)


def _add_original_prefix(module: nn.Module, state_dict: Dict[str, Any], prefix: str,
                         *args: Any) -> None:
    """Load pre-hook, the inverse of :func:`_drop_original_prefix` (also accepts the
    ``original.``-prefixed names of older checkpoints)."""
    for key in [k for k in state_dict if k.startswith(prefix)]:
        rest = key[len(prefix):]
        if rest.startswith("original.") or rest.startswith("focus."):
            continue
        state_dict[prefix + "original." + rest] = state_dict.pop(key)


# --------------------------------------------------------------------------------------
# compose / decompose and switches
# --------------------------------------------------------------------------------------

_STATE_ATTR = "_focus_composition"


def compose_focus(model: nn.Module, num_groups: int = 4, top_k: int = 2, window: int = 128,
                  group_dim: int = 16, tau: float = 0.1, sinkhorn_iters: int = 10,
                  gate: Optional[str] = "additive", backend: str = "blocks",
                  freeze: bool = True, causal: Optional[bool] = None,
                  router: Any = None, num_sinks: int = 0, **focus_kwargs: Any) -> nn.Module:
    r"""Compose Focus sparse attention onto every supported attention layer of
    :obj:`model`, in place (centroid-only retrofit of Yao et al., arXiv 2604.03260).

    Each attention layer becomes a :class:`FocusComposed` that reuses the layer's own
    projections and adds a router with
    :math:`d \cdot d_g + K d_g` parameters, so the whole model gains

    .. math::
        L \, (d \, d_g + K \, d_g)

    trainable parameters (GPT-2 124M, :math:`d_g = 16`, :math:`K = 4`: 148,224). In
    inference token :math:`i` attends to the causal pairs with :math:`i - j \le w`, a shared
    hard group or :math:`j < s` (the attention sinks); in training the soft gate of
    ``gate`` applies (see :class:`~quest_geometric.nn.focus.module.FocusAttention`).
    Routing is prefix-causal.

    Args:
        model (torch.nn.Module): a model containing recognised attention modules
            (:func:`~quest_geometric.adapters.supported_attention_types`).
        num_groups (int): groups :math:`K` (default: :obj:`4`, the paper's retrofit).
        top_k (int): hard groups per token, :math:`1..K` (default: :obj:`2`).
        window (int): local window :math:`w \ge 0` (default: :obj:`128`).
        group_dim (int): routing dimension :math:`d_g` (default: :obj:`16`).
        tau (float): Sinkhorn temperature (default: :obj:`0.1`).
        sinkhorn_iters (int): Sinkhorn iterations (default: :obj:`10`).
        gate (str, optional): training gate, ``'additive'``, ``'multiplicative'`` or
            ``'straight_through'`` (hard top-:math:`k` pattern, soft gradient; see
            :func:`~quest_geometric.nn.focus.dense.focus_soft_attention`)
            (default: :obj:`'additive'`).
        backend (str): hard back-end, ``'blocks'``, ``'edges'`` or ``'dense'``
            (default: :obj:`'blocks'`).
        freeze (bool): set ``requires_grad=False`` on every parameter of :obj:`model` that
            existed before (the flags are restored by :func:`decompose`), so only the routers
            train (default: :obj:`True`).
        causal (bool, optional): causal attention and prefix-causal routing. Decoder
            attention (CharGPT, GPT-2, GPT-NeoX, the Llama family) is causal and refuses
            ``False``; :class:`torch.nn.MultiheadAttention` does either and needs it
            (``causal=False`` for the global attention of PyG's ``GPSConv``: Focus over each
            graph's nodes, non-causal routing, ``window=0`` allowed) (default: :obj:`None`,
            each module's own).
        router (Router or callable, optional): the routing rule instead of a learned
            :class:`~quest_geometric.nn.focus.router.FocusRouter` per layer: a module
            following :class:`~quest_geometric.nn.focus.router.Router` (one object shared by
            every layer, e.g. a content-free router) or a factory ``embed_dim -> Router``
            called once per layer; :obj:`num_groups`, :obj:`top_k`, :obj:`group_dim`,
            :obj:`tau` and :obj:`sinkhorn_iters` are then not used. Models composed this way
            can be saved with :func:`save_routers` only when the router is a content-free
            :class:`~quest_geometric.nn.focus.window_router.WindowOnlyRouter`,
            :class:`~quest_geometric.nn.focus.random_router.RandomGroupsRouter` or
            :class:`~quest_geometric.nn.focus.far_bias_router.FarBiasRouter` (recorded by
            type and options, with its parameters if any) (default: :obj:`None`).
        num_sinks (int): attention sinks :math:`s \ge 0`: the first :math:`s` tokens of every
            sequence are always attended (StreamingLLM); in cached decoding, the first
            :math:`s` positions of the cache (default: :obj:`0`).
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
    """Add the router entries of the state dict (``<layer>.focus.*``) to the
    ``_keys_to_ignore_on_save`` of every Hugging Face model in :obj:`model` (the set of exact
    keys ``PreTrainedModel.save_pretrained`` leaves out), so that ``save_pretrained`` writes
    the original model's keys only and :func:`save_routers` carries the routers. The state
    dict itself keeps them. Routers :func:`save_routers` cannot store (a given ``router``
    other than the content-free ones) stay in the saved weights. Returns ``(module, value
    before)`` for :func:`decompose`, which restores the values."""
    if router is not None and any(_router_spec(w.focus.router) is None for w in wrappers):
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
    r"""Undo :func:`compose_focus`: put every original attention module (the same object)
    back in place and restore the ``requires_grad`` flags the parameters had before, and the
    ``_keys_to_ignore_on_save`` of the Hugging Face models in it.

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
    r"""Every :class:`FocusAttention` of :obj:`model`: the ones composed by
    :func:`compose_focus` and native ones (e.g. ``CharGPT(attention='focus')``)."""
    return [m for m in model.modules() if isinstance(m, FocusAttention)]


def router_parameters(model: nn.Module) -> Iterator[nn.Parameter]:
    r"""The router parameters of every Focus layer (:math:`\mathbf{W}_g` and centroids of a
    learned router; the per-head temperature and far-pair bias of a
    :class:`~quest_geometric.nn.focus.far_bias_router.FarBiasRouter`; none for a
    parameter-free router). A router shared by several layers is listed once."""
    seen = set()
    for f in focus_layers(model):
        for p in f.router.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                yield p


def set_focus_enabled(model: nn.Module, enabled: bool) -> nn.Module:
    r"""Switch Focus on or off in every Focus layer of :obj:`model`. Off, a composed layer
    calls its original module (the model is exactly the original) and a native
    :class:`FocusAttention` runs full causal attention."""
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
    r"""Change the hard top-:math:`k`, the back-end, the window or the number of attention
    sinks of every Focus layer (e.g. to evaluate one trained router at top-:math:`k` = 1, 2
    and :math:`K`).

    All or nothing: when any option is refused, no layer is changed.

    Raises:
        ValueError: for a :obj:`top_k` a layer's router refuses (outside :math:`1..K`; the
            message names the layer), an unknown back-end or a negative window or number of
            sinks.
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


_FORMAT = "quest_geometric.focus_routers"
_VERSION = 2
# What :func:`save_routers` reads off the running layers (FocusAttention first, then router).
# Files written before ``num_sinks`` existed do not record it: they compose with 0 sinks.
_OPTIONS = ("num_groups", "top_k", "window", "group_dim", "tau", "sinkhorn_iters", "gate",
            "backend", "gate_scale", "gate_bias", "num_sinks")
_CONFIG_KEYS = frozenset(_OPTIONS + ("causal", "router"))
# The content-free routers a router file may name (``config["router"]``): their record's keys.
_ROUTER_SPECS = {"window_only": frozenset({"type", "causal"}),
                 "far_bias": frozenset({"type", "causal", "num_heads"}),
                 "random_groups": frozenset({"type", "causal", "num_groups", "top_k", "seed"})}


def _router_spec(router: Any) -> Optional[Dict[str, Any]]:
    """The JSON record of a content-free router :func:`save_routers` can write, or
    :obj:`None` for any other router (exact types: a subclass may route differently)."""
    if type(router) is WindowOnlyRouter:
        return {"type": "window_only", "causal": router.causal}
    if type(router) is FarBiasRouter:  # its parameters are saved as tensors
        return {"type": "far_bias", "causal": router.causal, "num_heads": router.num_heads}
    if type(router) is RandomGroupsRouter:
        return {"type": "random_groups", "causal": router.causal,
                "num_groups": router.num_groups, "top_k": router.top_k, "seed": router.seed}
    return None


def _router_from_spec(spec: Dict[str, Any]) -> nn.Module:
    """The router a checked record (:func:`_check_config`) describes."""
    if spec["type"] == "window_only":
        return WindowOnlyRouter(causal=spec["causal"])
    if spec["type"] == "far_bias":
        return FarBiasRouter(spec["num_heads"], causal=spec["causal"])
    return RandomGroupsRouter(spec["num_groups"], top_k=spec["top_k"], seed=spec["seed"],
                              causal=spec["causal"])
_CONVERT = "python -m quest_geometric.nn.focus.convert_routers"


def _running_config(state: Dict[str, Any]) -> Dict[str, Any]:
    """The composition arguments the layers actually run with (after set_focus_options)."""
    config = {k: v for k, v in state["config"].items() if k in _CONFIG_KEYS and k != "router"}
    keys = _OPTIONS + (("router",) if state["config"].get("router") is not None else ())
    for key in keys:
        values = []
        for _, _, w in state["wrappers"]:
            f = w.focus
            if key == "router":
                v = _router_spec(f.router)
            elif hasattr(f, key):
                v = getattr(f, key)
            else:  # a content-free router has no group_dim, tau, sinkhorn_iters
                v = getattr(f.router, key, state["config"].get(key))
            if v not in values:
                values.append(v)
        if len(values) > 1:
            raise ValueError(f"save_routers: the Focus layers run with different {key!r} "
                             f"({values}); give them one value (set_focus_options) first")
        config[key] = values[0]
    return json.loads(json.dumps(config))


def _versions() -> Dict[str, Optional[str]]:
    from importlib import metadata

    out: Dict[str, Optional[str]] = {"torch": torch.__version__}
    for dist in ("quest_geometric", "transformers"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def _write_router_files(folder: str, config: Dict[str, Any], layers: List[str],
                        tensors: Dict[str, Tensor]) -> str:
    """Write :data:`ROUTERS_FILE` then :data:`ROUTERS_CONFIG` (with the tensors' digest),
    each atomically; returns the folder."""
    import hashlib

    from safetensors.torch import save as st_save

    from quest_geometric._utils import atomic_write_bytes, atomic_write_json

    data = st_save({k: t.detach().cpu().contiguous() for k, t in tensors.items()})
    os.makedirs(folder, exist_ok=True)
    atomic_write_bytes(os.path.join(folder, ROUTERS_FILE), data)
    atomic_write_json(os.path.join(folder, ROUTERS_CONFIG), {
        "format": _FORMAT, "version": _VERSION, "config": config, "layers": list(layers),
        "versions": _versions(), "sha256": hashlib.sha256(data).hexdigest()}, indent=1,
        sort_keys=True)
    return folder


def save_routers(model: nn.Module, path: str) -> str:
    r"""Save the routers of a composed model into the folder :obj:`path` (e.g. the folder of
    ``model.save_pretrained(path)``), as a shareable adapter: the tensors in
    :data:`ROUTERS_FILE` (safetensors, no pickle) and, in :data:`ROUTERS_CONFIG`, the
    :func:`compose_focus` arguments the layers run with (read off the layers, so options
    changed by :func:`set_focus_options` are the ones recorded; a content-free router,
    :class:`~quest_geometric.nn.focus.window_router.WindowOnlyRouter`,
    :class:`~quest_geometric.nn.focus.random_router.RandomGroupsRouter` or
    :class:`~quest_geometric.nn.focus.far_bias_router.FarBiasRouter`, is recorded by
    type and options under ``"router"``, with its parameters if any), the versions of
    quest_geometric, torch and transformers, and the SHA-256 digest of the tensors file.

    Each tensor is named ``"{layer module path}.{router state dict key}"``;
    :func:`load_routers` recomposes a freshly loaded base model with them. Each file is
    written atomically (a temporary file in the same folder, renamed into place).

    Args:
        model (torch.nn.Module): a model returned by :func:`compose_focus`.
        path (str): a folder (created if missing).

    Returns:
        str: the path of the written tensors file.

    Raises:
        ValueError: if :obj:`model` was not composed with :func:`compose_focus` (with the
            default learned routers or a content-free one), or its layers run with different
            options.
    """
    state = getattr(model, _STATE_ATTR, None)
    if state is None:
        raise fail(ValueError, "save_routers", "model", "a model composed with compose_focus",
                   got_text=f"a {type(model).__name__} that is not composed")
    if state["config"].get("router") is not None and any(
            _router_spec(w.focus.router) is None for _, _, w in state["wrappers"]):
        raise ValueError("save_routers: the model was composed with a given 'router'; only "
                         "the default learned routers and the content-free WindowOnlyRouter, "
                         "RandomGroupsRouter and FarBiasRouter can be saved and recomposed")
    config = _running_config(state)
    names = {id(m): n for n, m in model.named_modules()}
    layers = [names[id(w)] for _, _, w in state["wrappers"]]
    tensors = {f"{n}.{k}": t for n, (_, _, w) in zip(layers, state["wrappers"])
               for k, t in w.router.state_dict().items()}
    _write_router_files(os.fspath(path), config, layers, tensors)
    return os.path.join(os.fspath(path), ROUTERS_FILE)


def _check_config(where: str, file: str, config: Any) -> Dict[str, Any]:
    from quest_geometric._utils.untrusted import refused

    if not isinstance(config, dict) or not config:
        raise refused(where, file, "it records no composition arguments ('config')")
    unknown = sorted(set(config) - _CONFIG_KEYS)
    if unknown:
        raise refused(where, file, f"its config has unknown composition arguments {unknown}")
    spec = config.get("router")
    if spec is not None:
        if not isinstance(spec, dict) or spec.get("type") not in _ROUTER_SPECS \
                or set(spec) != _ROUTER_SPECS[spec["type"]] \
                or not isinstance(spec["causal"], bool):
            raise refused(where, file, f"its 'router' record {spec!r} names no content-free "
                          f"router (one of {sorted(_ROUTER_SPECS)} with its options)")
        try:
            _router_from_spec(spec)
        except (TypeError, ValueError) as e:
            raise refused(where, file, f"its 'router' record {spec!r} is invalid", e) from None
    return dict(config)


def _check_tensors(where: str, file: str, tensors: Any, allow_empty: bool = False
                   ) -> Dict[str, Tensor]:
    from quest_geometric._utils.untrusted import refused

    if not isinstance(tensors, dict) or (not tensors and not allow_empty):
        raise refused(where, file, "it holds no router tensors")
    for name, t in tensors.items():
        if not isinstance(name, str) or not isinstance(t, Tensor):
            raise refused(where, file, f"entry {name!r} is not a named tensor")
        if not t.is_floating_point():
            raise refused(where, file, f"tensor {name!r} has dtype {t.dtype}, a floating "
                          f"dtype was expected")
        if not all_finite(t):
            raise refused(where, file, f"tensor {name!r} holds NaN or infinite values")
    return tensors


def _read_new(where: str, tensors_file: str, config_file: str
              ) -> Tuple[str, Dict[str, Any], Dict[str, Tensor]]:
    import hashlib

    from safetensors.torch import load as st_load

    from quest_geometric._utils.untrusted import refused

    if not os.path.isfile(config_file):
        raise refused(where, tensors_file, f"its config {os.path.basename(config_file)!r} "
                      f"is missing (save_routers writes both files)")
    if not os.path.isfile(tensors_file):
        raise refused(where, config_file, f"its tensors file "
                      f"{os.path.basename(tensors_file)!r} is missing")
    try:
        with open(config_file, "rb") as fh:
            meta = json.loads(fh.read(1 << 20).decode("utf-8"))
    except BaseException as e:  # nothing read from the file may escape as success
        raise refused(where, config_file, "it is not a JSON router config", e) from None
    if not isinstance(meta, dict) or meta.get("format") != _FORMAT:
        raise refused(where, config_file, "it is not a router config of quest_geometric "
                      f"(no 'format': {_FORMAT!r})")
    if meta.get("version") != _VERSION:
        raise refused(where, config_file, f"it has version {meta.get('version')!r}, this "
                      f"library reads version {_VERSION}")
    config = _check_config(where, config_file, meta.get("config"))
    digest = meta.get("sha256")
    if not isinstance(digest, str):
        raise refused(where, config_file, "it records no 'sha256' digest of the tensors")
    try:
        with open(tensors_file, "rb") as fh:
            data = fh.read()
    except OSError as e:
        raise refused(where, tensors_file, "it cannot be read", e) from None
    if hashlib.sha256(data).hexdigest() != digest:
        raise refused(where, tensors_file, f"its SHA-256 digest does not match the one "
                      f"recorded in {os.path.basename(config_file)!r} (the file is damaged "
                      f"or was changed)")
    try:
        tensors = st_load(data)
    except BaseException as e:  # nothing read from the file may escape as success
        raise refused(where, tensors_file, "it is not a safetensors file", e) from None
    return tensors_file, config, _check_tensors(where, tensors_file, tensors,
                                                allow_empty=config.get("router") is not None)


def read_legacy_routers(path: str, where: str, allow_pickle: bool = False
                        ) -> Tuple[Dict[str, Any], Dict[str, Tensor]]:
    r"""Read a :data:`LEGACY_ROUTERS_FILE` of earlier versions as ``(config, tensors)`` with
    the tensors named as in :data:`ROUTERS_FILE`: with ``torch.load(weights_only=True)``, or
    refused with the one-line command that converts it. :obj:`allow_pickle` (for a file
    you wrote yourself, used by :mod:`~quest_geometric.nn.focus.convert_routers`) unpickles
    it in full: it can run code."""
    from quest_geometric._utils.untrusted import load_tensors, refused

    if allow_pickle:
        try:
            blob = torch.load(path, map_location="cpu", weights_only=False)
        except Exception as e:
            raise refused(where, path, "it is not a PyTorch file", e) from None
    else:
        try:
            blob = load_tensors(path, where)
        except ValueError as e:
            raise ValueError(f"{e}; if you wrote it yourself, convert it with `{_CONVERT} "
                             f"--allow-pickle {path} NEW_FOLDER`") from None
    if not isinstance(blob, dict) or blob.get("format") != 1 or not isinstance(
            blob.get("routers"), dict):
        raise refused(where, path, "it is not a router file of quest_geometric")
    config = _check_config(where, path, blob.get("config"))
    tensors: Dict[str, Any] = {}
    for layer, sd in blob["routers"].items():
        if not isinstance(sd, dict):
            raise refused(where, path, f"layer {layer!r} holds no state dict")
        tensors.update({f"{layer}.{k}": t for k, t in sd.items()})
    return config, _check_tensors(where, path, tensors)


def read_routers(path: str | os.PathLike, where: str = "read_routers"
                 ) -> Tuple[str, Dict[str, Any], Dict[str, Tensor]]:
    r"""Read and check router files without touching any model: ``(file, config,
    tensors)``. :obj:`path` is a :func:`save_routers` folder, its tensors or config file, or
    a :data:`LEGACY_ROUTERS_FILE` (read with ``weights_only=True``). Every tensor is checked
    to be floating and finite, and the tensors file against its recorded digest.

    Raises:
        FileNotFoundError: if nothing is at :obj:`path`.
        ValueError: a one-line refusal naming the file and what is wrong.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        new = [os.path.join(path, f) for f in (ROUTERS_FILE, ROUTERS_CONFIG)]
        if any(os.path.isfile(f) for f in new):
            return _read_new(where, *new)
        old = os.path.join(path, LEGACY_ROUTERS_FILE)
        if os.path.isfile(old):
            return (old, *read_legacy_routers(old, where))
        raise FileNotFoundError(f"{where}: no {ROUTERS_FILE} in {path!r} (write it with "
                                f"save_routers(model, {path!r}))")
    for ext in (".safetensors", ".json"):
        if path.endswith(ext):
            stem = path[:-len(ext)]
            return _read_new(where, stem + ".safetensors", stem + ".json")
    if os.path.isfile(path):
        return (path, *read_legacy_routers(path, where))
    raise FileNotFoundError(f"{where}: no router files at {path!r} (write them with "
                            f"save_routers(model, folder))")


def load_routers(model: nn.Module, path: str, strict: bool = True) -> nn.Module:
    r"""Restore routers saved by :func:`save_routers`: compose :obj:`model` (if it is not
    composed yet) with the recorded :func:`compose_focus` arguments, then load every router.

    The documented round trip::

        model.save_pretrained(folder); save_routers(model, folder)
        base = AutoModelForCausalLM.from_pretrained(folder)  # the original weights, exactly
        load_routers(base, folder)  # the composed model again, bitwise

    Nothing is unpickled (:data:`ROUTERS_FILE` is safetensors; a :data:`LEGACY_ROUTERS_FILE`
    is read with ``torch.load(weights_only=True)``). The load is all or nothing: the files
    (digest, finiteness) and every tensor's name, shape and dtype are checked before any
    router is written, and a failed load leaves :obj:`model` exactly as it was (a model
    this call composed is decomposed again).

    Args:
        model (torch.nn.Module): a base model (or one already composed the same way).
        path (str): the folder given to :func:`save_routers` (or one of its files).
        strict (bool): require exactly the saved layers and, for a model already
            composed, the saved number of groups, window and sinks (routers run with another
            pattern than the one they were trained for otherwise; default: :obj:`True`).

    Returns:
        torch.nn.Module: :obj:`model`, composed, with the saved routers.

    Raises:
        FileNotFoundError: if no router file exists at :obj:`path`.
        ValueError: if a file is refused (damaged, changed, non-finite, not a router file),
            the saved tensors do not match the model's Focus layers, or (with :obj:`strict`)
            the model is composed with another ``num_groups`` or ``window`` than the saved
            one.
    """
    from quest_geometric._utils.untrusted import refused

    where = "load_routers"
    file, config, tensors = read_routers(path, where)
    state = getattr(model, _STATE_ATTR, None)
    composed_here = state is None
    if composed_here:
        try:
            if config.get("router") is not None:  # a content-free router, by its record
                spec = config["router"]  # one router per layer (a factory)
                config = dict(config, router=lambda embed_dim: _router_from_spec(spec))
            compose_focus(model, **config)
        except (TypeError, ValueError) as e:
            raise refused(where, file, "its composition arguments do not compose this model",
                          e) from None
    try:
        if not composed_here and strict:
            for key in ("num_groups", "window", "num_sinks"):
                saved_v = config.get(key, 0 if key == "num_sinks" else None)  # old files: 0
                have = state["config"].get(key)
                if saved_v is not None and saved_v != have:
                    raise ValueError(
                        f"load_routers: {file!r} holds routers trained with {key}={saved_v}, "
                        f"but the model is composed with {key}={have}; compose it as saved "
                        f"(or pass an uncomposed model), or load anyway with strict=False")
        layers = {n: m.router for n, m in model.named_modules() if isinstance(m, FocusComposed)}
        expected = {f"{n}.{k}": (n, k, t) for n, r in layers.items()
                    for k, t in r.state_dict().items()}
        missing = sorted(set(expected) - set(tensors))
        extra = sorted(set(tensors) - set(expected))
        if strict and (missing or extra):
            raise refused(where, file, f"its tensors do not match the model's Focus layers "
                          f"(missing {missing[:3]}{'...' if len(missing) > 3 else ''}, "
                          f"unexpected {extra[:3]}{'...' if len(extra) > 3 else ''})")
        new: Dict[str, Dict[str, Tensor]] = {}
        for name, (layer, key, ref) in expected.items():
            if name not in tensors:
                continue
            t = tensors[name]
            if t.shape != ref.shape:
                raise refused(where, file, f"tensor {name!r} has shape {tuple(t.shape)}, the "
                              f"model's router expects {tuple(ref.shape)}")
            new.setdefault(layer, {})[key] = t.to(device=ref.device, dtype=ref.dtype)
        for layer, sd in new.items():
            if set(sd) != set(layers[layer].state_dict()):
                raise refused(where, file, f"layer {layer!r} has only part of its router "
                              f"tensors ({sorted(sd)})")
        with torch.no_grad():
            for layer, sd in new.items():
                layers[layer].load_state_dict(sd)
    except BaseException:
        if composed_here:
            decompose(model)
        raise
    return model
