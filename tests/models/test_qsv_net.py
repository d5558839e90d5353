"""Tests for QSVNet and the parameter-matched standard-attention control
(match_parameter_count); the ablation's models by name are tested in
tests/benchmarks/qsv_ablation/test_variants.py."""
from __future__ import annotations

import pytest
import torch
from torch_geometric.data import Batch

from quest_geometric.datasets.images import DigitsGraphs
from quest_geometric.models.qsv_net import QSVNet, match_parameter_count
from quest_geometric.nn.quaternion_linear import QuaternionLinear
from quest_geometric.testing.qsv import random_image_batch
from quest_geometric.transforms.image_to_lattice import ImageToLattice
from quest_geometric.transforms.image_to_sphere import ImageToSphere

SPHERE = ImageToSphere(sizes=(16, 32), k=6, k_cross=2)
LATTICE = ImageToLattice(k=4)
SMALL = dict(channels=16, heads=2, num_layers=2)


def sphere_batch(n: int = 3, c: int = 3, seed: int = 0) -> Batch:
    return random_image_batch(SPHERE, n, c, seed=seed)


def lattice_batch(n: int = 3, c: int = 3, seed: int = 0) -> Batch:
    return random_image_batch(LATTICE, n, c, seed=seed)


def count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# ---------------------------------------------------------------------------- shapes
@pytest.mark.parametrize("graph", ["sphere", "lattice"])
@pytest.mark.parametrize("stem", ["linear", "conv"])
@pytest.mark.parametrize("readout", ["mean", "outer"])
@pytest.mark.parametrize("conv", ["qsv", "transformer"])
def test_shapes_on_sphere_and_lattice(graph, stem, readout, conv):
    torch.manual_seed(0)
    data = sphere_batch() if graph == "sphere" else lattice_batch()
    model = QSVNet(3, 7, stem=stem, readout=readout, conv=conv, **SMALL)
    out = model(data)
    assert out.shape == (3, 7) and torch.isfinite(out).all()


@pytest.mark.parametrize("mixing, cls", [("quaternion", QuaternionLinear),
                                         ("linear", torch.nn.Linear),
                                         ("none", torch.nn.Identity)])
@pytest.mark.parametrize("norm", ["layer", "batch"])
def test_mixing_and_norm_options(mixing, cls, norm):
    model = QSVNet(3, 5, mixing=mixing, norm=norm, **SMALL)
    assert all(isinstance(block.mix, cls) for block in model.blocks)
    assert model(sphere_batch()).shape == (3, 5)


def test_single_graph_without_batch_vector():
    model = QSVNet(3, 4, **SMALL).eval()
    data = SPHERE(torch.rand(3, 8, 8))
    out = model(data)
    assert out.shape == (1, 4)
    torch.testing.assert_close(out, model(Batch.from_data_list([data])))


def test_batching_is_independent_per_graph():
    model = QSVNet(3, 4, stem="conv", readout="outer", **SMALL).eval()
    batch = sphere_batch(4)
    out = model(batch)
    for g in range(4):
        torch.testing.assert_close(out[g:g + 1], model(batch.get_example(g)),
                                   rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------- readout
def final_node_features(model: QSVNet, data) -> torch.Tensor:
    store = {}
    handle = model.final_norm.register_forward_hook(lambda m, i, o: store.update(h=o))
    model(data)
    handle.remove()
    return store["h"]


def test_outer_readout_is_mean_over_each_graphs_outer_shell():
    torch.manual_seed(0)
    # A mixed batch: sphere graphs (outer shell id 1) and lattice graphs (all shell 0).
    graphs = sphere_batch(2).to_data_list() + lattice_batch(2, seed=1).to_data_list()
    batch = Batch.from_data_list(graphs)
    model = QSVNet(3, 6, readout="outer", **SMALL).eval()
    h = final_node_features(model, batch)
    pooled = []
    for g, graph in enumerate(graphs):
        nodes = h[batch.batch == g]
        outer = graph.shell == graph.shell.max()
        assert outer.sum() == (32 if g < 2 else 64)
        pooled.append(nodes[outer].mean(0))
    expected = model.classifier(torch.stack(pooled))
    torch.testing.assert_close(model(batch), expected)


def test_outer_readout_equals_mean_readout_on_the_lattice():
    torch.manual_seed(0)
    outer = QSVNet(3, 6, readout="outer", **SMALL).eval()
    mean = QSVNet(3, 6, readout="mean", **SMALL).eval()
    mean.load_state_dict(outer.state_dict())
    data = lattice_batch()
    torch.testing.assert_close(outer(data), mean(data))
    # ... and differs on the sphere, where the inner shell is dropped.
    assert not torch.allclose(outer(sphere_batch()), mean(sphere_batch()))


def test_outer_readout_needs_shell():
    data = sphere_batch()
    del data.shell
    with pytest.raises(ValueError, match=r"^QSVNet: 'shell' must be one shell id per node \[N\] "
                                         r"for readout='outer' \(data.shell"):
        QSVNet(3, 6, readout="outer", **SMALL)(data)


def test_pos_embedding_adds_a_tiled_per_node_vector():
    torch.manual_seed(0)
    model = QSVNet(3, 5, pos_embedding=True, num_nodes=48, **SMALL).eval()
    plain = QSVNet(3, 5, **SMALL).eval()
    plain.load_state_dict({k: v for k, v in model.state_dict().items() if k != "pos"})
    assert model.pos.shape == (48, 16)
    assert count(model) == count(plain) + 48 * 16
    with torch.no_grad():
        model.pos.zero_()
    data = sphere_batch(2)
    torch.testing.assert_close(model(data), plain(data))
    with torch.no_grad():
        model.pos.normal_()
    # Node i of every graph gets pos[i]: the batched output equals the per-graph one.
    out = model(data)
    for g in range(2):
        torch.testing.assert_close(out[g:g + 1], model(data.get_example(g)),
                                   rtol=1e-5, atol=1e-5)
    assert not torch.allclose(out, plain(data))
    with pytest.raises(ValueError, match="^QSVNet: 'data.x' must be whole copies of the 48-node "
                                         "template graph"):
        model(lattice_batch(1))


def test_num_nodes_must_be_used():
    with pytest.raises(ValueError, match="^QSVNet: 'num_nodes' must be None unless "):
        QSVNet(3, 5, num_nodes=48, **SMALL)
    with pytest.raises(TypeError, match="^QSVNet: 'num_nodes' must be an int >= 1, got None$"):
        QSVNet(3, 5, pos_embedding=True, **SMALL)
    with pytest.raises(TypeError, match="^QSVConv: 'num_nodes' .* must be an int >= 1, got None"):
        QSVNet(3, 5, qsv_kwargs={"quaternion": "node"}, **SMALL)
    with pytest.raises(ValueError, match="^QSVNet: 'qsv_kwargs' must be free of 'num_nodes'"):
        QSVNet(3, 5, qsv_kwargs={"quaternion": "node", "num_nodes": 48}, **SMALL)


# ---------------------------------------------------------------------------- ablations
@pytest.mark.parametrize("flags, built", [
    (dict(attention="uniform"), {"attention": "uniform"}),
    (dict(transport=False), {"transport": False}),
    (dict(transport=False, attention="uniform"), {"transport": False, "attention": "uniform"}),
])
def test_test_time_ablation_equals_model_built_ablated(flags, built):
    torch.manual_seed(0)
    model = QSVNet(3, 6, **SMALL).eval()
    reference = QSVNet(3, 6, qsv_kwargs=built, **SMALL).eval()
    reference.load_state_dict(model.state_dict())
    data = sphere_batch()
    before = model(data)
    state = model.set_ablation(**flags)
    assert state == [{"transport": True, "attention": "learned"}] * 2
    for layer in model.qsv_layers():
        assert layer.transport == flags.get("transport", True)
        assert layer.attention == flags.get("attention", "learned")
    ablated = model(data)
    torch.testing.assert_close(ablated, reference(data))
    assert not torch.allclose(ablated, before)
    model.restore_ablation(state)
    torch.testing.assert_close(model(data), before)


def test_ablation_context_manager_restores_after_errors():
    model = QSVNet(3, 6, **SMALL)
    with pytest.raises(RuntimeError):
        with model.ablation(transport=False, attention="uniform"):
            assert [c.transport for c in model.qsv_layers()] == [False, False]
            raise RuntimeError
    assert [(c.transport, c.attention) for c in model.qsv_layers()] == [(True, "learned")] * 2


def test_ablation_bad_input():
    model = QSVNet(3, 6, **SMALL)
    with pytest.raises(ValueError, match="^QSVNet.set_ablation: 'attention' must be one of"):
        model.set_ablation(attention="random")
    with pytest.raises(TypeError, match="^QSVNet.set_ablation: 'transport' must be a bool or "
                                        "None, got 'no'$"):
        model.set_ablation(transport="no")
    with pytest.raises(ValueError, match="QSVConv"):
        QSVNet(3, 6, conv="transformer", **SMALL).set_ablation(transport=False)


# ---------------------------------------------------------------------------- analysis hooks
def test_attention_weights_match_the_returned_quaternions():
    torch.manual_seed(0)
    model = QSVNet(3, 6, qsv_kwargs={"temperature": 3.0}, **SMALL).eval()
    data = sphere_batch(2)
    logits, atts = model(data, return_attention_weights=True)
    torch.testing.assert_close(logits, model(data))
    qs = model.quaternions(data)
    assert len(qs) == len(atts) == 2
    n = data.num_nodes
    for q, (edge_index, alpha) in zip(qs, atts):
        assert q.shape == (n, 2, 4)
        torch.testing.assert_close(q.norm(dim=-1), torch.ones(n, 2))
        # Dense reference: alpha_ij = softmax_j(3 <q_i, q_j>) over the k in-edges of i.
        k = edge_index.size(1) // n
        src = edge_index[0].view(n, k)
        logit = 3.0 * (q.unsqueeze(1) * q[src]).sum(-1)  # [n, k, H]
        torch.testing.assert_close(alpha.view(n, k, 2), logit.softmax(dim=1))


# ---------------------------------------------------------------------------- training
#: The graph rows of the QSV ablation as QSVNet arguments (the lattice row is the qsv model on
#: lattice graphs).
ROWS = {"qsv": {}, "no_transport": {"qsv_kwargs": {"transport": False}},
        "uniform": {"qsv_kwargs": {"attention": "uniform"}},
        "standard_attention": {"conv": "transformer"}, "lattice": {}}


@pytest.mark.parametrize("name", list(ROWS))
def test_gradient_reaches_every_parameter(name):
    torch.manual_seed(0)
    model = QSVNet(3, 4, stem="conv", **SMALL, **ROWS[name])
    data = sphere_batch() if name != "lattice" else lattice_batch()
    loss = torch.nn.functional.cross_entropy(model(data), data.y)
    loss.backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), pname
        assert p.grad.abs().sum() > 0, pname


@pytest.mark.parametrize("graph, kwargs, ratio", [
    (SPHERE, {}, 0.8),
    (LATTICE, {}, 0.8),
    (SPHERE, dict(qsv_kwargs={"quaternion": "both"}, num_nodes=48), 0.6),
])
@pytest.mark.slow
def test_training_on_digits_decreases_the_loss(graph, kwargs, ratio, one_thread):
    torch.manual_seed(0)
    ds = DigitsGraphs(split="train", graph=graph)
    batch = ds.graph_batch(range(48))
    model = QSVNet(1, 10, **SMALL, **kwargs)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(30):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(batch), batch.y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < ratio * losses[0]


# ---------------------------------------------------------------------------- misc
def test_repr_and_config():
    assert str(QSVNet(3, 10)) == "QSVNet(3, 10, channels=64, heads=4, num_layers=4)"
    model = QSVNet(1, 10, channels=16, heads=2, num_layers=2, stem="conv", readout="outer",
                   conv="transformer")
    assert str(model) == ("QSVNet(1, 10, channels=16, heads=2, num_layers=2, stem='conv', "
                          "readout='outer', conv='transformer')")
    assert str(QSVNet(3, 10, pos_embedding=True, num_nodes=64)) == (
        "QSVNet(3, 10, channels=64, heads=4, num_layers=4, pos_embedding=True, num_nodes=64)")
    rebuilt = QSVNet(**model.config)
    assert count(rebuilt) == count(model) and str(rebuilt) == str(model)


def test_reset_parameters_changes_weights():
    model = QSVNet(3, 6, **SMALL)
    before = [p.detach().clone() for p in model.parameters()]
    torch.manual_seed(123)
    model.reset_parameters()
    changed = [not torch.equal(a, b) for a, b in zip(before, model.parameters())]
    assert sum(changed) > len(changed) // 2


@pytest.mark.parametrize("kwargs, match", [
    (dict(channels=12, heads=2), "^QSVNet: 'channels' must be a multiple of 4 \\* heads"),
    (dict(stem="cnn"), "stem"),
    (dict(readout="max"), "readout"),
    (dict(conv="gat"), "conv"),
    (dict(mixing="dense"), "mixing"),
    (dict(dropout=1.0), "dropout"),
    (dict(conv="transformer", channels=18, heads=3),
     "^QSVNet: 'channels' must be a multiple of 12"),
    (dict(conv="transformer", qsv_kwargs={"transport": False}), "^QSVNet: 'qsv_kwargs' must be"),
    (dict(transformer_kwargs={"beta": True}), "^QSVNet: 'transformer_kwargs' must be"),
    (dict(num_layers=0), "num_layers"),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        QSVNet(3, 10, **kwargs)


def test_bad_data():
    model = QSVNet(3, 10, **SMALL)
    data = sphere_batch(c=1)
    with pytest.raises(ValueError, match=r"^QSVNet: 'data.x' must be of shape \[num_nodes, 3\]"):
        model(data)


# ----------------------------------------------------------- the parameter-matched control
def test_match_parameter_count_reports_the_built_model():
    match = match_parameter_count(50_000, 3, 10, heads=4, num_layers=3)
    model = QSVNet(3, 10, channels=match["channels"], mlp_hidden=match["mlp_hidden"],
                   conv="transformer", heads=4, num_layers=3)
    assert count(model) == match["parameters"]
    assert match["channels"] % 4 == 0
    assert abs(match["parameters"] - 50_000) / 50_000 == pytest.approx(match["relative_gap"])
    assert match["relative_gap"] <= 0.05
    with pytest.raises(ValueError, match="within"):
        match_parameter_count(50_000, 3, 10, tolerance=1e-9, num_layers=1)


@pytest.mark.parametrize("kwargs, exc, arg", [
    (dict(target=0), ValueError, "target"),
    (dict(target=1.5), TypeError, "target"),
    (dict(tolerance=-0.1), ValueError, "tolerance"),
    (dict(channels=16), ValueError, "channels"),
    (dict(mlp_hidden=8), ValueError, "mlp_hidden"),
    (dict(conv="qsv"), ValueError, "conv"),
    (dict(qsv_kwargs={}), ValueError, "qsv_kwargs"),
])
def test_match_parameter_count_bad_input(kwargs, exc, arg):
    args = {"target": 5_000, **kwargs}
    with pytest.raises(exc, match=f"^match_parameter_count: '{arg}' must be"):
        match_parameter_count(args.pop("target"), 3, 10, **args)
