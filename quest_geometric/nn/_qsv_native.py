r"""Native CPU kernels of :class:`~quest_geometric.nn.QSVConv`'s dense path.

The C source (``csrc/qsv_kernels.c``) is compiled at first use into a per-user cache folder
that is trusted or not used (:mod:`~quest_geometric.nn._qsv_build`) and loaded with
:mod:`ctypes`, as :func:`torch.compile`'s CPU back-end does with its own kernels.  Each kernel
is a :func:`torch.library.custom_op` with a fake implementation, an autograd formula and a
FLOP formula, so eager and compiled models call the same code.  Where the kernels cannot be
built the layer keeps its PyTorch path and :func:`qsv_native_status` says why;
``QUEST_GEOMETRIC_NATIVE=0`` turns them off.  Each operator has a plain PyTorch reference
(``*_reference``, tested equal in values and gradients).

Threads: built with OpenMP where the compiler has it, the kernels split their rows over the
OpenMP pool torch itself uses (the library's ``libgomp.so.1`` resolves to torch's copy), since
a second pool would compete with torch's spinning workers for the same cores; otherwise over
POSIX threads of their own.
"""
from __future__ import annotations

import ctypes
import math
import os
import subprocess
import threading
import warnings
from pathlib import Path
from typing import Any, Optional

import torch
from torch import Tensor

from quest_geometric.nn import _qsv_build as build
from quest_geometric.nn._qsv_graph import DENSE_LAYOUT_ERROR, NonFiniteOutput, range_error
from quest_geometric.quaternion import (
    NORMALIZE_EPS, normalize, rotate_vector_parts, to_rotation_matrix,
)

__all__ = [
    "qsv_native_available", "qsv_native_status", "qsv_native_enabled",
    "set_qsv_native_enabled", "supports",
    "rotate", "rotate_reference", "rotation_matrix", "rotation_matrix_reference", "attend",
    "attend_checked", "attend_reference", "attend_rotate", "attend_rotate_reference",
    "attend_edge_flops", "attend_backward_edge_flops", "prepare", "prepare_reference",
    "ENV_SWITCH",
]

#: ``QUEST_GEOMETRIC_NATIVE=0`` turns the native kernels off.
ENV_SWITCH = "QUEST_GEOMETRIC_NATIVE"
_VERSION = 14  # qsv_kernels_version() of the source this module speaks to
_DTYPES = {torch.float32: "f32", torch.float64: "f64"}
#: Below this many multiply-adds a kernel runs on the calling thread only.
_PARALLEL_WORK = 1 << 16

_lock = threading.Lock()
_state: dict[str, Any] = {"lib": None, "tried": False, "reason": "not built yet", "path": None}
_enabled = [True]


def _declare(lib: ctypes.CDLL) -> None:
    p, i64, i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
    argtypes = {
        "rotate": [p, p, p, p, i64, i64, i64, i32, i32],
        "rotation_matrix": [p, p, p, i64, i32],
        "rotate_backward": [p] * 5 + [i64, i64, i32, i32],
        "attend": [p] * 9 + [i64] * 5 + [i32],
        "attend_rotate": [p] * 11 + [i64] * 5 + [i32],
        "prepare": [p] * 6 + [i64] * 3 + [ctypes.c_double, i32],
        "attend_backward": [p] * 12 + [i64] * 5 + [i32],
        "transposed_sum": [p] * 9 + [i64, i64, i32],
    }
    for suffix in _DTYPES.values():
        for name, types in argtypes.items():
            fn = getattr(lib, f"qsv_{name}_{suffix}")
            fn.argtypes, fn.restype = types, None


def _library() -> Optional[ctypes.CDLL]:
    """The loaded kernels, building them on first call; ``None`` (with the reason in
    :func:`qsv_native_status`) where they cannot be had.  A cached library that was not
    trusted, a refused ``$CC`` or cache path, or a library without the expected symbols
    gives one :class:`RuntimeWarning` saying why."""
    if _state["tried"]:
        return _state["lib"]
    with _lock:
        if _state["tried"]:
            return _state["lib"]
        warning = None
        try:
            if os.environ.get(ENV_SWITCH, "1").strip() in ("0", "false", "no", "off"):
                raise RuntimeError(f"turned off by {ENV_SWITCH}={os.environ[ENV_SWITCH]!r}")
            lib, path, warning = build.load_library((build.FLAGS + build.OPENMP_FLAGS, build.FLAGS))
            try:
                threads = _check_library(lib, path)
            except (AttributeError, RuntimeError) as err:
                raise build.Refused(f"{path} is not a library of these kernels ({err})") from None
            _state.update(lib=lib, reason="ok", path=str(path), threads=threads)
        except build.Refused as err:
            _state.update(lib=None, reason=str(err))
            warning = str(err) if warning is None else f"{warning}; {err}"
        except (OSError, RuntimeError, subprocess.SubprocessError) as err:
            _state.update(lib=None, reason=str(err))
        _state["tried"] = True
    if warning is not None:
        warnings.warn(f"QSV native kernels: {warning}" + (
            "" if _state["lib"] is not None else "; QSVConv uses its PyTorch path"),
            RuntimeWarning, stacklevel=3)
    return _state["lib"]


def _check_library(lib: ctypes.CDLL, path: Path) -> str:
    """Checks the library's version and declares its functions (a missing symbol raises
    :class:`AttributeError`); returns its thread source."""
    lib.qsv_kernels_version.restype = ctypes.c_int
    if lib.qsv_kernels_version() != _VERSION:
        raise RuntimeError(f"{path} is version {lib.qsv_kernels_version()}, "
                           f"expected {_VERSION}")
    _declare(lib)
    lib.qsv_kernels_openmp.restype = ctypes.c_int
    return "openmp" if lib.qsv_kernels_openmp() else "pthreads"


@torch._dynamo.assume_constant_result
def qsv_native_available() -> bool:
    """Whether the native kernels are built and loaded (builds them on first call; under
    :func:`torch.compile` the answer is a constant of the traced graph)."""
    return _library() is not None


def qsv_native_status() -> dict[str, Any]:
    """``{'available', 'enabled', 'reason', 'path', 'threads'}``: whether the kernels load,
    whether :class:`~quest_geometric.nn.QSVConv` uses them (:func:`set_qsv_native_enabled`),
    why not, the library's file, and where their threads come from (``'openmp'``: the OpenMP
    pool torch uses; ``'pthreads'``: threads of their own, where the compiler has no OpenMP;
    :obj:`None` when not loaded)."""
    available = qsv_native_available()
    return {"available": available, "enabled": _enabled[0], "reason": _state["reason"],
            "path": _state["path"], "threads": _state.get("threads") if available else None}


def qsv_native_enabled() -> bool:
    """Whether :class:`~quest_geometric.nn.QSVConv` may use the native kernels (the
    switch of :func:`set_qsv_native_enabled`; they must also be available)."""
    return _enabled[0]


def set_qsv_native_enabled(enabled: bool) -> bool:
    """Lets :class:`~quest_geometric.nn.QSVConv` use the native kernels (:obj:`True`, the
    default) or keeps it on its PyTorch path (:obj:`False`); returns the previous setting."""
    if not isinstance(enabled, bool):
        raise TypeError(f"set_qsv_native_enabled: 'enabled' must be a bool, got {enabled!r}")
    previous, _enabled[0] = _enabled[0], enabled
    return previous


def supports(*tensors: Tensor) -> bool:
    """Whether the native kernels may run on these tensors: enabled, available, every tensor
    on the CPU in one of float32 / float64 (the same for all)."""
    if not _enabled[0] or any(t.device.type != "cpu" for t in tensors):
        return False
    dtypes = {t.dtype for t in tensors}
    return len(dtypes) == 1 and next(iter(dtypes)) in _DTYPES and qsv_native_available()


def _threads(work: int) -> int:
    return torch.get_num_threads() if work >= _PARALLEL_WORK else 1


def _fn(name: str, dtype: torch.dtype) -> Any:
    lib = _library()
    if lib is None:
        raise RuntimeError(f"the native QSV kernels are not available: {_state['reason']}")
    if dtype not in _DTYPES:
        raise TypeError(f"the native QSV kernels take float32 or float64, got {dtype}")
    return getattr(lib, f"qsv_{name}_{_DTYPES[dtype]}")


def _ptr(t: Optional[Tensor]) -> Optional[int]:
    return None if t is None else t.data_ptr()


def _empty(like: Tensor, shape: Any, need: bool) -> Tensor:
    """``like.new_empty(shape)``, or an empty tensor where the result is not asked for."""
    return like.new_empty(shape if need else (0,))


# --------------------------------------------------------------------------- rotate
def rotate_reference(rot: Tensor, x: Tensor, transpose: bool) -> Tensor:
    r"""The plain PyTorch form of :func:`rotate`: ``rot [..., 3, 3]``, ``x [..., m, 4]``."""
    return rotate_vector_parts(rot, x, transpose, method="bmm")


@torch.library.custom_op("quest_geometric::qsv_rotate", mutates_args=())
def _rotate_op(rot: Tensor, x: Tensor, transpose: bool, bias: Optional[Tensor] = None
               ) -> Tensor:
    rot, x = rot.contiguous(), x.contiguous()
    y = torch.empty_like(x)
    rows, m = rot.shape[:-2].numel(), x.size(-2)
    heads = 1 if bias is None else bias.size(0)
    bias = None if bias is None else bias.contiguous()
    _fn("rotate", x.dtype)(_ptr(rot), _ptr(x), _ptr(bias), _ptr(y), rows, m, heads,
                           int(transpose), _threads(rows * m * 9))
    return y


@_rotate_op.register_fake
def _(rot: Tensor, x: Tensor, transpose: bool, bias: Optional[Tensor] = None) -> Tensor:
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("quest_geometric::qsv_rotate_backward", mutates_args=())
def _rotate_backward_op(rot: Tensor, x: Tensor, grad: Tensor, transpose: bool, need_rot: bool,
                        need_x: bool) -> tuple[Tensor, Tensor]:
    """``(g_rot, g_x)`` of :func:`rotate` in one pass (each empty unless asked for)."""
    rot, x, grad = rot.contiguous(), x.contiguous(), grad.contiguous()
    rows, m = x.shape[:-2].numel(), x.size(-2)
    g_rot, g_x = _empty(x, rot.shape, need_rot), _empty(x, x.shape, need_x)
    _fn("rotate_backward", x.dtype)(_ptr(rot), _ptr(x), _ptr(grad),
                                    _ptr(g_rot) if need_rot else None,
                                    _ptr(g_x) if need_x else None, rows, m, int(transpose),
                                    _threads(rows * m * 18))
    return g_rot, g_x


@_rotate_backward_op.register_fake
def _(rot: Tensor, x: Tensor, grad: Tensor, transpose: bool, need_rot: bool, need_x: bool
      ) -> tuple[Tensor, Tensor]:
    return _empty(x, rot.shape, need_rot), _empty(x, x.shape, need_x)


def _rotate_setup(ctx: Any, inputs: tuple, output: Tensor) -> None:
    rot, x, transpose, bias = inputs
    ctx.save_for_backward(rot, x)
    ctx.transpose = transpose
    ctx.bias_shape = None if bias is None else bias.shape


def _rotate_backward(ctx: Any, grad: Tensor
                     ) -> tuple[Optional[Tensor], Optional[Tensor], None, Optional[Tensor]]:
    rot, x = ctx.saved_tensors
    need = ctx.needs_input_grad
    g_rot = g_x = g_bias = None
    if need[0] or need[1]:
        g_rot, g_x = _rotate_backward_op(rot, x, grad, ctx.transpose, bool(need[0]), bool(need[1]))
    if ctx.bias_shape is not None and need[3]:  # the bias of head h: rows r with r % H == h
        g_bias = grad.reshape(-1, *ctx.bias_shape).sum(0)
    return (g_rot if need[0] else None), (g_x if need[1] else None), None, g_bias


_rotate_op.register_autograd(_rotate_backward, setup_context=_rotate_setup)


def rotate(rot: Tensor, x: Tensor, transpose: bool = False, bias: Optional[Tensor] = None
           ) -> Tensor:
    r""":math:`(x_0, \mathbf{x}_v) \mapsto (x_0, M\mathbf{x}_v) + b` for every quaternion of
    ``x [..., H, m, 4]``, with :math:`M` the matrix of ``rot [..., H, 3, 3]`` of its leading
    index (:math:`R^{\top}` when ``transpose``) and :math:`b` the row of ``bias [H, m, 4]``
    of its head (none when :obj:`None`), added as the rows are written; differentiable in
    all three (:func:`~quest_geometric.quaternion.rotate_vector_parts`).  The caller checks
    :func:`supports`."""
    if rot.shape[-2:] != (3, 3) or x.size(-1) != 4 or rot.shape[:-2] != x.shape[:-2]:
        raise ValueError(f"rotate: 'rot' [..., 3, 3] and 'x' [..., m, 4] with the same leading "
                         f"shape expected, got {tuple(rot.shape)} and {tuple(x.shape)}")
    if bias is not None and (x.dim() < 3 or bias.shape != x.shape[-3:]):
        raise ValueError(f"rotate: 'bias' of shape [H, m, 4] = {tuple(x.shape[-3:])} expected "
                         f"for 'x' of shape {tuple(x.shape)}, got {tuple(bias.shape)}")
    return _rotate_op(rot, x, transpose, bias)


def rotation_matrix_reference(q: Tensor) -> Tensor:
    r"""The plain PyTorch form of :func:`rotation_matrix`."""
    return to_rotation_matrix(q)


@torch.library.custom_op("quest_geometric::qsv_rotation_matrix", mutates_args=())
def _rotation_matrix_op(q: Tensor) -> Tensor:
    q = q.contiguous()
    rows = q.shape[:-1].numel()
    rot = q.new_empty(*q.shape[:-1], 3, 3)
    _fn("rotation_matrix", q.dtype)(_ptr(q), None, _ptr(rot), rows, _threads(rows * 16))
    return rot


@_rotation_matrix_op.register_fake
def _(q: Tensor) -> Tensor:
    return q.new_empty(*q.shape[:-1], 3, 3)


@torch.library.custom_op("quest_geometric::qsv_rotation_matrix_backward", mutates_args=())
def _rotation_matrix_backward_op(q: Tensor, grad: Tensor) -> Tensor:
    q, grad = q.contiguous(), grad.contiguous()
    rows = q.shape[:-1].numel()
    g_q = torch.empty_like(q)
    _fn("rotation_matrix", q.dtype)(_ptr(q), _ptr(grad), _ptr(g_q), rows, _threads(rows * 36))
    return g_q


@_rotation_matrix_backward_op.register_fake
def _(q: Tensor, grad: Tensor) -> Tensor:
    return torch.empty_like(q, memory_format=torch.contiguous_format)


_rotation_matrix_op.register_autograd(
    lambda ctx, grad: _rotation_matrix_backward_op(ctx.saved_tensors[0], grad),
    setup_context=lambda ctx, inputs, output: ctx.save_for_backward(inputs[0]))


def rotation_matrix(q: Tensor) -> Tensor:
    r"""The matrix :math:`R(q)` of :math:`\mathbf{v} \mapsto q\,(0, \mathbf{v})\,q^{*}` of
    every quaternion of ``q [..., 4]``, ``[..., 3, 3]``
    (:func:`~quest_geometric.quaternion.to_rotation_matrix`, which it equals); its backward
    :math:`\nabla q = \sum_{ab} G_{ab}\, \partial R_{ab} / \partial q` runs in one pass.  The
    caller checks :func:`supports`."""
    if q.dim() == 0 or q.size(-1) != 4:
        raise ValueError(f"rotation_matrix: 'q' of shape [..., 4] expected, got "
                         f"{tuple(q.shape)}")
    return _rotation_matrix_op(q)


# --------------------------------------------------------------------------- attend
def attend_reference(q_src: Tensor, q_dst: Tensor, scale: Tensor, xs: Tensor, src: Tensor,
                     k: int) -> tuple[Tensor, Tensor]:
    r"""The plain PyTorch form of :func:`attend` (a gather of the ``[N_dst, k]``
    neighbourhoods): ``(out [N_dst, H, C], alpha [N_dst, H, k])``."""
    Nd, H = q_dst.size(0), q_dst.size(1)
    q_j = q_src.index_select(0, src).view(Nd, k, H, 4)
    logit = (q_j * q_dst.unsqueeze(1)).sum(-1).transpose(1, 2) * scale.view(1, H, 1)
    alpha = logit.softmax(dim=-1)  # [Nd, H, k]
    x_j = xs.index_select(0, src).view(Nd, k, H, -1)
    out = (alpha.transpose(1, 2).unsqueeze(-1) * x_j).sum(1)
    return out, alpha


def attend_checked(q_src: Tensor, q_dst: Tensor, scale: Tensor, xs: Tensor, src: Tensor,
                   k: int, rot: Optional[Tensor] = None, bias: Optional[Tensor] = None,
                   targets: Optional[Tensor] = None, check_finite: bool = False
                   ) -> tuple[Tensor, Tensor, bool]:
    """The forward kernel of :func:`attend` (``rot`` None) or of :func:`attend_rotate`, no
    autograd: ``(out, alpha, ok)``.  The kernel checks each row's source indices against
    ``[0, N_src)`` before the row reads one and raises the layer's :class:`ValueError` where
    one is outside.  With ``targets`` it also checks the dense layout beside each row's
    sources; ``ok`` is :obj:`False` where it does not hold (the outputs are then to be
    discarded).  ``check_finite`` as for :func:`attend_rotate`."""
    q_src, q_dst, scale, xs = (t.contiguous() for t in (q_src, q_dst, scale, xs))
    src = src.contiguous()
    Nd, H, C = q_dst.size(0), q_dst.size(1), xs.size(-1)
    _check_attend_shapes(q_src, q_dst, scale, xs, src, k)
    out = xs.new_empty(Nd, H, C)
    alpha = xs.new_empty(Nd, H, k)
    bad = ctypes.c_int(0)
    if targets is not None:
        targets = targets.contiguous()
        if targets.dtype != torch.int64 or targets.numel() != Nd * k:
            raise ValueError(f"attend: 'targets' must be int64 with N_dst * k = {Nd * k} "
                             f"entries, got {targets.dtype} with {targets.numel()}")
    inputs = (_ptr(q_src), _ptr(q_dst), _ptr(scale), _ptr(xs), _ptr(src), _ptr(targets),
              ctypes.addressof(bad))
    if rot is None:
        _fn("attend", xs.dtype)(*inputs, _ptr(out), _ptr(alpha), xs.size(0), Nd, H, k, C,
                                _threads(Nd * H * k * (C + 4)))
    else:
        if rot.numel() != Nd * H * 9 or (bias is not None and bias.numel() != H * C):
            raise ValueError(f"attend_rotate: expected 'rot' of {Nd * H * 9} entries and "
                             f"'bias' of {H * C}, got {rot.numel()} and "
                             f"{None if bias is None else bias.numel()}")
        bias = None if bias is None else bias.contiguous()
        _fn("attend_rotate", xs.dtype)(*inputs, _ptr(rot.contiguous()), _ptr(bias), _ptr(out),
                                       _ptr(alpha), xs.size(0), Nd, H, k, C,
                                       _threads(Nd * H * (k * (C + 4) + 3 * C)))
    if bad.value & 2:
        raise range_error(xs.size(0), Nd, src, targets)
    if bad.value & 1:
        return out, alpha, False
    if check_finite and bad.value & 4:
        raise NonFiniteOutput("attend_rotate: the output holds NaN or infinite entries")
    return out, alpha, True


def _check_attend_shapes(q_src: Tensor, q_dst: Tensor, scale: Tensor, xs: Tensor,
                         src: Tensor, k: int) -> None:
    """Refuse shapes the attention kernels would read outside of (they take raw
    pointers): ``k`` sources per target, one quaternion and feature row per source."""
    Nd, H = q_dst.size(0), q_dst.size(1)
    if (k < 1 or src.numel() != Nd * k or src.dtype != torch.int64 or q_src.size(0) != xs.size(0)
            or tuple(q_src.shape[1:]) != (H, 4) or tuple(q_dst.shape[2:]) != (4,)
            or scale.numel() != H or xs.dim() != 3 or xs.size(1) != H):
        raise ValueError(
            f"attend: expected q_src [N_src, H, 4], q_dst [N_dst, H, 4], scale [H], xs "
            f"[N_src, H, C] and int64 src [N_dst * k] with k >= 1, got {tuple(q_src.shape)}, "
            f"{tuple(q_dst.shape)}, {tuple(scale.shape)}, {tuple(xs.shape)}, "
            f"{src.dtype} {tuple(src.shape)} and k = {k}")


def _attend_forward(q_src: Tensor, q_dst: Tensor, scale: Tensor, xs: Tensor, src: Tensor,
                    k: int, rot: Optional[Tensor] = None, bias: Optional[Tensor] = None,
                    targets: Optional[Tensor] = None, check_finite: bool = False
                    ) -> tuple[Tensor, Tensor]:
    """:func:`attend_checked` for the operators: a layout that does not hold raises
    :data:`~quest_geometric.nn._qsv_graph.DENSE_LAYOUT_ERROR`."""
    out, alpha, ok = attend_checked(q_src, q_dst, scale, xs, src, k, rot, bias, targets,
                                    check_finite)
    if not ok:
        raise RuntimeError(DENSE_LAYOUT_ERROR)
    return out, alpha


def _attend_fake(q_dst: Tensor, xs: Tensor, src: Tensor, k: int) -> tuple[Tensor, Tensor]:
    Nd, H = q_dst.size(0), q_dst.size(1)
    torch._check(src.numel() == Nd * k)
    return xs.new_empty(Nd, H, xs.size(-1)), xs.new_empty(Nd, H, k)


@torch.library.custom_op("quest_geometric::qsv_attend", mutates_args=())
def _attend_op(q_src: Tensor, q_dst: Tensor, scale: Tensor, xs: Tensor, src: Tensor,
               k: int, crow_t: Optional[Tensor], col_t: Optional[Tensor],
               gather: Optional[Tensor], targets: Optional[Tensor] = None
               ) -> tuple[Tensor, Tensor]:
    return _attend_forward(q_src, q_dst, scale, xs, src, k, targets=targets)


@_attend_op.register_fake
def _(q_src: Tensor, q_dst: Tensor, scale: Tensor, xs: Tensor, src: Tensor, k: int,
      crow_t: Optional[Tensor], col_t: Optional[Tensor], gather: Optional[Tensor],
      targets: Optional[Tensor] = None) -> tuple[Tensor, Tensor]:
    return _attend_fake(q_dst, xs, src, k)


@torch.library.custom_op("quest_geometric::qsv_attend_backward", mutates_args=())
def _attend_backward_op(grad: Tensor, grad_alpha: Optional[Tensor], alpha: Tensor,
                        q_src: Tensor, q_dst: Tensor, scale: Tensor, xs: Tensor, src: Tensor,
                        k: int, crow_t: Optional[Tensor], col_t: Optional[Tensor],
                        gather: Optional[Tensor], need_q_src: bool, need_xs: bool
                        ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(g_q_src, g_q_dst [Nd, H, 4], g_scale_rows [Nd, H], g_xs)`` from the gradients of
    the output and of the weights (``grad_alpha``, :obj:`None` where they are not used); the
    scale's gradient per target row (the caller sums it); ``g_q_src`` and ``g_xs`` empty
    unless asked for."""
    grad, alpha, q_src, q_dst, scale, xs = (
        t.contiguous() for t in (grad, alpha, q_src, q_dst, scale, xs))
    if grad_alpha is not None:
        grad_alpha = grad_alpha.contiguous()
    src = src.contiguous()
    Nd, H, C = q_dst.size(0), q_dst.size(1), xs.size(-1)
    g_raw, g_qd, g_scale = xs.new_empty(Nd, H, k), xs.new_empty(Nd, H, 4), xs.new_empty(Nd, H)
    threads = _threads(Nd * H * k * (C + 8))
    _check_attend_shapes(q_src, q_dst, scale, xs, src, k)
    bad = ctypes.c_int(0)
    _fn("attend_backward", xs.dtype)(_ptr(grad), _ptr(grad_alpha), _ptr(alpha), _ptr(q_src),
                                     _ptr(q_dst), _ptr(scale), _ptr(xs), _ptr(src),
                                     ctypes.addressof(bad), _ptr(g_raw), _ptr(g_qd),
                                     _ptr(g_scale), xs.size(0), Nd, H, k, C, threads)
    if bad.value:
        raise range_error(xs.size(0), Nd, src)
    g_xs, g_qs = _empty(xs, xs.shape, need_xs), _empty(q_src, q_src.shape, need_q_src)
    if need_xs or need_q_src:
        if crow_t is None or col_t is None or gather is None:
            from quest_geometric.nn._qsv_csr import TRANSPOSES

            crow_t, col_t, gather = TRANSPOSES(src, xs.size(0), k, H)
        _fn("transposed_sum", xs.dtype)(
            _ptr(alpha), _ptr(grad), _ptr(g_raw), _ptr(q_dst), _ptr(crow_t.contiguous()),
            _ptr(col_t.contiguous()), _ptr(gather.contiguous()),
            _ptr(g_xs) if need_xs else None, _ptr(g_qs) if need_q_src else None,
            xs.size(0) * H, C, threads)
    return g_qs, g_qd, g_scale, g_xs


@_attend_backward_op.register_fake
def _(grad: Tensor, grad_alpha: Optional[Tensor], alpha: Tensor, q_src: Tensor, q_dst: Tensor,
      scale: Tensor, xs: Tensor, src: Tensor, k: int, crow_t: Optional[Tensor],
      col_t: Optional[Tensor], gather: Optional[Tensor], need_q_src: bool, need_xs: bool
      ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    Nd, H = q_dst.size(0), q_dst.size(1)
    return (_empty(q_src, q_src.shape, need_q_src), xs.new_empty(Nd, H, 4),
            xs.new_empty(Nd, H), _empty(xs, xs.shape, need_xs))


def _attend_setup(ctx: Any, inputs: tuple, output: tuple[Tensor, Tensor]) -> None:
    q_src, q_dst, scale, xs, src, k, crow_t, col_t, gather, _ = inputs
    ctx.save_for_backward(output[1], q_src, q_dst, scale, xs, src, crow_t, col_t, gather)
    ctx.k = k


def _attend_backward(ctx: Any, grad: Tensor, grad_alpha: Tensor
                     ) -> tuple[Optional[Tensor], ...]:
    alpha, q_src, q_dst, scale, xs, src, crow_t, col_t, gather = ctx.saved_tensors
    need = ctx.needs_input_grad
    if not any(need[:4]):
        return (None,) * 10
    g_qs, g_qd, g_scale, g_xs = _attend_backward_op(
        grad, grad_alpha, alpha, q_src, q_dst, scale, xs, src, ctx.k, crow_t, col_t, gather,
        bool(need[0]), bool(need[3]))
    return (g_qs if need[0] else None, g_qd if need[1] else None,
            g_scale.sum(0) if need[2] else None, g_xs if need[3] else None,
            None, None, None, None, None, None)


_attend_op.register_autograd(_attend_backward, setup_context=_attend_setup)


def attend(q_src: Tensor, q_dst: Tensor, scale: Tensor, xs: Tensor, src: Tensor, k: int,
           transposed: Optional[tuple[Tensor, Tensor, Tensor]] = None,
           targets: Optional[Tensor] = None) -> tuple[Tensor, Tensor]:
    r"""Softmax attention of every target over its ``k`` sources, in one pass over the
    neighbours' features:

    .. math::
        \alpha_{ij}^{(h)} = \operatorname{softmax}_j\bigl(s_h \langle q_i^{(h)},
        q_{j}^{(h)}\rangle\bigr), \qquad y_i^{(h)} = \sum_j \alpha_{ij}^{(h)} x_j^{(h)}.

    Its backward, with :math:`g_{ij} = \langle G_i, x_j\rangle` and :math:`\bar g_{ij} =
    \alpha_{ij}(g_{ij} - \sum_l \alpha_{il} g_{il})`, is :math:`\nabla x_j = \sum_{i \to j}
    \alpha_{ij} G_i` (over the transposed pattern), :math:`\nabla q_i = \sum_j s_h \bar g_{ij}
    q_j`, :math:`\nabla q_j = \sum_i s_h \bar g_{ij} q_i` and :math:`\nabla s_h = \sum_{ij}
    \bar g_{ij} \langle q_i, q_j\rangle`.

    Args:
        q_src (torch.Tensor): Source quaternions ``[N_src, H, 4]``.
        q_dst (torch.Tensor): Target quaternions ``[N_dst, H, 4]``.
        scale (torch.Tensor): Logit scale per head ``[H]``.
        xs (torch.Tensor): Source features ``[N_src, H, C]``.
        src (torch.Tensor): ``int64`` sources of the edges ``[N_dst * k]``, ``k`` per target
            in order (the dense layout).
        k (int): In-edges per target.
        transposed (tuple, optional): ``(crow_t, col_t, gather)`` of the transposed pattern
            (:func:`~quest_geometric.nn._qsv_csr.transpose_pattern`) for the backward; found
            in :data:`~quest_geometric.nn._qsv_csr.TRANSPOSES` when not given.
        targets (torch.Tensor, optional): The edges' ``int64`` targets ``[N_dst * k]``: the
            kernel then checks the dense layout (``targets[i * k + j] == i``) in the same
            pass and raises :class:`RuntimeError`
            (:data:`~quest_geometric.nn._qsv_graph.DENSE_LAYOUT_ERROR`) where it does not
            hold. (default: :obj:`None`: not checked)

    Returns:
        ``(out [N_dst, H, C], alpha [N_dst, H, k])``, both differentiable in the
        quaternions, the scale and the features.  The caller checks :func:`supports`.
    """
    crow_t, col_t, gather = transposed if transposed is not None else (None, None, None)
    return _attend_op(q_src, q_dst, scale, xs, src.long(), k, crow_t, col_t, gather, targets)


# --------------------------------------------------------------------------- attend_rotate
def attend_rotate_reference(q_src: Tensor, q_dst: Tensor, scale: Tensor, xs: Tensor,
                            src: Tensor, k: int, rot: Tensor, bias: Optional[Tensor] = None
                            ) -> tuple[Tensor, Tensor]:
    r"""The plain PyTorch form of :func:`attend_rotate`: :func:`attend_reference`, then
    :func:`rotate_reference` with :math:`R^{\top}` and the bias."""
    out, alpha = attend_reference(q_src, q_dst, scale, xs, src, k)
    Nd, H, C = out.shape
    y = rotate_reference(rot.reshape(Nd, H, 3, 3), out.reshape(Nd, H, C // 4, 4), True)
    if bias is not None:
        y = y + bias.reshape(H, C // 4, 4)
    return y.reshape(Nd, H, C), alpha


@torch.library.custom_op("quest_geometric::qsv_attend_rotate", mutates_args=())
def _attend_rotate_op(q_src: Tensor, q_dst: Tensor, scale: Tensor, xs: Tensor, src: Tensor,
                      k: int, rot: Tensor, bias: Optional[Tensor],
                      targets: Optional[Tensor] = None, check_finite: bool = False
                      ) -> tuple[Tensor, Tensor]:
    return _attend_forward(q_src, q_dst, scale, xs, src, k, rot, bias, targets, check_finite)


@_attend_rotate_op.register_fake
def _(q_src: Tensor, q_dst: Tensor, scale: Tensor, xs: Tensor, src: Tensor, k: int,
      rot: Tensor, bias: Optional[Tensor], targets: Optional[Tensor] = None,
      check_finite: bool = False) -> tuple[Tensor, Tensor]:
    torch._check(rot.numel() == q_dst.size(0) * q_dst.size(1) * 9)
    return _attend_fake(q_dst, xs, src, k)


def attend_rotate(q_src: Tensor, q_dst: Tensor, scale: Tensor, xs: Tensor, src: Tensor,
                  k: int, rot: Tensor, bias: Optional[Tensor] = None,
                  targets: Optional[Tensor] = None, check_finite: bool = False
                  ) -> tuple[Tensor, Tensor]:
    r""":func:`attend` with the layer's output rotation and bias in the same pass:

    .. math::
        y_i^{(h)} = \bigl(u_0,\; R_i^{(h)\top} \mathbf{u}_v\bigr) + b^{(h)}
        \quad \text{per quaternion of} \quad u = \sum_j \alpha_{ij}^{(h)} x_j^{(h)},

    each row rotated while still in the cache.  **Forward only** (no autograd formula).

    Args:
        q_src, q_dst, scale, xs, src, k: as for :func:`attend`.
        rot (torch.Tensor): The targets' rotation matrices ``[N_dst, H, 3, 3]``.
        bias (torch.Tensor, optional): ``[H, C // 4, 4]`` (or any shape of ``H * C``
            entries in that order), added to the rotated rows.
        targets (torch.Tensor, optional): As for :func:`attend`. (default: :obj:`None`)
        check_finite (bool, optional): Raise :class:`~quest_geometric.nn._qsv_graph.
            NonFiniteOutput` where an output entry is NaN or infinite, tested by the kernel
            on each row as it finishes it. (default: :obj:`False`)

    Returns:
        ``(y [N_dst, H, C], alpha [N_dst, H, k])``.  The caller checks :func:`supports`.
    """
    return _attend_rotate_op(q_src, q_dst, scale, xs, src.long(), k, rot, bias, targets,
                             check_finite)


# --------------------------------------------------------------------------- prepare
def prepare_reference(x: Tensor, weight: Tensor, bias: Tensor, heads: int
                      ) -> tuple[Tensor, Tensor, Tensor]:
    r"""The plain PyTorch form of :func:`prepare`: the linear map, then
    :func:`~quest_geometric.quaternion.normalize`, :func:`rotation_matrix_reference` and
    :func:`rotate_reference`."""
    N = x.size(0)
    q = normalize(torch.nn.functional.linear(x, weight, bias).view(N, heads, 4))
    rot = rotation_matrix_reference(q)
    xs = rotate_reference(rot, x.reshape(N, heads, -1, 4), False).reshape(N, -1)
    return q, rot, xs


@torch.library.custom_op("quest_geometric::qsv_prepare", mutates_args=())
def _prepare_op(x: Tensor, weight: Tensor, bias: Tensor, heads: int
                ) -> tuple[Tensor, Tensor, Tensor]:
    x, weight, bias = x.contiguous(), weight.contiguous(), bias.contiguous()
    N, cin = x.shape
    q = x.new_empty(N, heads, 4)
    rot = x.new_empty(N, heads, 3, 3)
    xs = torch.empty_like(x)
    _fn("prepare", x.dtype)(_ptr(x), _ptr(weight), _ptr(bias), _ptr(q), _ptr(rot), _ptr(xs),
                            N, heads, cin // heads, NORMALIZE_EPS,
                            _threads(N * cin * 8))
    return q, rot, xs


@_prepare_op.register_fake
def _(x: Tensor, weight: Tensor, bias: Tensor, heads: int) -> tuple[Tensor, Tensor, Tensor]:
    N = x.size(0)
    torch._check(weight.size(0) == 4 * heads and weight.size(1) == x.size(1))
    return (x.new_empty(N, heads, 4), x.new_empty(N, heads, 3, 3),
            torch.empty_like(x, memory_format=torch.contiguous_format))


def prepare(x: Tensor, weight: Tensor, bias: Tensor, heads: int
            ) -> tuple[Tensor, Tensor, Tensor]:
    r"""The layer's per-node prologue for every head :math:`h`,

    .. math::
        q^{(h)} = \frac{W_h x + b_h}{\max(\lVert W_h x + b_h \rVert, \epsilon)}, \qquad
        R^{(h)} = R(q^{(h)}), \qquad
        \tilde x^{(h)} = \bigl(x_0, R^{(h)} \mathbf{x}_v\bigr)
        \ \text{per quaternion of the head's channels},

    in one pass instead of four.  **Forward only** (no autograd formula).

    Args:
        x (torch.Tensor): Node features ``[N, H * C]`` (``C`` a multiple of 4).
        weight (torch.Tensor): The quaternion map's weight ``[4 H, H * C]``.
        bias (torch.Tensor): Its bias ``[4 H]``.
        heads (int): ``H``.

    Returns:
        ``(q [N, H, 4], rot [N, H, 3, 3], xs [N, H * C])``.  The caller checks
        :func:`supports`.
    """
    return _prepare_op(x, weight, bias, heads)


# --------------------------------------------------------------------------- FLOP formulas
# FlopCounterMode counts an operator only where a formula is registered for it.  The formulas
# receive shapes in place of tensors.  Element-wise work (the rotation matrices, the bias, the
# normalisation) is not counted, as in torch's own formulas.
def _rotate_flops(rot: Any, x: Any, transpose: bool, bias: Any = None, *,
                  out_shape: Any = None) -> int:
    """A 3 x 3 matrix times each of the ``m`` vector parts of a row: 9 multiply-adds."""
    return 18 * math.prod(int(s) for s in x[:-1])


def _rotate_backward_flops(rot: Any, x: Any, grad: Any, transpose: bool, need_rot: bool,
                           need_x: bool, *, out_shape: Any = None) -> int:
    """Per quaternion 9 multiply-adds for the input's gradient and 9 for the matrix's."""
    return _rotate_flops(rot, x, transpose) * (int(need_rot) + int(need_x))


def attend_edge_flops(edge_heads: int, channels: int) -> int:
    """FLOPs of the attention over ``edge_heads`` (edge, head) pairs: per pair a 4-d dot
    product and a weighted sum of ``channels`` channels."""
    return edge_heads * (8 + 2 * channels)


def attend_backward_edge_flops(edge_heads: int, channels: int, need_q_src: bool,
                               need_xs: bool) -> int:
    """FLOPs of its backward, per (edge, head): ``<G_i, x_j>`` (``C`` multiply-adds) and the
    target quaternion's gradient (4); the features' gradient (``C``) and the source
    quaternion's (4) when asked."""
    C = channels
    return edge_heads * (2 * C + 8 + (2 * C if need_xs else 0) + (8 if need_q_src else 0))


def _attend_flops(q_src: Any, q_dst: Any, scale: Any, xs: Any, src: Any, k: int, *rest: Any,
                  out_shape: Any = None) -> int:
    return attend_edge_flops(int(q_dst[0]) * int(k) * int(q_dst[1]), int(xs[-1]))


def _attend_rotate_flops(q_src: Any, q_dst: Any, scale: Any, xs: Any, src: Any, k: int,
                         rot: Any, bias: Any, targets: Any = None, check_finite: Any = False,
                         *, out_shape: Any = None) -> int:
    Nd, H, C = int(q_dst[0]), int(q_dst[1]), int(xs[-1])
    return attend_edge_flops(Nd * int(k) * H, C) + _rotate_flops(rot, (Nd, H, C // 4, 4), True)


def _prepare_flops(x: Any, weight: Any, bias: Any, heads: int, *, out_shape: Any = None
                   ) -> int:
    """The linear map's multiply-adds (as torch counts ``addmm``) and the rotation's."""
    N, cin = int(x[0]), int(x[1])
    return 2 * N * cin * int(weight[0]) + _rotate_flops(None, (N, heads, cin // heads // 4, 4),
                                                        False)


def _attend_backward_flops(grad: Any, grad_alpha: Any, alpha: Any, q_src: Any, q_dst: Any,
                           scale: Any, xs: Any, src: Any, k: int, crow_t: Any, col_t: Any,
                           gather: Any, need_q_src: bool, need_xs: bool, *,
                           out_shape: Any = None) -> int:
    return attend_backward_edge_flops(int(q_dst[0]) * int(k) * int(q_dst[1]), int(xs[-1]),
                                      need_q_src, need_xs)


def register_flop_formulas(formulas: dict[str, Any]) -> None:
    """Registers each ``quest_geometric::<name>`` operator's FLOP formula, once (a
    re-imported module registers nothing)."""
    from torch.utils.flop_counter import flop_registry, register_flop_formula

    for name, formula in formulas.items():
        packet = getattr(torch.ops.quest_geometric, name)
        if packet not in flop_registry:
            register_flop_formula(packet)(formula)


register_flop_formulas({
    "qsv_rotate": _rotate_flops, "qsv_rotate_backward": _rotate_backward_flops,
    "qsv_attend": _attend_flops, "qsv_attend_rotate": _attend_rotate_flops,
    "qsv_prepare": _prepare_flops, "qsv_attend_backward": _attend_backward_flops})
