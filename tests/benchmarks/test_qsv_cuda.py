"""The CUDA benchmark of QSVConv (benchmarks/qsv/cuda.py): its grid and graph against
torch-harmonics, its targets arithmetic, and its whole timing path run on the CPU."""
from __future__ import annotations

import math

import pytest
import torch

from benchmarks.qsv import cuda as qsv_cuda

HARMONICS = ("torch-harmonics not installed; install it with "
             "`pip install --no-deps torch-harmonics==0.9.3`")


@pytest.mark.slow  # importing torch-harmonics takes over a second
def test_equiangular_points_are_torch_harmonics_grid():
    th = pytest.importorskip("torch_harmonics.quadrature", reason=HARMONICS)
    nlat, nlon = 9, 12
    colat, _ = th.precompute_latitudes(nlat, grid="equiangular")
    ours = qsv_cuda.equiangular_points(nlat, nlon)
    theirs = qsv_cuda.equiangular_points(nlat, nlon, colatitudes=colat)
    torch.testing.assert_close(ours, theirs, atol=1e-14, rtol=0)
    torch.testing.assert_close(ours.norm(dim=1), torch.ones(nlat * nlon, dtype=torch.float64))
    # row-major (lat, lon): the first nlon points are the north pole, the last the south
    assert torch.allclose(ours[:nlon], torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64))
    assert torch.allclose(ours[-nlon:], torch.tensor([0.0, 0.0, -1.0], dtype=torch.float64))
    # the second latitude ring, longitude 1: by hand
    t, p = math.pi / (nlat - 1), 2 * math.pi / nlon
    torch.testing.assert_close(ours[nlon + 1], torch.tensor(
        [math.sin(t) * math.cos(p), math.sin(t) * math.sin(p), math.cos(t)],
        dtype=torch.float64))
    with pytest.raises(ValueError, match="'colatitudes' must have shape"):
        qsv_cuda.equiangular_points(nlat, nlon, colatitudes=colat[:-1])
    with pytest.raises(ValueError, match="'nlat' must be >= 2"):
        qsv_cuda.equiangular_points(1, nlon)


@pytest.mark.slow
@pytest.mark.parametrize("grid", sorted(qsv_cuda.K_BY_GRID))
def test_k_by_grid_is_torch_harmonics_mean_neighbourhood(grid):
    pytest.importorskip("torch_harmonics", reason=HARMONICS)
    from benchmarks.qsv.memory import neighbourhood_size

    assert qsv_cuda.K_BY_GRID[grid] == neighbourhood_size(*grid)["k"]


def test_grid_graph_is_the_brute_force_knn():
    from quest_geometric.testing.geometry import brute_force_knn

    nlat, nlon, k = 7, 10, 5
    ei = qsv_cuda.grid_graph(nlat, nlon, k)
    pos = qsv_cuda.equiangular_points(nlat, nlon)
    ref = brute_force_knn(pos, pos, k)
    # both list (source, target) sorted by target; the same neighbour sets per target
    got = ei[0].view(-1, k).sort(1).values
    want = ref[0].view(-1, k).sort(1).values
    # ties at the poles (nlon equal points) may be broken differently: compare distances
    d_got = (pos[got] - pos[:, None]).norm(dim=-1).sort(1).values
    d_want = (pos[want] - pos[:, None]).norm(dim=-1).sort(1).values
    torch.testing.assert_close(d_got, d_want)
    assert torch.equal(ei[1], torch.arange(nlat * nlon).repeat_interleave(k))


def test_targets_arithmetic_by_hand():
    def row(layer, what, ms, speedup=1.0):
        return {"points": 100, "mode": "eager", "pass": what, "layer": layer, "ms": ms,
                "qsv_speedup": speedup, "spmm_ms": 1.0, "spmm_fb_ms": 3.0, "gather_ms": 0.5}

    rows = [row("QSVConv", "forward", 2.5), row("QSVConv", "forward+backward", 8.0),
            row("TransformerConv", "forward+backward", 40.0, speedup=5.0)]
    (t,) = qsv_cuda.targets(rows)
    assert t["fwd_vs_spmm"] == pytest.approx(0.4) and not t["floor_target_met"]
    assert t["fb_vs_spmm"] == pytest.approx(3 / 8) and t["fb_floor_target_met"]
    assert t["fb_vs_tconv"] == 5.0
    assert qsv_cuda.targets(rows[1:]) == []  # no forward row: no target row


def test_run_refuses_without_cuda(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(RuntimeError, match="needs a CUDA device"):
        qsv_cuda.run(quick=True, out_dir=tmp_path)


@pytest.mark.slow
def test_cuda_rows_timing_path_on_cpu():
    """The whole timing path on a tiny grid on the CPU (the code the GPU runs, so that a
    mistake in it is found here, not in the GPU's scarce minutes)."""
    grid = (6, 12)
    rows, notes = qsv_cuda.cuda_rows(grids=(grid,), compiled=False, repeat=2, progress=False,
                                     device="cpu", k_by_grid={grid: 5})
    layers = {r["layer"] for r in rows}
    assert {"QSVConv", "TransformerConv"} <= layers
    assert {r["pass"] for r in rows} == {"forward", "forward+backward"}
    for r in rows:
        assert r["points"] == 72 and r["k"] == 5 and r["ms"] > 0
        assert r["spmm_ms"] > 0 and r["spmm_fb_ms"] > 0 and r["gather_ms"] > 0
        if r["layer"] == "QSVConv":
            assert r["qsv_speedup"] == 1.0
        assert math.isnan(r["peak_mib"]) == (r["pass"] == "forward")
    t = qsv_cuda.targets(rows)
    assert len(t) == 1
    q = next(r for r in rows if r["layer"] == "QSVConv" and r["pass"] == "forward")
    assert t[0]["fwd_vs_spmm"] == pytest.approx(q["spmm_ms"] / q["ms"])


def test_launch_profile_counts_operators_on_the_cpu():
    # no kernels on the CPU; the operator counts must order as the work does: the backward
    # adds operators to the forward, and one sparse product is fewer than a QSVConv forward
    rows = qsv_cuda.launch_profile(grids=((6, 12),), device="cpu", calls=2,
                                   k_by_grid={(6, 12): 5})
    by = {r["what"]: r for r in rows}
    assert set(by) == {"forward", "forward+backward", "spmm (floor)"}
    assert all(r["points"] == 72 and r["kernels"] == 0 and r["wall_ms"] > 0 for r in rows)
    assert 0 < by["spmm (floor)"]["aten_ops"] < by["forward"]["aten_ops"]
    assert by["forward"]["aten_ops"] < by["forward+backward"]["aten_ops"]
