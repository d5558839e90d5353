"""The attention-adapter protocol, :class:`AttentionAdapter`, and the types it passes; it
imports neither :mod:`quest_geometric.nn` nor :mod:`quest_geometric.analysis`."""
from __future__ import annotations

import math
import warnings
import weakref
from dataclasses import dataclass, field
from typing import Any, Dict, NamedTuple, Optional, Tuple

import torch
from torch import Tensor, nn

from quest_geometric._utils.checks import fail

__all__ = ["QKView", "AttentionCall", "HeadLayout", "AttentionAdapter", "FunctionAdapter",
           "padding_from_mask", "repeat_kv", "warn_cached_call"]


@dataclass
class QKView:
    r"""The per-head queries and keys an attention layer uses in one forward call, as an adapter
    returns them. Head :math:`h`'s logits :math:`L_h = s\, Q_h K_h^\top` are softmaxed per row
    over the allowed keys (``causal``, ``mask``, ``k_valid``), or over each target node's
    in-edges when ``edge_index`` is given.

    Args:
        q (Tensor): queries ``[B, H, T, d]``.
        k (Tensor): keys ``[B, H, S, d]`` (grouped-query key heads repeated, :func:`repeat_kv`).
        scale (float, optional): :math:`s`. (default: :obj:`None`, :math:`1/\sqrt{d}`)
        causal (bool): query ``i`` may attend to key ``j`` only if ``j <= i + S - T``.
            (default: :obj:`False`)
        mask (Tensor, optional): bool, broadcastable to ``[B, H, T, S]``, :obj:`True` for an
            allowed pair (combined with ``causal``). (default: :obj:`None`)
        q_valid (Tensor, optional): bool ``[B, T]``; :obj:`False` marks padding queries, left
            out of every metric. (default: :obj:`None`, all valid)
        k_valid (Tensor, optional): bool ``[B, S]``, likewise for keys. (default: :obj:`None`)
        edge_index (Tensor, optional): long ``[2, E]`` (source = key, target = query) for
            sparse graph attention; needs ``B == 1``. (default: :obj:`None`)
        edge_logits (Tensor, optional): ``[E, H]`` per-edge logits replacing
            :math:`s\,\mathbf{q}_i^\top\mathbf{k}_j` (e.g. with edge-feature terms).
            (default: :obj:`None`)
    """

    q: Tensor
    k: Tensor
    scale: Optional[float] = None
    causal: bool = False
    mask: Optional[Tensor] = None
    q_valid: Optional[Tensor] = None
    k_valid: Optional[Tensor] = None
    edge_index: Optional[Tensor] = None
    edge_logits: Optional[Tensor] = None


class HeadLayout(NamedTuple):
    """Head layout of an attention module: ``embed_dim`` (its input width), ``num_heads``
    (:math:`H`), ``num_kv_heads`` (:math:`H_{kv}`, dividing :math:`H`), ``head_dim`` (:math:`D`)."""

    embed_dim: int
    num_heads: int
    num_kv_heads: int
    head_dim: int


@dataclass
class AttentionCall:
    """One parsed forward call of an attention module.

    Attributes:
        hidden (Tensor): the hidden states of the new tokens, ``[B, T, C]``.
        valid (Tensor, optional): bool ``[B, S]`` over every key of the call (cached ones
            first, ``S = cache_len + T``), :obj:`False` for padding; :obj:`None` without any.
        cache (Any): the key/value cache object (Hugging Face ``Cache``), or :obj:`None`.
        cache_len (int): tokens already in :attr:`cache` for this layer.
        layer_idx (int, optional): the module's index in the cache.
        rotary (tuple, optional): ``(cos, sin)`` rotary embeddings of the new tokens.
        causal (bool, optional): the causality the call asks for (e.g. a causal
            ``attn_mask``), :obj:`None` when it does not say; a composed layer refuses a
            contradiction.
        extra (dict): anything else the adapter carries from :meth:`~AttentionAdapter.parse`.
    """

    hidden: Tensor
    valid: Optional[Tensor] = None
    cache: Any = None
    cache_len: int = 0
    layer_idx: Optional[int] = None
    rotary: Optional[Tuple[Tensor, Tensor]] = None
    causal: Optional[bool] = None
    extra: Dict[str, Any] = field(default_factory=dict)


def repeat_kv(x: Tensor, n_rep: int) -> Tensor:
    r"""Repeat each key/value head of ``[B, H_kv, S, D]`` :obj:`n_rep` times, so that query
    head :math:`h` meets head :math:`\lfloor h / n_{rep} \rfloor` (Hugging Face's layout)."""
    if n_rep == 1:
        return x
    b, hkv, s, d = x.shape
    return x[:, :, None].expand(b, hkv, n_rep, s, d).reshape(b, hkv * n_rep, s, d)


_WARNED_CACHE: set = set()


def warn_cached_call(module: nn.Module) -> None:
    """Warn once per module that the probe skips a call continuing a non-empty KV cache."""
    if id(module) not in _WARNED_CACHE:
        _WARNED_CACHE.add(id(module))
        warnings.warn(f"QKProbe: {type(module).__name__} called with a non-empty KV cache "
                      "(incremental decoding); such calls are skipped. Probe full sequences "
                      "(use_cache=False).", stacklevel=5)


def _allowed_from_mask(mask: Tensor, who: str) -> Tensor:
    """Boolean 'may attend' view of a boolean or additive mask (0 = attend, very negative =
    masked); any other additive value is a bias and is refused."""
    if mask.dtype == torch.bool:
        return mask
    if not mask.is_floating_point():
        return mask != 0
    allowed = mask > torch.finfo(mask.dtype).min / 2
    if bool((mask[allowed] != 0).any()):
        raise fail(ValueError, who, "attention_mask", "a padding mask with Focus enabled (a "
                   "[B, S] 0/1 mask, or the causal [B, 1, T, S] mask Hugging Face builds from "
                   "it)", got_text="an additive bias (finite non-zero values)")
    return allowed


def padding_from_mask(mask: Optional[Tensor], q_len: int, kv_len: int, causal: bool,
                      who: str) -> Optional[Tensor]:
    r"""Reduce an attention mask to a padding mask, or refuse it: accepted are :obj:`None`, a
    ``[B, S]`` padding mask (non-zero = real token), or a ``[B, 1 or H, T, S]`` boolean or
    additive mask that allows exactly

    .. math::
        \mathrm{allowed}_{b,i,j} = \mathrm{valid}_{b,j} \wedge
        (j \le i + S - T \text{ if causal})

    on every real query row :math:`i`. The last reduction is returned again for the same,
    unchanged mask tensor (every layer of a forward gets the same one); do not change the
    result in place.

    Args:
        mask (Tensor, optional): the mask as the module received it.
        q_len (int): :math:`T`, new tokens.
        kv_len (int): :math:`S`, all keys (cached + new).
        causal (bool): whether the module attends causally.
        who (str): the name used in error messages.

    Returns:
        Tensor, optional: bool ``[B, S]`` (:obj:`False` = padding), or :obj:`None` when no key
        is padding.

    Raises:
        ValueError: for any other mask (a sliding window, a bias, a non-tensor), naming what is
            supported.
    """
    if mask is None:
        return None
    if not isinstance(mask, Tensor):
        raise fail(ValueError, who, "attention_mask", "None, a [B, S] padding mask, or the "
                   "4-D causal padding mask Hugging Face builds from it with Focus enabled",
                   mask, hint="; use attn_implementation='sdpa' or 'eager'")
    key = None if mask.is_inference() else (mask._version, q_len, kv_len, bool(causal))
    ref, last_key, last = _LAST_MASK
    if key is not None and ref is not None and ref() is mask and last_key == key:
        return last
    valid = _reduce_mask(mask, q_len, kv_len, causal, who)
    if key is not None:
        _LAST_MASK[:] = [weakref.ref(mask), key, valid]
    return valid


#: The last mask :func:`padding_from_mask` reduced: a weak reference to it, its version
#: counter (an in-place change is a new mask) with the query/key lengths, and the result.
#: Inference tensors have no version counter and are reduced at every call.
_LAST_MASK: list = [None, None, None]


def _reduce_mask(mask: Tensor, q_len: int, kv_len: int, causal: bool, who: str
                 ) -> Optional[Tensor]:
    """The reduction of :func:`padding_from_mask` (a tensor mask, not memoised)."""
    if mask.dim() == 2:
        if mask.size(-1) != kv_len:
            raise fail(ValueError, who, "attention_mask", f"[B, {kv_len}] (cached + new "
                       "tokens) when 2-D", mask)
        valid = mask != 0
    elif mask.dim() == 4:
        if mask.size(-2) != q_len or mask.size(-1) < kv_len:
            raise fail(ValueError, who, "attention_mask", f"[B, 1, {q_len}, {kv_len}] when "
                       "4-D", mask)
        allowed = _allowed_from_mask(mask[..., :kv_len], who)
        if allowed.size(1) > 1 and not bool((allowed == allowed[:, :1]).all()):
            raise fail(ValueError, who, "attention_mask", "the same for every head with Focus "
                       "enabled", got_text="a per-head mask")
        allowed = allowed[:, 0]
        valid = allowed[:, -1, :].clone()
        pattern = torch.ones(q_len, kv_len, dtype=torch.bool, device=mask.device)
        if causal:  # query i sits at position i + kv_len - q_len
            pattern = pattern.tril(kv_len - q_len)
        bad = (allowed != (valid.unsqueeze(1) & pattern)).any(-1) & valid[:, kv_len - q_len:]
        if bool(bad.any()):
            raise fail(ValueError, who, "attention_mask", "a padding mask with Focus enabled "
                       "(left or right padding, combined with the causal mask)",
                       got_text=f"a {list(mask.shape)} mask that masks other pairs (a sliding "
                       "window, a custom 4-D mask or bias)", hint="; pass a [B, S] padding "
                       "mask, or disable Focus with set_focus_enabled(model, False)")
    else:
        raise fail(ValueError, who, "attention_mask", "2-D [B, S] or 4-D [B, 1, T, S]", mask)
    if bool(valid.all()):
        return None
    return valid


class AttentionAdapter:
    """How to drive one attention module class: subclass it and register an instance with
    :func:`~quest_geometric.adapters.register_attention_adapter`. Implementing :meth:`heads`,
    :meth:`parse`, :meth:`project` and :meth:`output` (and :meth:`finish` unless the module
    returns ``(out, None)``) serves both Focus composition and the probe; overriding only
    :meth:`qk_view` serves the probe.

    Attributes:
        causal (bool, optional): :obj:`True` for causal (decoder) attention, :obj:`False` for
            bidirectional, :obj:`None` when the caller says (``compose_focus(..., causal=...)``).
        probe_only (bool): :obj:`True` when only :meth:`qk_view` is implemented.
        keep_type (bool): the composed layer stays an instance of the module's class, for
            parents that check ``isinstance`` (PyG's ``GPSConv`` on ``MultiheadAttention``).
    """

    causal: Optional[bool] = True
    probe_only: bool = False
    keep_type: bool = False

    def can_compose(self, module: nn.Module) -> bool:
        """Whether to compose this instance (e.g. not a cross-attention instance of a
        self-attention class; default: :obj:`True` unless :attr:`probe_only`)."""
        return not self.probe_only

    def heads(self, module: nn.Module) -> HeadLayout:
        """The module's :class:`HeadLayout`."""
        raise NotImplementedError(f"{type(self).__name__}.heads")

    def scaling(self, module: nn.Module) -> float:
        r"""The module's softmax scale :math:`s` (default: :math:`1/\sqrt{D}`)."""
        return 1.0 / math.sqrt(self.heads(module).head_dim)

    def parse(self, module: nn.Module, args: tuple, kwargs: Dict[str, Any]) -> AttentionCall:
        """Parse one ``module.forward`` call, refusing what cannot be honoured."""
        raise NotImplementedError(f"{type(self).__name__}.parse")

    def project(self, module: nn.Module, call: AttentionCall
                ) -> Tuple[Tensor, Tensor, Tensor]:
        """Queries ``[B, H, T, D]``, keys and values ``[B, H_kv, T, D]`` of the new tokens, as
        the module computes them (rotary embeddings applied, queries not scaled)."""
        raise NotImplementedError(f"{type(self).__name__}.project")

    def output(self, module: nn.Module, o: Tensor) -> Tensor:
        """The module's output projection of the attention output ``[B, T, H * D]``."""
        raise NotImplementedError(f"{type(self).__name__}.output")

    def finish(self, module: nn.Module, out: Tensor, call: AttentionCall) -> Any:
        """The module's return value for the output ``[B, T, C]`` (default ``(out, None)``)."""
        return out, None

    def update_cache(self, module: nn.Module, call: AttentionCall, k: Tensor, v: Tensor
                     ) -> Tuple[Tensor, Tensor]:
        """Store the new keys and values in the call's cache (if any); return every key and
        value of the call, ``[B, H_kv, S, D]``."""
        if call.cache is None:
            return k, v
        return call.cache.update(k, v, call.layer_idx)

    def qk_view(self, module: nn.Module, args: tuple, kwargs: Dict[str, Any]
                ) -> Optional[QKView]:
        """Queries and keys of one call for :class:`~quest_geometric.analysis.probe.QKProbe`
        (changing nothing), or :obj:`None` to skip it; the default skips calls continuing a cache
        and repeats grouped-query keys (:func:`repeat_kv`)."""
        call = self.parse(module, args, kwargs)
        if call.cache_len > 0:
            warn_cached_call(module)
            return None
        q, k, _ = self.project(module, call)
        lay = self.heads(module)
        k = repeat_kv(k, lay.num_heads // lay.num_kv_heads)
        return _padded_view(q, k, self.scaling(module), bool(self.causal), call.valid)


def _padded_view(q: Tensor, k: Tensor, scale: float, causal: bool,
                 valid: Optional[Tensor]) -> QKView:
    """A :class:`QKView` of self-attention with the padding ``valid`` ``[B, S]`` (or none)."""
    mask = valid[:, None, None, :] if valid is not None else None
    return QKView(q, k, scale, causal=causal, mask=mask, q_valid=valid, k_valid=valid)


class FunctionAdapter(AttentionAdapter):
    r"""A probe-only adapter from a function ``fn(module, args, kwargs)`` returning ``(q, k)``,
    a :class:`QKView` or :obj:`None` (what a plain function is registered as)."""

    probe_only = True

    def __init__(self, fn: Any) -> None:
        if not callable(fn):
            raise fail(TypeError, "FunctionAdapter", "fn", "callable", fn)
        self.fn = fn

    def qk_view(self, module: nn.Module, args: tuple, kwargs: Dict[str, Any]) -> Any:
        return self.fn(module, args, kwargs)

    def __repr__(self) -> str:
        return f"FunctionAdapter({getattr(self.fn, '__qualname__', self.fn)!r})"
