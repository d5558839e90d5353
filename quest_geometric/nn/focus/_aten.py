r"""The private ATen flash-attention kernels of PyTorch's CPU build, in one place (private).

The fused path of :func:`~quest_geometric.nn.focus.blocks.focus_blocks_attention` needs the
log-sum-exp of every call and a backward that takes the *merged* output and log-sum-exp,
which :func:`~torch.nn.functional.scaled_dot_product_attention` does not give, so this
module calls its two CPU kernels directly:

* ``torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(query, key, value,
  dropout_p=0., is_causal=False, *, attn_mask=None, scale=None) -> (output, logsumexp)``
* ``torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(grad_out, query,
  key, value, out, logsumexp, dropout_p, is_causal, *, attn_mask=None, scale=None)
  -> (grad_query, grad_key, grad_value)``

on ``[B, H, L, D]`` tensors (``logsumexp`` ``[B, H, L]``, float32 for half precision). These
ops are private and may change in another PyTorch version; if either is missing,
:data:`FLASH_AVAILABLE` is :obj:`False` and the blocks back-end runs its plain reference.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor

_FLASH_FWD = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
_FLASH_BWD = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu_backward",
                     None)

#: Whether both CPU flash kernels exist in this PyTorch build.
FLASH_AVAILABLE: bool = _FLASH_FWD is not None and _FLASH_BWD is not None


def flash_forward(q: Tensor, k: Tensor, v: Tensor, is_causal: bool,
                  attn_mask: Optional[Tensor] = None, scale: Optional[float] = None
                  ) -> Tuple[Tensor, Tensor]:
    """``(output, logsumexp)`` of softmax attention on ``[B, H, L, D]`` CPU tensors (no
    dropout)."""
    return _FLASH_FWD(q, k, v, 0.0, is_causal, attn_mask=attn_mask, scale=scale)


def flash_backward(grad_out: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor,
                   lse: Tensor, is_causal: bool, attn_mask: Optional[Tensor] = None,
                   scale: Optional[float] = None) -> Tuple[Tensor, Tensor, Tensor]:
    r"""``(grad_q, grad_k, grad_v)`` of :func:`flash_forward` for the given ``out`` and ``lse``
    (those of a larger, merged softmax give the call's exact share of its gradient)."""
    return _FLASH_BWD(grad_out, q, k, v, out, lse, 0.0, is_causal, attn_mask=attn_mask,
                      scale=scale)
