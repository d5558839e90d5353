"""The one checks module of the package: argument validators with one message shape,
``"<where>: '<arg>' must be ..., got ..."`` (``where`` names the public function or class
the user called), a :class:`TypeError` for a wrong type (a :obj:`bool` where an ``int`` is
expected, a non-tensor where a tensor is expected, a wrong dtype) and a :class:`ValueError`
for a wrong value (range, shape, non-finite entries).

``arg`` may be given bare (``"k"``) or quoted (``"'k'"``, ``"`k`"``); it is shown quoted,
with any trailing note kept (``"'max_blocks' (or None)"``).
"""
from __future__ import annotations

import math
import numbers
import reprlib
from collections import abc
from typing import Any, Optional, Sequence, Tuple

import torch
from torch import Tensor

_CHANNEL_COUNTS = (1, 2, 3, 4)
_repr = reprlib.Repr()
_repr.maxstring = _repr.maxother = 60


def _quote(arg: str) -> str:
    arg = arg.replace("`", "'")
    if arg.startswith("'"):
        return arg
    head, sep, tail = arg.partition(" ")
    return f"'{head}'{sep}{tail}"


def describe(value: Any) -> str:
    """A short description of ``value`` for the ``got ...`` part of a message."""
    if isinstance(value, Tensor):
        return f"a {value.dtype} tensor of shape {list(value.shape)}"
    if isinstance(value, (torch.dtype, torch.device)):
        return str(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return repr(value) if not isinstance(value, str) else _repr.repr(value)
    return f"{type(value).__name__} {_repr.repr(value)}"


def fail(exc: type, where: Optional[str], arg: str, expected: str, got: Any = None,
         *, got_text: Optional[str] = None, hint: str = "") -> Exception:
    """The exception ``exc("<where>: '<arg>' must be <expected>, got <got><hint>")``
    (returned, to be raised by the caller)."""
    shown = got_text if got_text is not None else describe(got)
    prefix = f"{where}: " if where else ""
    return exc(f"{prefix}{_quote(arg)} must be {expected}, got {shown}{hint}")


def check_int(value: Any, arg: str, minimum: Optional[int] = None, where: Optional[str] = None,
              maximum: Optional[int] = None) -> int:
    """``value`` is an ``int`` (not a ``bool``) within ``[minimum, maximum]``."""
    bounds = (f" >= {minimum}" if minimum is not None else "") + (
        f" and <= {maximum}" if maximum is not None else "")
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise fail(TypeError, where, arg, f"an int{bounds}", value)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise fail(ValueError, where, arg, f"an int{bounds}", value)
    return int(value)


def check_positive_int(value: Any, arg: str, where: Optional[str] = None) -> int:
    """:func:`check_int` with ``minimum=1``."""
    return check_int(value, arg, 1, where=where)


def check_shell_sizes(sizes: Any, arg: str = "sizes", where: Optional[str] = None) -> list[int]:
    """A non-empty sequence of positive ints (the points per shell of concentric spheres)."""
    if isinstance(sizes, (int, str)) or not isinstance(sizes, abc.Sequence):
        raise fail(TypeError, where, arg, "a sequence of ints >= 1", sizes)
    if len(sizes) == 0:
        raise fail(ValueError, where, arg, "a non-empty sequence of ints >= 1", sizes)
    return [check_int(n, f"{_quote(arg)} (entry {i})", 1, where=where)
            for i, n in enumerate(sizes)]


def check_shell_radii(radii: Optional[Sequence[float]], num_shells: int,
                      arg: str = "radii", where: Optional[str] = None) -> list[float]:
    """One finite, positive, strictly increasing radius per shell; :obj:`None` gives the
    radii ``1, 2, ..., num_shells``."""
    if radii is None:
        return [float(s + 1) for s in range(num_shells)]
    if isinstance(radii, (str, bytes)) or not isinstance(radii, abc.Iterable):
        raise fail(TypeError, where, arg, f"a sequence of {num_shells} real numbers", radii)
    radii = [check_real(r, f"{_quote(arg)} (entry {i})", where=where)
             for i, r in enumerate(radii)]
    if len(radii) != num_shells:
        raise fail(ValueError, where, arg, f"one radius per shell ({num_shells})", radii)
    if not all(r > 0 for r in radii):
        raise fail(ValueError, where, arg, "positive", radii)
    if any(b <= a for a, b in zip(radii, radii[1:])):
        raise fail(ValueError, where, arg, "strictly increasing", radii)
    return radii


def check_real(value: Any, arg: str, positive: bool = False, where: Optional[str] = None,
               allow_zero: bool = False) -> float:
    """A finite real scalar (a Python or NumPy number, not a bool, or a one-element real
    tensor) as a :obj:`float`; ``> 0`` with ``positive`` (``>= 0`` with ``allow_zero`` too)."""
    sign = (" >= 0" if allow_zero else " > 0") if positive else ""
    if isinstance(value, Tensor) and value.numel() == 1 and not value.is_complex() \
            and value.dtype != torch.bool:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise fail(TypeError, where, arg, f"a real number{sign}", value)
    value = float(value)
    if not math.isfinite(value) or (positive and not (value >= 0 if allow_zero else value > 0)):
        raise fail(ValueError, where, arg, f"a finite number{sign}", value)
    return value


def check_positive_float(value: Any, arg: str, where: Optional[str] = None,
                         allow_zero: bool = False) -> float:
    """:func:`check_real` with ``positive=True``."""
    return check_real(value, arg, True, where=where, allow_zero=allow_zero)


def check_choice(value: Any, arg: str, choices: Sequence[Any], where: Optional[str] = None) -> Any:
    """``value`` is one of ``choices`` (a :class:`TypeError` when every choice is a string
    and ``value`` is not)."""
    choices = tuple(choices)
    if all(isinstance(c, str) for c in choices) and not isinstance(value, str):
        raise fail(TypeError, where, arg, f"a str, one of {choices}", value)
    if value not in choices:
        raise fail(ValueError, where, arg, f"one of {choices}", value)
    return value


def check_tensor(value: Any, arg: str, where: Optional[str] = None,
                 floating: bool = False) -> Tensor:
    """``value`` is a tensor (a floating-point one with ``floating``)."""
    if not isinstance(value, Tensor) or (floating and not value.is_floating_point()):
        raise fail(TypeError, where, arg, "a floating-point tensor" if floating else "a tensor",
                   value)
    return value


def all_finite(t: Tensor) -> bool:
    """Whether every entry of the floating-point tensor ``t`` is finite: a sum of finite terms
    is finite, so one reduction decides (no ``[*t.shape]`` boolean tensor); only a non-finite
    sum (a non-finite entry, or an overflow) runs the exact elementwise test."""
    return bool(torch.isfinite(t.sum())) or bool(torch.isfinite(t).all())


def check_finite(value: Tensor, arg: str, where: Optional[str] = None) -> Tensor:
    """``value`` holds no NaN or infinity (:func:`all_finite`)."""
    if (value.is_floating_point() or value.is_complex()) and not all_finite(value):
        raise fail(ValueError, where, arg, "finite", got_text="NaN or infinite entries")
    return value


def check_all_finite(named: Sequence[Tuple[str, Optional[Tensor]]],
                     where: Optional[str] = None) -> None:
    """Every floating-point tensor of ``named`` (``(argument, tensor)`` pairs; :obj:`None`
    skipped) is finite, else a :class:`ValueError` naming the first that is not. One host
    sync for all: the sum of their sums (:func:`all_finite`). Skipped while
    :func:`torch.compile` traces (a data-dependent branch would break the graph)."""
    tensors = [(n, t) for n, t in named
               if t is not None and (t.is_floating_point() or t.is_complex())]
    if not tensors or torch.compiler.is_compiling():
        return
    with torch.no_grad():
        total = sum(t.detach().sum() for _, t in tensors)
    if bool(torch.isfinite(total)):
        return
    for name, t in tensors:
        if not all_finite(t):
            bad = int((~torch.isfinite(t)).sum())
            raise fail(ValueError, where, name, "finite",
                       got_text=f"{bad} NaN or infinite of {t.numel()} entries")


# ---- Focus attention arguments
def check_batch(batch: Optional[Tensor], num_nodes: int, name: str = "batch",
                where: Optional[str] = None) -> None:
    """A PyG ``batch`` vector (:obj:`None`, or an integer tensor ``[num_nodes]``, sorted,
    non-negative)."""
    if batch is None:
        return
    if not isinstance(batch, Tensor) or batch.dtype not in (torch.long, torch.int32):
        raise fail(TypeError, where, name, "a long tensor", batch)
    if batch.dim() != 1 or batch.numel() != num_nodes:
        raise fail(ValueError, where, name, f"of shape [{num_nodes}]", batch)
    if num_nodes > 1 and bool((batch[1:] < batch[:-1]).any()):
        raise fail(ValueError, where, name, "sorted in non-decreasing order (PyG convention: "
                   "nodes of one graph/sequence are contiguous)", got_text="an unsorted vector")
    if num_nodes > 0 and int(batch[0]) < 0:
        raise fail(ValueError, where, name, "non-negative", got_text=f"{int(batch[0])}")


def check_features(x, name: str, min_dims: int = 2, max_dims: int = 3,
                   where: Optional[str] = None) -> None:
    """A finite floating-point feature tensor ``[N, C]`` or ``[B, T, C]`` holding at least
    one token (finite even for a content-free router: one rule for every entry point keeps a
    NaN from going unnoticed)."""
    if not isinstance(x, Tensor) or not x.is_floating_point():
        raise fail(TypeError, where, name, "a floating-point tensor (float16, bfloat16, "
                   "float32 or float64)", x)
    if not min_dims <= x.dim() <= max_dims:
        shapes = "[B, T, C] or [N, C]" if (min_dims, max_dims) == (2, 3) else \
            f"of {min_dims}-{max_dims} dimensions"
        raise fail(ValueError, where, name, shapes, x)
    if x.shape[:-1].numel() == 0:
        raise fail(ValueError, where, name, "a tensor holding at least one token", x)
    check_all_finite(((name, x),), where=where)


def check_qkv(q: Tensor, k: Tensor, v: Tensor, where: Optional[str] = None) -> None:
    """``q``, ``k``, ``v``: floating-point ``[N, H, D]`` tensors of one shape, dtype, device,
    and finite (a NaN in any of them would spread through the softmax)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor) or not t.is_floating_point():
            raise fail(TypeError, where, name, "a floating-point [N, H, D] tensor", t)
        if t.dim() != 3:
            raise fail(ValueError, where, name, "a [N, H, D] tensor", t)
    for attr, exc, expected in (("shape", ValueError, f"of the shape of 'q' {list(q.shape)}"),
                                ("dtype", TypeError, f"of the dtype of 'q' ({q.dtype})"),
                                ("device", ValueError, f"on the device of 'q' ({q.device})")):
        for name, t in (("k", k), ("v", v)):
            if getattr(t, attr) != getattr(q, attr):
                raise fail(exc, where, name, expected, t,
                           got_text=str(t.device) if attr == "device" else None)
    check_all_finite((("q", q), ("k", k), ("v", v)), where=where)


def check_window(window: int, where: Optional[str] = None) -> None:
    """``window``: a non-negative int (not a bool)."""
    check_int(window, "window", 0, where=where)


def check_soft(soft: Tensor, n: Optional[int] = None, where: Optional[str] = None) -> None:
    """``soft``: finite floating-point soft memberships ``[N, K]`` (``N = n`` when given)."""
    shape = f"[{'N' if n is None else n}, K]"
    if not isinstance(soft, Tensor) or not soft.is_floating_point():
        raise fail(TypeError, where, "soft", f"a floating-point {shape} tensor", soft)
    if soft.dim() != 2 or (n is not None and soft.size(0) != n):
        raise fail(ValueError, where, "soft", f"a {shape} tensor", soft)
    check_all_finite((("soft", soft),), where=where)


def check_num_sinks(num_sinks: Any, where: Optional[str] = None) -> int:
    """``num_sinks``: a non-negative int, the attention sinks."""
    return check_int(num_sinks, "num_sinks", 0, where=where)


def check_groups(groups: Tensor, where: Optional[str] = None) -> Tensor:
    """``groups``: non-negative long group ids ``[N, top_k]`` (``[N]`` becomes ``[N, 1]``;
    ``[N, 0]`` keeps no far pair: window-only routing)."""
    if not isinstance(groups, Tensor) or groups.dtype != torch.long:
        raise fail(TypeError, where, "groups", "a long tensor", groups)
    if groups.dim() == 1:
        groups = groups.unsqueeze(-1)
    if groups.dim() != 2:
        raise fail(ValueError, where, "groups", "of shape [N, top_k]", groups)
    if groups.numel() > 0 and int(groups.min()) < 0:
        raise fail(ValueError, where, "groups", "non-negative group ids",
                   got_text=f"id {int(groups.min())}")
    return groups


def check_hard_args(q: Tensor, k: Tensor, v: Tensor, groups: Tensor, window: int,
                    batch: Optional[Tensor], num_groups: Optional[int],
                    where: Optional[str] = None) -> Tuple[Tensor, int]:
    """Validate the arguments of a hard back-end; return ``groups`` ``[N, top_k]`` and
    :math:`K` (``groups.max() + 1`` when :obj:`num_groups` is :obj:`None`)."""
    check_qkv(q, k, v, where=where)
    groups = check_groups(groups, where=where)
    n = q.size(0)
    if groups.size(0) != n:
        raise fail(ValueError, where, "groups", f"of {n} rows (one per token)", groups)
    if groups.device != q.device:
        raise fail(ValueError, where, "groups", f"on {q.device}", got_text=str(groups.device))
    check_window(window, where=where)
    check_batch(batch, n, where=where)
    gmax = int(groups.max()) + 1 if groups.numel() > 0 else 1
    if num_groups is None:
        return groups, gmax
    check_int(num_groups, "num_groups", 1, where=where)
    if gmax > num_groups:
        raise fail(ValueError, where, "groups", f"group ids in [0, num_groups={num_groups})",
                   got_text=f"id {gmax - 1}")
    return groups, num_groups


# ---- images
def looks_channels_last(shape: Sequence[int]) -> bool:
    """``[..., H, W, C]``: few channels last and a spatial size before (as PIL, NumPy and
    matplotlib load an image)."""
    return shape[-1] in _CHANNEL_COUNTS and shape[-3] not in _CHANNEL_COUNTS


def check_image(image: Any, name: str = "image", where: Optional[str] = None) -> Tensor:
    """One image ``[C, H, W]`` (floating point, or ``uint8`` rescaled to ``[0, 1]``)."""
    if not isinstance(image, Tensor):
        raise fail(TypeError, where, name, "a [C, H, W] tensor", image)
    if image.dim() != 3 or looks_channels_last(tuple(image.shape)):
        hint = {4: ", a batch [B, C, H, W]; call transform.batch_call(images) for a batch, "
                   "or transform it image by image",
                2: f", a single-channel [H, W] image?; pass {name}[None] to add the channel "
                   "axis",
                3: f", which looks channels-last [H, W, C]; pass {name}.permute(2, 0, 1)"}
        raise fail(ValueError, where, name, "of shape [C, H, W]", image,
                   hint=hint.get(image.dim(), ""))
    return as_float(image, name, where=where)


def as_float(image: Tensor, name: str, where: Optional[str] = None) -> Tensor:
    r"""Floating-point images pass unchanged (their range is the caller's); ``uint8`` images
    become :math:`x / 255`; other integer or boolean images are refused (unknown range)."""
    if image.dtype == torch.uint8:
        image = image.to(torch.get_default_dtype()).div_(255.0)
    elif not image.is_floating_point():
        raise fail(TypeError, where, name, "a floating-point or uint8 image (uint8 is "
                   "rescaled to [0, 1])", image,
                   hint="; convert other integer images to float in the range you want first")
    return check_finite(image, name, where=where)


def check_images(images: Any, y: Optional[Tensor], where: Optional[str] = None) -> Tensor:
    """A ``[B, C, H, W]`` image batch (and its targets ``y``, one per image) for
    ``batch_call``."""
    if not isinstance(images, Tensor):
        raise fail(TypeError, where, "images", "a [B, C, H, W] tensor", images)
    if images.dim() != 4 or looks_channels_last(tuple(images.shape)):
        hint = {3: "; for one image [C, H, W] call the transform itself, or pass "
                   "images.unsqueeze(0)",
                4: ", which looks channels-last [B, H, W, C]; pass images.permute(0, 3, 1, 2)"}
        raise fail(ValueError, where, "images", "of shape [B, C, H, W]", images,
                   hint=hint.get(images.dim(), ""))
    images = as_float(images, "images", where=where)
    if y is not None and not isinstance(y, Tensor):
        raise fail(TypeError, where, "y", "a tensor with one entry per image", y)
    if y is not None and (y.dim() == 0 or y.size(0) != images.size(0)):
        raise fail(ValueError, where, "y", f"a tensor with one entry per image "
                   f"({images.size(0)})", y)
    return images


# ---- QSV layers
def check_return_attention_weights(value: Any, where: Optional[str] = None) -> bool:
    """The one meaning of ``return_attention_weights`` in
    :class:`~quest_geometric.nn.QSVConv` and :class:`~quest_geometric.models.qsv_net.QSVNet`:
    :obj:`True` returns the weights, :obj:`None` or :obj:`False` does not."""
    if value is None or value is False:
        return False
    if value is True:
        return True
    raise fail(TypeError, where, "return_attention_weights", "True, False or None", value)
