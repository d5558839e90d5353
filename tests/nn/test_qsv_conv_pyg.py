"""QSVConv as a PyG layer: the fused dense path against the gather reference and the scatter
path, explain masks and hooks, PyG's explainers on a sphere graph, bipartite input,
``to_hetero``, sparse-layout attention weights, dropout and the one meaning of
``return_attention_weights``.  References are independent, from the formulas
(:mod:`quest_geometric.testing.qsv`)."""
from __future__ import annotations

import typing

import pytest
import torch
from torch import nn
from torch_geometric.explain import Explainer
from torch_geometric.explain.algorithm import AttentionExplainer, GNNExplainer, PGExplainer
from torch_geometric.nn import global_mean_pool, to_hetero
from torch_geometric.utils import to_edge_index

from quest_geometric.geometry.graphs import sphere_graph
from quest_geometric.models.qsv_net import QSVBlock, QSVNet
from quest_geometric.nn.qsv_conv import QSVConv
from quest_geometric.testing.qsv import make_qsv_conv, qsv_conv_reference, random_dense_edges

DT = torch.float64


def run(conv, x, ei, **kw):
    """Output, alpha, input gradient and parameter gradients of a weighted sum of the output."""
    conv.zero_grad()
    xx = x.clone().requires_grad_()
    out, (_, alpha) = conv(xx, ei, return_attention_weights=True, **kw)
    (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)).sum().backward()
    grads = {k: p.grad.clone() for k, p in conv.named_parameters() if p.grad is not None}
    return out, alpha, xx.grad, grads


# ----------------------------------------------------------------------------- fused path
MODES = [
    dict(quaternion="feature", heads=1),
    dict(quaternion="feature", heads=2),
    dict(quaternion="feature", heads=4, channels=32, temperature="learned"),
    dict(quaternion="node", heads=2),
    dict(quaternion="both", heads=2, temperature=2.5),
    dict(quaternion="feature", heads=2, transport=False),
    dict(quaternion="feature", heads=2, attention="uniform"),
]


@pytest.mark.parametrize("mode", MODES, ids=lambda m: "-".join(map(str, m.values())))
def test_fused_equals_gather_reference_and_scatter_values_and_grads(mode):
    n, k = 15, 5
    kw = dict(mode)
    if kw["quaternion"] != "feature":
        kw["num_nodes"] = n
    conv = make_qsv_conv(**kw)
    ei = random_dense_edges(n, k)
    x = torch.randn(n, conv.out_channels, dtype=DT)
    conv.fused = True
    fused = run(conv, x, ei, dense=True)
    conv.fused = False
    gather = run(conv, x, ei, dense=True)
    scatter = run(conv, x, ei, dense=False)
    for other in (gather, scatter):
        for a, b in zip(fused[:3], other[:3]):
            torch.testing.assert_close(a, b)
        assert fused[3].keys() == other[3].keys() and fused[3]
        for name in fused[3]:
            torch.testing.assert_close(fused[3][name], other[3][name])


@pytest.mark.slow
def test_fused_path_float32_and_gradcheck_float64():
    n, k = 9, 3
    ei = random_dense_edges(n, k)
    conv32 = QSVConv(16, 16, heads=2)
    x = torch.randn(n, 16)
    conv32.fused = False
    ref = conv32(x, ei, dense=True)
    conv32.fused = True
    torch.testing.assert_close(conv32(x, ei, dense=True), ref, atol=1e-5, rtol=1e-5)
    conv = make_qsv_conv(channels=8, heads=2, temperature="learned")
    xx = torch.randn(n, 8, dtype=DT, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: conv(t, ei, dense=True), (xx,))


def test_checks_are_cached_per_tensor_and_redone_after_in_place_change():
    n, k = 10, 3
    ei = random_dense_edges(n, k)
    conv = make_qsv_conv()
    x = torch.randn(n, 16, dtype=DT)
    out = conv(x, ei)
    torch.testing.assert_close(out, conv(x, ei.clone(), dense=False))
    # break the dense layout in place: the cached answer must not be reused
    ei[1, 0], ei[1, k] = ei[1, k].clone(), ei[1, 0].clone()
    assert not QSVConv.is_dense_layout(ei, n)
    torch.testing.assert_close(conv(x, ei), qsv_conv_reference(conv, (x, x), ei))
    with pytest.raises(ValueError, match="dense=True"):
        conv(x, ei, dense=True)
    ei[0, 0] = n  # out of range, in place
    with pytest.raises(ValueError, match="'edge_index'"):
        conv(x, ei)


# ----------------------------------------------------------------------------- explain masks
@pytest.mark.parametrize("apply_sigmoid", [False, True])
def test_explain_mask_applied_identically_on_every_path(apply_sigmoid):
    n, k = 12, 4
    ei = random_dense_edges(n, k)
    conv = make_qsv_conv()
    x = torch.randn(n, 16, dtype=DT)
    g = torch.Generator().manual_seed(3)
    if apply_sigmoid:
        raw = torch.randn(ei.size(1), generator=g, dtype=DT)
        raw[::3] = -torch.inf  # sigmoid -> exactly 0: these messages are removed
        weight = raw.sigmoid()
    else:
        raw = (torch.rand(ei.size(1), generator=g) > 0.4).to(DT)  # zero mask entries
        weight = raw
    expected = qsv_conv_reference(conv, (x, x), ei, edge_weight=weight)
    conv.explain = True
    conv._edge_mask = raw
    conv._apply_sigmoid = apply_sigmoid
    try:
        outs = {}
        for dense, fused in ((None, True), (False, True), (True, True), (True, False)):
            conv.fused = fused
            outs[dense, fused] = conv(x, ei, dense=dense)
    finally:
        conv.explain = False
        conv._edge_mask = None
    for out in outs.values():
        torch.testing.assert_close(out, expected)
    # an all-zero mask removes every message: only the bias is left
    conv.explain, conv._edge_mask, conv._apply_sigmoid = True, torch.zeros(ei.size(1)), False
    try:
        for dense in (True, False):
            torch.testing.assert_close(conv(x, ei, dense=dense), conv.bias.expand(n, -1))
    finally:
        conv.explain = False
        conv._edge_mask = None


def test_dense_path_steps_aside_for_hooks_and_refuses_them_when_forced():
    n, k = 10, 3
    ei = random_dense_edges(n, k)
    conv = make_qsv_conv()
    x = torch.randn(n, 16, dtype=DT)
    seen = []
    handle = conv.register_message_forward_hook(lambda mod, inp, out: seen.append(inp[0]["alpha"]))
    try:
        out, (_, alpha) = conv(x, ei, return_attention_weights=True)  # auto: scatter path
        assert len(seen) == 1
        torch.testing.assert_close(seen[0], alpha)
        torch.testing.assert_close(out, qsv_conv_reference(conv, (x, x), ei))
        with pytest.raises(ValueError, match="hooks"):
            conv(x, ei, dense=True)
    finally:
        handle.remove()
    conv(x, ei)
    assert len(seen) == 1  # hook removed: the dense path again, no messages


# ----------------------------------------------------------------------------- explainers
class SphereNet(nn.Module):
    """Two QSVConv layers, a mean readout and a linear classifier (graph level)."""

    def __init__(self, dense, dtype=DT):
        super().__init__()
        torch.manual_seed(0)
        self.lin_in = nn.Linear(3, 16)
        self.conv1 = QSVConv(16, 16, heads=2)
        self.conv2 = QSVConv(16, 16, heads=2)
        self.out = nn.Linear(16, 4)
        self.dense = dense
        self.to(dtype)

    def forward(self, x, edge_index):
        h = self.lin_in(x)
        h = h + self.conv1(h, edge_index, dense=self.dense).tanh()
        h = h + self.conv2(h, edge_index, dense=self.dense).tanh()
        batch = torch.zeros(h.size(0), dtype=torch.long)
        return self.out(global_mean_pool(h, batch))


@pytest.fixture(scope="module")
def sphere():
    g = sphere_graph((12, 24), k=4, k_cross=2)
    assert QSVConv.is_dense_layout(g.edge_index, g.num_nodes)
    x = torch.randn(g.num_nodes, 3, generator=torch.Generator().manual_seed(0), dtype=DT)
    return x, g.edge_index


MODEL_CONFIG = dict(mode="multiclass_classification", task_level="graph", return_type="raw")


def _gnn_explanation(model, x, ei):
    torch.manual_seed(0)
    explainer = Explainer(model, algorithm=GNNExplainer(epochs=20), explanation_type="model",
                          node_mask_type="attributes", edge_mask_type="object",
                          model_config=MODEL_CONFIG)
    return explainer(x, ei)


@pytest.mark.parametrize("dense", [None, True])
@pytest.mark.slow
def test_gnn_explainer_same_on_sphere_graph_as_scatter_path(sphere, dense):
    x, ei = sphere
    ref = _gnn_explanation(SphereNet(dense=False), x, ei)
    exp = _gnn_explanation(SphereNet(dense=dense), x, ei)
    torch.testing.assert_close(exp.edge_mask, ref.edge_mask, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(exp.node_mask, ref.node_mask, atol=1e-6, rtol=1e-5)
    assert ref.edge_mask.std() > 0  # the mask did something


def _pg_explanation(model, x, ei):
    torch.manual_seed(0)
    explainer = Explainer(model, algorithm=PGExplainer(epochs=5, lr=0.01),
                          explanation_type="phenomenon", edge_mask_type="object",
                          model_config=MODEL_CONFIG)
    target = model(x, ei).argmax(-1)
    losses = [explainer.algorithm.train(e, model, x, ei, target=target) for e in range(5)]
    return explainer(x, ei, target=target), losses


@pytest.mark.parametrize("dense", [None, True])
def test_pg_explainer_same_on_sphere_graph_as_scatter_path(sphere, dense):
    x, ei = sphere
    x = x.float()  # PGExplainer's own MLP is float32
    ref, ref_losses = _pg_explanation(SphereNet(dense=False, dtype=torch.float32), x, ei)
    exp, losses = _pg_explanation(SphereNet(dense=dense, dtype=torch.float32), x, ei)
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_losses),
                               atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(exp.edge_mask, ref.edge_mask, atol=1e-4, rtol=1e-4)
    assert ref.edge_mask.std() > 0


@pytest.mark.slow
def test_attention_explainer_same_on_sphere_graph_as_scatter_path(sphere):
    x, ei = sphere

    def explain(model):
        explainer = Explainer(model, algorithm=AttentionExplainer(), explanation_type="model",
                              edge_mask_type="object", model_config=MODEL_CONFIG)
        return explainer(x, ei)

    ref = explain(SphereNet(dense=False))
    exp = explain(SphereNet(dense=None))
    torch.testing.assert_close(exp.edge_mask, ref.edge_mask)
    # the mask is the max over layers and heads of the attention weights
    model = SphereNet(dense=False)
    h = model.lin_in(x)
    _, (_, a1) = model.conv1(h, ei, return_attention_weights=True)
    h = h + model.conv1(h, ei).tanh()
    _, (_, a2) = model.conv2(h, ei, return_attention_weights=True)
    expected = torch.cat([a1, a2], dim=1).max(dim=1).values
    torch.testing.assert_close(ref.edge_mask, expected.detach())
    with pytest.raises(ValueError, match="hooks"):
        explain(SphereNet(dense=True))


# ----------------------------------------------------------------------------- bipartite
@pytest.mark.parametrize("dense", [None, False, True])
def test_bipartite_equals_per_target_reference(dense):
    n_src, n_dst, k = 11, 7, 3
    ei = random_dense_edges(n_dst, k, n_src=n_src)
    conv = make_qsv_conv()
    xs, xd = torch.randn(n_src, 16, dtype=DT), torch.randn(n_dst, 16, dtype=DT)
    out = conv((xs, xd), ei, dense=dense)
    assert out.shape == (n_dst, 16)
    torch.testing.assert_close(out, qsv_conv_reference(conv, (xs, xd), ei))


def test_bipartite_paths_agree_in_gradients_and_same_tensor_is_plain_call():
    n_src, n_dst, k = 9, 6, 4
    ei = random_dense_edges(n_dst, k, n_src=n_src)
    conv = make_qsv_conv(heads=4, channels=32)
    xs, xd = torch.randn(n_src, 32, dtype=DT), torch.randn(n_dst, 32, dtype=DT)
    results = []
    for dense, fused in ((True, True), (True, False), (False, True)):
        conv.fused = fused
        a, b = xs.clone().requires_grad_(), xd.clone().requires_grad_()
        out = conv((a, b), ei, dense=dense)
        out.square().sum().backward()
        results.append((out, a.grad, b.grad))
    for other in results[1:]:
        for u, v in zip(results[0], other):
            torch.testing.assert_close(u, v)
    ei_sq = random_dense_edges(n_src, k, seed=2)
    torch.testing.assert_close(conv((xs, xs), ei_sq), conv(xs, ei_sq))


def test_bipartite_errors():
    conv = QSVConv(16, 16, heads=2)
    ei = torch.tensor([[0, 4], [0, 1]])
    with pytest.raises(TypeError, match=r"^QSVConv: 'x\[1\] \(x_dst\)' must be a tensor .*got "
                       "None$"):
        conv((torch.randn(5, 16), None), ei)
    with pytest.raises(ValueError, match=r"^QSVConv: 'x\[1\] \(x_dst\)' must be of 16 channels"):
        conv((torch.randn(5, 16), torch.randn(2, 8)), ei)
    with pytest.raises(ValueError, match="^QSVConv: 'edge_index' must be sources in"):
        conv((torch.randn(4, 16), torch.randn(2, 16)), ei)
    node = QSVConv(16, 16, heads=2, quaternion="node", num_nodes=5)
    with pytest.raises(ValueError, match="^QSVConv: 'x' must be one tensor .* got a bipartite"):
        node((torch.randn(5, 16), torch.randn(2, 16)), ei)
    with pytest.raises(ValueError, match="^QSVConv: 'edge_index' must be .*2 x 5"):
        conv((torch.randn(5, 16), torch.randn(2, 16)),
             torch.sparse_coo_tensor(ei.flip(0), torch.ones(2), (5, 2)))


def test_to_hetero_relation_between_node_types():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = QSVConv(16, 16, heads=2)

        def forward(self, x, edge_index):
            return self.conv(x, edge_index)

    metadata = (["a", "b"], [("a", "to", "b"), ("b", "to", "a"), ("b", "self", "b")])
    torch.manual_seed(0)
    model = to_hetero(Net(), metadata, aggr="sum").double()
    g = torch.Generator().manual_seed(1)
    x = {"a": torch.randn(6, 16, generator=g, dtype=DT),
         "b": torch.randn(4, 16, generator=g, dtype=DT)}
    ei = {("a", "to", "b"): random_dense_edges(4, 3, n_src=6),
          ("b", "to", "a"): torch.tensor([[0, 1, 3, 2, 2], [0, 0, 2, 4, 5]]),
          ("b", "self", "b"): random_dense_edges(4, 2, seed=4)}
    out = model(x, ei)
    assert out["a"].shape == (6, 16) and out["b"].shape == (4, 16)
    convs = {key: conv for key, conv in model.conv.items()}
    exp_b = (qsv_conv_reference(convs["a__to__b"], (x["a"], x["b"]), ei["a", "to", "b"])
             + qsv_conv_reference(convs["b__self__b"], (x["b"], x["b"]), ei["b", "self", "b"]))
    torch.testing.assert_close(out["b"], exp_b)
    torch.testing.assert_close(
        out["a"], qsv_conv_reference(convs["b__to__a"], (x["b"], x["a"]), ei["b", "to", "a"]))


# ----------------------------------------------------------------------------- weights
@pytest.mark.parametrize("layout", [torch.sparse_coo, torch.sparse_csr, torch.sparse_csc])
def test_sparse_input_returns_weights_in_its_layout(layout):
    n, k = 9, 3
    ei = random_dense_edges(n, k)
    conv = make_qsv_conv()
    x = torch.randn(n, 16, dtype=DT)
    out_ref, (_, alpha_ref) = conv(x, ei, return_attention_weights=True)
    adj_t = torch.sparse_coo_tensor(ei.flip(0), torch.ones(ei.size(1), dtype=DT), (n, n))
    adj_t = adj_t.coalesce() if layout == torch.sparse_coo else adj_t.to_sparse(layout=layout)
    out, (adj_alpha, alpha) = conv(x, adj_t, return_attention_weights=True)
    torch.testing.assert_close(out, out_ref)
    assert adj_alpha.layout == layout and adj_alpha.shape == (n, n, 2)
    dense_alpha = adj_alpha.to_dense()  # [target, source, head]
    torch.testing.assert_close(dense_alpha[ei[1], ei[0]], alpha_ref)
    assert int((dense_alpha.abs().sum(-1) > 0).sum()) == ei.size(1)
    ei_t, values = to_edge_index(adj_alpha)
    torch.testing.assert_close(values, alpha)


def test_uncoalesced_coo_input_is_coalesced_not_just_flagged():
    n, k = 8, 2
    ei = random_dense_edges(n, k)
    perm = torch.randperm(ei.size(1), generator=torch.Generator().manual_seed(0))
    adj_t = torch.sparse_coo_tensor(ei.flip(0)[:, perm], torch.ones(ei.size(1), dtype=DT),
                                    (n, n))
    assert not adj_t.is_coalesced()
    conv = make_qsv_conv()
    x = torch.randn(n, 16, dtype=DT)
    out, (adj_alpha, _) = conv(x, adj_t, return_attention_weights=True)
    assert not adj_t.is_coalesced()  # the caller's tensor is left alone
    torch.testing.assert_close(out, qsv_conv_reference(conv, (x, x), ei))
    _, (_, alpha_ref) = conv(x, ei, return_attention_weights=True)
    torch.testing.assert_close(adj_alpha.to_dense()[ei[1], ei[0]], alpha_ref)


@pytest.mark.parametrize("dense, fused", [(True, True), (True, False), (False, True)])
def test_returned_weights_are_the_ones_used_after_dropout(dense, fused):
    n, k = 12, 4
    ei = random_dense_edges(n, k)
    conv = make_qsv_conv(transport=False, dropout=0.5)
    conv.fused = fused
    conv.train()
    x = torch.randn(n, 16, dtype=DT)
    torch.manual_seed(1)
    out, (_, alpha) = conv(x, ei, dense=dense, return_attention_weights=True)
    assert (alpha == 0).any()
    sums = torch.zeros(n, 2, dtype=DT).index_add_(0, ei[1], alpha)
    assert not torch.allclose(sums, torch.ones_like(sums))  # no longer a softmax
    h = x.view(n, 2, 8)
    expected = torch.zeros_like(h).index_add_(0, ei[1], alpha[..., None] * h[ei[0]])
    torch.testing.assert_close(out, expected.view(n, 16) + conv.bias)


def test_one_meaning_of_return_attention_weights():
    n, k = 16, 4
    ei = random_dense_edges(n, k)
    x = torch.randn(n, 16)
    conv = QSVConv(16, 16, heads=2)
    for value in (None, False):
        assert isinstance(conv(x, ei, return_attention_weights=value), torch.Tensor)
    assert isinstance(conv(x, ei, return_attention_weights=True), tuple)
    for kind in ("qsv", "transformer"):
        block = QSVBlock(16, 2, conv=kind)
        for value in (None, False):
            assert isinstance(block(x, ei, return_attention_weights=value), torch.Tensor)
        out, (_, alpha) = block(x, ei, return_attention_weights=True)
        assert out.shape == (n, 16) and alpha.shape == (ei.size(1), 2)
    from torch_geometric.data import Data

    net = QSVNet(16, 3, channels=16, heads=2, num_layers=2)
    data = Data(x=x, edge_index=ei)
    for value in (None, False):
        assert isinstance(net(data, return_attention_weights=value), torch.Tensor)
    logits, atts = net(data, return_attention_weights=True)
    assert logits.shape == (1, 3) and len(atts) == 2
    for name, call in (("QSVConv", lambda v: conv(x, ei, return_attention_weights=v)),
                       ("QSVBlock", lambda v: block(x, ei, return_attention_weights=v)),
                       ("QSVNet", lambda v: net(data, return_attention_weights=v))):
        for bad in (1, "yes", 0):
            with pytest.raises(TypeError, match=f"^{name}: 'return_attention_weights' must be "
                               f"True, False or None, got {bad!r}$"):
                call(bad)


def test_forward_overloads():
    for fn in (QSVConv.forward, QSVBlock.forward, QSVNet.forward):
        overloads = typing.get_overloads(fn)
        assert len(overloads) == 2
