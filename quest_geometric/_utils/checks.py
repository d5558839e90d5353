"""Argument validators with one message format: ``"<where>: <arg> must be ..., got ..."``."""
from __future__ import annotations

import math
from collections import abc
from typing import Any, Optional, Sequence


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
