"""QSVConv under :func:`torch.compile`: the custom operators of the fused dense path against
an explicit dense-matrix reference and the eager :class:`NeighbourSum` (values and gradients,
float32 and float64, gradcheck, ``torch.library.opcheck``), the compiled layer against the
eager one (outputs and gradients), and zero graph breaks for the layer and a ``QSVNet``.

The compiled comparisons use the ``aot_eager`` backend: it traces the forward and the
backward exactly as ``inductor`` does (Dynamo, AOT autograd, the operators' fake
implementations) without generating code, which on the shared 2-core CPU takes minutes per
graph."""
from __future__ import annotations

import pytest
import torch
from torch_geometric.data import Batch, Data

from quest_geometric.models.qsv_net import QSVNet
from quest_geometric.nn import _qsv_csr, _qsv_native
from quest_geometric.nn._qsv_csr import (
    CSRPattern,
    NeighbourSum,
    TransposeCache,
    neighbour_sum_op,
    pattern_columns,
    transpose_pattern,
)
from quest_geometric.nn.qsv_conv import QSVConv
from quest_geometric.testing.qsv import knn_edges, make_qsv_conv, random_dense_edges

BACKEND = "aot_eager"


# ----------------------------------------------------------------------------- operators
def dense_matrix(values: torch.Tensor, src: torch.Tensor, num_src: int, k: int,
                 heads: int) -> torch.Tensor:
    """The block-diagonal matrix A, written out entry by entry from its definition: row
    ``(i, h)`` holds ``values[(i * heads + h) * k + e]`` at column ``(src[i * k + e], h)``."""
    num_dst = src.numel() // k
    a = values.new_zeros(num_dst * heads, num_src * heads)
    for i in range(num_dst):
        for h in range(heads):
            for e in range(k):
                a[i * heads + h, int(src[i * k + e]) * heads + h] += values[(i * heads + h) * k + e]
    return a


def op_inputs(dtype, heads=2, n_dst=7, n_src=9, k=3, channels=5, seed=0):
    src = random_dense_edges(n_dst, k, n_src=n_src, seed=seed)[0]
    g = torch.Generator().manual_seed(seed)
    values = torch.rand(n_dst * heads * k, generator=g, dtype=dtype)
    x = torch.randn(n_src * heads, channels, generator=g, dtype=dtype)
    return src, values, x, n_src, k, heads


def op_call(values, x, src, num_src, k, heads):
    crow, col = pattern_columns(src, src.numel() // k, k, heads)
    return neighbour_sum_op(values, x, crow, col, src, k, heads)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("heads", [1, 3])
def test_neighbour_sum_op_matches_dense_matrix_and_eager_function(dtype, heads):
    src, values, x, n_src, k, H = op_inputs(dtype, heads=heads)
    g = torch.randn(src.numel() // k * H, x.size(1), dtype=dtype)
    results = []
    for impl in ("dense", "op", "function"):
        v, xx = values.clone().requires_grad_(), x.clone().requires_grad_()
        if impl == "dense":
            out = dense_matrix(v, src, n_src, k, H) @ xx
        elif impl == "op":
            out = op_call(v, xx, src, n_src, k, H)
        else:
            out = NeighbourSum.apply(v, xx, CSRPattern(src, n_src, src.numel() // k, k, H))
        (out * g).sum().backward()
        results.append((out.detach(), v.grad, xx.grad))
    tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=1e-12, rtol=1e-12)
    for other in results[1:]:
        for a, b in zip(other, results[0]):
            assert a.dtype == dtype
            torch.testing.assert_close(a, b, **tol)


def test_transpose_pattern_is_the_transpose():
    src, values, x, n_src, k, H = op_inputs(torch.float64, heads=2)
    crow_t, col_t, gather = transpose_pattern(src, n_src, k, H)
    a_t = _qsv_csr.sparse_csr(crow_t, col_t, values[gather], (n_src * H, src.numel() // k * H))
    torch.testing.assert_close(a_t.to_dense(), dense_matrix(values, src, n_src, k, H).T)


def test_transpose_cache_finds_equal_sources_and_only_those():
    cache = TransposeCache(size=2)
    src, _, _, n_src, k, H = op_inputs(torch.float64, heads=2)
    first = cache(src, n_src, k, H)
    for a, b in zip(first, transpose_pattern(src, n_src, k, H)):
        assert torch.equal(a, b)
    # a new tensor with the same sources (as a traced graph passes them) is a hit
    assert cache(src.clone(), n_src, k, H) is first and (cache.hits, cache.misses) == (1, 1)
    # one changed source, another head count or another number of sources: misses, and
    # each answer is the transpose of what was asked
    changed = src.clone()
    changed[0] = (changed[0] + 1) % n_src
    for args in ((changed, n_src, k, H), (src, n_src, k, 1), (src, n_src + 1, k, H)):
        got = cache(*args)
        assert got is not first
        for a, b in zip(got, transpose_pattern(*args)):
            assert torch.equal(a, b)
    assert cache.misses == 4 and len(cache) == 2  # the oldest entries were evicted
    assert cache(src, n_src, k, H) is not first  # ... so this one is rebuilt
    cache.clear()
    assert len(cache) == 0 and "entries=0" in repr(cache)
    with pytest.raises(ValueError, match=r"^TransposeCache: 'size' must be an int >= 1"):
        TransposeCache(size=0)
    with pytest.raises(TypeError, match=r"^TransposeCache: 'size' must be an int >= 1"):
        TransposeCache(size=2.0)


def test_neighbour_sum_op_gradcheck_float64():
    src, values, x, n_src, k, H = op_inputs(torch.float64, heads=2, n_dst=4, n_src=5, k=2,
                                            channels=3)
    assert torch.autograd.gradcheck(
        lambda v, xx: op_call(v, xx, src, n_src, k, H),
        (values.requires_grad_(), x.requires_grad_()))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["neighbour_sum", "neighbour_sum_backward"])
def test_custom_ops_opcheck(name):
    src, values, x, n_src, k, H = op_inputs(torch.float64, heads=2)
    n_dst = src.numel() // k
    crow, col = pattern_columns(src, n_dst, k, H)
    grad = torch.randn(n_dst * H, x.size(1), dtype=x.dtype)
    # the backward operator has no autograd of its own
    args = {
        "neighbour_sum": (values.clone().requires_grad_(), x.clone().requires_grad_(), crow,
                          col, src, k, H),
        "neighbour_sum_backward": (values, x, grad, crow, col, src, k, H, True, True),
    }[name]
    result = torch.library.opcheck(getattr(torch.ops.quest_geometric, name).default, args)
    assert set(result.values()) == {"SUCCESS"}, result


def test_neighbour_sum_backward_op_gives_only_the_gradients_asked_for():
    src, values, x, n_src, k, H = op_inputs(torch.float64, heads=2)
    n_dst = src.numel() // k
    crow, col = pattern_columns(src, n_dst, k, H)
    grad = torch.randn(n_dst * H, x.size(1), dtype=x.dtype)
    a = dense_matrix(values, src, n_src, k, H)
    g_v, g_x = torch.ops.quest_geometric.neighbour_sum_backward(values, x, grad, crow, col,
                                                                 src, k, H, True, True)
    torch.testing.assert_close(g_x, a.T @ grad)
    # the value gradient is <G_r, X_c> at each entry (r, c) of the pattern, in value order
    rows = torch.arange(n_dst * H).repeat_interleave(k)
    torch.testing.assert_close(g_v, (grad[rows] * x[col]).sum(-1))
    only_v = torch.ops.quest_geometric.neighbour_sum_backward(values, x, grad, crow, col, src,
                                                              k, H, True, False)
    assert only_v[1].numel() == 0 and torch.equal(only_v[0], g_v)


# ----------------------------------------------------------------------------- the layer
def eager_and_compiled(conv, x, ei, **kw):
    """Output and the gradients (input and every parameter) of a weighted sum of the output,
    eager and compiled (``fullgraph=True``)."""
    torch._dynamo.reset()
    compiled = torch.compile(conv, fullgraph=True, backend=BACKEND)
    g = torch.randn(x.size(0), conv.out_channels, dtype=x.dtype,
                    generator=torch.Generator().manual_seed(3))
    results = []
    for fn in (conv, compiled):
        conv.zero_grad()
        xx = x.clone().requires_grad_()
        out = fn(xx, ei, **kw)
        (out * g).sum().backward()
        results.append([out.detach(), xx.grad] + [p.grad.clone() for p in conv.parameters()])
    return results


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("use_native", [True, False])
def test_compiled_fused_path_matches_eager(dtype, use_native):
    n = 12
    ei = knn_edges(n, 4)
    conv = make_qsv_conv(channels=16, heads=2, temperature="learned").to(dtype)
    x = torch.randn(n, 16, dtype=dtype)
    previous = _qsv_native.set_qsv_native_enabled(use_native)
    try:
        eager, compiled = eager_and_compiled(conv, x, ei, dense=True)
    finally:
        _qsv_native.set_qsv_native_enabled(previous)
    tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=1e-12, rtol=1e-12)
    for a, b in zip(compiled, eager):
        torch.testing.assert_close(a, b, **tol)
    # and the eager gather reference (fused=False) agrees with the compiled fused path
    conv.fused = False
    gather, _ = eager_and_compiled(conv, x, ei, dense=True)
    for a, b in zip(compiled, gather):
        torch.testing.assert_close(a, b, **tol)


@pytest.mark.slow
def test_layer_default_dense_compiles_without_cond_and_matches_eager():
    """QSVConv(dense=True): forward's dense=None takes the layer's default, so the compiled
    graph holds the dense path alone (no torch.cond, whose backward recomputes the branch),
    with the same outputs and gradients as the eager layer that detects the layout."""
    n = 12
    ei = knn_edges(n, 4)
    detecting = make_qsv_conv(channels=16, heads=2, temperature="learned")
    conv = make_qsv_conv(channels=16, heads=2, temperature="learned", dense=True)
    assert "dense=True" in repr(conv) and "dense" not in repr(detecting)
    x = torch.randn(n, 16, dtype=torch.float64)
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(conv)(x, ei)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert "torch.ops.higher_order.cond" not in "".join(gm.code for gm in explanation.graphs)
    eager, _ = eager_and_compiled(detecting, x, ei)
    _, compiled = eager_and_compiled(conv, x, ei)
    for a, b in zip(compiled, eager):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("use_native", [True, False], ids=["native", "torch"])
@pytest.mark.parametrize("grad", [True, False], ids=["training", "inference"])
def test_compiled_dense_path_checks_the_layout_at_run_time(use_native, grad):
    """dense=True under compile: a graph with the same sizes but another layout (the edges
    shuffled; two edges swapped between rows, both ends kept) raises from inside the
    compiled graph instead of returning a wrong result; a graph whose edge count is no
    multiple of the nodes is refused while tracing.  With the native kernels the attention
    kernel checks the targets before its rows (no assertion pass in the graph),
    without them an assertion in the graph does."""
    if use_native and not _qsv_native.qsv_native_available():
        pytest.skip(f"native kernels: {_qsv_native.qsv_native_status()['reason']}")
    n = 12
    ei = knn_edges(n, 4)
    shuffled = ei[:, torch.randperm(ei.size(1), generator=torch.Generator().manual_seed(1))]
    perm = torch.arange(ei.size(1))
    perm[[5, 9]] = perm[[9, 5]]
    swapped = ei[:, perm]
    conv = make_qsv_conv(channels=16, heads=2, dense=True)
    x = torch.randn(n, 16, dtype=torch.float64)
    previous = _qsv_native.set_qsv_native_enabled(use_native)
    try:
        with torch.set_grad_enabled(grad):
            code = _traced_code(conv, x, ei)
            assert ("_assert_async" in code) == (not use_native)
            torch._dynamo.reset()
            compiled = torch.compile(conv, fullgraph=True)
            torch.testing.assert_close(compiled(x, ei), conv(x, ei), atol=1e-12, rtol=1e-12)
            for wrong in (shuffled, swapped):
                with pytest.raises(RuntimeError, match="'dense=True' needs every node"):
                    compiled(x, wrong)
            with pytest.raises(Exception, match="'dense=True' needs every node"):
                compiled(x, ei[:, :-1])
    finally:
        _qsv_native.set_qsv_native_enabled(previous)


def test_layer_default_dense_applies_eagerly_and_is_checked():
    n = 10
    ei = knn_edges(n, 3)
    shuffled = ei[:, torch.randperm(ei.size(1), generator=torch.Generator().manual_seed(1))]
    conv = make_qsv_conv(channels=8, heads=1, dense=True)
    x = torch.randn(n, 8, dtype=torch.float64)
    torch.testing.assert_close(conv(x, ei), conv(x, ei, dense=True))
    with pytest.raises(ValueError, match="'dense=True' needs every node"):
        conv(x, shuffled)  # the default is checked as forward's dense=True is
    conv.dense = None
    expected = conv(x, shuffled)
    conv.dense = True
    torch.testing.assert_close(conv(x, shuffled, dense=False), expected)  # a call overrides
    with pytest.raises(TypeError, match="QSVConv: 'dense' must be True, False or None"):
        make_qsv_conv(channels=8, heads=1, dense="yes")


@pytest.mark.slow
@pytest.mark.parametrize("use_native", [True, False])
def test_compiled_graph_calls_the_custom_op(use_native):
    if use_native and not _qsv_native.qsv_native_available():
        pytest.skip(f"native kernels: {_qsv_native.qsv_native_status()['reason']}")
    n = 10
    ei = knn_edges(n, 3)
    conv = QSVConv(16, 16, heads=2)
    x = torch.randn(n, 16)
    previous = _qsv_native.set_qsv_native_enabled(use_native)
    try:
        torch._dynamo.reset()
        explanation = torch._dynamo.explain(conv)(x, ei, dense=True)
        code = "".join(gm.code for gm in explanation.graphs)
        # the native kernel (logits, softmax and sum in one operator, rotations too), or the
        # sparse product with the rotations traced in their elementwise form (no batched
        # product of 3 x 3 matrices for the compiler to call out to)
        expected = ("quest_geometric.qsv_attend" if use_native
                    else "quest_geometric.neighbour_sum")
        other = ("quest_geometric.neighbour_sum" if use_native
                 else "quest_geometric.qsv_attend")
        assert expected in code and other not in code
        assert "matmul" not in code and "bmm" not in code
        assert ("quest_geometric.qsv_rotate" in code) == use_native
        conv.fused = False
        torch._dynamo.reset()
        explanation = torch._dynamo.explain(conv)(x, ei, dense=True)
        code = "".join(gm.code for gm in explanation.graphs)
        assert "quest_geometric.neighbour_sum" not in code
        assert "quest_geometric.qsv_attend" not in code
    finally:
        _qsv_native.set_qsv_native_enabled(previous)


def _traced_code(conv, x, ei) -> str:
    """The code of the graphs Dynamo traces for ``conv(x, ei, dense=True)`` (fresh caches),
    checking that there is no graph break."""
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(conv)(x, ei, dense=True)
    assert explanation.graph_break_count == 0
    return "".join(gm.code for gm in explanation.graphs)


@pytest.mark.slow
def test_compiled_fused_path_without_grad_matches_eager():
    n = 10
    ei = knn_edges(n, 3)
    conv = make_qsv_conv(channels=8, heads=1, quaternion="both", num_nodes=n)
    x = torch.randn(n, 8, dtype=torch.float64)
    torch._dynamo.reset()
    compiled = torch.compile(conv, fullgraph=True, backend=BACKEND)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, ei, dense=True), conv(x, ei, dense=True))
    if _qsv_native.qsv_native_available():
        # without gradients the output rotation runs in the attention kernel's epilogue
        with torch.no_grad():
            code = _traced_code(conv, x, ei)
        assert "quest_geometric.qsv_attend_rotate" in code
        assert code.count("quest_geometric.qsv_rotate") == 1  # the sources' rotation only


@pytest.mark.slow
def test_compiled_inference_runs_the_two_fused_passes():
    """Without gradients the default layer (quaternions from the features) compiles to the
    fused prologue and the attention kernel with its epilogue, no other QSV kernel, and gives
    the eager layer's output."""
    if not _qsv_native.qsv_native_available():
        pytest.skip(f"native kernels: {_qsv_native.qsv_native_status()['reason']}")
    n = 10
    ei = knn_edges(n, 3)
    conv = make_qsv_conv(channels=8, heads=2)
    x = torch.randn(n, 8, dtype=torch.float64)
    with torch.no_grad():
        code = _traced_code(conv, x, ei)
        assert "quest_geometric.qsv_prepare" in code
        assert "quest_geometric.qsv_attend_rotate" in code
        assert "quest_geometric.qsv_rotate" not in code
        assert "quest_geometric.qsv_rotation_matrix" not in code
        torch._dynamo.reset()
        compiled = torch.compile(conv, fullgraph=True, backend=BACKEND)
        torch.testing.assert_close(compiled(x, ei, dense=True), conv(x, ei, dense=True))
    # with gradients the same compiled layer takes the separate kernels again
    code = _traced_code(conv, x, ei)
    assert "quest_geometric.qsv_prepare" not in code and "quest_geometric.qsv_rotate" in code


@pytest.mark.slow
@pytest.mark.parametrize("dense", [None, True, False])
def test_layer_has_no_graph_breaks(dense):
    n = 12
    ei = knn_edges(n, 4)
    conv = QSVConv(16, 16, heads=2)
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(conv)(torch.randn(n, 16), ei, dense=dense)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1


@pytest.mark.slow
def test_qsvnet_forward_has_no_graph_breaks_and_compiles():
    n = 12
    ei = knn_edges(n, 4)
    torch.manual_seed(0)
    net = QSVNet(3, 5, channels=16, heads=2, num_layers=2)
    data = Batch.from_data_list([Data(x=torch.randn(n, 3), edge_index=ei) for _ in range(2)])
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(net)(data)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1
    torch._dynamo.reset()
    compiled = torch.compile(net, fullgraph=True, backend=BACKEND)
    cache = _qsv_csr.TRANSPOSES
    cache.clear()
    hits, misses = cache.hits, cache.misses
    out = compiled(data)
    out.sum().backward()
    grads = [p.grad.clone() for p in net.parameters()]
    # the two layers share the batch's graph: its transpose is built once, then found again
    assert (cache.misses - misses, cache.hits - hits) == (1, 1)
    net.zero_grad()
    expected = net(data)
    expected.sum().backward()
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    for a, p in zip(grads, net.parameters()):
        torch.testing.assert_close(a, p.grad, atol=1e-5, rtol=1e-5)
