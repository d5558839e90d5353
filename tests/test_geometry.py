"""Tests of quest_geometric.geometry: Fibonacci spheres, exact kNN backends, template graphs."""
import math

import numpy as np
import pytest
import torch
from scipy.spatial.distance import cdist

from quest_geometric import typing as qg_typing
from quest_geometric.geometry.fibonacci import concentric_spheres, fibonacci_sphere
from quest_geometric.geometry.graphs import lattice_graph, sphere_graph
from quest_geometric.geometry.knn import knn_bipartite, knn_graph, resolve_backend

BACKENDS = [
    "scipy",
    "torch",
    pytest.param("torch_cluster", marks=pytest.mark.skipif(
        not qg_typing.WITH_TORCH_CLUSTER, reason="torch-cluster not installed")),
]


# ------------------------------------------------------------------------- references
def ref_knn(x, y, k, bx=None, by=None, exclude_self=False):
    """Brute force: per query, sort all same-batch candidates by (float64 sq. dist, index)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    bx = np.zeros(len(x), int) if bx is None else np.asarray(bx)
    by = np.zeros(len(y), int) if by is None else np.asarray(by)
    d = cdist(y, x, "sqeuclidean")
    out = []
    for i in range(len(y)):
        j = np.arange(len(x))
        ok = bx == by[i]
        if exclude_self:
            ok &= j != i
        j = j[ok]
        out.append(j[np.lexsort((j, d[i, j]))][:k])
    nbr = torch.from_numpy(np.stack(out)).long()
    return torch.stack([nbr.reshape(-1), torch.arange(len(y)).repeat_interleave(k)])


def grid_points(h, w, offset=0.0):
    ii, jj = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    return np.stack([jj.ravel(), ii.ravel(), np.zeros(h * w)], 1) + offset


# ------------------------------------------------------------------------- fibonacci
@pytest.mark.parametrize("radius", [1.0, 2.5])
def test_fibonacci_sphere_formula_and_uniformity(radius):
    n = 500
    pos = fibonacci_sphere(n, radius, dtype=torch.float64)
    assert pos.shape == (n, 3) and pos.dtype == torch.float64
    assert torch.allclose(pos.norm(dim=1), torch.full((n,), radius, dtype=torch.float64))
    i = np.arange(n)
    z = 1 - 2 * (i + 0.5) / n
    phi = i * math.pi * (3 - math.sqrt(5))
    r = np.sqrt(1 - z**2)
    expected = radius * np.stack([r * np.cos(phi), r * np.sin(phi), z], 1)
    np.testing.assert_allclose(pos.numpy(), expected, atol=1e-12)
    # nearly uniform: centroid at the origin, nearest-neighbour distances within a narrow
    # band around the ideal spacing sqrt(4 pi / n) * radius.
    assert pos.mean(0).norm() < 0.01 * radius
    d = cdist(pos.numpy(), pos.numpy())
    np.fill_diagonal(d, np.inf)
    nn = d.min(1) / (radius * math.sqrt(4 * math.pi / n))
    assert 0.75 < nn.min() and nn.max() < 1.25 and nn.std() < 0.1


def test_fibonacci_sphere_dtype_and_errors():
    assert fibonacci_sphere(10, dtype=torch.float32).dtype == torch.float32
    with pytest.raises(ValueError, match="'n'"):
        fibonacci_sphere(0)
    with pytest.raises(TypeError, match="'n'"):
        fibonacci_sphere(2.5)
    with pytest.raises(ValueError, match="'radius'"):
        fibonacci_sphere(10, radius=-1.0)


def test_concentric_spheres():
    pos, shell = concentric_spheres([8, 32, 128])
    assert pos.shape == (168, 3) and shell.dtype == torch.long
    assert torch.equal(torch.bincount(shell), torch.tensor([8, 32, 128]))
    assert torch.allclose(pos.norm(dim=1), (shell + 1).to(pos.dtype), atol=1e-6)
    pos, shell = concentric_spheres([8, 16], radii=[0.5, 3.0])
    assert torch.allclose(pos.norm(dim=1), torch.tensor([0.5] * 8 + [3.0] * 16), atol=1e-6)
    with pytest.raises(ValueError, match="'radii'"):
        concentric_spheres([8, 16], radii=[2.0, 1.0])
    with pytest.raises(ValueError, match="'radii'"):
        concentric_spheres([8, 16], radii=[1.0])
    with pytest.raises(ValueError, match="'sizes'"):
        concentric_spheres([])


# ------------------------------------------------------------------------- knn
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("loop", [False, True])
@pytest.mark.parametrize("batched", [False, True])
def test_knn_graph_random_matches_brute_force(backend, loop, batched):
    gen = torch.Generator().manual_seed(0)
    pos = torch.rand(240, 3, generator=gen)
    batch = torch.sort(torch.randint(0, 4, (240,), generator=gen))[0] if batched else None
    expected = ref_knn(pos, pos, 7, batch, batch, exclude_self=not loop)
    out = knn_graph(pos, 7, batch, loop=loop, backend=backend)
    assert out.dtype == torch.long
    assert torch.equal(out, expected)


@pytest.mark.parametrize("chunk_size", [1, 7, 50, None, 10_000])
def test_knn_graph_torch_chunks_equal_reference(chunk_size):
    gen = torch.Generator().manual_seed(1)
    pos = torch.randn(150, 2, generator=gen)
    batch = torch.tensor([0] * 40 + [2] * 60 + [3] * 50)  # an empty batch element too
    single = knn_graph(pos, 5, batch, backend="torch", chunk_size=10_000)  # the reference
    assert torch.equal(single, ref_knn(pos, pos, 5, batch, batch, exclude_self=True))
    assert torch.equal(knn_graph(pos, 5, batch, backend="torch", chunk_size=chunk_size),
                       single)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("k", [1, 4, 6, 8, 13, 30])
@pytest.mark.parametrize("loop", [False, True])
def test_knn_graph_lattice_ties(backend, k, loop):
    # Integer lattice far from the origin: many exact ties, all broken by smaller index.
    pos = torch.tensor(grid_points(9, 7, offset=1000.0), dtype=torch.float32)
    expected = ref_knn(pos, pos, k, exclude_self=not loop)
    assert torch.equal(knn_graph(pos, k, loop=loop, backend=backend), expected)


@pytest.mark.parametrize("backend", BACKENDS)
def test_knn_graph_duplicates_need_retries(backend):
    # Groups of 12 identical points: 11 candidates tie at distance 0, more than the first
    # candidate list holds, so the exactness check must widen the search.
    pos = torch.arange(10.0).repeat_interleave(12).unsqueeze(1)
    for k in (3, 11, 15):
        expected = ref_knn(pos, pos, k, exclude_self=True)
        assert torch.equal(knn_graph(pos, k, backend=backend), expected)


@pytest.mark.parametrize("backend", BACKENDS)
def test_knn_bipartite_matches_brute_force(backend):
    gen = torch.Generator().manual_seed(2)
    x, y = torch.rand(80, 3, generator=gen), torch.rand(30, 3, generator=gen)
    bx = torch.tensor([0] * 50 + [1] * 30)
    by = torch.tensor([0] * 10 + [1] * 20)
    out = knn_bipartite(x, y, 6, bx, by, backend=backend)
    assert torch.equal(out, ref_knn(x, y, 6, bx, by))


def test_knn_float64_and_auto():
    pos = torch.rand(60, 3, dtype=torch.float64)
    assert torch.equal(knn_graph(pos, 4), ref_knn(pos, pos, 4, exclude_self=True))
    assert resolve_backend("auto", torch.device("cpu")) == "scipy"
    expected = "torch_cluster" if qg_typing.WITH_TORCH_CLUSTER else "torch"
    assert resolve_backend("auto", torch.device("cuda")) == expected


def test_knn_errors():
    pos = torch.rand(10, 3)
    with pytest.raises(ValueError, match="'batch' must be sorted"):
        knn_graph(pos, 2, torch.tensor([0, 1] * 5))
    with pytest.raises(ValueError, match="'k'"):
        knn_graph(pos, 10)  # 9 other points
    assert knn_graph(pos, 10, loop=True).shape == (2, 100)
    with pytest.raises(ValueError, match="'k'"):
        knn_graph(pos, 11, loop=True)
    with pytest.raises(ValueError, match="'k'"):
        knn_graph(pos, 3, torch.tensor([0] * 8 + [1] * 2))  # second graph too small
    bad = pos.clone()
    bad[3, 1] = float("nan")
    with pytest.raises(ValueError, match="non-finite"):
        knn_graph(bad, 2)
    with pytest.raises(ValueError, match="'pos'"):
        knn_graph(pos.view(-1), 2)
    with pytest.raises(ValueError, match="'backend'"):
        knn_graph(pos, 2, backend="faiss")
    with pytest.raises(ValueError, match="'chunk_size'"):
        knn_graph(pos, 2, backend="torch", chunk_size=0)
    with pytest.raises(ValueError, match="'k'"):
        knn_graph(pos, 0)


@pytest.mark.skipif(qg_typing.WITH_TORCH_CLUSTER, reason="torch-cluster is installed")
def test_knn_torch_cluster_missing_is_clear():
    with pytest.raises(ImportError, match="torch-cluster"):
        knn_graph(torch.rand(10, 3), 2, backend="torch_cluster")


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
    ref = ref_knn(pos, pos, k, shell, shell, exclude_self=True)[0].view(n, k)
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
    assert torch.equal(data.edge_index, ref_knn(expected_pos, expected_pos, k,
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


def test_knn_torch_cluster_adapter_with_stub(monkeypatch):
    """Checks the torch_cluster adapter (padding, grouping, exactness retries) against a
    stand-in with torch_cluster.knn's contract: for each y, up to k nearest x of the same
    batch element as (y index, x index) pairs, ties in arbitrary order, pairs unordered."""
    import sys
    import types

    rng = np.random.default_rng(0)

    def fake_knn(x, y, k, batch_x=None, batch_y=None):
        bx = np.zeros(len(x), int) if batch_x is None else batch_x.numpy()
        by = np.zeros(len(y), int) if batch_y is None else batch_y.numpy()
        d = cdist(y.numpy(), x.numpy(), "sqeuclidean")
        rows, cols = [], []
        for i in range(len(y)):
            j = np.flatnonzero(bx == by[i])
            j = j[np.lexsort((rng.random(len(j)), d[i, j]))][:k]  # random tie order
            rows += [i] * len(j)
            cols += j.tolist()
        perm = rng.permutation(len(rows))
        return torch.tensor([np.array(rows)[perm].tolist(), np.array(cols)[perm].tolist()])

    monkeypatch.setitem(sys.modules, "torch_cluster", types.SimpleNamespace(knn=fake_knn))
    monkeypatch.setattr(qg_typing, "WITH_TORCH_CLUSTER", True)
    assert resolve_backend("auto", torch.device("cuda")) == "torch_cluster"
    gen = torch.Generator().manual_seed(3)
    pos = torch.rand(90, 3, generator=gen)
    batch = torch.tensor([0] * 20 + [1] * 70)
    for loop in (False, True):
        assert torch.equal(knn_graph(pos, 6, batch, loop=loop, backend="torch_cluster"),
                           ref_knn(pos, pos, 6, batch, batch, exclude_self=not loop))
    lattice = torch.tensor(grid_points(6, 6), dtype=torch.float32)
    assert torch.equal(knn_graph(lattice, 8, backend="torch_cluster"),
                       ref_knn(lattice, lattice, 8, exclude_self=True))
    dup = torch.arange(5.0).repeat_interleave(12).unsqueeze(1)
    assert torch.equal(knn_graph(dup, 3, backend="torch_cluster"),
                       ref_knn(dup, dup, 3, exclude_self=True))
