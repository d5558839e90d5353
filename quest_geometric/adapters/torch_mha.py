r"""Adapter for PyTorch's :class:`torch.nn.MultiheadAttention` as self-attention, e.g. in PyG's
:class:`~torch_geometric.nn.conv.GPSConv`. It attends causally or not depending on its use,
so :func:`~quest_geometric.nn.focus.compose.compose_focus` needs ``causal=``:

.. code-block:: python

    conv = GPSConv(16, GINConv(mlp), heads=2, attn_type='multihead')
    compose_focus(model_with_gps_layers, causal=False, window=0, num_groups=4, top_k=1)

(``window=0``: node order carries no meaning in a graph.) The padding ``GPSConv`` adds is
dropped before routing, so every graph of a batch gives what it gives alone. With Focus
enabled a call must be self-attention (``query``, ``key`` and ``value`` the same
``[B, T, C]`` (``batch_first``), ``[T, B, C]`` or ``[T, C]`` tensor; instances with another
``kdim`` or ``vdim`` are left dense), with ``need_weights=False`` (no dense attention matrix
exists; it returns ``(out, None)``), a ``[B, S]`` ``key_padding_mask`` of bools or of 0 and
:math:`-\infty`, and no ``attn_mask`` but one allowing every pair or the causal one
(``[T, T]`` or ``[B * H, T, T]``) on a ``causal=True`` composition. ``add_bias_kv`` and
``add_zero_attn`` add keys that are no token and are refused; the attention ``dropout`` is
not applied. A composed module is still a :class:`torch.nn.MultiheadAttention`
(:attr:`MultiheadAttentionAdapter.keep_type`), so ``GPSConv`` keeps calling it.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from quest_geometric._utils.checks import describe, fail
from quest_geometric.adapters.base import (AttentionAdapter, AttentionCall, HeadLayout, QKView,
                                           _padded_view)
from quest_geometric.adapters.registry import register_attention_adapter

__all__ = ["MultiheadAttentionAdapter"]

_ARGS = ("query", "key", "value", "key_padding_mask", "need_weights", "attn_mask",
         "average_attn_weights", "is_causal")
_WHO = "compose_focus (MultiheadAttention)"


def _masked(mask: Tensor, name: str) -> Tensor:
    """PyTorch's mask convention as bool 'masked out': bool :obj:`True`, or an additive
    float :math:`-\\infty` (very negative); a finite non-zero value is a bias (refused)."""
    if mask.dtype == torch.bool:
        return mask
    if not mask.is_floating_point():
        raise fail(TypeError, _WHO, name, "a bool or floating-point tensor", mask)
    masked = mask <= torch.finfo(mask.dtype).min / 2
    if bool((mask[~masked] != 0).any()):
        raise fail(ValueError, _WHO, name, "a mask of 0 and -inf (or a bool mask) with Focus "
                   "enabled", got_text="an additive bias (finite non-zero values)")
    return masked


class MultiheadAttentionAdapter(AttentionAdapter):
    r"""Adapter of :class:`torch.nn.MultiheadAttention` as self-attention, :attr:`causal` given
    by the caller. Per head :math:`h` (:math:`D = C / H`) the module computes

    .. math::
        [Q\;K\;V] = X W_{in}^\top + b_{in}, \qquad
        O_h = \operatorname{softmax}\Bigl(\frac{Q_h K_h^\top}{\sqrt{D}} + M\Bigr) V_h,
        \qquad Y = [O_1 \cdots O_H]\, W_{out}^\top + b_{out},

    :math:`M` the padding (and causal) mask; Focus replaces the softmax between
    :meth:`project` and :meth:`output`.
    """

    causal: Optional[bool] = None
    keep_type = True

    @staticmethod
    def _check_structure(module: nn.Module) -> None:
        if module.bias_k is not None or module.bias_v is not None:
            raise ValueError(f"{_WHO}: add_bias_kv=True (bias_k/bias_v) adds a learned key and "
                             f"value that are no token; not supported with Focus")
        if module.add_zero_attn:
            raise ValueError(f"{_WHO}: add_zero_attn=True adds a zero key and value that are no "
                             f"token; not supported with Focus")

    def can_compose(self, module: nn.Module) -> bool:
        """:obj:`False` for an instance that can only do cross-attention (``kdim`` or
        ``vdim`` other than ``embed_dim``); refuses ``add_bias_kv``/``add_zero_attn``."""
        if module.kdim != module.embed_dim or module.vdim != module.embed_dim:
            return False
        self._check_structure(module)
        return True

    def heads(self, module: nn.Module) -> HeadLayout:
        return HeadLayout(module.embed_dim, module.num_heads, module.num_heads, module.head_dim)

    def parse(self, module: nn.Module, args: tuple, kwargs: Dict[str, Any],
              probe: bool = False) -> AttentionCall:
        r"""Parse a ``forward`` call into hidden states ``[B, T, C]``, the padding mask and
        the causality it asks for; ``probe=True`` (the probe's view) accepts
        ``need_weights=True``."""
        self._check_structure(module)
        bound = {**dict(zip(_ARGS, args)), **kwargs}
        q, k, v = bound.get("query"), bound.get("key"), bound.get("value")
        e = module.embed_dim
        shapes = f"[B, T, {e}] (batch_first), [T, B, {e}] or unbatched [T, {e}]"
        if not isinstance(q, Tensor):
            raise fail(TypeError, _WHO, "query", f"a tensor {shapes}", q)
        if k is not q or v is not q:
            bad, other = ("key", k) if k is not q else ("value", v)
            raise fail(ValueError, _WHO, bad, "the 'query' tensor itself with Focus enabled "
                       "(only self-attention is supported, as GPSConv calls it; "
                       "cross-attention is not)", got_text="another tensor" if isinstance(
                           other, Tensor) else describe(other))
        if not probe and bound.get("need_weights", True):
            raise fail(ValueError, _WHO, "need_weights", "False with Focus enabled (as "
                       "GPSConv calls it; the dense attention weights do not exist on the "
                       "Focus path), or disable Focus", got_text="True" + (
                           "" if "need_weights" in bound else " (the default of "
                           "MultiheadAttention.forward)"))
        if q.dim() not in (2, 3) or q.size(-1) != e:
            raise fail(ValueError, _WHO, "query", f"of shape {shapes}", q)
        unbatched = q.dim() == 2
        x = q.unsqueeze(0) if unbatched else (q if module.batch_first else q.transpose(0, 1))
        b, t = x.shape[:2]
        valid = None
        kpm = bound.get("key_padding_mask")
        if kpm is not None:
            want = [t] if unbatched else [b, t]
            if not isinstance(kpm, Tensor):
                raise fail(TypeError, _WHO, "key_padding_mask", f"a {want} tensor", kpm)
            if list(kpm.shape) != want:
                raise fail(ValueError, _WHO, "key_padding_mask", f"of shape {want}", kpm)
            valid = ~_masked(kpm, "key_padding_mask").reshape(b, t)
            if bool(valid.all()):
                valid = None
        causal = None
        am = bound.get("attn_mask")
        if bound.get("is_causal") and am is None:
            raise fail(ValueError, _WHO, "attn_mask", "the causal mask when is_causal=True "
                       "(as in PyTorch)", None)
        if am is not None:
            shapes = f"[{t}, {t}] or [{b * module.num_heads}, {t}, {t}]"
            if not isinstance(am, Tensor):
                raise fail(TypeError, _WHO, "attn_mask", f"a {shapes} tensor", am)
            if am.dim() not in (2, 3) or tuple(am.shape[-2:]) != (t, t) or (
                    am.dim() == 3 and am.size(0) != b * module.num_heads):
                raise fail(ValueError, _WHO, "attn_mask", f"of shape {shapes}", am)
            masked = _masked(am, "attn_mask")
            if bool(masked.any()):  # a mask allowing every pair is the same as none
                upper = torch.ones(t, t, dtype=torch.bool, device=am.device).triu(1)
                if not bool((masked == upper).all()):
                    raise fail(ValueError, _WHO, "attn_mask", "None or the causal mask with Focus "
                               "enabled (nn.Transformer.generate_square_subsequent_mask, "
                               "with a model composed with causal=True)",
                               got_text=f"a {list(am.shape)} mask that masks other pairs (a "
                               "sliding window, a custom mask)", hint="; pass padding as "
                               "key_padding_mask, or disable Focus with "
                               "set_focus_enabled(model, False)")
                causal = True
        return AttentionCall(hidden=x, valid=valid, causal=causal,
                             extra={"unbatched": unbatched})

    def project(self, module: nn.Module, call: AttentionCall) -> Tuple[Tensor, Tensor, Tensor]:
        x = call.hidden
        e = module.embed_dim
        bias = module.in_proj_bias
        if module._qkv_same_embed_dim:
            q, k, v = F.linear(x, module.in_proj_weight, bias).split(e, dim=-1)
        else:
            bq, bk, bv = bias.split(e) if bias is not None else (None, None, None)
            q = F.linear(x, module.q_proj_weight, bq)
            k = F.linear(x, module.k_proj_weight, bk)
            v = F.linear(x, module.v_proj_weight, bv)
        shape = (*x.shape[:-1], module.num_heads, module.head_dim)
        return tuple(z.view(shape).transpose(1, 2) for z in (q, k, v))  # type: ignore

    def output(self, module: nn.Module, o: Tensor) -> Tensor:
        return module.out_proj(o)

    def finish(self, module: nn.Module, out: Tensor, call: AttentionCall) -> Any:
        """``(out, None)`` in the layout of the query: ``[B, T, C]`` (``batch_first``),
        ``[T, B, C]`` or unbatched ``[T, C]``."""
        if call.extra.get("unbatched"):
            out = out.squeeze(0)
        elif not module.batch_first:
            out = out.transpose(0, 1)
        return out, None

    def qk_view(self, module: nn.Module, args: tuple, kwargs: Dict[str, Any]
                ) -> Optional[QKView]:
        r"""Per-head queries and keys (any ``need_weights``), padding marked in
        ``q_valid``/``k_valid``, ``causal`` following the call's ``attn_mask``."""
        call = self.parse(module, args, kwargs, probe=True)
        q, k, _ = self.project(module, call)
        return _padded_view(q, k, self.scaling(module), bool(call.causal), call.valid)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


register_attention_adapter("torch.nn.modules.activation.MultiheadAttention",
                           MultiheadAttentionAdapter(), builtin=True)
