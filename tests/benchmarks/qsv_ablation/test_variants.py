"""The QSV ablation's models by name (qsv_variant), the standard-attention row
parameter-matched (match_parameter_count is tested in tests/models/test_qsv_net.py)."""
from __future__ import annotations

import pytest
import torch
from torch_geometric.nn.conv import TransformerConv

from benchmarks.qsv.ablation_study.config import GRAPH_VARIANTS as VARIANTS
from benchmarks.qsv.ablation_study.variants import qsv_variant
from quest_geometric.models.qsv_net import QSVNet
from quest_geometric.testing.qsv import random_image_batch
from quest_geometric.transforms.image_to_sphere import ImageToSphere

SPHERE = ImageToSphere(sizes=(16, 32), k=6, k_cross=2)
SMALL = dict(channels=16, heads=2, num_layers=2)


def sphere_batch(n: int = 3, c: int = 3, seed: int = 0):
    return random_image_batch(SPHERE, n, c, seed=seed)


def count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("kwargs", [
    {},
    dict(channels=32, heads=2, num_layers=2),
    dict(channels=48, heads=4, num_layers=3, stem="conv", mlp_ratio=4.0),
    dict(channels=16, heads=1, num_layers=2, mixing="linear"),
])
@pytest.mark.slow
def test_standard_attention_control_is_parameter_matched(kwargs):
    reference = QSVNet(3, 10, **kwargs)
    control = qsv_variant("standard_attention", 3, 10, **kwargs)
    n_ref, n_ctl = count(reference), count(control)
    assert abs(n_ctl - n_ref) <= 0.05 * n_ref
    assert control.parameter_count() == n_ctl
    assert not control.qsv_layers()
    convs = [m for m in control.modules() if isinstance(m, TransformerConv)]
    assert len(convs) == reference.num_layers
    assert all(c.heads == reference.heads for c in convs)
    # The same network otherwise: stem, mixing and readout follow the arguments.
    assert control.stem_type == reference.stem_type and control.mixing == reference.mixing
    assert control(sphere_batch()).shape == (3, 10)


@pytest.mark.slow
def test_variants_and_parameter_counts():
    kwargs = dict(SMALL)
    counts = {name: qsv_variant(name, 3, 10, **kwargs).parameter_count() for name in VARIANTS}
    assert set(counts) == set(VARIANTS)
    full = count(QSVNet(3, 10, **kwargs))
    for name in ("qsv", "no_transport", "uniform", "lattice"):
        assert counts[name] == full
    assert abs(counts["standard_attention"] - full) <= 0.05 * full
    flags = {name: [(c.transport, c.attention)
                    for c in qsv_variant(name, 3, 10, **kwargs).qsv_layers()]
             for name in ("qsv", "no_transport", "uniform", "lattice")}
    assert flags["qsv"] == flags["lattice"] == [(True, "learned")] * 2
    assert flags["no_transport"] == [(False, "learned")] * 2
    assert flags["uniform"] == [(True, "uniform")] * 2
    with pytest.raises(ValueError, match="name"):
        qsv_variant("cnn", 3, 10)


def test_node_quaternions_with_num_nodes():
    n = 48  # 16 + 32 sphere nodes
    model = qsv_variant("qsv", 3, 5, qsv_kwargs={"quaternion": "both"}, num_nodes=n, **SMALL)
    assert all(c.node_q is not None and c.node_q.shape == (n, 2, 4)
               for c in model.qsv_layers())
    assert model(sphere_batch(2)).shape == (2, 5)
    control = qsv_variant("standard_attention", 3, 5, qsv_kwargs={"quaternion": "both"},
                          num_nodes=n, **SMALL)
    assert abs(count(control) - count(model)) <= 0.05 * count(model)


def test_standard_attention_control_keeps_the_pos_embedding():
    model = QSVNet(3, 5, pos_embedding=True, num_nodes=48, **SMALL)
    control = qsv_variant("standard_attention", 3, 5, pos_embedding=True, num_nodes=48,
                          **SMALL)
    assert control.pos is not None
    assert abs(count(control) - count(model)) <= 0.05 * count(model)
