r"""Adapters for Hugging Face ``transformers`` attention classes, registered by name (so
``transformers`` is imported only when a model uses it): ``GPT2Attention`` (cross-attention
probed, not composed), ``GPTNeoXAttention`` (Pythia) and the Llama family
(``LlamaAttention``, ``MistralAttention``, ``Qwen2Attention``, and checkpoints built on them
such as SmolLM2).
"""
from __future__ import annotations

import sys
from typing import Any, Dict, Optional, Tuple

import torch
from torch import Tensor, nn

from quest_geometric._utils.checks import fail
from quest_geometric.adapters.base import (AttentionAdapter, AttentionCall, HeadLayout, QKView,
                                           padding_from_mask, warn_cached_call)
from quest_geometric.adapters.registry import register_attention_adapter

__all__ = ["HFAttentionAdapter", "GPT2AttentionAdapter", "GPTNeoXAttentionAdapter",
           "LlamaAttentionAdapter", "hf_cache", "hf_cache_length"]


def hf_cache(kwargs: Dict[str, Any], names: Tuple[str, ...] = ("cache", "past_key_values",
                                                              "layer_past")) -> Any:
    """The self-attention KV cache passed to a Hugging Face attention module, under any of
    its names (``EncoderDecoderCache`` reduced to its self-attention part), or :obj:`None`."""
    for n in names:
        c = kwargs.get(n)
        if c is not None:
            return getattr(c, "self_attention_cache", c)
    return None


def hf_cache_length(cache: Any, layer_idx: Optional[int]) -> int:
    """Tokens already in ``cache`` for layer ``layer_idx`` (0 for no cache)."""
    if cache is None or not hasattr(cache, "get_seq_length"):
        return 0
    try:
        return int(cache.get_seq_length(layer_idx if layer_idx is not None else 0))
    except TypeError:  # pragma: no cover - older cache API
        return int(cache.get_seq_length())


def _bind(args: tuple, kwargs: Dict[str, Any], names: Tuple[str, ...]) -> Dict[str, Any]:
    return {**dict(zip(names, args)), **kwargs}


def _attentions_requested(bound: Dict[str, Any]) -> bool:
    """Whether the caller asked for the attention weights: ``output_attentions``, or an
    active output collector of ``attentions`` (transformers v5 models such as GPT-2 record
    them through hooks instead of passing the flag down)."""
    if bound.get("output_attentions"):
        return True
    capturing = sys.modules.get("transformers.utils.output_capturing")
    collector = getattr(capturing, "_active_collector", None)
    if collector is None:
        return False
    try:
        collected = collector.get()
    except Exception:  # pragma: no cover - a changed private API: nothing to detect
        return False
    return isinstance(collected, dict) and "attentions" in collected


def _probe_mask(mask: Any) -> Tuple[Optional[Tensor], Optional[Tensor]]:
    """A 4-D HF attention mask as bool (True = attend) and the ``[B, S]`` valid keys (a key
    is padding iff no query may attend to it); ``(None, None)`` without a mask."""
    if not isinstance(mask, Tensor):
        return None, None
    if mask.dim() != 4:
        raise fail(ValueError, "QKProbe", "attention_mask", "a 4-D [B, 1, T, S] mask", mask)
    if mask.dtype != torch.bool:
        mask = mask > torch.finfo(mask.dtype).min / 2
    return mask, mask.any(dim=-2).any(dim=1)


class HFAttentionAdapter(AttentionAdapter):
    r"""Shared parsing of Hugging Face self-attention calls: the mask reduced by
    :func:`~quest_geometric.adapters.padding_from_mask`, the cache found under any of its
    names, ``output_attentions`` refused (no dense attention matrix exists with Focus)."""

    #: positional parameter names of ``forward`` after ``hidden_states``
    arg_names: Tuple[str, ...] = ("hidden_states",)
    #: where a module that needs ``position_embeddings`` gets them (:obj:`None`: not needed)
    rotary_from: Optional[str] = None

    def parse(self, module: nn.Module, args: tuple, kwargs: Dict[str, Any]) -> AttentionCall:
        bound = _bind(args, kwargs, self.arg_names)
        who = f"compose_focus ({type(module).__name__})"
        if _attentions_requested(bound):
            raise fail(ValueError, who, "output_attentions", "False with Focus enabled (no "
                       "dense attention matrix exists; True is not supported)", True)
        x = bound["hidden_states"]
        if not isinstance(x, Tensor):
            raise fail(TypeError, who, "hidden_states", "a [B, T, C] tensor", x)
        if x.dim() != 3:
            raise fail(ValueError, who, "hidden_states", "of shape [B, T, C]", x)
        cache = hf_cache(bound)
        layer_idx = getattr(module, "layer_idx", None)
        cache_len = hf_cache_length(cache, layer_idx)
        t = x.size(1)
        valid = padding_from_mask(bound.get("attention_mask"), t, cache_len + t, True, who)
        pe = bound.get("position_embeddings")
        if pe is None and self.rotary_from is not None:
            raise fail(ValueError, who, "position_embeddings",
                       f"passed as (cos, sin), as {self.rotary_from}", None)
        return AttentionCall(hidden=x, valid=valid, cache=cache, cache_len=cache_len,
                             layer_idx=layer_idx, rotary=tuple(pe) if pe is not None else None,
                             extra={"bound": bound})


class GPT2AttentionAdapter(HFAttentionAdapter):
    """``transformers`` ``GPT2Attention``: fused ``c_attn`` (``Conv1D``) split into q, k, v;
    the module's ``scaling``; ``c_proj`` and residual dropout."""

    arg_names = ("hidden_states", "cache", "attention_mask", "encoder_hidden_states")

    def heads(self, module: nn.Module) -> HeadLayout:
        return HeadLayout(module.embed_dim, module.num_heads, module.num_heads, module.head_dim)

    def scaling(self, module: nn.Module) -> float:
        return float(getattr(module, "scaling", module.head_dim ** -0.5))

    def can_compose(self, module: nn.Module) -> bool:
        return not getattr(module, "is_cross_attention", False)

    def parse(self, module: nn.Module, args: tuple, kwargs: Dict[str, Any]) -> AttentionCall:
        bound = _bind(args, kwargs, self.arg_names)
        who = f"compose_focus ({type(module).__name__})"
        if bound.get("encoder_hidden_states") is not None:
            raise fail(ValueError, who, "encoder_hidden_states", "None with Focus enabled "
                       "(cross-attention is not supported)", bound["encoder_hidden_states"])
        if getattr(module, "is_cross_attention", False):
            raise ValueError(f"{who}: a cross-attention module is not supported with Focus "
                             "enabled")
        return super().parse(module, args, kwargs)

    def project(self, module: nn.Module, call: AttentionCall) -> Tuple[Tensor, Tensor, Tensor]:
        x = call.hidden
        b, t, _ = x.shape
        h, d = module.num_heads, module.head_dim
        q, k, v = module.c_attn(x).split(module.split_size, dim=2)
        return tuple(a.view(b, t, h, d).transpose(1, 2) for a in (q, k, v))  # type: ignore

    def output(self, module: nn.Module, o: Tensor) -> Tensor:
        return module.resid_dropout(module.c_proj(o))

    def qk_view(self, module: nn.Module, args: tuple, kwargs: Dict[str, Any]
                ) -> Optional[QKView]:
        hidden = args[0] if args else kwargs.get("hidden_states")
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        enc = kwargs.get("encoder_hidden_states")
        if enc is not None:  # cross-attention: queries from q_attn, keys from the encoder
            q = module.q_attn(hidden)
            k, _ = module.c_attn(enc).split(module.split_size, dim=2)
            mask, kv = _probe_mask(kwargs.get("encoder_attention_mask"))
            causal, qv = False, None
        else:
            if hf_cache_length(cache, getattr(module, "layer_idx", None)) > 0:
                warn_cached_call(module)
                return None
            q, k, _ = module.c_attn(hidden).split(module.split_size, dim=2)
            mask, kv = _probe_mask(kwargs.get("attention_mask"))
            causal, qv = True, kv
        q, k = (a.view(*a.shape[:-1], -1, module.head_dim).transpose(1, 2) for a in (q, k))
        return QKView(q, k, self.scaling(module), causal=causal, mask=mask, q_valid=qv,
                      k_valid=kv)


def _rope(module: nn.Module) -> Any:
    return getattr(sys.modules[type(module).__module__], "apply_rotary_pos_emb")


class GPTNeoXAttentionAdapter(HFAttentionAdapter):
    """``transformers`` ``GPTNeoXAttention`` (Pythia): fused head-interleaved
    ``query_key_value`` (``[H, 3, D]``), rotary embeddings from ``position_embeddings``
    (post-rotary q/k), ``dense`` output."""

    arg_names = ("hidden_states", "attention_mask", "layer_past", "position_embeddings")
    rotary_from = "GPTNeoXModel does in transformers v5"

    def heads(self, module: nn.Module) -> HeadLayout:
        c = module.query_key_value.in_features
        h = c // module.head_size
        return HeadLayout(c, h, h, module.head_size)

    def scaling(self, module: nn.Module) -> float:
        return float(module.scaling)

    def project(self, module: nn.Module, call: AttentionCall) -> Tuple[Tensor, Tensor, Tensor]:
        x = call.hidden
        b, t, _ = x.shape
        d = module.head_size
        qkv = module.query_key_value(x).view(b, t, -1, 3 * d).transpose(1, 2)
        q, k, v = qkv.chunk(3, dim=-1)  # [B, H, T, D] each, as the original
        q, k = _rope(module)(q, k, *call.rotary)
        return q, k, v

    def output(self, module: nn.Module, o: Tensor) -> Tensor:
        return module.dense(o)

    def qk_view(self, module: nn.Module, args: tuple, kwargs: Dict[str, Any]
                ) -> Optional[QKView]:
        hidden = args[0] if args else kwargs.get("hidden_states")
        cache = kwargs.get("layer_past", kwargs.get("past_key_values", kwargs.get("cache")))
        if hf_cache_length(cache, getattr(module, "layer_idx", None)) > 0:
            warn_cached_call(module)
            return None
        pos = kwargs.get("position_embeddings")
        if pos is None:
            raise fail(ValueError, "QKProbe", "position_embeddings", "passed to "
                       f"{type(module).__name__} as (cos, sin) (the transformers v5 layout, "
                       "where the model passes them; the probe supports that one)", None)
        # post-rotary queries and keys: what the attention compares
        q, k, _ = self.project(module, AttentionCall(hidden=hidden, rotary=tuple(pos)))
        mask, valid = _probe_mask(kwargs.get("attention_mask"))
        return QKView(q, k, self.scaling(module), causal=True, mask=mask, q_valid=valid,
                      k_valid=valid)


class LlamaAttentionAdapter(HFAttentionAdapter):
    r"""The Llama family (``LlamaAttention``, ``MistralAttention``, ``Qwen2Attention``):
    separate projections, grouped-query attention (query head :math:`h` reads key/value head
    :math:`\lfloor h / (H/H_{kv}) \rfloor`), the model's own ``apply_rotary_pos_emb``. Focus
    attends over the whole causal prefix, so a call with more keys than a sliding window
    (Mistral, Qwen2 with ``use_sliding_window``) is refused, naming ``config.sliding_window``."""

    arg_names = ("hidden_states", "position_embeddings", "attention_mask", "cache")
    rotary_from = "the transformers v5 model does"

    def heads(self, module: nn.Module) -> HeadLayout:
        d = module.head_dim
        h = module.q_proj.out_features // d
        hkv = module.k_proj.out_features // d
        return HeadLayout(module.q_proj.in_features, h, hkv, d)

    def scaling(self, module: nn.Module) -> float:
        return float(module.scaling)

    @staticmethod
    def sliding_window(module: nn.Module) -> Optional[int]:
        """The sliding window the module's attention applies, or :obj:`None`."""
        if hasattr(module, "sliding_window"):  # Qwen2: per layer type
            return module.sliding_window
        if type(module).__name__.startswith("Mistral"):
            return getattr(module.config, "sliding_window", None)
        return None

    def parse(self, module: nn.Module, args: tuple, kwargs: Dict[str, Any]) -> AttentionCall:
        who = f"compose_focus ({type(module).__name__})"
        sw = self.sliding_window(module)
        if sw is not None:  # before the mask is parsed: a sliding-window mask is refused there
            bound = _bind(args, kwargs, self.arg_names)
            x = bound.get("hidden_states")
            total = (hf_cache_length(hf_cache(bound), getattr(module, "layer_idx", None))
                     + (x.size(1) if isinstance(x, Tensor) and x.dim() == 3 else 0))
            if total > sw:
                raise fail(ValueError, who, "hidden_states", f"at most config.sliding_window="
                           f"{sw} keys (cached + new tokens), the window the module attends "
                           "within; Focus attends over the whole causal prefix",
                           got_text=f"{total} keys", hint="; set config.sliding_window=None "
                           "(and use a dynamic cache: generate(..., "
                           f"cache_implementation='dynamic')) or keep sequences within {sw} "
                           "tokens")
        return super().parse(module, args, kwargs)

    def project(self, module: nn.Module, call: AttentionCall) -> Tuple[Tensor, Tensor, Tensor]:
        x = call.hidden
        shape = (*x.shape[:-1], -1, module.head_dim)
        q, k, v = (proj(x).view(shape).transpose(1, 2)
                   for proj in (module.q_proj, module.k_proj, module.v_proj))
        q, k = _rope(module)(q, k, *call.rotary)
        return q, k, v

    def output(self, module: nn.Module, o: Tensor) -> Tensor:
        return module.o_proj(o)


register_attention_adapter("transformers.models.gpt2.modeling_gpt2.GPT2Attention",
                           GPT2AttentionAdapter(), builtin=True)
register_attention_adapter("transformers.models.gpt_neox.modeling_gpt_neox.GPTNeoXAttention",
                           GPTNeoXAttentionAdapter(), builtin=True)
for _name in ("transformers.models.llama.modeling_llama.LlamaAttention",
              "transformers.models.mistral.modeling_mistral.MistralAttention",
              "transformers.models.qwen2.modeling_qwen2.Qwen2Attention"):
    register_attention_adapter(_name, LlamaAttentionAdapter(), builtin=True)
