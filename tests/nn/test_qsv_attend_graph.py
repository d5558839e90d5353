"""``quest_geometric::qsv_attend_graph``, the compiled ``dense=None`` path of QSVConv: the
operator against its plain autograd reference on graphs of each layout (values and gradients,
float32 and float64, the native kernel on and off), gradcheck and opcheck, a hand-computed
case, its FLOP count, and the compiled layer (no torch.cond, equal to eager on both layouts)."""
from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from quest_geometric.nn import _qsv_native as native
from quest_geometric.nn._qsv_attend_graph import (
    _attend_graph_backward_op,
    _attend_graph_op,
    attend_graph,
    attend_graph_reference,
    attend_graph_rotate,
)
from quest_geometric.testing.qsv import knn_edges, make_qsv_conv, random_dense_edges

TOL = {torch.float32: dict(atol=2e-5, rtol=1e-5), torch.float64: dict(atol=1e-12, rtol=1e-12)}


@pytest.fixture(params=[True, False], ids=["native", "torch"])
def use_native(request):
    if request.param and not native.qsv_native_available():
        pytest.skip(f"native kernels: {native.qsv_native_status()['reason']}")
    previous = native.set_qsv_native_enabled(request.param)
    yield request.param
    native.set_qsv_native_enabled(previous)


def graph(layout, n_dst=9, n_src=11, k=4, seed=0):
    """``(src, dst)``: the dense layout, the same edges shuffled, the same edges with two
    of them swapped between the second and third targets (every size and both ends as in the
    dense layout: only reading every target tells them apart), or a ragged graph (random
    degrees, one target without in-edges)."""
    src, dst = random_dense_edges(n_dst, k, n_src=n_src, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    if layout == "swapped":
        perm = torch.arange(src.numel())
        perm[[k + 1, 2 * k + 2]] = perm[[2 * k + 2, k + 1]]
        src, dst = src[perm], dst[perm]
    elif layout == "shuffled":
        perm = torch.randperm(src.numel(), generator=g)
        src, dst = src[perm], dst[perm]
    elif layout == "ragged":
        keep = (torch.rand(src.numel(), generator=g) < 0.6) & (dst != 0)
        src, dst = src[keep], dst[keep]
    return src, dst


def inputs(dtype, heads=2, n_dst=9, n_src=11, channels=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    q_src = torch.randn(n_src, heads, 4, generator=g, dtype=dtype)
    q_dst = torch.randn(n_dst, heads, 4, generator=g, dtype=dtype)
    scale = torch.rand(heads, generator=g, dtype=dtype) + 0.5
    xs = torch.randn(n_src, heads, channels, generator=g, dtype=dtype)
    return [t.requires_grad_() for t in (q_src, q_dst, scale, xs)]


def spy_on_kernel(monkeypatch) -> list:
    """A list that collects, per call of the checked native kernel, whether it found the
    dense layout (its result used) or not (the operator falls back on the scatter form)."""
    used = []
    checked = native.attend_checked

    def spy(*args, **kwargs):
        result = checked(*args, **kwargs)
        used.append(result[2])
        return result

    monkeypatch.setattr(native, "attend_checked", spy)
    return used


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("layout", ["dense", "shuffled", "swapped", "ragged"])
@pytest.mark.parametrize("heads", [1, 3])
def test_equals_reference_values_and_grads(use_native, dtype, layout, heads, monkeypatch):
    src, dst = graph(layout)
    leaves = inputs(dtype, heads=heads)
    used = spy_on_kernel(monkeypatch)
    results = []
    for fn in (attend_graph, attend_graph_reference):
        out, alpha = fn(*leaves, src, dst, 9)
        g = torch.Generator().manual_seed(5)
        w_out = torch.randn(out.shape, generator=g, dtype=dtype)
        w_alpha = torch.randn(alpha.shape, generator=g, dtype=dtype)
        loss = (out * w_out).sum() + (alpha * w_alpha).sum()  # the weights' gradient too
        results.append((out, alpha, *torch.autograd.grad(loss, leaves)))
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, **TOL[dtype])
    # the native kernel's result is used exactly on the dense layout, when enabled; on the
    # swapped edges it ran and its own check refused them
    assert used.count(True) == int(use_native and layout == "dense")
    assert used.count(False) == int(use_native and layout == "swapped")
    if layout == "ragged":  # the target without in-edges gets zeros, not NaN
        assert torch.equal(results[0][0][0], torch.zeros_like(results[0][0][0]))


@pytest.mark.parametrize("layout", ["dense", "shuffled"])
def test_without_alpha_the_output_and_grads_are_the_same(use_native, layout):
    src, dst = graph(layout)
    leaves = inputs(torch.float64)
    results = []
    for fn in (lambda *a: attend_graph(*a, want_alpha=False), attend_graph_reference):
        out, alpha = fn(*leaves, src, dst, 9)
        w = torch.randn(out.shape, generator=torch.Generator().manual_seed(5), dtype=out.dtype)
        results.append((out, *torch.autograd.grad((out * w).sum(), leaves)))
        if fn is not attend_graph_reference:
            assert alpha.numel() == 0
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, **TOL[torch.float64])


def test_backward_runs_the_form_of_the_forward():
    """Switching the kernels off between forward and backward changes nothing: the backward
    reads the forward's weights in the order they were written (the kernel's here)."""
    if not native.qsv_native_available():
        pytest.skip(f"native kernels: {native.qsv_native_status()['reason']}")
    src, dst = graph("dense")
    leaves = inputs(torch.float64)
    previous = native.set_qsv_native_enabled(True)
    try:
        out, alpha = attend_graph(*leaves, src, dst, 9)
        native.set_qsv_native_enabled(False)
        grads = torch.autograd.grad(out.sum() + alpha.square().sum(), leaves)
    finally:
        native.set_qsv_native_enabled(previous)
    out, alpha = attend_graph_reference(*leaves, src, dst, 9)
    expected = torch.autograd.grad(out.sum() + alpha.square().sum(), leaves)
    for a, b in zip(grads, expected):
        torch.testing.assert_close(a, b, **TOL[torch.float64])


def test_hand_computed_case():
    # target 0 reads sources 0 and 1 (listed in the order 1, 0), scale 2: logits 2 * (0, 1)
    # for the edges (1 -> 0, 0 -> 0), weights 1 : e^2; target 1 reads source 1 alone
    q_src = torch.tensor([[[1.0, 0, 0, 0]], [[0, 1.0, 0, 0]]], dtype=torch.float64)
    q_dst = torch.tensor([[[1.0, 0, 0, 0]], [[0, 1.0, 0, 0]]], dtype=torch.float64)
    xs = torch.tensor([[[4.0]], [[8.0]]], dtype=torch.float64)
    src, dst = torch.tensor([1, 0, 1]), torch.tensor([0, 0, 1])
    out, alpha = attend_graph(q_src, q_dst, torch.tensor([2.0], dtype=torch.float64), xs,
                              src, dst, 2)
    e2 = torch.tensor(2.0, dtype=torch.float64).exp()
    a_far, a_near = 1 / (e2 + 1), e2 / (e2 + 1)
    torch.testing.assert_close(alpha, torch.stack([a_far, a_near, torch.ones_like(e2)])
                               .view(3, 1))
    torch.testing.assert_close(out.view(2), torch.stack([8 * a_far + 4 * a_near,
                                                         torch.tensor(8.0).double()]))


@pytest.mark.parametrize("layout", ["dense", "shuffled"])
def test_gradcheck_and_opcheck(use_native, layout):
    src, dst = graph(layout, n_dst=5, n_src=6, k=3)
    leaves = inputs(torch.float64, n_dst=5, n_src=6, channels=3)
    assert torch.autograd.gradcheck(lambda *a: attend_graph(*a, src, dst, 5), leaves)
    for want_alpha in (True, False):
        torch.library.opcheck(_attend_graph_op, (*leaves, src, dst, 5, want_alpha))


def test_backward_gives_only_the_gradients_asked_for():
    src, dst = graph("shuffled")
    leaves = [t.detach() for t in inputs(torch.float64)]
    out, alpha = attend_graph(*leaves, src, dst, 9)
    grad, grad_alpha = torch.randn_like(out), torch.randn_like(alpha)
    _, weights, order, _ = _attend_graph_op(*leaves, src, dst, 9, False)
    full = _attend_graph_backward_op(grad, grad_alpha, weights, order, *leaves, src, dst, 9,
                                     True, True)
    some = _attend_graph_backward_op(grad, grad_alpha, weights, order, *leaves, src, dst, 9,
                                     False, False)
    assert some[0].numel() == 0 and some[3].numel() == 0
    assert torch.equal(some[1], full[1]) and torch.equal(some[2], full[2])


@pytest.mark.parametrize("backward", [False, True])
def test_flops_are_counted_as_the_dense_kernel(backward):
    """The same count as the native kernel's formula on the same edges (one layout)."""
    src, dst = graph("dense")
    counts = []
    for fn in (lambda *a: attend_graph(*a, src, dst, 9),
               lambda *a: native.attend(*a, src, 4)):
        leaves = inputs(torch.float32)
        with FlopCounterMode(display=False) as counter:
            out, alpha = fn(*leaves)
            if backward:
                (out.sum() + alpha.sum()).backward()
        counts.append(counter.get_total_flops())
    assert counts[0] == counts[1] == 9 * 4 * 2 * (8 + 2 * 6) * (3 if backward else 1)


@pytest.mark.slow
@pytest.mark.parametrize("heads", [1, 2])
def test_compiled_default_layer_uses_the_operator_and_matches_eager(use_native, heads):
    """dense=None under compile: with the native kernels the layout is found inside the
    operator (no torch.cond in the graph), without them torch.cond chooses; one compiled
    graph serves the dense layout and the same edges shuffled, equal to eager in the output
    and every gradient."""
    n = 12
    ei = knn_edges(n, 4)
    shuffled = ei[:, torch.randperm(ei.size(1), generator=torch.Generator().manual_seed(1))]
    conv = make_qsv_conv(channels=16, heads=heads, temperature="learned").double()
    x = torch.randn(n, 16, dtype=torch.float64)
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(conv)(x, ei)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    code = "".join(gm.code for gm in explanation.graphs)
    assert ("quest_geometric.qsv_attend_graph" in code) == use_native
    assert ("torch.ops.higher_order.cond" in code) == (not use_native)
    torch._dynamo.reset()
    compiled = torch.compile(conv, fullgraph=True)
    w = torch.randn(n, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    for edges in (ei, shuffled):
        results = []
        for fn in (conv, compiled):
            conv.zero_grad()
            xx = x.clone().requires_grad_()
            (fn(xx, edges) * w).sum().backward()
            results.append([fn(x, edges).detach(), xx.grad]
                           + [p.grad.clone() for p in conv.parameters()])
        for a, b in zip(*results):
            torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("layout", ["dense", "shuffled", "swapped", "ragged"])
@pytest.mark.parametrize("with_bias", [True, False])
def test_rotate_form_equals_reference_then_rotation(dtype, layout, with_bias, monkeypatch):
    """``qsv_attend_graph_rotate`` (inference): the reference attention, then each output
    quaternion rotated by its target's R^T and the bias added; the fused kernel runs exactly
    on the dense layout, the scatter form and a separate rotation elsewhere."""
    if not native.qsv_native_available():
        pytest.skip(f"native kernels: {native.qsv_native_status()['reason']}")
    from quest_geometric.quaternion import normalize, to_rotation_matrix

    src, dst = graph(layout)
    q_src, q_dst, scale, xs = [t.detach() for t in inputs(dtype, heads=2, channels=8)]
    rot = to_rotation_matrix(normalize(torch.randn(9, 2, 4, dtype=dtype)))  # [9, 2, 3, 3]
    bias = torch.randn(2, 8, dtype=dtype) if with_bias else None
    used = spy_on_kernel(monkeypatch)
    out, alpha = attend_graph_rotate(q_src, q_dst, scale, xs, src, dst, 9, rot, bias)
    ref, ref_alpha = attend_graph_reference(q_src, q_dst, scale, xs, src, dst, 9)
    v = ref.view(9, 2, 2, 4)
    rotated = torch.cat([v[..., :1], torch.einsum("nhji,nhgj->nhgi", rot, v[..., 1:])], -1)
    expected = rotated.reshape(9, 2, 8) + (0 if bias is None else bias)
    torch.testing.assert_close(out, expected, **TOL[dtype])
    torch.testing.assert_close(alpha, ref_alpha, **TOL[dtype])
    assert used.count(True) == int(layout == "dense")
    assert used.count(False) == int(layout == "swapped")
    _, empty = attend_graph_rotate(q_src, q_dst, scale, xs, src, dst, 9, rot, bias,
                                   want_alpha=False)
    assert empty.numel() == 0
    torch.library.opcheck(torch.ops.quest_geometric.qsv_attend_graph_rotate,
                          (q_src, q_dst, scale, xs, src, dst, 9, True, rot, bias),
                          test_utils=("test_schema", "test_faketensor"))


@pytest.mark.slow
def test_compiled_default_layer_without_grad_rotates_in_the_kernel():
    """dense=None under compile without gradients: the layout found inside
    ``qsv_attend_graph_rotate``, the output rotation and bias in the attention kernel's pass
    (no separate rotation of the output), equal to eager on the dense layout and on the same
    edges shuffled."""
    if not native.qsv_native_available():
        pytest.skip(f"native kernels: {native.qsv_native_status()['reason']}")
    n = 12
    ei = knn_edges(n, 4)
    shuffled = ei[:, torch.randperm(ei.size(1), generator=torch.Generator().manual_seed(1))]
    conv = make_qsv_conv(channels=16, heads=2).double()
    x = torch.randn(n, 16, dtype=torch.float64)
    with torch.no_grad():
        torch._dynamo.reset()
        explanation = torch._dynamo.explain(conv)(x, ei)
        assert explanation.graph_break_count == 0, explanation.break_reasons
        code = "".join(gm.code for gm in explanation.graphs)
        assert "quest_geometric.qsv_attend_graph_rotate" in code
        assert "quest_geometric.qsv_rotate" not in code
        torch._dynamo.reset()
        compiled = torch.compile(conv, fullgraph=True)
        for edges in (ei, shuffled):
            torch.testing.assert_close(compiled(x, edges), conv(x, edges), atol=1e-12,
                                       rtol=1e-12)
