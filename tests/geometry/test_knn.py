"""Tests of quest_geometric.geometry.knn: every exact kNN back-end against a brute-force
reference (:mod:`quest_geometric.testing.geometry`)."""
import numpy as np
import pytest
import torch
from scipy.spatial.distance import cdist

from quest_geometric import typing as qg_typing
from quest_geometric.geometry.knn import knn_bipartite, knn_graph, resolve_backend
from quest_geometric.testing.geometry import brute_force_knn, grid_points

BACKENDS = [
    "scipy",
    "torch",
    pytest.param("torch_cluster", marks=pytest.mark.skipif(
        not qg_typing.WITH_TORCH_CLUSTER,
        reason="torch-cluster not installed; `pip install --no-build-isolation -e \".[ext]\"` "
               "in the repository's root installs it")),
]


# ------------------------------------------------------------------------- knn
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("loop", [False, True])
@pytest.mark.parametrize("batched", [False, True])
def test_knn_graph_random_matches_brute_force(backend, loop, batched):
    gen = torch.Generator().manual_seed(0)
    pos = torch.rand(240, 3, generator=gen)
    batch = torch.sort(torch.randint(0, 4, (240,), generator=gen))[0] if batched else None
    expected = brute_force_knn(pos, pos, 7, batch, batch, exclude_self=not loop)
    out = knn_graph(pos, 7, batch, loop=loop, backend=backend)
    assert out.dtype == torch.long
    assert torch.equal(out, expected)


@pytest.mark.parametrize("chunk_size", [1, 7, 50, None, 10_000])
def test_knn_graph_torch_chunks_equal_reference(chunk_size):
    gen = torch.Generator().manual_seed(1)
    pos = torch.randn(150, 2, generator=gen)
    batch = torch.tensor([0] * 40 + [2] * 60 + [3] * 50)  # an empty batch element too
    single = knn_graph(pos, 5, batch, backend="torch", chunk_size=10_000)  # the reference
    assert torch.equal(single, brute_force_knn(pos, pos, 5, batch, batch, exclude_self=True))
    assert torch.equal(knn_graph(pos, 5, batch, backend="torch", chunk_size=chunk_size),
                       single)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("k", [1, 4, 6, 8, 13, 30])
@pytest.mark.parametrize("loop", [False, True])
def test_knn_graph_lattice_ties(backend, k, loop):
    # Integer lattice far from the origin: many exact ties, all broken by smaller index.
    pos = torch.tensor(grid_points(9, 7, offset=1000.0), dtype=torch.float32)
    expected = brute_force_knn(pos, pos, k, exclude_self=not loop)
    assert torch.equal(knn_graph(pos, k, loop=loop, backend=backend), expected)


@pytest.mark.parametrize("backend", BACKENDS)
def test_knn_graph_duplicates_need_retries(backend):
    # Groups of 12 identical points: 11 candidates tie at distance 0, more than the first
    # candidate list holds, so the exactness check must widen the search.
    pos = torch.arange(10.0).repeat_interleave(12).unsqueeze(1)
    for k in (3, 11, 15):
        expected = brute_force_knn(pos, pos, k, exclude_self=True)
        assert torch.equal(knn_graph(pos, k, backend=backend), expected)


@pytest.mark.parametrize("backend", BACKENDS)
def test_knn_bipartite_matches_brute_force(backend):
    gen = torch.Generator().manual_seed(2)
    x, y = torch.rand(80, 3, generator=gen), torch.rand(30, 3, generator=gen)
    bx = torch.tensor([0] * 50 + [1] * 30)
    by = torch.tensor([0] * 10 + [1] * 20)
    out = knn_bipartite(x, y, 6, bx, by, backend=backend)
    assert torch.equal(out, brute_force_knn(x, y, 6, bx, by))


def test_knn_float64_and_auto():
    pos = torch.rand(60, 3, dtype=torch.float64)
    assert torch.equal(knn_graph(pos, 4), brute_force_knn(pos, pos, 4, exclude_self=True))
    assert resolve_backend("auto", torch.device("cpu")) == "scipy"
    expected = "torch_cluster" if qg_typing.WITH_TORCH_CLUSTER else "torch"
    assert resolve_backend("auto", torch.device("cuda")) == expected


def test_knn_errors():
    pos = torch.rand(10, 3)
    with pytest.raises(ValueError, match="^knn_graph: 'batch' must be sorted"):
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
    with pytest.raises(ValueError, match="^knn_graph: 'pos' must be finite, got NaN or infinite"):
        knn_graph(bad, 2)
    with pytest.raises(ValueError, match=r"^knn_graph: 'pos' must be of shape \[N, D\]"):
        knn_graph(pos.view(-1), 2)
    with pytest.raises(TypeError, match="^knn_graph: 'pos' must be a floating-point tensor"):
        knn_graph(pos.long(), 2)
    with pytest.raises(ValueError, match="^knn_graph: 'backend' must be one of"):
        knn_graph(pos, 2, backend="faiss")
    with pytest.raises(ValueError, match=r"^knn_graph: 'chunk_size' \(or None\) must be an int"):
        knn_graph(pos, 2, backend="torch", chunk_size=0)
    with pytest.raises(ValueError, match="^knn_graph: 'k' must be an int >= 1, got 0$"):
        knn_graph(pos, 0)
    with pytest.raises(TypeError, match="^knn_graph: 'k' must be an int >= 1, got True$"):
        knn_graph(pos, True)


@pytest.mark.skipif(qg_typing.WITH_TORCH_CLUSTER, reason="torch-cluster is installed")
def test_knn_torch_cluster_missing_is_clear():
    with pytest.raises(ImportError, match="torch-cluster"):
        knn_graph(torch.rand(10, 3), 2, backend="torch_cluster")


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
                           brute_force_knn(pos, pos, 6, batch, batch, exclude_self=not loop))
    lattice = torch.tensor(grid_points(6, 6), dtype=torch.float32)
    assert torch.equal(knn_graph(lattice, 8, backend="torch_cluster"),
                       brute_force_knn(lattice, lattice, 8, exclude_self=True))
    dup = torch.arange(5.0).repeat_interleave(12).unsqueeze(1)
    assert torch.equal(knn_graph(dup, 3, backend="torch_cluster"),
                       brute_force_knn(dup, dup, 3, exclude_self=True))
