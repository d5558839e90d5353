"""Tests for QSVConv, each against an independent reference from the formulas
(:mod:`quest_geometric.testing.qsv`)."""
from __future__ import annotations

import math

import pytest
import torch
from torch_geometric.testing import assert_module
from torch_geometric.utils import to_edge_index

from quest_geometric.nn.qsv_conv import QSVConv
from quest_geometric.testing.compile import assert_torch_compile
from quest_geometric.testing.qsv import (
    conjugate,
    hamilton,
    knn_edges,
    make_qsv_conv,
    qsv_conv_reference,
    qsv_quaternions,
)

DT = torch.float64


# ----------------------------------------------------------------------------- helpers
def irregular_edges(n: int, isolated: tuple[int, ...] = ()) -> torch.Tensor:
    """Random in-degrees 1..4, unsorted, with duplicates allowed; `isolated` get none."""
    g = torch.Generator().manual_seed(1)
    src, dst = [], []
    for i in range(n):
        if i in isolated:
            continue
        deg = int(torch.randint(1, 5, (1,), generator=g))
        src.append(torch.randint(0, n, (deg,), generator=g))
        dst.append(torch.full((deg,), i))
    ei = torch.stack([torch.cat(src), torch.cat(dst)])
    return ei[:, torch.randperm(ei.size(1), generator=g)]


MODES = [
    dict(quaternion="feature"),
    dict(quaternion="node"),
    dict(quaternion="both", temperature="learned"),
    dict(quaternion="feature", temperature=3.0),
    dict(quaternion="feature", transport=False),
    dict(quaternion="node", attention="uniform"),
]


def _kw(mode: dict, n: int) -> dict:
    kw = dict(mode)
    if kw["quaternion"] != "feature":
        kw["num_nodes"] = n
    return kw


# ----------------------------------------------------------------------------- reference
@pytest.mark.parametrize("mode", MODES, ids=lambda m: "-".join(map(str, m.values())))
@pytest.mark.parametrize("dense", [True, False, None])
def test_equals_per_node_reference_knn(mode, dense):
    n = 12
    ei = knn_edges(n, 4)
    conv = make_qsv_conv(**_kw(mode, n))
    x = torch.randn(n, 16, dtype=DT)
    torch.testing.assert_close(conv(x, ei, dense=dense), qsv_conv_reference(conv, x, ei))


@pytest.mark.parametrize("mode", MODES, ids=lambda m: "-".join(map(str, m.values())))
def test_equals_per_node_reference_irregular(mode):
    n = 10
    ei = irregular_edges(n, isolated=(3,))
    conv = make_qsv_conv(**_kw(mode, n))
    x = torch.randn(n, 16, dtype=DT)
    torch.testing.assert_close(conv(x, ei), qsv_conv_reference(conv, x, ei))


@pytest.mark.slow
def test_complete_graph_equals_dense_global_attention():
    n, h, m = 9, 2, 2
    ei = knn_edges(n, n)  # every node sees every node, self loop included
    conv = make_qsv_conv(channels=4 * h * m, heads=h, temperature="learned", bias=False)
    x = torch.randn(n, 4 * h * m, dtype=DT)
    q = qsv_quaternions(conv, x)  # [N, H, 4]
    scores = torch.einsum("ihd,jhd->hij", q, q) * conv.scale[:, None, None]
    att = torch.softmax(scores, dim=-1)  # [H, N, N] dense softmax matrix
    # per-pair rotation of the relative quaternion, no factorisation
    r = hamilton(conjugate(q)[:, None], q[None, :])  # [N, N, H, 4] r_ij
    w, a, b, c = r.unbind(-1)
    rot = torch.stack([
        w * w + a * a - b * b - c * c, 2 * (a * b - w * c), 2 * (a * c + w * b),
        2 * (a * b + w * c), w * w - a * a + b * b - c * c, 2 * (b * c - w * a),
        2 * (a * c - w * b), 2 * (b * c + w * a), w * w - a * a - b * b + c * c,
    ], -1).view(n, n, h, 3, 3)
    xv = x.view(n, h, m, 4)
    moved_v = torch.einsum("ijhab,jhgb->ijhga", rot, xv[..., 1:])
    moved = torch.cat((xv[None, :, :, :, :1].expand(n, n, h, m, 1), moved_v), -1)
    expected = torch.einsum("hij,ijhgc->ihgc", att, moved).reshape(n, -1)
    out, (ei_out, alpha) = conv(x, ei, return_attention_weights=True)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(alpha, att.permute(1, 2, 0)[ei[1], ei[0]])


# ------------------------------------------------- PyG signature: input projections (issue 30)
def test_equal_widths_add_no_projection_and_keep_the_state_dict():
    conv = make_qsv_conv(channels=16, heads=2, temperature="learned")
    assert conv.lin is None and conv.lin_src is None and conv.lin_dst is None
    assert sorted(conv.state_dict()) == ["bias", "lin_q.bias", "lin_q.weight", "scale"]
    n = 10
    ei = irregular_edges(n)
    x = torch.randn(n, 16, dtype=DT)
    # The reference applies no projection to a layer without one: the operator itself.
    torch.testing.assert_close(conv(x, ei), qsv_conv_reference(conv, x, ei))


@pytest.mark.parametrize("mode", MODES, ids=lambda m: "-".join(map(str, m.values())))
@pytest.mark.parametrize("dense", [True, False])
def test_projection_equals_projection_then_layer_by_hand(mode, dense):
    n = 12
    ei = knn_edges(n, 4)
    conv = make_qsv_conv(in_channels=5, **_kw(mode, n))
    assert conv.lin is not None and conv.lin.weight.shape == (16, 5) and conv.lin.bias is None
    core = make_qsv_conv(**_kw(mode, n))  # the same operator without a projection
    core.load_state_dict({k: v for k, v in conv.state_dict().items() if k != "lin.weight"})
    x = torch.randn(n, 5, dtype=DT)
    projected = x @ conv.lin.weight.detach().T
    out = conv(x, ei, dense=dense)
    assert out.shape == (n, 16)
    torch.testing.assert_close(out, core(projected, ei, dense=dense))
    torch.testing.assert_close(out, qsv_conv_reference(conv, x, ei))


def test_bipartite_projections_per_side():
    conv = make_qsv_conv(in_channels=(6, 10), channels=16, heads=2)
    assert conv.lin is None and conv.lin_src.weight.shape == (16, 6)
    assert conv.lin_dst.weight.shape == (16, 10)
    x_src, x_dst = torch.randn(9, 6, dtype=DT), torch.randn(4, 10, dtype=DT)
    ei = torch.stack([torch.tensor([0, 3, 8, 1, 2, 5, 7]), torch.tensor([0, 0, 1, 2, 2, 3, 3])])
    core = make_qsv_conv(channels=16, heads=2)
    core.load_state_dict({k: v for k, v in conv.state_dict().items() if "lin_s" not in k
                          and "lin_d" not in k})
    by_hand = core((x_src @ conv.lin_src.weight.detach().T,
                    x_dst @ conv.lin_dst.weight.detach().T), ei)
    torch.testing.assert_close(conv((x_src, x_dst), ei), by_hand)
    torch.testing.assert_close(by_hand, qsv_conv_reference(conv, (x_src, x_dst), ei))
    # One side at the operator's width needs no projection on that side.
    half = QSVConv((6, 16), 16, heads=2)
    assert half.lin_src is not None and half.lin_dst is None


def test_lazy_in_channels():
    torch.manual_seed(0)
    conv = QSVConv(-1, 16, heads=2).double()
    conv.reset_parameters()  # allowed before the width is known
    n = 10
    ei = irregular_edges(n)
    x = torch.randn(n, 7, dtype=DT)
    out = conv(x, ei)
    assert conv.lin.weight.shape == (16, 7) and out.shape == (n, 16)
    torch.testing.assert_close(out, qsv_conv_reference(conv, x, ei))
    before = conv.lin.weight.detach().clone()
    conv.reset_parameters()
    assert not torch.equal(before, conv.lin.weight)
    with pytest.raises(ValueError, match="^QSVConv: 'x' must be of 7 channels"):
        conv(torch.randn(n, 8, dtype=DT), ei)


def test_width_errors_say_how_to_change_the_width():
    # The old QSVConv(channels, heads) reading of QSVConv(16, 2): 2 is now out_channels.
    with pytest.raises(ValueError, match=r"'out_channels' must be a positive multiple of "
                                         r"4 \* heads = 4.*pass heads by keyword.*projected"):
        QSVConv(16, 2)
    with pytest.raises(TypeError):
        QSVConv(16, heads=2)  # out_channels is required, as in PyG
    conv = QSVConv(8, 16, heads=2)
    with pytest.raises(ValueError, match="^QSVConv: 'x' must be of 8 channels"):
        conv(torch.randn(5, 16), knn_edges(5, 2))


# ----------------------------------------------------------------------------- properties
@pytest.mark.parametrize("quaternion", ["feature", "node", "both"])
def test_global_left_multiplication_invariance(quaternion):
    n = 10
    ei = knn_edges(n, 3)
    conv = make_qsv_conv(num_nodes=None if quaternion == "feature" else n, quaternion=quaternion)
    x = torch.randn(n, 16, dtype=DT)
    out, (_, alpha) = conv(x, ei, return_attention_weights=True)
    g = torch.tensor([0.3, -0.5, 0.7, 0.4], dtype=DT)
    g = g / g.norm()
    with torch.no_grad():
        if quaternion == "feature":
            # left multiplication by g is linear: apply it to lin_q's weight rows and bias
            w = conv.lin_q.weight.view(conv.heads, 4, -1).permute(0, 2, 1)  # [H, in, 4]
            conv.lin_q.weight.copy_(hamilton(g, w).permute(0, 2, 1).reshape(-1, 16))
            conv.lin_q.bias.copy_(hamilton(g, conv.lin_q.bias.view(-1, 4)).reshape(-1))
        else:
            conv.node_q.copy_(hamilton(g, conv.node_q))
    out2, (_, alpha2) = conv(x, ei, return_attention_weights=True)
    torch.testing.assert_close(out2, out)
    torch.testing.assert_close(alpha2, alpha)


def test_sign_flip_keeps_transport_changes_logits():
    n = 8
    ei = knn_edges(n, 3)
    conv = make_qsv_conv(quaternion="node", num_nodes=n, attention="uniform", bias=False)
    x = torch.randn(n, 16, dtype=DT)
    out = conv(x, ei)
    with torch.no_grad():
        conv.node_q[::2].neg_()
    torch.testing.assert_close(conv(x, ei), out)  # uniform weights: only transport matters
    conv.attention = "learned"
    _, (_, a1) = conv(x, ei, return_attention_weights=True)
    with torch.no_grad():
        conv.node_q[::2].neg_()
    _, (_, a2) = conv(x, ei, return_attention_weights=True)
    assert not torch.allclose(a1, a2)


@pytest.mark.parametrize("dense", [True, False])
def test_uniform_no_transport_is_mean_aggregation(dense):
    n = 12
    ei = knn_edges(n, 5)
    conv = make_qsv_conv(attention="uniform", transport=False, bias=False)
    x = torch.randn(n, 16, dtype=DT)
    adj = torch.zeros(n, n, dtype=DT)
    adj.index_put_((ei[1], ei[0]), torch.ones(ei.size(1), dtype=DT), accumulate=True)
    expected = (adj / adj.sum(1, keepdim=True)) @ x
    torch.testing.assert_close(conv(x, ei, dense=dense), expected)


def test_no_transport_is_attention_weighted_average():
    n = 10
    ei = irregular_edges(n)
    conv = make_qsv_conv(transport=False, bias=False)
    x = torch.randn(n, 16, dtype=DT)
    out, (_, alpha) = conv(x, ei, return_attention_weights=True)
    q = qsv_quaternions(conv, x)
    logits = (q[ei[1]] * q[ei[0]]).sum(-1)  # [E, H]
    expected_alpha = torch.zeros_like(logits)
    for i in range(n):
        mask = ei[1] == i
        expected_alpha[mask] = torch.softmax(logits[mask], dim=0)
    torch.testing.assert_close(alpha, expected_alpha)
    h = x.view(n, 2, 8)
    expected = torch.zeros_like(h).index_add_(0, ei[1], expected_alpha[..., None] * h[ei[0]])
    torch.testing.assert_close(out, expected.view(n, 16))


def test_attention_shapes_and_normalisation():
    n = 11
    ei = irregular_edges(n, isolated=(0, 5))
    conv = QSVConv(16, 16, heads=4)
    out, (ei_out, alpha) = conv(torch.randn(n, 16), ei, return_attention_weights=True)
    assert out.shape == (n, 16)
    assert torch.equal(ei_out, ei)
    assert alpha.shape == (ei.size(1), 4)
    assert (alpha >= 0).all() and (alpha <= 1).all()
    sums = torch.zeros(n, 4).index_add_(0, ei[1], alpha)
    has_in = torch.zeros(n, dtype=torch.bool)
    has_in[ei[1]] = True
    torch.testing.assert_close(sums[has_in], torch.ones(int(has_in.sum()), 4))
    assert (sums[~has_in] == 0).all()


@pytest.mark.parametrize("dense", [False, None])
def test_isolated_nodes_give_zeros_not_nan(dense):
    n = 6
    ei = torch.tensor([[1, 2, 2], [0, 0, 1]])  # nodes 2..5 have no in-edges
    conv = QSVConv(8, 8, heads=1, bias=False)
    x = torch.randn(n, 8, requires_grad=True)
    out = conv(x, ei, dense=dense)
    assert torch.isfinite(out).all()
    assert (out[2:] == 0).all()
    out.sum().backward()
    assert torch.isfinite(x.grad).all()
    empty = conv(x, torch.empty(2, 0, dtype=torch.long))
    assert (empty == 0).all()


def test_node_quaternions_tile_over_batch():
    n = 7
    ei = knn_edges(n, 3)
    conv = make_qsv_conv(quaternion="node", num_nodes=n)
    x = torch.randn(3 * n, 16, dtype=DT)
    batch_ei = torch.cat([ei + b * n for b in range(3)], dim=1)
    out = conv(x, batch_ei)
    for b in range(3):
        torch.testing.assert_close(out[b * n:(b + 1) * n], conv(x[b * n:(b + 1) * n], ei))


# ----------------------------------------------------------------------------- paths
@pytest.mark.parametrize("mode", MODES, ids=lambda m: "-".join(map(str, m.values())))
def test_dense_path_equals_scatter_path_values_and_grads(mode):
    n = 14
    ei = knn_edges(n, 5, loop=False)
    conv = make_qsv_conv(**_kw(mode, n))
    x = torch.randn(n, 16, dtype=DT)
    results = []
    for dense in (True, False):
        conv.zero_grad()
        xx = x.clone().requires_grad_()
        out, (_, alpha) = conv(xx, ei, dense=dense, return_attention_weights=True)
        (out * torch.linspace(-1, 1, out.numel(), dtype=DT).view_as(out)).sum().backward()
        grads = {k: p.grad.clone() for k, p in conv.named_parameters() if p.grad is not None}
        results.append((out, alpha, xx.grad, grads))
    (o1, a1, g1, p1), (o2, a2, g2, p2) = results
    torch.testing.assert_close(o1, o2)
    torch.testing.assert_close(a1, a2)
    torch.testing.assert_close(g1, g2)
    assert p1.keys() == p2.keys() and len(p1) > 0
    for k in p1:
        torch.testing.assert_close(p1[k], p2[k])


def test_auto_detects_dense_layout():
    ei = knn_edges(10, 3)
    assert QSVConv.is_dense_layout(ei, 10)
    assert not QSVConv.is_dense_layout(ei[:, torch.randperm(30)], 10)
    assert not QSVConv.is_dense_layout(ei[:, :-1], 10)
    assert not QSVConv.is_dense_layout(torch.empty(2, 0, dtype=torch.long), 10)


def test_sparse_layouts_and_edge_permutation():
    n = 12
    ei = knn_edges(n, 4, loop=False)
    conv = QSVConv(16, 16, heads=2)
    x = torch.randn(n, 16)
    # PyG's own check: edge permutation (scatter path) and CSC / COO adj_t (dense path)
    assert_module(conv, x, ei, expected_size=(n, 16),
                  test_sparse_layouts=[torch.sparse_csc, torch.sparse_coo], atol=1e-6)
    adj_t = torch.sparse_coo_tensor(ei.flip(0), torch.ones(ei.size(1)), (n, n)).coalesce()
    out, (adj_alpha, alpha) = conv(x, adj_t, return_attention_weights=True)
    out_ref, (_, alpha_ref) = conv(x, ei, return_attention_weights=True)
    torch.testing.assert_close(out, out_ref)
    # a sparse input returns the weights in its own sparse layout (PyG's GATConv convention)
    assert adj_alpha.layout == torch.sparse_coo and adj_alpha.shape == (n, n, 2)
    ei_t, values = to_edge_index(adj_alpha)
    torch.testing.assert_close(values, alpha)
    ei_out = ei_t.flip(0)
    # same edges, same weights (compare as sets keyed by edge)
    key = lambda e: e[0] * n + e[1]  # noqa: E731
    order, order_ref = key(ei_out).argsort(), key(ei).argsort()
    torch.testing.assert_close(alpha[order], alpha_ref[order_ref])


@pytest.mark.slow
def test_compile_zero_graph_breaks_dense_path():
    n = 16
    ei = knn_edges(n, 4)
    conv = QSVConv(16, 16, heads=2, temperature="learned")
    x = torch.randn(n, 16)
    assert_torch_compile(conv, x, ei, dense=True, atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_scatter_path_traces_without_graph_breaks():
    n = 10
    ei = irregular_edges(n)
    conv = QSVConv(16, 16, heads=2, quaternion="node", num_nodes=n)
    explanation = torch._dynamo.explain(conv)(torch.randn(n, 16), ei, dense=False)
    assert explanation.graph_break_count == 0, explanation.break_reasons


@pytest.mark.slow
def test_gradcheck_float64():
    n = 5
    ei = knn_edges(n, 2)
    conv = make_qsv_conv(channels=8, heads=1, quaternion="both", num_nodes=n,
                     temperature="learned")
    x = torch.randn(n, 8, dtype=DT, requires_grad=True)
    for dense in (True, False):
        assert torch.autograd.gradcheck(lambda x: conv(x, ei, dense=dense), (x,))
    assert torch.autograd.gradcheck(
        lambda p: torch.func.functional_call(conv, {"node_q": p}, (x.detach(), ei)),
        (conv.node_q.detach().clone().requires_grad_(),))


def test_dropout_only_in_training():
    n = 12
    ei = knn_edges(n, 4)
    conv = QSVConv(16, 16, heads=2, dropout=0.5, bias=False)
    x = torch.randn(n, 16)
    conv.eval()
    torch.testing.assert_close(conv(x, ei), conv(x, ei))
    conv.train()
    torch.manual_seed(0)
    _, (_, alpha) = conv(x, ei, return_attention_weights=True)
    assert (alpha == 0).any()
    conv.dropout = 1.0
    assert (conv(x, ei) == 0).all()


# ----------------------------------------------------------------------------- misc
def test_repr():
    assert str(QSVConv(64, 64, heads=4)) == "QSVConv(64, 64, heads=4)"
    assert str(QSVConv(16, 16)) == "QSVConv(16, 16, heads=1)"
    assert str(QSVConv(-1, 32, heads=4)) == "QSVConv(-1, 32, heads=4)"
    assert str(QSVConv((8, 12), 16, heads=2)) == "QSVConv((8, 12), 16, heads=2)"
    assert (str(QSVConv(16, 16, heads=2, quaternion="node", num_nodes=5, transport=False,
                        attention="uniform", temperature="learned"))
            == "QSVConv(16, 16, heads=2, quaternion='node', num_nodes=5, transport=False, "
               "attention='uniform', temperature='learned')")


def test_construction_reads_no_source_once_the_class_is_built(monkeypatch):
    """PyG builds QSVConv's ``propagate`` and ``edge_updater`` from the class's type comments
    once; a type name those built modules cannot resolve makes PyG retry, reading the class's
    source through :func:`inspect.getsource`, at every construction."""
    import inspect

    QSVConv(8, 8)  # the class built (its first construction may read the source)
    read, getsource = [], inspect.getsource
    # counted, not refused: PyG swallows an exception raised while it builds
    monkeypatch.setattr(inspect, "getsource", lambda obj: read.append(obj) or getsource(obj))
    QSVConv(16, 16, heads=2)
    assert read == []


def test_reset_parameters():
    conv = QSVConv(16, 16, heads=2, quaternion="both", num_nodes=6, temperature="learned")
    with torch.no_grad():
        conv.bias.fill_(3.0)
        conv.scale.fill_(7.0)
        conv.node_q.fill_(5.0)
    conv.reset_parameters()
    assert (conv.bias == 0).all()
    assert (conv.scale == 1).all()
    torch.testing.assert_close(conv.node_q.norm(dim=-1), torch.ones(6, 2))
    assert conv.lin_q.weight.shape == (8, 16)
    plain = QSVConv(16, 16, heads=2, quaternion="node", num_nodes=6, bias=False)
    assert plain.lin_q is None and plain.scale is None and plain.bias is None


# ----------------------------------------------------------------------------- errors
@pytest.mark.parametrize("kwargs, err, match", [
    (dict(channels=12, heads=2), ValueError, "'out_channels' must be a positive multiple of 4"),
    (dict(channels=16.0), TypeError, "'out_channels' must be an int >= 1"),
    (dict(channels=16, in_channels=0), ValueError, "'in_channels' must be a positive int"),
    (dict(channels=16, in_channels=(8, -2)), ValueError, "'in_channels' must be a positive int"),
    (dict(channels=16, in_channels=16.0), TypeError, "'in_channels' must be a positive int"),
    (dict(channels=16, in_channels=(8, 16), quaternion="node", num_nodes=4), ValueError,
     "'in_channels' must be one width"),
    (dict(channels=16, heads=0), ValueError, "'heads' must be an int >= 1"),
    (dict(channels=16, heads=True), TypeError, "'heads' must be an int >= 1"),
    (dict(channels=16, quaternion="edge"), ValueError, "'quaternion' must be one of"),
    (dict(channels=16, quaternion="node"), TypeError, "'num_nodes' .* must be an int >= 1"),
    (dict(channels=16, quaternion="both", num_nodes=0), ValueError,
     "'num_nodes' .* must be an int >= 1"),
    (dict(channels=16, num_nodes=4), ValueError, "'num_nodes' must be None unless"),
    (dict(channels=16, attention="softmax"), ValueError, "'attention' must be one of"),
    (dict(channels=16, temperature="hot"), TypeError, "'temperature' .* must be a real number"),
    (dict(channels=16, temperature=-1.0), ValueError,
     "'temperature' .* must be a finite number > 0"),
    (dict(channels=16, temperature=math.inf), ValueError,
     "'temperature' .* must be a finite number > 0"),
    (dict(channels=16, dropout=1.5), ValueError, r"'dropout' must be a float in \[0, 1\]"),
    (dict(channels=16, dropout="0.1"), TypeError, "'dropout' must be a real number"),
    (dict(channels=16, transport="yes"), TypeError, "'transport' must be a bool, got 'yes'"),
    (dict(channels=16, fused=1), TypeError, "'fused' must be a bool, got 1"),
])
def test_constructor_errors(kwargs, err, match):
    channels = kwargs.pop("channels")
    in_channels = kwargs.pop("in_channels", channels)
    with pytest.raises(err, match="^QSVConv: " + match):
        QSVConv(in_channels, channels, **kwargs)


def test_forward_errors():
    conv = QSVConv(16, 16, heads=2)
    x = torch.randn(5, 16)
    ei = torch.tensor([[0, 1], [1, 2]])
    with pytest.raises(ValueError, match=r"^QSVConv: 'x' must be a 2-D tensor"):
        conv(x[None], ei)
    with pytest.raises(ValueError, match="^QSVConv: 'x' must be of 16 channels"):
        conv(torch.randn(5, 8), ei)
    with pytest.raises(TypeError, match="^QSVConv: 'x' must be a floating-point tensor"):
        conv(x.long(), ei)
    with pytest.raises(TypeError, match="^QSVConv: 'x' must be a floating-point tensor, got "
                       "ndarray"):
        conv(x.numpy(), ei)
    with pytest.raises(TypeError, match="^QSVConv: 'edge_index' must be of an integer dtype"):
        conv(x, ei.float())
    with pytest.raises(TypeError, match="^QSVConv: 'edge_index' must be a LongTensor"):
        conv(x, [[0, 1], [1, 2]])
    with pytest.raises(ValueError, match=r"^QSVConv: 'edge_index' must be of shape \[2, E\]"):
        conv(x, torch.tensor([[0, 1, 2]]))
    with pytest.raises(ValueError, match="^QSVConv: 'edge_index' must be entries in \\[0, 4\\]"):
        conv(x, torch.tensor([[0, 5], [1, 2]]))
    with pytest.raises(ValueError, match="^QSVConv: 'edge_index' must be entries in \\[0, 4\\]"):
        conv(x, torch.tensor([[0, -1], [1, 2]]))
    with pytest.raises(ValueError, match="^QSVConv: 'edge_index' must be as a sparse .*5 x 5"):
        conv(x, torch.sparse_coo_tensor(ei, torch.ones(2), (6, 6)))
    with pytest.raises(ValueError, match="^QSVConv: 'dense=True'"):
        conv(x, ei, dense=True)
    node = QSVConv(16, 16, heads=2, quaternion="node", num_nodes=4)
    with pytest.raises(ValueError, match="^QSVConv: 'x' must be of num_nodes=4"):
        node(x, ei)


# ---------------------------------------------------- non-finite and dtype errors (issue 28)
@pytest.mark.parametrize("quaternion", ["feature", "node"])
def test_non_finite_input_is_refused(quaternion):
    n = 6
    kw = dict(num_nodes=n) if quaternion == "node" else {}
    conv = QSVConv(8, 8, heads=1, quaternion=quaternion, **kw)
    ei = knn_edges(n, 2)
    x = torch.randn(n, 8)
    assert bool(torch.isfinite(conv(x, ei)).all())
    for bad in (float("nan"), float("inf"), -float("inf")):
        xb = x.clone()
        xb[2, 3] = bad
        for dense in (True, False, None):
            with pytest.raises(ValueError, match=r"QSVConv: 'x' must be finite, got .*1 of 48"):
                conv(xb, ei, dense=dense)
    if quaternion == "feature":  # bipartite: the argument is named
        with pytest.raises(ValueError, match=r"'x\[1\] \(x_dst\)' must be finite"):
            conv((x, xb), ei)


def test_input_checked_once_when_one_tensor_feeds_both_sides(monkeypatch):
    import quest_geometric.nn.qsv_conv as qsv_module

    seen = []
    real = qsv_module.all_finite
    monkeypatch.setattr(qsv_module, "all_finite", lambda t: seen.append(t) or real(t))
    conv = QSVConv(8, 8)
    x, ei = torch.randn(6, 8), knn_edges(6, 2)
    out = conv(x, ei)
    # the quaternions once (every feature enters them), then the output (for overflow)
    assert len(seen) == 2 and seen[0].shape == (6, conv.heads, 4)
    assert seen[1].shape == out.shape
    seen.clear()
    conv((x, x.clone()), ei)  # bipartite: both sides' quaternions are checked
    assert len(seen) == 3 and seen[0].shape == seen[1].shape == (6, conv.heads, 4)
    seen.clear()
    # node quaternions do not read the features: the input itself is checked
    QSVConv(8, 8, quaternion="node", num_nodes=6)(x, ei)
    assert len(seen) == 2 and seen[0] is x


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_feature_named_through_the_quaternion_check(bad):
    # the gradient path checks the quaternions, not the features; a non-finite feature in
    # one channel of one row still reaches them and is reported by the input's name
    conv = QSVConv(8, 8)
    ei = knn_edges(6, 2)
    for x, name in ((torch.randn(6, 8), "x"), ((torch.randn(6, 8), torch.randn(6, 8)),
                                                 r"x\[1\] \(x_dst\)")):
        target = x if isinstance(x, torch.Tensor) else x[1]
        target[3, 5] = bad
        with pytest.raises(ValueError, match=rf"QSVConv: '{name}' must be finite"):
            conv(x, ei)


def test_other_dtype_than_parameters_is_a_type_error():
    n = 6
    ei = knn_edges(n, 2)
    for kw in (dict(), dict(quaternion="node", num_nodes=n)):
        conv = QSVConv(8, 8, heads=1, **kw)
        x = torch.randn(n, 8, dtype=DT)
        with pytest.raises(TypeError, match=r"QSVConv: 'x' must be of the dtype of the layer's "
                                            r"parameters \(torch.float32\), got torch.float64"
                                            r".*layer.to\(torch.float64\)"):
            conv(x, ei)
        with pytest.raises(TypeError, match=r"'x\[0\] \(x_src\)'.*torch.float16"):
            conv((x.half(), x.float()), ei)
        # the fix the message names works, and gives the float32 result
        ref = conv(x.float(), ei)
        torch.testing.assert_close(conv.to(DT)(x, ei).float(), ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("native", [True, False])
def test_dense_path_under_bf16_autocast_follows_float32(native):
    """Under ``torch.autocast`` the features reaching the sparse products may be bfloat16
    beside float32 weights; the layer runs them in float32 (CUDA's sampled product refuses
    mixed dtypes in the backward; the CUDA test is in tests/test_cuda.py) and stays within
    bfloat16's rounding of the float32 layer, forward and backward."""
    from quest_geometric.nn import set_qsv_native_enabled
    from quest_geometric.testing.qsv import assert_bf16_autocast_follows_float32

    previous = set_qsv_native_enabled(native)
    try:
        assert_bf16_autocast_follows_float32(60, "cpu", dense=True)
    finally:
        set_qsv_native_enabled(previous)
