"""Tests of quest_geometric.geometry.graphs: the sphere and lattice template graphs against
brute-force references (:mod:`quest_geometric.testing.geometry`)."""
import numpy as np
import pytest
import torch

from quest_geometric import typing as qg_typing
from quest_geometric.geometry.graphs import lattice_graph, sphere_graph
from quest_geometric.geometry.knn import knn_graph
from quest_geometric.testing.geometry import brute_force_knn, grid_points

BACKENDS = [
    "scipy",
    "torch",
    pytest.param("torch_cluster", marks=pytest.mark.skipif(
        not qg_typing.WITH_TORCH_CLUSTER,
        reason="torch-cluster not installed; `pip install --no-build-isolation -e \".[ext]\"` "
               "in the repository's root installs it")),
]


# ------------------------------------------------------------------------- sphere graph
@pytest.mark.parametrize("backend", BACKENDS)
def test_sphere_graph_regular_and_exact(backend):
    sizes, k, k_cross = [12, 40, 90], 5, 3
    data = sphere_graph(sizes, k, k_cross=k_cross, backend=backend)
    n = sum(sizes)
    pos, shell, (row, col) = data.pos, data.shell, data.edge_index
    assert data.num_nodes == n and pos.shape == (n, 3)
    assert torch.equal(shell, torch.arange(3).repeat_interleave(torch.tensor(sizes)))
    # the hard requirement: regular in-degree, sorted by target (dense [N, k] layout)
    assert torch.equal(col, torch.arange(n).repeat_interleave(k + k_cross))
    table = row.view(n, k + k_cross)
    within, cross = table[:, :k], table[:, k:]
    # within-shell part: brute-force kNN per shell
    ref = brute_force_knn(pos, pos, k, shell, shell, exclude_self=True)[0].view(n, k)
    assert torch.equal(within, ref)
    # cross part: nearest nodes of the union of the adjacent shells, by brute force
    p = pos.double().numpy()
    s = shell.numpy()
    for i in range(n):
        cand = np.flatnonzero(np.abs(s - s[i]) == 1)
        d = ((p[cand] - p[i]) ** 2).sum(1)
        expected = cand[np.lexsort((cand, d))][:k_cross]
        assert cross[i].tolist() == expected.tolist()
    assert (shell[cross] - shell.unsqueeze(1)).abs().eq(1).all()
    # both shells adjacent to the middle one are used
    assert set(shell[cross[shell == 1]].unique().tolist()) == {0, 2}


def test_sphere_graph_backends_agree_and_single_shell():
    a = sphere_graph([30, 60], 6, k_cross=2, backend="scipy")
    b = sphere_graph([30, 60], 6, k_cross=2, backend="torch")
    assert torch.equal(a.edge_index, b.edge_index)
    one = sphere_graph([50], 6)
    assert one.edge_index.shape == (2, 300)
    assert torch.equal(one.edge_index, knn_graph(one.pos, 6))


def test_sphere_graph_errors():
    with pytest.raises(ValueError, match="'k'"):
        sphere_graph([8, 30], 8)
    with pytest.raises(ValueError, match="'k_cross'"):
        sphere_graph([10, 30], 4, k_cross=31)
    with pytest.raises(ValueError, match="'k_cross'"):
        sphere_graph([30], 4, k_cross=2)
    with pytest.raises(ValueError, match="'k_cross'"):
        sphere_graph([10, 30], 4, k_cross=-1)
    with pytest.raises(TypeError, match="'sizes'"):
        sphere_graph([10, 30.5], 4)


# ------------------------------------------------------------------------- lattice
@pytest.mark.parametrize("k", [4, 6, 8])
def test_lattice_graph_matches_brute_force(k):
    h, w = 5, 7
    data = lattice_graph(h, w, k)
    expected_pos = grid_points(h, w)
    np.testing.assert_array_equal(data.pos.numpy(), expected_pos)
    assert torch.equal(data.shell, torch.zeros(h * w, dtype=torch.long))
    assert torch.equal(data.edge_index, brute_force_knn(expected_pos, expected_pos, k,
                                                exclude_self=True))
    if k in (4, 8):  # interior pixels: exactly the 4- / 8-neighbourhood
        node = 2 * w + 3
        nbrs = set(data.edge_index[0, node * k:(node + 1) * k].tolist())
        offsets = [(-1, 0), (1, 0), (0, -1), (0, 1)]
        if k == 8:
            offsets += [(-1, -1), (-1, 1), (1, -1), (1, 1)]
        assert nbrs == {(2 + di) * w + 3 + dj for di, dj in offsets}


def test_lattice_graph_errors():
    with pytest.raises(ValueError, match="'k'"):
        lattice_graph(2, 2, 4)
    with pytest.raises(ValueError, match="'height'"):
        lattice_graph(0, 3, 1)
