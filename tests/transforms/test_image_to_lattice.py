"""Tests of quest_geometric.transforms.image_to_lattice: ImageToLattice."""
import torch
from torch_geometric.data import Data
from torch_geometric.loader import DataLoader

import quest_geometric.transforms.image_to_lattice as lattice_mod
from quest_geometric.geometry.graphs import lattice_graph
from quest_geometric.transforms.image_to_lattice import ImageToLattice


def test_lattice_template_built_once(monkeypatch):
    calls = []
    original = lattice_mod._build_lattice_template
    monkeypatch.setattr(lattice_mod, "_build_lattice_template",
                        lambda c: calls.append(c) or original(c))
    lattice_mod._lattice_template.cache_clear()
    t = ImageToLattice(k=4)
    for _ in range(50):
        t(torch.rand(1, 9, 11))
    assert len(calls) == 1
    t(torch.rand(1, 11, 9))
    assert len(calls) == 2
    lattice_mod._lattice_template.cache_clear()


def test_image_to_lattice():
    image = torch.rand(2, 5, 6)
    data = ImageToLattice(k=8)(Data(image=image, y=torch.tensor([1])))
    graph = lattice_graph(5, 6, 8)
    for i in range(5):
        for j in range(6):
            node = i * 6 + j
            assert torch.equal(data.x[node], image[:, i, j])
            assert data.pos[node].tolist() == [j, i, 0]
    assert torch.equal(data.edge_index, graph.edge_index)
    assert torch.equal(data.shell, torch.zeros(30, dtype=torch.long))
    assert torch.equal(data.y, torch.tensor([1]))
    batch = next(iter(DataLoader([data, data], batch_size=2)))
    assert torch.equal(batch.edge_index[:, 240:], data.edge_index + 30)
    assert torch.equal(batch.y, torch.tensor([1, 1]))
