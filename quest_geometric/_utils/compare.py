r"""Exact comparison of two integer tensors' values by their bytes.

:class:`~quest_geometric.nn._qsv_csr.TransposeCache` compares a graph's source vector with
the cached one at every backward of a compiled :class:`~quest_geometric.nn.QSVConv`. For two
contiguous CPU integer tensors of one dtype and shape, equal values are equal bytes, and the
C library's ``memcmp`` compares them at memory speed; everything else (floating point, where
``-0.0 == 0.0`` and ``nan != nan`` differ from the bytes; another device; a strided view; no
C library found) goes to :func:`torch.equal`.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import sys
from typing import Any, Optional

import torch
from torch import Tensor

__all__ = ["same_values", "MEMCMP_AVAILABLE"]

_EXACT_DTYPES = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def _load_memcmp() -> Optional[Any]:
    try:
        if sys.platform == "win32":
            lib = ctypes.cdll.msvcrt
        else:
            name = ctypes.util.find_library("c")
            lib = ctypes.CDLL(name) if name else ctypes.CDLL(None)
        fn = lib.memcmp
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_int
    fn.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
    return fn


_MEMCMP = _load_memcmp()

#: Whether ``memcmp`` was found (else :func:`same_values` is :func:`torch.equal`).
MEMCMP_AVAILABLE: bool = _MEMCMP is not None


def same_values(a: Tensor, b: Tensor) -> bool:
    """Whether ``a`` and ``b`` have one dtype, one shape and the same values (``memcmp`` of
    their bytes where that is the same question, else :func:`torch.equal`)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if (_MEMCMP is not None and a.dtype in _EXACT_DTYPES and a.device.type == "cpu"
            and b.device.type == "cpu" and a.is_contiguous() and b.is_contiguous()):
        n = a.numel() * a.element_size()
        return n == 0 or _MEMCMP(a.data_ptr(), b.data_ptr(), n) == 0
    return bool(torch.equal(a, b))
