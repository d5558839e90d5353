"""Every index QSVConv reads is checked on every path (issue 53 part 2): an index outside the
nodes is refused with the layer's ValueError eagerly and under torch.compile (by the native
kernels and the custom operators, which read the indices), an edge_index edited in place
after a call is read again, very wide channels with k = 65 use no stack array, and a finite
input that overflows the output is refused.  Cases that could crash run in a subprocess."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from quest_geometric.nn import _qsv_native as native
from quest_geometric.nn.qsv_conv import QSVConv
from quest_geometric.testing.qsv import knn_edges, make_qsv_conv, qsv_conv_reference

ROOT = Path(__file__).resolve().parents[2]
INDEX = r"QSVConv: 'edge_index' must (be entries|hold source indices) in \[0, 4\]"


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=900, env=dict(os.environ, PYTHONPATH=str(ROOT),
                                                OMP_NUM_THREADS="1"))


@pytest.mark.parametrize("bad", [10**9, 6, 5, -1])
@pytest.mark.parametrize("dense", [None, True, False])
@pytest.mark.parametrize("use_native", [True, False])
def test_index_outside_the_nodes_is_refused_eagerly(bad, dense, use_native):
    conv, x, ei = QSVConv(8, 8, heads=2), torch.randn(5, 8), knn_edges(5, 2)
    ei[0, 4] = bad
    previous = native.set_qsv_native_enabled(use_native)
    try:
        for grad in (True, False):
            with torch.set_grad_enabled(grad), pytest.raises(ValueError, match=INDEX):
                conv(x, ei, dense=dense)
    finally:
        native.set_qsv_native_enabled(previous)


@pytest.mark.parametrize("rotate", [False, True])
def test_kernel_refuses_a_source_outside_the_nodes(rotate):
    """The attention kernel checks the sources itself (forward and backward), before it
    reads one: the check a compiled graph cannot skip."""
    if not native.qsv_native_available():
        pytest.skip(native.qsv_native_status()["reason"])
    q_src, q_dst = torch.randn(5, 2, 4), torch.randn(5, 2, 4)
    scale, xs = torch.ones(2), torch.randn(5, 2, 8, requires_grad=True)
    src = knn_edges(5, 2)[0].clone()
    rot = torch.randn(5, 2, 3, 3) if rotate else None
    for bad in (10**9, 5, -1):
        wrong = src.clone()
        wrong[4] = bad
        with pytest.raises(ValueError, match="QSVConv: 'edge_index' must be entries"):
            if rotate:
                native.attend_rotate(q_src, q_dst, scale, xs.detach(), wrong, 2, rot)
            else:
                native.attend(q_src, q_dst, scale, xs, wrong, 2)
    if not rotate:  # the sources edited between the forward and the backward, unseen by autograd
        out, _ = native.attend(q_src, q_dst, scale, xs, src, 2)
        src.data[4] = 10**9
        with pytest.raises(ValueError, match="QSVConv: 'edge_index' must be entries"):
            out.sum().backward()


@pytest.mark.slow
def test_index_outside_the_nodes_is_refused_under_compile():
    """``ei[0, 4] = 10**9`` and ``= 6`` with N = 5 under torch.compile (the layer's own range
    check is skipped while tracing): refused with the layer's error on every compiled path,
    with and without the native kernels and gradients."""
    code = f"INDEX = {INDEX!r}\n" + """
import re, torch
from quest_geometric.nn import _qsv_native as native
from quest_geometric.nn.qsv_conv import QSVConv
from quest_geometric.testing.qsv import knn_edges
torch.manual_seed(0)
conv, x = QSVConv(8, 8, heads=2), torch.randn(5, 8)
for use_native in (True, False):
    native.set_qsv_native_enabled(use_native)
    for dense in (None, True, False):
        torch._dynamo.reset()
        f = torch.compile(lambda x, ei: conv(x, ei, dense=dense), fullgraph=True)
        ei = knn_edges(5, 2)
        torch.testing.assert_close(f(x, ei), conv(x, ei))
        for bad in (10**9, 6):
            e = ei.clone()
            e[0, 4] = bad
            for grad in (True, False):
                try:
                    with torch.set_grad_enabled(grad):
                        f(x, e)
                    print("ACCEPTED", use_native, dense, bad, grad)
                except ValueError as err:
                    assert re.match(INDEX, str(err)), err
                    print("REFUSED")
"""
    done = _run(code)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["REFUSED"] * 24, done.stdout


def test_edge_index_edited_in_place_through_numpy_is_read_again():
    """An edit through a ``from_numpy`` buffer does not bump the tensor's version: the layer
    must not answer from what it read in an earlier call (forward and gradients equal the
    reference on the edited graph), and an edit to an index outside the nodes is refused."""
    buffer = knn_edges(12, 4).numpy().copy()
    ei = torch.from_numpy(buffer)
    conv = make_qsv_conv(16, heads=2)
    x = torch.randn(12, 16, dtype=torch.float64, requires_grad=True)
    for dense in (None, True, False):
        conv(x, ei, dense=dense).sum().backward()  # a first call reads the graph
        version = ei._version
        buffer[0, 5], buffer[0, 9] = (buffer[0, 5] + 3) % 12, (buffer[0, 9] + 7) % 12
        assert ei._version == version  # the edit is invisible to the version counter
        x.grad = None
        out = conv(x, ei, dense=dense)
        (g,) = torch.autograd.grad(out.square().sum(), x)
        ref = qsv_conv_reference(conv, x, ei.clone())
        (g_ref,) = torch.autograd.grad(ref.square().sum(), x)
        torch.testing.assert_close(out, ref)
        torch.testing.assert_close(g, g_ref)
    buffer[0, 4] = 10**9
    with pytest.raises(ValueError, match="QSVConv: 'edge_index' must be entries"):
        conv(x, ei)


def test_edge_index_edited_through_data_is_read_again():
    ei = knn_edges(12, 4)
    conv = make_qsv_conv(16, heads=2)
    x = torch.randn(12, 16, dtype=torch.float64)
    conv(x, ei)
    ei.data[0, 3] = 10**9
    with pytest.raises(ValueError, match="QSVConv: 'edge_index' must be entries"):
        conv(x, ei)
    ei.data[0, 3] = 2
    torch.testing.assert_close(conv(x, ei), qsv_conv_reference(conv, x, ei.clone()))


@pytest.mark.slow
def test_very_wide_channels_with_k_65_equal_the_reference():
    """The weighted sums over more than 64 neighbours (k = 65) and the backward's sums over
    a source with more than 64 targets accumulate in place: no stack array sized by the
    channels (``C`` = 2**21 float32 channels, 8 MB a row, overflowed the stack before)."""
    code = f"INDEX = {INDEX!r}\n" + """
import re, torch
from quest_geometric.nn import _qsv_native as native
if not native.qsv_native_available():
    print("SKIP"); raise SystemExit
torch.manual_seed(0)
C, k = 2 ** 21, 65
q_src = torch.nn.functional.normalize(torch.randn(2, 1, 4), dim=-1)
q_dst = torch.nn.functional.normalize(torch.randn(2, 1, 4), dim=-1)
scale, xs = torch.tensor([2.0]), torch.randn(2, 1, C, requires_grad=True)
src = torch.randint(0, 2, (2 * k,))
out, alpha = native.attend(q_src, q_dst, scale, xs, src, k)
logit = (q_src[src, 0].view(2, k, 4) * q_dst[:, 0].unsqueeze(1)).sum(-1) * 2.0
a = logit.softmax(-1)                                    # [2, k]
w = torch.stack([torch.zeros(2).index_add_(0, src.view(2, k)[i], a[i]) for i in range(2)])
ref = w @ xs.detach()[:, 0]                              # [2, C]
torch.testing.assert_close(alpha[:, 0], a)
torch.testing.assert_close(out[:, 0], ref, rtol=1e-5, atol=1e-4)
g = torch.randn(2, 1, C)
(g_xs,) = torch.autograd.grad(out, xs, g)
torch.testing.assert_close(g_xs[:, 0], w.t() @ g[:, 0], rtol=1e-5, atol=1e-4)
print("SAME")
"""
    done = _run(code)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() in ("SAME", "SKIP"), done.stdout


def test_k_65_layer_equals_reference():
    """The layer over k = 65 neighbours (two blocks of the kernel's weighted sum) equals the
    plain reference, forward and backward."""
    conv = make_qsv_conv(32, heads=2)
    x = torch.randn(70, 32, dtype=torch.float64, requires_grad=True)
    ei = knn_edges(70, 65)
    out = conv(x, ei)
    ref = qsv_conv_reference(conv, x, ei)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(torch.autograd.grad(out.square().sum(), x)[0],
                               torch.autograd.grad(ref.square().sum(), x)[0])


@pytest.mark.parametrize("grad", [True, False])
@pytest.mark.parametrize("quaternion", ["feature", "node"])
def test_finite_input_that_overflows_is_refused(grad, quaternion):
    """A finite 3e38 float32 input overflows the quaternion map or the rotations: refused
    with the argument's name instead of a silent NaN or infinity."""
    kwargs = {"num_nodes": 10} if quaternion == "node" else {}
    conv = QSVConv(16, 16, heads=2, quaternion=quaternion, **kwargs)
    x = torch.randn(10, 16)
    x[3] = 3e38
    ei = knn_edges(10, 3)
    for dense in (None, True, False):  # the kernel's check of the output and the layer's
        with torch.set_grad_enabled(grad), pytest.raises(
                ValueError, match="QSVConv: 'x' must be small enough that the output stays"):
            conv(x, ei, dense=dense)
    x[3] = float("nan")  # a non-finite input keeps its own error
    for dense in (None, True, False):
        with torch.set_grad_enabled(grad), pytest.raises(ValueError, match="'x' must be finite"):
            conv(x, ei, dense=dense)
