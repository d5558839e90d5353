"""Argument checks shared by the Focus attention back-ends (private)."""
from __future__ import annotations

from torch import Tensor


def check_qkv(q: Tensor, k: Tensor, v: Tensor) -> None:
    """``q``, ``k``, ``v``: floating-point ``[N, H, D]`` tensors of one shape, dtype, device."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor) or t.dim() != 3:
            raise ValueError(f"'{name}' must be a [N, H, D] tensor, got "
                             f"{list(getattr(t, 'shape', [])) or type(t).__name__}")
        if not t.is_floating_point():
            raise TypeError(f"'{name}' must be a floating-point tensor, got {t.dtype}")
    if k.shape != q.shape or v.shape != q.shape:
        raise ValueError(f"'q', 'k', 'v' must have the same shape [N, H, D], got "
                         f"{list(q.shape)}, {list(k.shape)}, {list(v.shape)}")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"'q', 'k', 'v' must share one dtype, got {q.dtype}, {k.dtype}, "
                        f"{v.dtype}")
    if k.device != q.device or v.device != q.device:
        raise ValueError("'q', 'k', 'v' must be on one device")
