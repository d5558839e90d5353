r"""The private ATen flash-attention kernels of PyTorch's CPU build, in one place (private).

The fused path of :func:`~quest_geometric.nn.focus.blocks.focus_blocks_attention` needs the
log-sum-exp of every attention call (to merge the same-group part and the window band
exactly) and a backward that takes the *merged* output and log-sum-exp. The public
:func:`~torch.nn.functional.scaled_dot_product_attention` returns neither, so this module
calls the two CPU kernels behind it directly:

* ``torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(query, key, value,
  dropout_p=0., is_causal=False, *, attn_mask=None, scale=None) -> (output, logsumexp)``
* ``torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(grad_out, query,
  key, value, out, logsumexp, dropout_p, is_causal, *, attn_mask=None, scale=None)
  -> (grad_query, grad_key, grad_value)``

on ``[B, H, L, D]`` tensors, with ``logsumexp`` ``[B, H, L]`` (float32 for half precision
input) and an additive ``attn_mask`` broadcastable to ``[B, H, Lq, Lk]``.

**Checked against torch 2.13.0** (the schemas above are those of that release, read from
``torch.ops.aten.<op>.default._schema``; the test suite runs the fused path against a float64
reference there). These ops are private: another PyTorch version may rename them or change
their signatures. They are looked up with :func:`getattr` at import; if either is missing,
:data:`FLASH_AVAILABLE` is :obj:`False` and the blocks back-end falls back to its plain
PyTorch reference (``fused=True`` is then refused with a clear error). Nothing else in the
package touches a private ``torch.ops.aten`` op.
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
    """``(grad_q, grad_k, grad_v)`` of :func:`flash_forward` for the given ``out`` and
    ``lse`` (which may be those of a larger, merged softmax: then these are the call's
    exact contributions to its gradient)."""
    return _FLASH_BWD(grad_out, q, k, v, out, lse, 0.0, is_causal, attn_mask=attn_mask,
                      scale=scale)
