r"""Compose Focus sparse attention onto a pretrained model (centroid-only retrofit).

:func:`compose_focus` wraps every supported attention layer of a model in a
:class:`FocusComposed` module that keeps the layer's own query/key/value/output projections
(the very same parameter objects, never copies) and adds one
:class:`~quest_geometric.nn.focus_router.FocusRouter` per layer, inside a
:class:`~quest_geometric.nn.focus_attention.FocusAttention` built with
:meth:`~quest_geometric.nn.focus_attention.FocusAttention.from_projections`. Every original
weight is frozen, so training touches only :math:`\mathbf{W}_g` and the centroids (the paper's
"composable" setting, Yao et al., arXiv 2604.03260). :func:`decompose` puts the original
modules back (the same objects) and restores their ``requires_grad`` flags.

Supported attention modules (one adapter each, all in :data:`ADAPTERS` below):

* :class:`~quest_geometric.models.char_gpt.CausalSelfAttention` (:class:`CharGPT`);
* Hugging Face ``GPT2Attention`` (self-attention; fused ``c_attn`` ``Conv1D``, its own
  ``scaling``);
* Hugging Face ``GPTNeoXAttention`` (Pythia; fused, head-interleaved ``query_key_value``,
  rotary embeddings from the ``position_embeddings`` argument, applied to queries and keys
  before the Focus attention exactly as the original does).
"""
from __future__ import annotations

import contextlib
import math
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import torch
from torch import Tensor, nn

from quest_geometric.nn.focus_attention import FocusAttention

__all__ = ["compose_focus", "decompose", "FocusComposed", "set_focus_enabled", "focus_disabled",
           "set_focus_options", "focus_layers", "router_parameters", "SUPPORTED_ATTENTION"]


# --------------------------------------------------------------------------------------
# per-architecture adapters
# --------------------------------------------------------------------------------------


@dataclass
class _Call:
    """One parsed forward call of a wrapped attention module."""

    hidden: Tensor                              # [B, T, C]
    mask: Optional[Tensor] = None               # as given (checked to be plain causal)
    cache: Any = None                           # HF cache object (self-attention part)
    rotary: Optional[Tuple[Tensor, Tensor]] = None
    new_kv: Optional[Tuple[Tensor, Tensor]] = None  # [B, H, T, D] keys/values for the cache
    extra: Dict[str, Any] = field(default_factory=dict)


def _check_causal_mask(mask: Optional[Tensor], t: int, who: str) -> None:
    r"""Accept :obj:`None`, an all-ones ``[B, S]`` padding mask, or a 4-D mask that allows
    exactly the causal pairs (HF's eager ``[B, 1, T, T]`` additive mask); refuse anything
    else (left padding, custom masks), which the Focus path cannot honour."""
    if mask is None:
        return
    if mask.dim() == 2:
        if bool((mask != 0).all()):
            return
    elif mask.dim() == 4 and mask.size(-1) == t and mask.size(-2) == t:
        if mask.dtype == torch.bool:
            allowed = mask
        else:
            allowed = mask > torch.finfo(mask.dtype).min / 2
            if bool((mask[allowed] != 0).any()):
                allowed = None  # an additive bias, not a mask
        if allowed is not None:
            causal = torch.ones(t, t, dtype=torch.bool, device=mask.device).tril()
            if bool((allowed == causal).all()):
                return
    raise ValueError(
        f"compose_focus ({who}): with Focus enabled only plain causal attention is supported; "
        f"got an attention_mask of shape {list(mask.shape)} that masks more (or other) pairs "
        f"than the causal mask (e.g. left padding). Use unpadded or right-padded batches, or "
        f"disable Focus with set_focus_enabled(model, False)")


def _hf_cache(call_kwargs: Dict[str, Any], names: Tuple[str, ...]) -> Any:
    for n in names:
        c = call_kwargs.get(n)
        if c is not None:
            return getattr(c, "self_attention_cache", c)  # EncoderDecoderCache -> self part
    return None


class _Adapter:
    """How to drive one attention architecture: heads, projections, call signature."""

    #: human-readable name of the supported type
    name: str = ""

    def matches(self, module: nn.Module) -> bool:
        raise NotImplementedError

    def dims(self, module: nn.Module) -> Tuple[int, int]:
        """``(embed_dim, num_heads)``."""
        raise NotImplementedError

    def parse(self, module: nn.Module, args: tuple, kwargs: Dict[str, Any]) -> _Call:
        raise NotImplementedError

    def qkv(self, module: nn.Module, x: Tensor, call: _Call) -> Tuple[Tensor, Tensor, Tensor]:
        """Queries (pre-scaled so that :math:`1/\\sqrt{D}` gives the module's own scaling),
        keys and values, each ``[B, T, H, D]``."""
        raise NotImplementedError

    def out_proj(self, module: nn.Module) -> Callable[[Tensor], Tensor]:
        raise NotImplementedError

    def finish(self, module: nn.Module, y: Tensor, call: _Call) -> Any:
        """Wrap the projected output ``[B, T, C]`` like the module's own return value."""
        return y

    # shared helpers
    @staticmethod
    def _check_cache(module: nn.Module, call: _Call, who: str) -> None:
        if call.cache is None:
            return
        layer_idx = getattr(module, "layer_idx", None)
        try:
            seen = call.cache.get_seq_length(layer_idx if layer_idx is not None else 0)
        except TypeError:  # pragma: no cover - older cache API
            seen = call.cache.get_seq_length()
        call.extra["cache_len"] = seen
        if seen:
            raise NotImplementedError(
                f"compose_focus ({who}): incremental decoding from a non-empty KV cache is not "
                f"supported with Focus enabled (the groups of cached keys are not stored); "
                f"run full sequences, pass use_cache=False, or disable Focus")


class _CharGPTAdapter(_Adapter):
    name = "quest_geometric.models.char_gpt.CausalSelfAttention"

    def matches(self, module: nn.Module) -> bool:
        from quest_geometric.models.char_gpt import CausalSelfAttention

        return type(module) is CausalSelfAttention

    def dims(self, module: nn.Module) -> Tuple[int, int]:
        return module.n_embd, module.n_head

    def parse(self, module: nn.Module, args: tuple, kwargs: Dict[str, Any]) -> _Call:
        x = args[0] if args else kwargs["x"]
        module._check(x)
        return _Call(hidden=x)

    def qkv(self, module: nn.Module, x: Tensor, call: _Call) -> Tuple[Tensor, Tensor, Tensor]:
        b, t, _ = x.shape
        h, d = module.n_head, module.head_dim
        # the probe hooks see (and may replace) [B, H, T, D] tensors, as in the original
        q = module.hook_q(module.q_proj(x).view(b, t, h, d).transpose(1, 2)).transpose(1, 2)
        k = module.hook_k(module.k_proj(x).view(b, t, h, d).transpose(1, 2)).transpose(1, 2)
        v = module.hook_v(module.v_proj(x).view(b, t, h, d).transpose(1, 2)).transpose(1, 2)
        return q, k, v

    def out_proj(self, module: nn.Module) -> Callable[[Tensor], Tensor]:
        return lambda y: module.resid_dropout(module.out_proj(y))


class _GPT2Adapter(_Adapter):
    name = "transformers GPT2Attention (self-attention)"

    def matches(self, module: nn.Module) -> bool:
        return (type(module).__name__ == "GPT2Attention"
                and type(module).__module__.startswith("transformers.")
                and not getattr(module, "is_cross_attention", False))

    def dims(self, module: nn.Module) -> Tuple[int, int]:
        return module.embed_dim, module.num_heads

    def parse(self, module: nn.Module, args: tuple, kwargs: Dict[str, Any]) -> _Call:
        names = ("hidden_states", "cache", "attention_mask", "encoder_hidden_states")
        bound = dict(zip(names, args))
        bound.update(kwargs)
        if bound.get("encoder_hidden_states") is not None:
            raise ValueError("compose_focus (GPT2Attention): cross-attention inputs "
                             "(encoder_hidden_states) are not supported with Focus enabled")
        if bound.get("output_attentions"):
            raise ValueError("compose_focus (GPT2Attention): output_attentions=True is not "
                             "supported with Focus enabled (no dense attention matrix exists)")
        x = bound["hidden_states"]
        call = _Call(hidden=x, mask=bound.get("attention_mask"),
                     cache=_hf_cache(bound, ("cache", "past_key_values", "layer_past")))
        self._check_cache(module, call, "GPT2Attention")
        _check_causal_mask(call.mask, x.size(1), "GPT2Attention")
        return call

    def qkv(self, module: nn.Module, x: Tensor, call: _Call) -> Tuple[Tensor, Tensor, Tensor]:
        b, t, _ = x.shape
        h, d = module.num_heads, module.head_dim
        q, k, v = module.c_attn(x).split(module.split_size, dim=2)
        q, k, v = (a.view(b, t, h, d) for a in (q, k, v))
        if call.cache is not None:
            call.new_kv = (k.transpose(1, 2), v.transpose(1, 2))
        return _prescale(q, float(module.scaling), d), k, v

    def out_proj(self, module: nn.Module) -> Callable[[Tensor], Tensor]:
        return lambda y: module.resid_dropout(module.c_proj(y))

    def finish(self, module: nn.Module, y: Tensor, call: _Call) -> Any:
        if call.cache is not None and call.new_kv is not None:
            call.cache.update(*call.new_kv, module.layer_idx)
        return y, None


class _GPTNeoXAdapter(_Adapter):
    name = "transformers GPTNeoXAttention (Pythia)"

    def matches(self, module: nn.Module) -> bool:
        return (type(module).__name__ == "GPTNeoXAttention"
                and type(module).__module__.startswith("transformers."))

    def dims(self, module: nn.Module) -> Tuple[int, int]:
        c = module.query_key_value.in_features
        return c, c // module.head_size

    def parse(self, module: nn.Module, args: tuple, kwargs: Dict[str, Any]) -> _Call:
        names = ("hidden_states", "attention_mask", "layer_past", "position_embeddings")
        bound = dict(zip(names, args))
        bound.update(kwargs)
        if bound.get("output_attentions"):
            raise ValueError("compose_focus (GPTNeoXAttention): output_attentions=True is not "
                             "supported with Focus enabled")
        x = bound["hidden_states"]
        pe = bound.get("position_embeddings")
        if pe is None:
            raise ValueError("compose_focus (GPTNeoXAttention): 'position_embeddings' "
                             "(cos, sin) must be passed, as GPTNeoXModel does in transformers v5")
        call = _Call(hidden=x, mask=bound.get("attention_mask"),
                     cache=_hf_cache(bound, ("layer_past", "cache", "past_key_values")),
                     rotary=tuple(pe))
        self._check_cache(module, call, "GPTNeoXAttention")
        _check_causal_mask(call.mask, x.size(1), "GPTNeoXAttention")
        return call

    def qkv(self, module: nn.Module, x: Tensor, call: _Call) -> Tuple[Tensor, Tensor, Tensor]:
        b, t, _ = x.shape
        d = module.head_size
        qkv = module.query_key_value(x).view(b, t, -1, 3 * d).transpose(1, 2)
        q, k, v = qkv.chunk(3, dim=-1)  # [B, H, T, D] each, as the original
        rope = getattr(sys.modules[type(module).__module__], "apply_rotary_pos_emb")
        cos, sin = call.rotary
        q, k = rope(q, k, cos, sin)
        if call.cache is not None:
            call.new_kv = (k, v)
        q, k, v = (a.transpose(1, 2) for a in (q, k, v))
        return _prescale(q, float(module.scaling), d), k, v

    def out_proj(self, module: nn.Module) -> Callable[[Tensor], Tensor]:
        return module.dense

    def finish(self, module: nn.Module, y: Tensor, call: _Call) -> Any:
        if call.cache is not None and call.new_kv is not None:
            call.cache.update(*call.new_kv, module.layer_idx)
        return y, None


def _prescale(q: Tensor, scaling: float, d: int) -> Tensor:
    r"""Fold a module's softmax scaling into the queries: Focus divides by :math:`\sqrt{D}`."""
    factor = scaling * math.sqrt(d)
    return q if factor == 1.0 else q * factor


#: The adapters, tried in order; add an architecture by adding one here.
ADAPTERS: Tuple[_Adapter, ...] = (_CharGPTAdapter(), _GPT2Adapter(), _GPTNeoXAdapter())
#: Names of the supported attention module types.
SUPPORTED_ATTENTION: Tuple[str, ...] = tuple(a.name for a in ADAPTERS)


def _adapter_for(module: nn.Module) -> Optional[_Adapter]:
    for a in ADAPTERS:
        if a.matches(module):
            return a
    return None


# --------------------------------------------------------------------------------------
# the wrapper
# --------------------------------------------------------------------------------------


class FocusComposed(nn.Module):
    r"""A pretrained attention module with a Focus router composed onto it.

    The wrapped module is kept as :attr:`original` (its parameters are the model's own,
    registered once, under ``<path>.original.*``). :attr:`focus` is a
    :class:`~quest_geometric.nn.focus_attention.FocusAttention` whose query/key/value come from
    the original projections (through the architecture's adapter: fused splits, rotary
    embeddings, the module's own scaling folded into the queries) and whose only parameters
    are the router's. The output goes through the original output projection (and residual
    dropout). Attention-probability dropout of the original is not applied on the Focus path.

    With Focus disabled (``focus.enabled = False``, see :func:`set_focus_enabled`) the call is
    forwarded to :attr:`original` unchanged, so the model is exactly the original one.

    Args:
        module (torch.nn.Module): the attention module to wrap (a supported type).
        **focus_kwargs: :class:`FocusAttention` arguments (``num_groups``, ``top_k``,
            ``window``, ``group_dim``, ``tau``, ``sinkhorn_iters``, ``gate``, ``backend``...).

    Shapes:
        - **input:** the original module's forward arguments (hidden states
          :math:`(B, T, C)`)
        - **output:** the original module's return structure (a tensor for CharGPT, a tuple
          ``(out, None)`` for the Hugging Face modules)
    """

    def __init__(self, module: nn.Module, **focus_kwargs: Any) -> None:
        super().__init__()
        adapter = _adapter_for(module)
        if adapter is None:
            raise ValueError(f"FocusComposed: unsupported attention module "
                             f"{type(module).__name__}; supported: {list(SUPPORTED_ATTENTION)}")
        embed_dim, num_heads = adapter.dims(module)
        self.adapter = adapter
        self.original = module
        self.focus = FocusAttention.from_projections(
            qkv=self._qkv, out_proj=None, num_heads=num_heads, embed_dim=embed_dim,
            causal=True, **focus_kwargs)
        self._pending: Optional[Tuple[int, int, _Call]] = None

    def _qkv(self, flat: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        if self._pending is None:
            raise RuntimeError("FocusComposed: the projections are only usable inside forward")
        b, t, call = self._pending
        q, k, v = self.adapter.qkv(self.original, flat.view(b, t, -1), call)
        return tuple(a.reshape(b * t, -1) for a in (q, k, v))  # type: ignore[return-value]

    @property
    def router(self) -> nn.Module:
        """The :class:`~quest_geometric.nn.focus_router.FocusRouter` of this layer."""
        return self.focus.router

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if not self.focus.enabled or self.focus.gate is None:
            return self.original(*args, **kwargs)
        call = self.adapter.parse(self.original, args, kwargs)
        x = call.hidden
        if x.dim() != 3:
            raise ValueError(f"FocusComposed: hidden states must be [B, T, C], got "
                             f"{list(x.shape)}")
        self._pending = (x.size(0), x.size(1), call)
        try:
            o = self.focus(x)
        finally:
            self._pending = None
        y = self.adapter.out_proj(self.original)(o)
        return self.adapter.finish(self.original, y, call)

    def __repr__(self) -> str:
        f = self.focus
        return (f"{self.__class__.__name__}({type(self.original).__name__}, "
                f"num_groups={f.num_groups}, top_k={f.router.top_k}, window={f.window}, "
                f"backend={f.backend!r}, gate={f.gate!r}, enabled={f.enabled})")


# --------------------------------------------------------------------------------------
# compose / decompose and switches
# --------------------------------------------------------------------------------------

_STATE_ATTR = "_focus_composition"


def compose_focus(model: nn.Module, num_groups: int = 4, top_k: int = 2, window: int = 128,
                  group_dim: int = 16, tau: float = 0.1, sinkhorn_iters: int = 10,
                  gate: Optional[str] = "additive", backend: str = "blocks",
                  freeze: bool = True, **focus_kwargs: Any) -> nn.Module:
    r"""Compose Focus sparse attention onto every supported attention layer of
    :obj:`model`, in place (centroid-only retrofit of Yao et al., arXiv 2604.03260).

    Each attention layer becomes a :class:`FocusComposed` that reuses the layer's own
    projections and adds a router with
    :math:`d \cdot d_g + K d_g` parameters, so the whole model gains

    .. math::
        L \, (d \, d_g + K \, d_g)

    trainable parameters (GPT-2 124M, :math:`d_g = 16`, :math:`K = 4`: 148,224). In
    inference token :math:`i` attends to the causal pairs with :math:`i - j \le w` or a shared
    hard group; in training the soft gate of ``gate`` applies (see
    :class:`~quest_geometric.nn.focus_attention.FocusAttention`). Routing is prefix-causal.

    Args:
        model (torch.nn.Module): a model containing supported attention modules
            (:data:`SUPPORTED_ATTENTION`).
        num_groups (int): groups :math:`K` (default: :obj:`4`, the paper's retrofit).
        top_k (int): hard groups per token, :math:`1..K` (default: :obj:`2`).
        window (int): local window :math:`w \ge 0` (default: :obj:`128`).
        group_dim (int): routing dimension :math:`d_g` (default: :obj:`16`).
        tau (float): Sinkhorn temperature (default: :obj:`0.1`).
        sinkhorn_iters (int): Sinkhorn iterations (default: :obj:`10`).
        gate (str, optional): ``'additive'`` or ``'multiplicative'`` soft gate
            (default: :obj:`'additive'`).
        backend (str): hard back-end, ``'blocks'``, ``'edges'`` or ``'dense'``
            (default: :obj:`'blocks'`).
        freeze (bool): set ``requires_grad=False`` on every parameter of :obj:`model` that
            existed before (the flags are restored by :func:`decompose`), so only the routers
            train (default: :obj:`True`).
        **focus_kwargs: further :class:`FocusAttention` arguments (``gate_scale``,
            ``gate_bias``).

    Returns:
        torch.nn.Module: :obj:`model` itself.

    Raises:
        ValueError: if :obj:`model` holds no supported attention layer (the message lists the
            supported types), is already composed, or an argument is invalid.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"compose_focus: 'model' must be a torch.nn.Module, got "
                        f"{type(model).__name__}")
    if getattr(model, _STATE_ATTR, None) is not None or any(
            isinstance(m, FocusComposed) for m in model.modules()):
        raise ValueError("compose_focus: the model is already composed; call decompose(model) "
                         "first")
    if not isinstance(top_k, int) or not 1 <= top_k <= num_groups:
        raise ValueError(f"compose_focus: 'top_k' must be an int in 1..num_groups={num_groups}, "
                         f"got {top_k!r}")
    targets: List[Tuple[nn.Module, str, nn.Module]] = []
    for parent in model.modules():
        for name, child in parent.named_children():
            if _adapter_for(child) is not None:
                targets.append((parent, name, child))
    if not targets:
        found = sorted({type(m).__name__ for m in model.modules() if "attn" in
                        type(m).__name__.lower() or "attention" in type(m).__name__.lower()})
        raise ValueError(
            f"compose_focus: {type(model).__name__} has no supported attention layer "
            f"(attention-like modules found: {found or 'none'}); supported: "
            f"{list(SUPPORTED_ATTENTION)}")
    flags = [(p, p.requires_grad) for p in model.parameters()]
    kwargs = dict(num_groups=num_groups, top_k=top_k, window=window, group_dim=group_dim,
                  tau=tau, sinkhorn_iters=sinkhorn_iters, gate=gate, backend=backend,
                  **focus_kwargs)
    ref = next(iter(model.parameters()), None)
    wrappers = []
    for parent, name, child in targets:
        w = FocusComposed(child, **kwargs)
        w.train(child.training)  # follow the model's current mode
        if ref is not None:
            w.focus.router.to(device=ref.device, dtype=ref.dtype if ref.is_floating_point()
                              else None)
        setattr(parent, name, w)
        wrappers.append((parent, name, w))
    if freeze:
        for p, _ in flags:
            p.requires_grad_(False)
    object.__setattr__(model, _STATE_ATTR, {"wrappers": wrappers, "flags": flags})
    return model


def decompose(model: nn.Module) -> nn.Module:
    r"""Undo :func:`compose_focus`: put every original attention module (the same object)
    back in place and restore the ``requires_grad`` flags the parameters had before.

    Args:
        model (torch.nn.Module): a model returned by :func:`compose_focus`.

    Returns:
        torch.nn.Module: :obj:`model` itself.

    Raises:
        ValueError: if :obj:`model` was not composed.
    """
    state = getattr(model, _STATE_ATTR, None)
    if state is None:
        raise ValueError("decompose: the model was not composed with compose_focus")
    for parent, name, w in state["wrappers"]:
        setattr(parent, name, w.original)
    for p, flag in state["flags"]:
        p.requires_grad_(flag)
    object.__delattr__(model, _STATE_ATTR)
    return model


def focus_layers(model: nn.Module) -> List[FocusAttention]:
    r"""Every :class:`FocusAttention` of :obj:`model`: the ones composed by
    :func:`compose_focus` and native ones (e.g. ``CharGPT(attention='focus')``)."""
    return [m for m in model.modules() if isinstance(m, FocusAttention)]


def router_parameters(model: nn.Module) -> Iterator[nn.Parameter]:
    r"""The router parameters (:math:`\mathbf{W}_g` and centroids) of every Focus layer."""
    for f in focus_layers(model):
        yield from f.router.parameters()


def set_focus_enabled(model: nn.Module, enabled: bool) -> nn.Module:
    r"""Switch Focus on or off in every Focus layer of :obj:`model`. Off, a composed layer
    calls its original module (the model is exactly the original) and a native
    :class:`FocusAttention` runs full causal attention."""
    layers = focus_layers(model)
    if not layers:
        raise ValueError("set_focus_enabled: the model has no Focus layer")
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
                      backend: Optional[str] = None, window: Optional[int] = None
                      ) -> nn.Module:
    r"""Change the hard top-:math:`k`, the back-end or the window of every Focus layer
    (e.g. to evaluate one trained router at top-:math:`k` = 1, 2 and :math:`K`).

    Raises:
        ValueError: for a :obj:`top_k` outside :math:`1..K`, an unknown back-end or a negative
            window.
    """
    from quest_geometric.nn.focus_attention import BACKENDS

    for f in focus_layers(model):
        if top_k is not None:
            if not isinstance(top_k, int) or not 1 <= top_k <= f.num_groups:
                raise ValueError(f"set_focus_options: 'top_k' must be an int in "
                                 f"1..{f.num_groups}, got {top_k!r}")
            f.top_k = f.router.top_k = top_k
        if backend is not None:
            if backend not in BACKENDS:
                raise ValueError(f"set_focus_options: 'backend' must be one of {BACKENDS}, "
                                 f"got {backend!r}")
            f.backend = backend
        if window is not None:
            if not isinstance(window, int) or isinstance(window, bool) or window < 0:
                raise ValueError(f"set_focus_options: 'window' must be a non-negative int, "
                                 f"got {window!r}")
            f.window = window
    return model
