"""quest_geometric.analysis.qsv against dense, hand-written references on tiny graphs."""
import math

import pytest
import torch
from torch_geometric.data import Batch, Data

from quest_geometric.analysis.metrics import attention_entropy
from quest_geometric.analysis.qsv import (
    ablation_accuracy,
    attention_entropy_per_node,
    node_attention_entropy,
    qsv_analysis,
    rotation_angles,
)
from quest_geometric.models.qsv_net import QSVNet


def _ragged_graph(n: int = 6, seed: int = 0) -> Data:
    """Random graph with in-degrees 0..4 (node 0 has none, node 1 exactly one)."""
    g = torch.Generator().manual_seed(seed)
    src, dst = [], []
    for i in range(n):
        deg = 0 if i == 0 else (1 if i == 1 else 2 + i % 3)
        others = [j for j in range(n) if j != i]
        pick = torch.randperm(len(others), generator=g)[:deg].tolist()
        src += [others[p] for p in pick]
        dst += [i] * deg
    edge_index = torch.tensor([src, dst])
    return Data(x=torch.randn(n, 1, generator=g), edge_index=edge_index, num_nodes=n,
                y=torch.tensor([1]))


def _batch(num_graphs: int = 3, seed: int = 0) -> Batch:
    return Batch.from_data_list([_ragged_graph(6, seed + b) for b in range(num_graphs)])


def _model(conv: str = "qsv", seed: int = 0, **kw) -> QSVNet:
    torch.manual_seed(seed)
    return QSVNet(1, 3, channels=8, heads=2, num_layers=2, conv=conv, **kw)


# ---------------------------------------------------------------- node_attention_entropy
@pytest.mark.parametrize("heads", [1, 3])
def test_node_entropy_matches_dense_masked_reference(heads):
    data = _ragged_graph()
    n, (src, dst) = data.num_nodes, data.edge_index
    logits = torch.randn(src.numel(), heads, generator=torch.Generator().manual_seed(1))
    # Dense [H, N, N] attention matrix with a mask, normalised row by row.
    mask = torch.zeros(n, n, dtype=torch.bool)
    mask[dst, src] = True
    dense = torch.full((heads, n, n), -math.inf)
    dense[:, dst, src] = logits.t()
    att = torch.where(mask, dense.softmax(-1), torch.zeros(()))
    att = torch.nan_to_num(att)  # rows without keys
    alpha = att[:, dst, src].t()  # [E, H], the sparse form of the same weights
    ref = attention_entropy(att, mask=mask.expand(heads, n, n))
    out = node_attention_entropy(alpha if heads > 1 else alpha[:, 0], dst, n)
    assert out.entropy.shape == (1, n, heads)
    torch.testing.assert_close(out.valid, ref.valid[0])
    torch.testing.assert_close(out.entropy[0], ref.entropy.t(), rtol=1e-10, atol=1e-12)
    # By hand for one node: -sum a log a / log(deg).
    i = 4
    a = alpha[dst == i, 0].double()
    assert out.entropy[0, i, 0].item() == pytest.approx(
        float(-(a * a.log()).sum() / math.log(a.numel())), rel=1e-12)
    assert not out.valid[0] and not out.valid[1]  # in-degree 0 and 1
    assert out.entropy[0, :2].abs().sum() == 0


def test_node_entropy_extremes_and_errors():
    dst = torch.tensor([0, 0, 0, 1, 1])
    uniform = torch.tensor([1 / 3, 1 / 3, 1 / 3, 0.5, 0.5])
    peaked = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0])
    torch.testing.assert_close(node_attention_entropy(uniform, dst, 2).entropy[0, :, 0],
                               torch.ones(2, dtype=torch.float64))
    torch.testing.assert_close(node_attention_entropy(peaked, dst, 2).entropy[0, :, 0],
                               torch.zeros(2, dtype=torch.float64))
    with pytest.raises(ValueError, match="non-negative"):
        node_attention_entropy(-uniform, dst, 2)
    with pytest.raises(ValueError, match="finite"):
        node_attention_entropy(uniform * math.nan, dst, 2)
    with pytest.raises(ValueError, match="index"):
        node_attention_entropy(uniform, dst[:3], 2)


# ---------------------------------------------------------------- model-level entropy
def _dense_layer0_entropy(model: QSVNet, batch: Batch) -> torch.Tensor:
    """Layer-0 entropy from the formulas: q = normalize(lin_q(norm1(stem(x)))), logits
    <q_i, q_j> softmax-ed densely over in-neighbours."""
    block = model.blocks[0]
    h = block.norm1(model.stem(batch.x))
    q = block.conv.lin_q(h).view(-1, model.heads, 4)
    q = q / q.norm(dim=-1, keepdim=True)
    n = batch.num_nodes
    src, dst = batch.edge_index
    out = torch.zeros(n, model.heads, dtype=torch.float64)
    for i in range(n):
        nb = src[dst == i]
        if nb.numel() < 2:
            continue
        a = (q[i].unsqueeze(0) * q[nb]).sum(-1).double().softmax(0)  # [deg, H]
        out[i] = -(a * a.log()).sum(0) / math.log(nb.numel())
    return out


@torch.no_grad()
def test_entropy_per_node_matches_dense_reference_over_a_loader():
    model = _model()
    batches = [_batch(2, 0), _batch(3, 10)]
    out = attention_entropy_per_node(model, batches)
    n_total = sum(b.num_nodes for b in batches)
    assert out.entropy.shape == (2, n_total, 2) and out.valid.shape == (n_total,)
    ref = torch.cat([_dense_layer0_entropy(model, b) for b in batches])
    torch.testing.assert_close(out.entropy[0], ref, rtol=1e-5, atol=1e-6)
    v = out.entropy[:, out.valid]
    assert bool(((v >= 0) & (v <= 1 + 1e-9)).all())
    torch.testing.assert_close(out.mean(), v.mean(dim=1))


@pytest.mark.parametrize("conv", ["qsv", "transformer"])
def test_entropy_is_one_under_uniform_attention_and_below_one_otherwise(conv):
    batch = _batch()
    if conv == "qsv":
        model = _model(qsv_kwargs={"temperature": 5.0})
        with model.ablation(attention="uniform"):
            uni = attention_entropy_per_node(model, batch)
        v = uni.entropy[:, uni.valid]
        torch.testing.assert_close(v, torch.ones_like(v))
    else:
        model = _model(conv="transformer")
    learned = attention_entropy_per_node(model, batch)
    assert learned.entropy[:, learned.valid].min() < 1 - 1e-4
    assert model.training  # mode restored


# ---------------------------------------------------------------- rotation angles
def _rotation(q: torch.Tensor) -> torch.Tensor:
    w, x, y, z = q.unbind(-1)
    return torch.stack([
        torch.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
        torch.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
        torch.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1),
    ], -2)


@torch.no_grad()
def test_rotation_angles_match_rotation_matrix_trace():
    model = _model()
    batches = [_batch(2, 3), _batch(1, 7)]
    ang = rotation_angles(model, batches)
    e_total = sum(b.num_edges for b in batches)
    assert ang.shape == (2, e_total, 2)
    refs = []
    for b in batches:
        qs = model.quaternions(b)
        src, dst = b.edge_index
        per_layer = []
        for q in qs:
            q = q.double()
            rel = _rotation(q[dst]).transpose(-1, -2) @ _rotation(q[src])  # R_i^T R_j
            tr = rel.diagonal(dim1=-2, dim2=-1).sum(-1)
            per_layer.append(torch.arccos(((tr - 1) / 2).clamp(-1, 1)))
        refs.append(torch.stack(per_layer))
    ref = torch.cat(refs, dim=1).float()
    torch.testing.assert_close(ang, ref, atol=2e-3, rtol=0)
    assert bool(((ang >= 0) & (ang <= math.pi + 1e-6)).all())


def test_rotation_angles_by_hand_on_two_nodes():
    """Node quaternions fixed by hand: identity and a 90-degree turn about z."""
    model = _model()
    c = math.cos(math.pi / 4)
    fixed = torch.tensor([[1.0, 0, 0, 0], [c, 0, 0, c]]).unsqueeze(1).repeat(1, 2, 1)
    for block in model.blocks:
        block.conv.quaternions = lambda x, fixed=fixed: fixed
    data = Data(x=torch.randn(2, 1), edge_index=torch.tensor([[1, 0], [0, 1]]), num_nodes=2)
    ang = rotation_angles(model, data)
    torch.testing.assert_close(ang, torch.full((2, 2, 2), math.pi / 2))


# ---------------------------------------------------------------- test-time ablations
@torch.no_grad()
@pytest.mark.slow
def test_ablation_accuracy_matches_retargeted_models():
    model = _model(seed=1)
    batches = [_batch(4, 0), _batch(4, 20)]
    for b in batches:  # labels that the untrained model gets partly right
        b.y = torch.randint(0, 3, (b.num_graphs,), generator=torch.Generator().manual_seed(5))
    out = ablation_accuracy(model, batches)

    def acc(m):
        m.eval()
        c = sum(int((m(b).argmax(-1) == b.y).sum()) for b in batches)
        return c / sum(b.num_graphs for b in batches)

    assert out["trained"] == pytest.approx(acc(model))
    for name, kwargs in (("no_transport", {"transport": False}),
                         ("uniform", {"attention": "uniform"}),
                         ("no_transport_uniform", {"transport": False,
                                                   "attention": "uniform"})):
        other = _model(seed=1, qsv_kwargs=kwargs)  # built ablated, same weights
        other.load_state_dict(model.state_dict())
        assert out[name] == pytest.approx(acc(other))
        assert out[f"delta_{name}"] == pytest.approx(out[name] - out["trained"])
    assert all(layer.transport and layer.attention == "learned"
               for layer in model.qsv_layers())


def test_qsv_analysis_summary_and_errors():
    model = _model()
    loader = [_batch(2, 0), _batch(2, 1)]
    res = qsv_analysis(model, loader)
    s = res["summary"]
    assert all(math.isfinite(v) for v in s.values())
    assert 0 <= s["entropy_mean"] <= 1 and 0 <= s["angle_median_deg"] <= 180
    assert s["acc_trained"] == res["accuracy"]["trained"]
    with pytest.raises(ValueError, match="conv='qsv'"):
        rotation_angles(_model(conv="transformer"), loader)
    with pytest.raises(ValueError, match="conv='qsv'"):
        ablation_accuracy(_model(conv="transformer"), loader)
    with pytest.raises(TypeError, match="loader"):
        attention_entropy_per_node(model, 3)
    with pytest.raises(ValueError, match="no batch"):
        rotation_angles(model, [])
    with pytest.raises(TypeError, match="one-shot"):
        qsv_analysis(model, iter(loader))
    with pytest.raises(TypeError, match="model"):
        attention_entropy_per_node("model", loader)
