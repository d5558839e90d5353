"""Argument validators with one message format: ``"<where>: <arg> must be ..., got ..."``."""
from __future__ import annotations

import math
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
            or (minimum is not None and value < minimum) or (maximum is not None and value > maximum)):
        raise ValueError(f"{_prefix(where)}{arg} must be an int{bounds}, got {value!r}")
    return value


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
