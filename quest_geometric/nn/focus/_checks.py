"""Argument checks and the token layout shared by the Focus modules (private).

The names carry no underscore so that the modules of :mod:`quest_geometric.nn.focus` can share
them; nothing here is public API.
"""
from __future__ import annotations

import math
import numbers
from typing import Optional, Tuple

import torch
from torch import Tensor

from quest_geometric._utils.checks import check_int

#: Half precision dtypes: computed in float32 by the back-ends (scores, softmax, merges).
HALF_DTYPES = (torch.float16, torch.bfloat16)


def check_batch(batch: Optional[Tensor], num_nodes: int, name: str = "batch") -> None:
    r"""Validate a PyG :obj:`batch` vector (long, 1-D, length :obj:`num_nodes`, sorted).

    Raises:
        TypeError: if :obj:`batch` is not an integer tensor.
        ValueError: if its shape is wrong, or it is not sorted in non-decreasing order.
    """
    if batch is None:
        return
    if not isinstance(batch, Tensor) or batch.dtype not in (torch.long, torch.int32):
        raise TypeError(f"'{name}' must be a long tensor, got {type(batch).__name__} "
                        f"{getattr(batch, 'dtype', '')}")
    if batch.dim() != 1 or batch.numel() != num_nodes:
        raise ValueError(f"'{name}' must have shape [{num_nodes}], got {list(batch.shape)}")
    if num_nodes > 1 and bool((batch[1:] < batch[:-1]).any()):
        raise ValueError(f"'{name}' must be sorted in non-decreasing order (PyG convention: "
                         f"nodes of one graph/sequence are contiguous)")
    if num_nodes > 0 and int(batch[0]) < 0:
        raise ValueError(f"'{name}' must be non-negative")


def check_real(value, name: str, positive: bool = False) -> float:
    r"""Validate a finite real scalar argument (a Python or NumPy number, not a bool, or a
    0-d real tensor) and return it as a :obj:`float`.

    Raises:
        TypeError: if :obj:`value` is not a real number.
        ValueError: if it is NaN or infinite, or not :math:`> 0` with ``positive=True``.
    """
    if isinstance(value, Tensor) and value.numel() == 1 and not value.is_complex() \
            and value.dtype != torch.bool:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"'{name}' must be a real number, got {type(value).__name__} "
                        f"{value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"'{name}' must be finite, got {value!r}")
    if positive and not value > 0:
        raise ValueError(f"'{name}' must be positive, got {value!r}")
    return value


def check_features(x, name: str, min_dims: int = 2, max_dims: int = 3) -> None:
    r"""Validate a floating-point feature tensor :obj:`[N, C]` or :obj:`[B, T, C]` holding
    at least one token.

    Raises:
        TypeError: if :obj:`x` is not a floating-point tensor.
        ValueError: if it has the wrong number of dimensions or no token.
    """
    if not isinstance(x, Tensor):
        raise TypeError(f"'{name}' must be a tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"'{name}' must be a floating-point tensor (float16, bfloat16, "
                        f"float32 or float64), got {x.dtype}")
    if not min_dims <= x.dim() <= max_dims:
        shapes = "[B, T, C] or [N, C]" if (min_dims, max_dims) == (2, 3) else \
            f"{min_dims}-{max_dims} dimensions"
        raise ValueError(f"'{name}' must be {shapes}, got {list(x.shape)}")
    if x.shape[:-1].numel() == 0:
        raise ValueError(f"'{name}' must hold at least one token, got shape {list(x.shape)}")


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


def check_window(window: int) -> None:
    """``window``: a non-negative int (not a bool)."""
    check_int(window, "'window'", 0)


def check_soft(soft: Tensor, n: Optional[int] = None) -> None:
    """``soft``: floating-point soft memberships ``[N, K]`` (``N = n`` when given)."""
    if not isinstance(soft, Tensor) or not soft.is_floating_point() or soft.dim() != 2 \
            or (n is not None and soft.size(0) != n):
        raise ValueError(f"'soft' must be a floating-point [{'N' if n is None else n}, K] "
                         f"tensor, got {getattr(soft, 'dtype', type(soft).__name__)} "
                         f"{list(getattr(soft, 'shape', []))}")


def check_num_sinks(num_sinks: int) -> None:
    """``num_sinks``: a non-negative int, the attention sinks (:class:`TypeError` for a
    non-int or a bool, :class:`ValueError` for a negative int)."""
    if isinstance(num_sinks, bool) or not isinstance(num_sinks, int):
        raise TypeError(f"'num_sinks' must be an int >= 0, got {num_sinks!r}")
    check_int(num_sinks, "'num_sinks'", 0)


def check_groups(groups: Tensor) -> Tensor:
    """``groups``: non-negative long group ids ``[N, top_k]`` (``[N]`` becomes ``[N, 1]``);
    ``top_k = 0`` (``[N, 0]``) is the empty group set of every token: no far pair is kept
    (window-only routing)."""
    if not isinstance(groups, Tensor) or groups.dtype != torch.long:
        raise TypeError(f"'groups' must be a long tensor, got "
                        f"{getattr(groups, 'dtype', type(groups).__name__)}")
    if groups.dim() == 1:
        groups = groups.unsqueeze(-1)
    if groups.dim() != 2:
        raise ValueError(f"'groups' must have shape [N, top_k], got {list(groups.shape)}")
    if groups.numel() > 0 and int(groups.min()) < 0:
        raise ValueError("'groups' must be non-negative group ids")
    return groups


def check_hard_args(q: Tensor, k: Tensor, v: Tensor, groups: Tensor, window: int,
                    batch: Optional[Tensor], num_groups: Optional[int]
                    ) -> Tuple[Tensor, int]:
    """Validate the arguments of a hard back-end; return ``groups`` ``[N, top_k]`` and
    :math:`K` (``groups.max() + 1`` when :obj:`num_groups` is :obj:`None`)."""
    check_qkv(q, k, v)
    groups = check_groups(groups)
    n = q.size(0)
    if groups.size(0) != n:
        raise ValueError(f"'groups' must have {n} rows (one per token), got "
                         f"{list(groups.shape)}")
    if groups.device != q.device:
        raise ValueError(f"'groups' must be on {q.device}, got {groups.device}")
    check_window(window)
    check_batch(batch, n)
    gmax = int(groups.max()) + 1 if groups.numel() > 0 else 1
    if num_groups is None:
        return groups, gmax
    check_int(num_groups, "'num_groups'", 1)
    if gmax > num_groups:
        raise ValueError(f"'groups' must hold ids in [0, num_groups={num_groups}), got id "
                         f"{gmax - 1}")
    return groups, num_groups


def seq_layout(batch: Optional[Tensor], n: int, device: torch.device
               ) -> Tuple[Tensor, int]:
    """Sequence id per token (long) and number of sequences."""
    if batch is None:
        return torch.zeros(n, dtype=torch.long, device=device), 1
    seq = batch.long()
    return seq, (int(seq.max()) + 1 if n > 0 else 0)
