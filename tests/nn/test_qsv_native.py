"""The native CPU kernels of QSVConv's dense path (``quest_geometric.nn._qsv_native``): each
operator against its plain PyTorch reference (values and gradients, float32 and float64,
gradcheck, ``torch.library.opcheck``), several threads against one, the layer with the
kernels against the layer without them, when the layer steps aside for them, and how the
library is built, found again and refused."""
from __future__ import annotations

import ast
import hashlib
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from quest_geometric.nn import _qsv_build
from quest_geometric.nn import _qsv_native as native
from quest_geometric.nn._qsv_csr import TRANSPOSES, transpose_pattern
from quest_geometric.nn.qsv_conv import QSVConv
from quest_geometric.testing.qsv import knn_edges, make_qsv_conv, random_dense_edges

pytestmark = pytest.mark.skipif(not native.qsv_native_available(),
                                reason=f"native kernels: {native.qsv_native_status()['reason']}")

TOL = {torch.float32: dict(atol=2e-5, rtol=1e-5), torch.float64: dict(atol=1e-12, rtol=1e-12)}


@pytest.fixture
def without_native():
    previous = native.set_qsv_native_enabled(False)
    yield
    native.set_qsv_native_enabled(previous)


def attend_inputs(dtype, heads=2, n_dst=9, n_src=11, k=4, channels=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    src = random_dense_edges(n_dst, k, n_src=n_src, seed=seed)[0]
    q_src = torch.randn(n_src, heads, 4, generator=g, dtype=dtype)
    q_dst = torch.randn(n_dst, heads, 4, generator=g, dtype=dtype)
    scale = torch.rand(heads, generator=g, dtype=dtype) * 2 + 0.5
    xs = torch.randn(n_src, heads, channels, generator=g, dtype=dtype)
    return q_src, q_dst, scale, xs, src, k


def loss_weights(*tensors, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(t.shape, generator=g, dtype=t.dtype) for t in tensors]


# ----------------------------------------------------------------------------- rotate
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("transpose", [False, True])
def test_rotate_equals_reference_values_and_grads(dtype, transpose):
    g = torch.Generator().manual_seed(0)
    rot = torch.randn(13, 3, 3, 3, generator=g, dtype=dtype, requires_grad=True)
    x = torch.randn(13, 3, 5, 4, generator=g, dtype=dtype, requires_grad=True)
    results = []
    for fn in (native.rotate, native.rotate_reference):
        y = fn(rot, x, transpose)
        (w,) = loss_weights(y)
        results.append((y, *torch.autograd.grad((y * w).sum(), (rot, x))))
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, **TOL[dtype])


@pytest.mark.parametrize("needs", [(True, False), (False, True), (True, True)])
def test_rotate_backward_computes_what_is_asked(needs):
    """The backward is one kernel that writes the matrix's gradient, the input's or both:
    each against the reference's, whichever of the two inputs requires a gradient."""
    g = torch.Generator().manual_seed(7)
    rot = torch.randn(5, 2, 3, 3, generator=g, dtype=torch.float64)
    x = torch.randn(5, 2, 3, 4, generator=g, dtype=torch.float64)
    rot.requires_grad_(needs[0])
    x.requires_grad_(needs[1])
    leaves = [t for t in (rot, x) if t.requires_grad]
    for transpose in (False, True):
        grads = []
        for fn in (native.rotate, native.rotate_reference):
            y = fn(rot, x, transpose)
            (w,) = loss_weights(y)
            grads.append(torch.autograd.grad((y * w).sum(), leaves))
        for a, b in zip(*grads):
            torch.testing.assert_close(a, b, **TOL[torch.float64])
        grad = torch.randn(x.shape, generator=g, dtype=torch.float64)
        torch.library.opcheck(native._rotate_backward_op,
                              (rot.detach(), x.detach(), grad, transpose, *needs))


def test_rotate_hand_computed_case():
    # a quarter turn about z: (x0, x, y, z) -> (x0, -y, x, z); its transpose turns back
    rot = torch.tensor([[[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]])
    x = torch.tensor([[[5.0, 1.0, 2.0, 3.0]]])
    torch.testing.assert_close(native.rotate(rot, x), torch.tensor([[[5.0, -2.0, 1.0, 3.0]]]))
    torch.testing.assert_close(native.rotate(rot, x, True),
                               torch.tensor([[[5.0, 2.0, -1.0, 3.0]]]))


def test_rotate_gradcheck_and_opcheck():
    g = torch.Generator().manual_seed(2)
    rot = torch.randn(4, 3, 3, generator=g, dtype=torch.float64, requires_grad=True)
    x = torch.randn(4, 2, 4, generator=g, dtype=torch.float64, requires_grad=True)
    for transpose in (False, True):
        assert torch.autograd.gradcheck(lambda r, v: native.rotate(r, v, transpose), (rot, x))
        torch.library.opcheck(native._rotate_op, (rot, x, transpose, None))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_rotate_with_bias_equals_reference_plus_bias(dtype):
    """The bias of head h is added to the rows of head h, and its gradient is the sum of
    theirs (the reference: the rotation, then a broadcast addition)."""
    g = torch.Generator().manual_seed(4)
    rot = torch.randn(7, 3, 3, 3, generator=g, dtype=dtype, requires_grad=True)
    x = torch.randn(7, 3, 5, 4, generator=g, dtype=dtype, requires_grad=True)
    bias = torch.randn(3, 5, 4, generator=g, dtype=dtype, requires_grad=True)
    results = []
    for y in (native.rotate(rot, x, True, bias), native.rotate_reference(rot, x, True) + bias):
        (w,) = loss_weights(y)
        results.append((y, *torch.autograd.grad((y * w).sum(), (rot, x, bias))))
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, **TOL[dtype])


def test_rotate_with_bias_gradcheck_opcheck_and_shape_error():
    g = torch.Generator().manual_seed(5)
    rot = torch.randn(3, 2, 3, 3, generator=g, dtype=torch.float64, requires_grad=True)
    x = torch.randn(3, 2, 2, 4, generator=g, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(2, 2, 4, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda r, v, b: native.rotate(r, v, False, b),
                                    (rot, x, bias))
    torch.library.opcheck(native._rotate_op, (rot, x, True, bias))
    with pytest.raises(ValueError, match="'bias' of shape \\[H, m, 4\\]"):
        native.rotate(rot, x, False, bias[:1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_rotation_matrix_equals_reference_values_and_grads(dtype):
    """Against quaternion.to_rotation_matrix (unit and non-unit quaternions), values and the
    gradient of a random linear loss."""
    g = torch.Generator().manual_seed(6)
    q = torch.randn(11, 3, 4, generator=g, dtype=dtype, requires_grad=True)
    results = []
    for fn in (native.rotation_matrix, native.rotation_matrix_reference):
        for inp in (q, q / q.norm(dim=-1, keepdim=True)):
            r = fn(inp)
            (w,) = loss_weights(r)
            results.append((r, *torch.autograd.grad((r * w).sum(), q)))
    for a, b in zip(results[:2], results[2:]):
        for u, v in zip(a, b):
            torch.testing.assert_close(u, v, **TOL[dtype])


def test_rotation_matrix_is_the_quarter_turn_by_hand_gradcheck_and_opcheck():
    # (cos 45, 0, 0, sin 45): a quarter turn about z
    c = 2 ** -0.5
    rot = native.rotation_matrix(torch.tensor([[c, 0.0, 0.0, c]], dtype=torch.float64))
    torch.testing.assert_close(rot[0], torch.tensor(
        [[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]], dtype=torch.float64))
    q = torch.randn(5, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(native.rotation_matrix, (q,))
    torch.library.opcheck(native._rotation_matrix_op, (q,))
    with pytest.raises(ValueError, match="rotation_matrix: 'q' of shape"):
        native.rotation_matrix(torch.randn(5, 3))


def test_rotate_shape_error_names_both_arguments():
    with pytest.raises(ValueError, match="'rot'.*'x'"):
        native.rotate(torch.randn(2, 3, 3), torch.randn(3, 1, 4))


def _flops(fn, *args, backward=False):
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        out = fn(*args)
        if backward:
            sum(o.sum() for o in (out if isinstance(out, tuple) else (out,))).backward()
    return counter.get_total_flops()


@pytest.mark.parametrize("backward", [False, True])
def test_rotate_flops_are_counted_as_the_batched_product_reference(backward):
    """torch's FLOP counter sees the kernel (its formula is registered) and counts what it
    counts for the reference's batched matrix products, forward and backward."""
    rot = torch.randn(6, 2, 3, 3, requires_grad=True)
    x = torch.randn(6, 2, 5, 4, requires_grad=True)
    counts = [_flops(fn, rot, x, True, backward=backward)
              for fn in (native.rotate, native.rotate_reference)]
    assert counts[0] == counts[1] == 18 * 6 * 2 * 5 * (3 if backward else 1)


@pytest.mark.parametrize("backward", [False, True])
def test_attend_flops_are_counted_as_its_einsum_form(backward):
    """The kernel's registered FLOP formula against torch's count of the same attention
    written with two einsums over the gathered neighbourhoods (which torch counts as batched
    products), forward and backward; and by hand."""
    heads, n_dst, k, channels = 2, 9, 4, 12
    q_src, q_dst, scale, xs, src, _ = attend_inputs(torch.float32, heads=heads, n_dst=n_dst,
                                                    k=k, channels=channels)
    leaves = [t.requires_grad_() for t in (q_src, q_dst, xs)]

    def einsum_form(q_src, q_dst, xs):
        q_j = q_src[src].view(n_dst, k, heads, 4)
        logit = torch.einsum("nkhd,nhd->nhk", q_j, q_dst) * scale.view(1, heads, 1)
        alpha = logit.softmax(-1)
        return torch.einsum("nhk,nkhc->nhc", alpha, xs[src].view(n_dst, k, heads, -1)), alpha

    counts = [_flops(lambda *a: native.attend(a[0], a[1], scale, a[2], src, k), *leaves,
                     backward=backward),
              _flops(einsum_form, *leaves, backward=backward)]
    edges = n_dst * k * heads
    assert counts[0] == counts[1] == edges * (8 + 2 * channels) * (3 if backward else 1)


# ----------------------------------------------------------------------------- attend
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("heads", [1, 3])
@pytest.mark.parametrize("given_transpose", [True, False])
def test_attend_equals_reference_values_and_grads(dtype, heads, given_transpose):
    q_src, q_dst, scale, xs, src, k = attend_inputs(dtype, heads=heads)
    leaves = [t.requires_grad_() for t in (q_src, q_dst, scale, xs)]
    transposed = transpose_pattern(src, xs.size(0), k, heads) if given_transpose else None
    results = []
    for fn in (native.attend, native.attend_reference):
        args = (*leaves, src, k) + ((transposed,) if fn is native.attend else ())
        out, alpha = fn(*args)
        w_out, w_alpha = loss_weights(out, alpha)
        # the loss reads the weights too: their gradient flows into the same kernel
        loss = (out * w_out).sum() + (alpha * w_alpha).sum()
        results.append((out, alpha, *torch.autograd.grad(loss, leaves)))
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("k, channels", [(70, 100), (3, 64), (5, 130)])
def test_attend_blocks_and_chunks_equal_reference(dtype, k, channels):
    """The kernels sum features in register blocks of 256 bytes and take neighbours 64 at a
    time: more than 64 in-edges per target (k = 70) and per source (the transposed pattern
    of 80 targets over 75 sources), channel counts on and off the block size, and a source
    that no edge reads (its feature gradient must be exactly zero)."""
    heads, n_dst, n_src = 2, 80, 75
    q_src, q_dst, scale, xs, _, _ = attend_inputs(dtype, heads=heads, n_dst=n_dst,
                                                  n_src=n_src, k=min(k, n_src),
                                                  channels=channels)
    g = torch.Generator().manual_seed(3)
    src = torch.randint(0, n_src - 1, (n_dst * k,), generator=g)  # source n_src - 1 unread
    leaves = [t.requires_grad_() for t in (q_src, q_dst, scale, xs)]
    leaves64 = [t.detach().double().requires_grad_() for t in leaves]
    results = []
    for fn, args in ((native.attend, leaves), (native.attend_reference, leaves),
                     (native.attend_reference, leaves64)):
        out, alpha = fn(*args, src, k)
        w_out, w_alpha = loss_weights(out.double(), alpha.double())
        loss = (out * w_out.to(out.dtype)).sum() + (alpha * w_alpha.to(out.dtype)).sum()
        results.append((out, alpha, *torch.autograd.grad(loss, args)))
    kernel, reference, exact = results
    for a, b, c in zip(kernel, reference, exact):
        if dtype == torch.float64:
            torch.testing.assert_close(a, b, **TOL[dtype])
        else:  # sums of up to 70 x 100 float32 terms: as close to float64 as the reference,
            # or within 32 float32 ulps of the result's magnitude: the temperatures' gradient
            # sums all 5,600 edges of a head, and the kernel's blocked order is not torch's
            # pairwise one (on an AVX-512 machine 1.6e-6 relative, 5.4x the reference's error)
            error, reference_error = (a.double() - c).abs().max(), (b.double() - c).abs().max()
            ulps = 32 * torch.finfo(torch.float32).eps * c.abs().max()
            assert error <= max(4 * reference_error + 1e-6, ulps), (error, reference_error, ulps)
    assert kernel[-1][n_src - 1].abs().max() == 0 and kernel[2][n_src - 1].abs().max() == 0


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 7, 8, 21])
def test_attend_softmax_underflow_tails_and_nan(k):
    """The kernel's exponentials run four at a time, the last partial vector padded: every
    tail length (k mod 4), logits spread far beyond float32's range of exp (scale 200: the
    weights of logits more than 87.3 below the row's maximum are exactly 0, where torch
    keeps subnormals below 1e-38), and a NaN quaternion makes its rows NaN, not a silent
    number."""
    q_src, q_dst, _, xs, src, _ = attend_inputs(torch.float32, heads=2, n_dst=9, n_src=25,
                                                k=k, channels=8, seed=k)
    q_src = torch.nn.functional.normalize(q_src, dim=-1)
    q_dst = torch.nn.functional.normalize(q_dst, dim=-1)
    scale = torch.tensor([200.0, 0.5])
    out, alpha = native.attend(q_src, q_dst, scale, xs, src, k)
    ref_out, ref_alpha = native.attend_reference(q_src, q_dst, scale, xs, src, k)
    torch.testing.assert_close(alpha, ref_alpha, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(out, ref_out, atol=1e-5, rtol=1e-5)
    assert torch.allclose(alpha.sum(-1), torch.ones(9, 2))
    if k > 1:  # some weights of the sharp head underflow to exactly 0
        assert bool((alpha[:, 0] == 0).any())
    bad = q_src.clone()
    bad[src[0], 1, 2] = float("nan")  # source of target 0's first edge, head 1
    out, alpha = native.attend(bad, q_dst, scale, xs, src, k)
    rows = (src.view(9, k) == src[0]).any(1)
    assert bool(alpha[rows, 1].isnan().all()) and bool(out[rows, 1].isnan().all())
    assert bool(torch.isfinite(alpha[~rows]).all()) and bool(torch.isfinite(out[:, 0]).all())


def test_attend_is_a_softmax_average_by_hand():
    # one target, two sources, scale 2: logits 2<q, q_j> = 2 * (1, 0); weights e^2 : 1
    q_dst = torch.tensor([[[1.0, 0.0, 0.0, 0.0]]], dtype=torch.float64)
    q_src = torch.tensor([[[1.0, 0.0, 0.0, 0.0]], [[0.0, 1.0, 0.0, 0.0]]], dtype=torch.float64)
    xs = torch.tensor([[[4.0, 0.0]], [[0.0, 8.0]]], dtype=torch.float64)
    out, alpha = native.attend(q_src, q_dst, torch.tensor([2.0], dtype=torch.float64), xs,
                               torch.tensor([0, 1]), 2)
    e2 = torch.tensor(2.0, dtype=torch.float64).exp()
    a0, a1 = e2 / (e2 + 1), 1 / (e2 + 1)
    torch.testing.assert_close(alpha, torch.stack([a0, a1]).view(1, 1, 2))
    torch.testing.assert_close(out, torch.stack([4 * a0, 8 * a1]).view(1, 1, 2))


def test_attend_gradcheck_and_opcheck():
    q_src, q_dst, scale, xs, src, k = attend_inputs(torch.float64, n_dst=5, n_src=6, k=3,
                                                    channels=4)
    leaves = [t.requires_grad_() for t in (q_src, q_dst, scale, xs)]
    assert torch.autograd.gradcheck(lambda *a: native.attend(*a, src, k), leaves)
    torch.library.opcheck(native._attend_op, (*leaves, src, k, None, None, None))


# ----------------------------------------------------------------------------- attend_rotate
def rotate_inputs(dtype, heads, n_dst=9, channels=12, seed=2):
    g = torch.Generator().manual_seed(seed)
    q = torch.nn.functional.normalize(torch.randn(n_dst, heads, 4, generator=g, dtype=dtype),
                                      dim=-1)
    rot = native.rotation_matrix_reference(q)
    bias = torch.randn(heads, channels // 4, 4, generator=g, dtype=dtype)
    return rot, bias


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("heads", [1, 3])
@pytest.mark.parametrize("with_bias", [True, False])
def test_attend_rotate_equals_reference_and_the_two_kernels(dtype, heads, with_bias):
    """The fused epilogue against the plain reference (gather, softmax, batched rotation,
    bias) and against the two kernels it replaces (attend, then rotate with R^T)."""
    q_src, q_dst, scale, xs, src, k = attend_inputs(dtype, heads=heads)
    rot, bias = rotate_inputs(dtype, heads)
    bias = bias if with_bias else None
    y, alpha = native.attend_rotate(q_src, q_dst, scale, xs, src, k, rot, bias)
    y_ref, alpha_ref = native.attend_rotate_reference(q_src, q_dst, scale, xs, src, k, rot,
                                                      bias)
    out, _ = native.attend(q_src, q_dst, scale, xs, src, k)
    y_two = native.rotate(rot, out.view(*out.shape[:2], -1, 4), True, bias).view_as(out)
    for expected in (y_ref, y_two):
        torch.testing.assert_close(y, expected, **TOL[dtype])
    torch.testing.assert_close(alpha, alpha_ref, **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_attend_rotate_checks_its_output_in_its_pass(dtype):
    """``check_finite``: the epilogue kernel raises ``NonFiniteOutput`` exactly where the
    output it returns without the check holds a NaN or an infinity (one source row made
    non-finite; overflow from finite input: ``test_qsv_bounds``), and is silent on finite
    output."""
    from quest_geometric.nn._qsv_graph import NonFiniteOutput

    q_src, q_dst, scale, xs, src, k = attend_inputs(dtype, heads=2)
    rot, bias = rotate_inputs(dtype, 2)
    y, _ = native.attend_rotate(q_src, q_dst, scale, xs, src, k, rot, bias, check_finite=True)
    assert torch.isfinite(y).all()
    for bad in (float("nan"), float("inf"), -float("inf")):
        wrong = xs.clone()
        wrong[int(src[3])] = bad  # a source of row 0 (k >= 4): its output is not finite
        plain, _ = native.attend_rotate(q_src, q_dst, scale, wrong, src, k, rot, bias)
        assert not torch.isfinite(plain).all()
        with pytest.raises(NonFiniteOutput):
            native.attend_rotate(q_src, q_dst, scale, wrong, src, k, rot, bias,
                                 check_finite=True)


def test_attend_rotate_by_hand():
    """One target attending to one source (weight 1): the source's two quaternions come back
    rotated by R^T, R the quarter turn about z ((1, 0, 0) -> (0, 1, 0)), plus the bias."""
    q = torch.tensor([[[1.0, 0.0, 0.0, 0.0]]], dtype=torch.float64)
    xs = torch.tensor([[[5.0, 1.0, 0.0, 0.0, -1.0, 0.0, 2.0, 3.0]]], dtype=torch.float64)
    rot = torch.tensor([[[[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]]],
                       dtype=torch.float64)
    bias = torch.arange(8, dtype=torch.float64).view(1, 2, 4)
    y, alpha = native.attend_rotate(q, q, torch.ones(1, dtype=torch.float64), xs,
                                    torch.tensor([0]), 1, rot, bias)
    # R^T (1, 0, 0) = (0, -1, 0); R^T (0, 2, 3) = (2, 0, 3)
    expected = torch.tensor([5.0, 0.0, -1.0, 0.0, -1.0, 2.0, 0.0, 3.0], dtype=torch.float64)
    torch.testing.assert_close(y.view(-1), expected + bias.view(-1))
    assert alpha.item() == 1.0


def test_attend_rotate_opcheck_and_flops():
    """The operator's fake implementation and schema (``opcheck``, without gradients: it has
    no backward), and its FLOP count: the attention's plus the rotation's, as the two
    kernels it replaces are counted."""
    q_src, q_dst, scale, xs, src, k = attend_inputs(torch.float64, heads=2)
    rot, bias = rotate_inputs(torch.float64, 2)
    for b in (bias, None):
        torch.library.opcheck(native._attend_rotate_op, (q_src, q_dst, scale, xs, src, k, rot,
                                                         b))
    fused = _flops(lambda: native.attend_rotate(q_src, q_dst, scale, xs, src, k, rot, bias))

    def two():
        out, _ = native.attend(q_src, q_dst, scale, xs, src, k)
        return native.rotate(rot, out.view(*out.shape[:2], -1, 4), True, bias)

    assert fused == _flops(two) == 9 * 4 * 2 * (8 + 2 * 12) + 18 * 9 * 2 * 3


# ----------------------------------------------------------------------------- layout check
@pytest.mark.parametrize("rotate", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_attend_checks_every_target_as_it_reads_the_sources(rotate, dtype):
    """With ``targets`` the kernel checks ``targets[i k + j] == i`` on every edge: the dense
    targets pass (the output is the unchecked kernel's), and one wrong target anywhere (the
    first or last edge of the first, a middle and the last row, as the next or previous
    target's index) is found; the operators raise the layer's error instead of returning."""
    q_src, q_dst, scale, xs, src, k = attend_inputs(dtype, heads=2, n_dst=9, k=5)
    rot, bias = rotate_inputs(dtype, 2) if rotate else (None, None)
    targets = torch.arange(9).repeat_interleave(k)
    out, alpha, ok = native.attend_checked(q_src, q_dst, scale, xs, src, k, rot, bias, targets)
    plain = (native.attend_rotate(q_src, q_dst, scale, xs, src, k, rot, bias) if rotate
             else native.attend(q_src, q_dst, scale, xs, src, k))
    assert ok
    torch.testing.assert_close((out, alpha), plain, rtol=0, atol=0)
    op = native.attend_rotate if rotate else native.attend
    for row in (0, 4, 8):
        for j in (0, k - 1):
            for shift in (1, -1):
                wrong = targets.clone()
                wrong[row * k + j] = (row + shift) % 9
                assert not native.attend_checked(q_src, q_dst, scale, xs, src, k, rot, bias,
                                                 wrong)[2]
    with pytest.raises(RuntimeError, match="'dense=True' needs every node"):
        if rotate:
            op(q_src, q_dst, scale, xs, src, k, rot, bias, wrong)
        else:
            op(q_src, q_dst, scale, xs, src, k, None, wrong)
    with pytest.raises(ValueError, match="'targets' must be int64 with N_dst \\* k = 45"):
        native.attend_checked(q_src, q_dst, scale, xs, src, k, targets=targets[:-1])


def test_attend_layout_check_with_threads():
    """Rows split over threads: a wrong target in the last rows (another thread's range than
    the first rows') is found, and the dense targets pass with the output of one thread."""
    q_src, q_dst, scale, xs, src, k = attend_inputs(torch.float32, heads=2, n_dst=600,
                                                    n_src=600, k=8, channels=16)
    targets = torch.arange(600).repeat_interleave(k)
    wrong = targets.clone()
    wrong[-1] = 0
    previous = torch.get_num_threads()
    results = []
    try:
        for threads in (1, 3):
            torch.set_num_threads(threads)
            out, alpha, ok = native.attend_checked(q_src, q_dst, scale, xs, src, k,
                                                   targets=targets)
            assert ok
            results.append((out, alpha))
            assert not native.attend_checked(q_src, q_dst, scale, xs, src, k,
                                             targets=wrong)[2]
    finally:
        torch.set_num_threads(previous)
    torch.testing.assert_close(*results, rtol=0, atol=0)


def test_attend_opcheck_with_targets():
    q_src, q_dst, scale, xs, src, k = attend_inputs(torch.float64, heads=2)
    targets = torch.arange(9).repeat_interleave(k)
    leaves = [t.clone().requires_grad_() for t in (q_src, q_dst, scale, xs)]
    torch.library.opcheck(native._attend_op, (*leaves, src, k, None, None, None, targets))
    rot, bias = rotate_inputs(torch.float64, 2)
    torch.library.opcheck(native._attend_rotate_op,
                          (q_src, q_dst, scale, xs, src, k, rot, bias, targets))


# ----------------------------------------------------------------------------- prepare
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("heads, channels", [(1, 64), (3, 8), (2, 12)])
def test_prepare_equals_reference_and_the_separate_kernels(dtype, heads, channels):
    """The fused prologue against the plain reference (linear map, normalize, rotation
    matrix, batched rotation) and against the layer's separate kernels."""
    g = torch.Generator().manual_seed(6)
    x = torch.randn(23, heads * channels, generator=g, dtype=dtype)
    weight = torch.randn(4 * heads, heads * channels, generator=g, dtype=dtype)
    bias = torch.randn(4 * heads, generator=g, dtype=dtype)
    fused = native.prepare(x, weight, bias, heads)
    reference = native.prepare_reference(x, weight, bias, heads)
    q = torch.nn.functional.normalize(
        torch.nn.functional.linear(x, weight, bias).view(23, heads, 4), dim=-1)
    rot = native.rotation_matrix(q)
    separate = (q, rot, native.rotate(rot, x.view(23, heads, -1, 4), False).view(23, -1))
    tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else TOL[dtype]
    for expected in (reference, separate):
        for a, b in zip(fused, expected):
            torch.testing.assert_close(a, b, **tol)


def test_prepare_by_hand_and_the_zero_quaternion():
    """W picks q = (x_0, x_1, 0, 0), no bias: row 0, x = (0, 2, 3, 4), gives q = (0, 2, 0, 0)
    -> (0, 1, 0, 0), the half turn about x (R = diag(1, -1, -1): y and z flip sign); row 1,
    x = (0, 0, 5, 6), gives the zero quaternion, which stays zero (normalize's eps) and so
    the zero matrix and a zero vector part (as the reference does)."""
    x = torch.tensor([[0.0, 2.0, 3.0, 4.0], [0.0, 0.0, 5.0, 6.0]], dtype=torch.float64)
    weight = torch.zeros(4, 4, dtype=torch.float64)
    weight[0, 0] = weight[1, 1] = 1.0
    bias = torch.zeros(4, dtype=torch.float64)
    q, rot, xs = native.prepare(x, weight, bias, 1)
    torch.testing.assert_close(q[0, 0], torch.tensor([0.0, 1.0, 0.0, 0.0], dtype=torch.float64))
    torch.testing.assert_close(rot[0, 0], torch.diag(torch.tensor([1.0, -1.0, -1.0],
                                                                  dtype=torch.float64)))
    torch.testing.assert_close(xs[0], torch.tensor([0.0, 2.0, -3.0, -4.0], dtype=torch.float64))
    assert q[1].abs().max() == 0 and rot[1].abs().max() == 0 and xs[1].abs().max() == 0
    for a, b in zip((q, rot, xs), native.prepare_reference(x, weight, bias, 1)):
        torch.testing.assert_close(a, b)


def test_prepare_opcheck_and_flops():
    g = torch.Generator().manual_seed(7)
    x = torch.randn(9, 24, generator=g, dtype=torch.float64)
    weight = torch.randn(8, 24, generator=g, dtype=torch.float64)
    bias = torch.randn(8, generator=g, dtype=torch.float64)
    torch.library.opcheck(native._prepare_op, (x, weight, bias, 2))
    # the linear map as torch counts addmm, plus the rotation of 9 rows x 2 heads x 3 groups
    fused = _flops(lambda: native.prepare(x, weight, bias, 2))
    linear = _flops(lambda: torch.nn.functional.linear(x, weight, bias))
    assert fused == linear + 18 * 9 * 2 * 3 == 2 * 9 * 24 * 8 + 18 * 9 * 2 * 3


def test_attend_backward_finds_the_transpose_in_the_cache():
    q_src, q_dst, scale, xs, src, k = attend_inputs(torch.float64)
    xs.requires_grad_()
    TRANSPOSES.clear()
    misses = TRANSPOSES.misses
    for _ in range(2):
        out, _ = native.attend(q_src, q_dst, scale, xs, src, k)
        out.sum().backward()
    assert TRANSPOSES.misses == misses + 1  # built once, found the second time


def _refuse_openmp(monkeypatch, cache):
    """The cache folder set to ``cache`` and an OpenMP flag the compiler refuses, from a fresh
    state: what a compiler without OpenMP gets."""
    monkeypatch.setenv("QUEST_GEOMETRIC_CACHE", str(cache))
    monkeypatch.setattr(_qsv_build, "OPENMP_FLAGS", ("-fno-such-openmp-flag",))
    _fresh_state(monkeypatch)


@pytest.fixture(scope="module")
def pthreads_build(tmp_path_factory):
    """``(folder, status, warnings)``: the kernels built once, into a new cache folder (not
    there before: the build makes it), where the OpenMP build fails (the fallback build,
    with the plain :data:`~quest_geometric.nn._qsv_build.FLAGS`), with the warnings the
    build gave; shared by the tests that need that build."""
    folder = tmp_path_factory.mktemp("qsv") / "cache"
    with pytest.MonkeyPatch.context() as monkeypatch, warnings.catch_warnings(
            record=True) as caught:
        warnings.simplefilter("always")
        _refuse_openmp(monkeypatch, folder)
        status = native.qsv_native_status()
    return folder, status, [str(w.message) for w in caught]


@pytest.fixture(params=["openmp", "pthreads"])
def build(request, monkeypatch):
    """The kernels as built here (OpenMP where the compiler has it) and, forced by an OpenMP
    flag the compiler refuses, the POSIX-threads build that such compilers get (loaded from
    the folder :func:`pthreads_build` built it in)."""
    if request.param == "pthreads":
        folder = request.getfixturevalue("pthreads_build")[0]
        _refuse_openmp(monkeypatch, folder)
    status = native.qsv_native_status()
    if status["threads"] != request.param:
        pytest.skip(f"this compiler builds the kernels with {status['threads']}")
    return request.param


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_threads_give_the_same_result_as_one(dtype, build):
    # large enough that the kernels split their rows (native._PARALLEL_WORK)
    q_src, q_dst, scale, xs, src, k = attend_inputs(dtype, heads=2, n_dst=600, n_src=600,
                                                    k=8, channels=16)
    leaves = [t.requires_grad_() for t in (q_src, q_dst, scale, xs)]
    rot = torch.randn(600, 2, 3, 3, dtype=dtype)
    previous = torch.get_num_threads()
    results = []
    try:
        for threads in (1, 3):
            torch.set_num_threads(threads)
            out, alpha = native.attend(*leaves, src, k)
            grads = torch.autograd.grad(out.square().sum(), leaves)
            y = native.rotate(rot, out.detach().view(600, 2, 4, 4))
            results.append((out, alpha, y, *grads))
    finally:
        torch.set_num_threads(previous)
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, **TOL[dtype])


def test_openmp_build_shares_torchs_openmp_runtime():
    """Built with OpenMP, the kernels run on the runtime torch loaded (one libgomp in the
    process), not on a second pool competing with torch's threads for the same cores."""
    if native.qsv_native_status()["threads"] != "openmp":
        pytest.skip("the kernels were built without OpenMP here")
    code = ("import torch; from quest_geometric.nn import _qsv_native as n; "
            "n.rotate(torch.randn(4, 3, 3), torch.randn(4, 2, 4)); "
            "print(sorted({l.split()[-1] for l in open('/proc/self/maps') if 'gomp' in l}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    libraries = ast.literal_eval(done.stdout.strip())  # a printed list of paths
    assert len(libraries) == 1 and "torch" in libraries[0], libraries


def test_failed_openmp_build_falls_back_to_posix_threads(pthreads_build):
    folder, status, _ = pthreads_build
    assert status["available"] and status["threads"] == "pthreads"
    name = os.path.basename(status["path"])
    assert os.path.dirname(status["path"]) == str(folder)
    assert sorted(p.name for p in folder.iterdir()) == [name, name + ".sha256"]


# ----------------------------------------------------------------------------- the layer
MODES = [
    dict(heads=1),
    dict(heads=2),
    dict(heads=2, temperature="learned"),
    dict(heads=2, temperature=3.0),
    dict(heads=2, transport=False),
    dict(heads=1, bias=False),
]


@pytest.mark.parametrize("mode", MODES, ids=lambda m: "-".join(map(str, m.values())))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_layer_with_kernels_equals_layer_without(mode, dtype, monkeypatch):
    n = 16
    ei = knn_edges(n, 5)
    conv = make_qsv_conv(**mode).to(dtype)
    x = torch.randn(n, 16, dtype=dtype)
    calls, fused = [], []
    attend, rotate, rotation_matrix = native.attend, native.rotate, native.rotation_matrix
    attend_checked = native.attend_checked  # the kernel as the layout-finding operator runs it
    monkeypatch.setattr(native, "attend", lambda *a: calls.append(1) or attend(*a))
    monkeypatch.setattr(native, "attend_checked",
                        lambda *a, **kw: calls.append(1) or attend_checked(*a, **kw))
    monkeypatch.setattr(native, "rotate", lambda *a: fused.append(len(a) == 4 and a[3] is not None)
                        or rotate(*a))
    monkeypatch.setattr(native, "rotation_matrix",
                        lambda q: fused.append("matrix") or rotation_matrix(q))
    results = []
    for enabled in (True, False):
        native.set_qsv_native_enabled(enabled)
        try:
            conv.zero_grad()
            xx = x.clone().requires_grad_()
            out, (_, alpha) = conv(xx, ei, return_attention_weights=True)
            (out * torch.linspace(-1, 1, out.numel(), dtype=dtype).view_as(out)).sum().backward()
            grads = [p.grad.clone() for p in conv.parameters() if p.grad is not None]
            results.append((out, alpha, xx.grad, *grads))
        finally:
            native.set_qsv_native_enabled(True)
    assert len(calls) == 1  # the kernel ran with the kernels on, not with them off
    # with them on: the matrix natively, the bias added by the back-rotation's kernel
    if conv.transport:
        assert "matrix" in fused and (True in fused) == (conv.bias is not None)
    else:
        assert fused == []  # no rotation without transport: the bias stays a plain addition
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, **TOL[dtype])


@pytest.mark.parametrize("mode", MODES, ids=lambda m: "-".join(map(str, m.values())))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_layer_without_grad_rotates_in_the_attention_kernel(mode, dtype, monkeypatch):
    """Inference (no gradient needed) takes the fused epilogue where the layer transports,
    and gives what the training path (two kernels) and the kernels-off path give; with
    gradients, or without transport, the epilogue is not used."""
    n = 16
    ei = knn_edges(n, 5)
    conv = make_qsv_conv(**mode).to(dtype)
    x = torch.randn(n, 16, dtype=dtype)
    calls, prepared = [], []
    attend_rotate, prepare = native.attend_rotate, native.prepare
    monkeypatch.setattr(native, "attend_rotate",
                        lambda *a: calls.append(a[7] is not None) or attend_rotate(*a))
    monkeypatch.setattr(native, "prepare", lambda *a: prepared.append(1) or prepare(*a))
    with torch.no_grad():
        fast, (_, alpha_fast) = conv(x, ei, dense=True, return_attention_weights=True)
    assert calls == ([conv.bias is not None] if conv.transport else [])
    assert len(prepared) == (1 if conv.transport else 0)  # the prologue too
    trained, (_, alpha) = conv(x, ei, dense=True, return_attention_weights=True)
    assert len(calls) == len(prepared) == (1 if conv.transport else 0)  # not with gradients
    previous = native.set_qsv_native_enabled(False)
    try:
        with torch.no_grad():
            plain = conv(x, ei, dense=True)
    finally:
        native.set_qsv_native_enabled(previous)
    for expected in (trained, plain):
        torch.testing.assert_close(fast, expected, **TOL[dtype])
    torch.testing.assert_close(alpha_fast, alpha, **TOL[dtype])
    # an input that needs a gradient keeps the differentiable path even with frozen weights
    conv.requires_grad_(False)
    conv(x.clone().requires_grad_(), ei, dense=True)
    assert len(calls) == len(prepared) == (1 if conv.transport else 0)
    # the scatter path takes the prologue as well (not the epilogue: no attention kernel)
    with torch.no_grad():
        scattered = conv(x, ei, dense=False)
    assert len(prepared) == (2 if conv.transport else 0)
    torch.testing.assert_close(scattered, fast, **TOL[dtype])


@pytest.mark.parametrize("channels", [(16, 16), (12, 16)], ids=["same", "projected"])
def test_prologue_refuses_non_finite_features_through_the_quaternions(channels, monkeypatch):
    """Without gradients the fused prologue's features are not summed first: a NaN or an
    infinity anywhere in a row (also behind the input projection) makes that row's
    quaternions, hence its output, non-finite, and the layer's check of its output then
    gives the features' own error, naming the argument and the count.  The kernel tests
    the output in its own pass (the epilogue), so the layer makes no pass over the output or
    the features; a non-finite row makes the kernel raise, and the layer names ``x``."""
    import quest_geometric.nn.qsv_conv as qsv_module

    n = 12
    ei = knn_edges(n, 4)
    conv = QSVConv(*channels, heads=2)
    x = torch.randn(n, channels[0])
    seen = []
    real = qsv_module.all_finite
    monkeypatch.setattr(qsv_module, "all_finite", lambda t: seen.append(t) or real(t))
    with torch.no_grad():
        conv(x, ei)
    assert seen == []  # neither the output nor x: the kernel checks the output
    for bad in (float("nan"), float("inf"), -float("inf")):
        for row, col in ((0, 0), (5, channels[0] - 1), (n - 1, 7)):
            xb = x.clone()
            xb[row, col] = bad
            for dense in (None, True, False):
                with torch.no_grad(), pytest.raises(
                        ValueError, match=rf"QSVConv: 'x' must be finite, got .*1 of "
                                          rf"{n * channels[0]}"):
                    conv(xb, ei, dense=dense)


def test_fused_passes_step_aside_under_autocast(monkeypatch):
    """Under autocast the quaternion map runs in bfloat16 on the training path; inference
    takes the same path there (same dtype and values), not the float32 fused passes."""
    n = 12
    ei = knn_edges(n, 4)
    conv = QSVConv(16, 16, heads=2)
    x = torch.randn(n, 16)
    calls = []
    for name in ("prepare", "attend_rotate"):
        real = getattr(native, name)
        monkeypatch.setattr(native, name, lambda *a, _r=real: calls.append(1) or _r(*a))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with torch.no_grad():
            fast = conv(x, ei, dense=True)
        trained = conv(x, ei, dense=True)
    assert calls == [] and fast.dtype == trained.dtype
    torch.testing.assert_close(fast, trained.detach())


@pytest.mark.parametrize("case", ["node", "both", "bipartite"])
def test_prologue_steps_aside_without_a_feature_map_of_its_own(case, monkeypatch):
    """Node quaternions (alone or times the map's) and bipartite graphs keep the separate
    kernels without gradients too, with the same result as with gradients."""
    n = 12
    ei = knn_edges(n, 4)
    kwargs = {"quaternion": case, "num_nodes": n} if case != "bipartite" else {}
    conv = make_qsv_conv(**kwargs)
    x = torch.randn(n, 16, dtype=torch.float64)
    inputs = (x, x.flip(0)) if case == "bipartite" else x
    prepared = []
    prepare = native.prepare
    monkeypatch.setattr(native, "prepare", lambda *a: prepared.append(1) or prepare(*a))
    with torch.no_grad():
        fast = conv(inputs, ei)
    assert prepared == []
    torch.testing.assert_close(fast, conv(inputs, ei))


@pytest.mark.parametrize("case", ["uniform", "dropout", "float16", "fused_off"])
def test_layer_steps_aside_where_the_kernel_does_not_apply(case, monkeypatch):
    ei = knn_edges(12, 4)
    kwargs = dict(uniform=dict(attention="uniform"), dropout=dict(dropout=0.5)).get(case, {})
    conv = QSVConv(16, 16, heads=2, fused=case != "fused_off", **kwargs)
    x = torch.randn(12, 16)
    if case == "float16":
        conv, x = conv.half(), x.half()
    calls = []
    monkeypatch.setattr(native, "attend", lambda *a: calls.append(1))
    conv.train(case == "dropout")
    out = conv(x, ei)
    assert out.shape == (12, 16) and not calls


def test_layer_without_kernels_still_uses_its_torch_path(without_native):
    n = 12
    ei = knn_edges(n, 4)
    conv = make_qsv_conv()
    x = torch.randn(n, 16, dtype=torch.float64)
    torch.testing.assert_close(conv(x, ei, dense=True), conv(x, ei, dense=False))


# ----------------------------------------------------------------------------- building
def _fresh_state(monkeypatch):
    monkeypatch.setattr(native, "_state", {"lib": None, "tried": False, "reason": "not built",
                                           "path": None})


def test_build_writes_one_library_and_finds_it_again(pthreads_build, monkeypatch):
    """The build of :func:`pthreads_build` (its last flag set, the plain FLAGS) made its
    folder private, wrote the library and its hash and nothing else (no temporary, also
    after the failed OpenMP attempts of the tests that loaded it since), and loading with
    those flags again finds that file rather than building another."""
    folder, status, build_warnings = pthreads_build
    first = Path(status["path"])
    assert first.parent == folder and first.is_file() and build_warnings == []
    assert folder.stat().st_mode & 0o777 == 0o700
    mtime = first.stat().st_mtime_ns
    monkeypatch.setenv("QUEST_GEOMETRIC_CACHE", str(folder))
    _, again, warning = _qsv_build.load_library((_qsv_build.FLAGS,))
    assert again == first and first.stat().st_mtime_ns == mtime and warning is None
    # no temporary left; the hash recorded beside the library
    assert sorted(p.name for p in first.parent.iterdir()) == [first.name, first.name + ".sha256"]
    recorded = (first.parent / (first.name + ".sha256")).read_text().strip()
    assert recorded == hashlib.sha256(first.read_bytes()).hexdigest()


def test_failed_build_is_reported_and_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("QUEST_GEOMETRIC_CACHE", str(tmp_path))
    broken = tmp_path / "broken.c"
    broken.write_text("this is not C\n")
    monkeypatch.setattr(_qsv_build, "SOURCE", broken)
    _fresh_state(monkeypatch)
    assert not native.qsv_native_available()
    assert "failed" in native.qsv_native_status()["reason"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken.c"]
    with pytest.raises(RuntimeError, match="not available"):
        native._fn("rotate", torch.float32)


def test_no_compiler_is_reported(monkeypatch):
    monkeypatch.setattr(_qsv_build, "compiler_command", lambda: None)
    _fresh_state(monkeypatch)
    status = native.qsv_native_status()
    assert not status["available"] and "no C compiler" in status["reason"]
    assert not native.supports(torch.zeros(1))


def test_environment_switch_turns_the_kernels_off(monkeypatch):
    """``QUEST_GEOMETRIC_NATIVE=0`` is read when the kernels are first wanted (not at import),
    so a fresh state under the variable is what a process started with it sees."""
    monkeypatch.setenv(native.ENV_SWITCH, "0")
    _fresh_state(monkeypatch)
    status = native.qsv_native_status()
    assert not status["available"] and "QUEST_GEOMETRIC_NATIVE" in status["reason"]
    calls = []
    monkeypatch.setattr(native, "attend", lambda *a: calls.append(1))
    x, ei = torch.randn(6, 8), knn_edges(6, 2)
    assert QSVConv(8, 8)(x, ei).shape == (6, 8) and not calls


def test_set_native_enabled_checks_its_argument():
    with pytest.raises(TypeError, match="'enabled'"):
        native.set_qsv_native_enabled(1)
    assert native.set_qsv_native_enabled(True) is True and native.qsv_native_enabled()


def test_unsupported_dtype_is_a_clear_error():
    with pytest.raises(TypeError, match="float32 or float64"):
        native._fn("rotate", torch.float16)
