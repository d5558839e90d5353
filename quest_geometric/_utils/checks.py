"""Argument validators with one message format: ``"<where>: <arg> must be ..., got ..."``."""
from __future__ import annotations

import math
import numbers
from collections import abc
from typing import Any, Optional, Sequence, Tuple

import torch
from torch import Tensor

_CHANNEL_COUNTS = (1, 2, 3, 4)


def _prefix(where: Optional[str]) -> str:
    return f"{where}: " if where else ""


def check_int(value: Any, arg: str, minimum: Optional[int] = None, where: Optional[str] = None,
              maximum: Optional[int] = None) -> int:
    """``value`` is an ``int`` (not a ``bool``) within ``[minimum, maximum]``; else a
    :class:`ValueError` naming ``arg`` (and ``where``, the function or class)."""
    bounds = (f" >= {minimum}" if minimum is not None else "") + (
        f" and <= {maximum}" if maximum is not None else "")
    if (isinstance(value, bool) or not isinstance(value, int)
            or (minimum is not None and value < minimum) or (maximum is not None
                                                             and value > maximum)):
        raise ValueError(f"{_prefix(where)}{arg} must be an int{bounds}, got {value!r}")
    return value


def check_positive_int(value: Any, arg: str, where: Optional[str] = None) -> int:
    """:func:`check_int` with ``minimum=1``, except that a value that is not an ``int`` (or is
    a ``bool``) is a :class:`TypeError`; a too-small int stays a :class:`ValueError`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{_prefix(where)}{arg} must be an int >= 1, got {value!r}")
    return check_int(value, arg, 1, where=where)


def check_shell_sizes(sizes: Any, arg: str = "'sizes'") -> list[int]:
    """A non-empty sequence of positive ints (the points per shell of concentric spheres); a
    non-sequence or a non-int entry is a :class:`TypeError`, an empty or non-positive one a
    :class:`ValueError`."""
    if isinstance(sizes, (int, str)) or not isinstance(sizes, abc.Sequence):
        raise TypeError(f"{arg} must be a sequence of ints (got {sizes!r})")
    if len(sizes) == 0:
        raise ValueError(f"{arg} must hold at least one shell size")
    return [check_positive_int(n, arg) for n in sizes]


def check_shell_radii(radii: Optional[Sequence[float]], num_shells: int,
                      arg: str = "'radii'") -> list[float]:
    """One finite, positive, strictly increasing radius per shell; :obj:`None` gives the
    radii ``1, 2, ..., num_shells``."""
    if radii is None:
        return [float(s + 1) for s in range(num_shells)]
    radii = [float(r) for r in radii]
    if len(radii) != num_shells:
        raise ValueError(f"{arg} must hold one radius per shell ({num_shells}), got {len(radii)}")
    if not all(math.isfinite(r) and r > 0 for r in radii):
        raise ValueError(f"{arg} must be positive and finite (got {radii})")
    if any(b <= a for a, b in zip(radii, radii[1:])):
        raise ValueError(f"{arg} must be strictly increasing (got {radii})")
    return radii


def check_positive_float(value: Any, arg: str, where: Optional[str] = None,
                         allow_zero: bool = False) -> float:
    """``value`` is a finite real number ``> 0`` (``>= 0`` with ``allow_zero``)."""
    ok = (not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
          and (value >= 0 if allow_zero else value > 0))
    if not ok:
        raise ValueError(f"{_prefix(where)}{arg} must be a finite number "
                         f"{'>= 0' if allow_zero else '> 0'}, got {value!r}")
    return float(value)


def check_choice(value: Any, arg: str, choices: Sequence[Any], where: Optional[str] = None) -> Any:
    """``value`` is one of ``choices``; else a :class:`ValueError` listing them."""
    if value not in tuple(choices):
        raise ValueError(f"{_prefix(where)}{arg} must be one of {tuple(choices)}, got {value!r}")
    return value


# ---- Focus attention arguments
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


def check_groups(groups: Tensor) -> Tensor:
    """``groups``: non-negative long group ids ``[N, top_k]`` (``[N]`` becomes ``[N, 1]``)."""
    if not isinstance(groups, Tensor) or groups.dtype != torch.long:
        raise TypeError(f"'groups' must be a long tensor, got "
                        f"{getattr(groups, 'dtype', type(groups).__name__)}")
    if groups.dim() == 1:
        groups = groups.unsqueeze(-1)
    if groups.dim() != 2 or groups.size(1) < 1:
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
    gmax = int(groups.max()) + 1 if n > 0 else 1
    if num_groups is None:
        return groups, gmax
    check_int(num_groups, "'num_groups'", 1)
    if gmax > num_groups:
        raise ValueError(f"'groups' must hold ids in [0, num_groups={num_groups}), got id "
                         f"{gmax - 1}")
    return groups, num_groups


# ---- images
def looks_channels_last(shape: Sequence[int]) -> bool:
    """``[..., H, W, C]`` with few channels last and a spatial size first (an image as
    loaded by PIL / NumPy / matplotlib)."""
    return shape[-1] in _CHANNEL_COUNTS and shape[-3] not in _CHANNEL_COUNTS


def check_image(image: Any, name: str = "image") -> Tensor:
    if not isinstance(image, Tensor):
        raise TypeError(f"'{name}' must be a Tensor (got {type(image).__name__})")
    shape = tuple(image.shape)
    if image.dim() == 4:
        raise ValueError(
            f"'{name}' must have shape [C, H, W] (got {shape}, a batch [B, C, H, W]); call "
            "transform.batch_call(images) for a batch, or transform it image by image"
        )
    if image.dim() != 3:
        raise ValueError(f"'{name}' must have shape [C, H, W] (got {shape})")
    if looks_channels_last(shape):
        raise ValueError(
            f"'{name}' must have shape [C, H, W] (got {shape}, which looks channels-last "
            f"[H, W, C]); pass {name}.permute(2, 0, 1)"
        )
    return as_float(image, name)


def as_float(image: Tensor, name: str) -> Tensor:
    r"""Floating-point images pass unchanged (their range is the caller's); ``uint8`` images
    are rescaled to :math:`[0, 1]` by :math:`x / 255`; other integer or boolean images are
    refused (their range is unknown)."""
    if image.dtype == torch.uint8:
        image = image.to(torch.get_default_dtype()).div_(255.0)
    elif not image.is_floating_point():
        raise ValueError(
            f"'{name}' has dtype {image.dtype}: pass a floating-point image, or uint8 (which "
            "is rescaled to [0, 1]); convert other integer images to float in the range you "
            "want first"
        )
    if not bool(torch.isfinite(image).all()):
        raise ValueError(f"'{name}' holds non-finite values (NaN or inf)")
    return image


def check_images(images: Any, y: Optional[Tensor]) -> Tensor:
    """Validate a ``[B, C, H, W]`` image batch (and its targets) for ``batch_call``."""
    if not isinstance(images, Tensor) or images.dim() != 4:
        shape = tuple(images.shape) if isinstance(images, Tensor) else type(images)
        hint = ""
        if isinstance(images, Tensor) and images.dim() == 3:
            hint = ("; for one image [C, H, W] call the transform itself, or pass "
                    "images.unsqueeze(0)")
        raise ValueError(f"'images' must have shape [B, C, H, W] (got {shape}){hint}")
    if looks_channels_last(tuple(images.shape)):
        raise ValueError(
            f"'images' must have shape [B, C, H, W] (got {tuple(images.shape)}, which looks "
            "channels-last [B, H, W, C]); pass images.permute(0, 3, 1, 2)"
        )
    images = as_float(images, "images")
    if y is not None and (not isinstance(y, Tensor) or y.size(0) != images.size(0)):
        raise ValueError("'y' must be a Tensor with one entry per image")
    return images


# ---- QSV layers
def check_return_attention_weights(value: Any) -> bool:
    r"""The one meaning of ``return_attention_weights`` in :class:`QSVConv`,
    :class:`~quest_geometric.models.qsv_net.QSVBlock` and
    :class:`~quest_geometric.models.qsv_net.QSVNet`: :obj:`True` returns the weights,
    :obj:`None` or :obj:`False` does not; anything else is an error."""
    if value is None or value is False:
        return False
    if value is True:
        return True
    raise ValueError(
        f"'return_attention_weights' must be True, False or None (got {value!r})"
    )
