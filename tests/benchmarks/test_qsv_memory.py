"""The memory benchmark: the FLOP formulas against a hand count and torch's FLOP counter, the
lower bound, the table, and (slow: spawned children) the measurement itself: a positive
delta that grows with the points, a lower bound that holds, a cap too small giving a row."""
import json
import math
import sys

import pytest
import torch

from benchmarks.qsv import memory as qsv_memory

HARMONICS = ("torch-harmonics not installed; install it with "
             "`pip install --no-deps torch-harmonics==0.9.3`")
LINUX = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_forward_flops_by_hand():
    # N = 2 nodes, E = 3 edges, C = 4 channels, one head
    # QSVConv: map C -> 4 (2*2*4*4 = 64), two rotations of the 2 x 1 vector parts by 3 x 3
    # matrices (2 * 2 * 1 * 9 * 2 = 72), one 4-d dot product per edge (3 * 8 = 24) and the
    # weighted sum (3 * 4 * 2 = 24)
    assert qsv_memory.forward_flops("QSVConv", 2, 3, 4) == 64 + 72 + 24 + 24
    # four 4 x 4 maps on 2 nodes (4 * 2 * 2 * 16 = 256), per edge a 4-d dot product and a
    # weighted sum of 4-vectors (3 * (8 + 8) = 48)
    assert qsv_memory.forward_flops("TransformerConv", 2, 3, 4) == 256 + 48
    assert qsv_memory.forward_flops("NeighborhoodAttentionS2", 2, 3, 4) == 256 + 48
    with pytest.raises(ValueError, match="forward_flops: 'layer' must be"):
        qsv_memory.forward_flops("GATConv", 2, 3, 4)
    with pytest.raises(TypeError, match="forward_flops: 'nodes' must be"):
        qsv_memory.forward_flops("QSVConv", 2.0, 3, 4)


@pytest.mark.slow
def test_forward_flops_match_torch_flop_counter():
    """torch's FlopCounterMode counts matrix products (and QSVConv's native rotation, whose
    formula is registered) only; the formula minus its
    element-wise per-edge terms must equal its count: QSVConv on its gather path (dense
    maps, rotations and the [N, k] x [N, k, C] weighted sum; not the per-edge 4-d dot
    products, 8 E; the fused path's sparse product would count as a dense [N, N] one),
    TransformerConv and torch-harmonics' NeighborhoodAttentionS2 (their four dense maps;
    not the per-edge dot products and weighted sums, 4 E C, which PyG computes element-wise
    and torch-harmonics in its own kernel)."""
    pytest.importorskip("torch_harmonics", reason=HARMONICS)
    from torch.utils.flop_counter import FlopCounterMode
    from torch_geometric.nn import TransformerConv
    from torch_harmonics import NeighborhoodAttentionS2

    from benchmarks.qsv.harmonics import equiangular_graph
    from quest_geometric.nn.qsv_conv import QSVConv

    nlat, nlon, k, C = 6, 12, 5, 16
    n = nlat * nlon
    ei = equiangular_graph(nlat, nlon, k)
    e = ei.size(1)
    x = torch.randn(n, C)
    th = NeighborhoodAttentionS2(C, (nlat, nlon), (nlat, nlon), num_heads=1)
    e_th = th.psi_col_idx.numel() * nlon
    calls = {
        "QSVConv": (QSVConv(C, C, heads=1, fused=False), (x, ei), {"dense": True}, e, 8 * e),
        "TransformerConv": (TransformerConv(C, C, heads=1), (x, ei), {}, e, 4 * e * C),
        "NeighborhoodAttentionS2": (th, (x.t().reshape(1, C, nlat, nlon).contiguous(),), {},
                                    e_th, 4 * e_th * C),
    }
    for name, (layer, args, kw, edges, elementwise) in calls.items():
        with FlopCounterMode(display=False) as counter:
            layer(*args, **kw)
        assert counter.get_total_flops() == (
            qsv_memory.forward_flops(name, n, edges, C) - elementwise), name


def test_neighbourhood_size_reads_a_given_layer_as_it_reads_its_own():
    th_mod = pytest.importorskip("torch_harmonics", reason=HARMONICS)
    layer = th_mod.NeighborhoodAttentionS2(8, (12, 24), (12, 24), num_heads=1)
    own = qsv_memory.neighbourhood_size(12, 24)
    given = qsv_memory.neighbourhood_size(12, 24, layer=layer)
    assert given == own
    # the entries over the grid: one meridian's neighbourhoods, shifted to every longitude
    assert own["th_edges"] == layer.psi_col_idx.numel() * 24
    assert own["k"] == max(1, round(own["mean_nbr"]))


def test_lower_bound_gb():
    # TransformerConv: (N C + 4 E C) float32; the others 3 N C
    assert qsv_memory.lower_bound_gb("TransformerConv", 1000, 20000, 64) == pytest.approx(
        4 * (1000 * 64 + 4 * 20000 * 64) / 2**30)
    assert qsv_memory.lower_bound_gb("QSVConv", 1000, 20000, 64) == pytest.approx(
        4 * 3 * 1000 * 64 / 2**30)
    # at 1,036,800 points and k = 23 TransformerConv cannot fit under 12 GiB
    assert qsv_memory.lower_bound_gb("TransformerConv", 1036800, 1036800 * 23) > 12


@pytest.mark.slow
def test_rows_skip_above_the_cap_and_table_has_the_columns(tmp_path, monkeypatch):
    """With a cap below every layer's lower bound nothing is measured (no child starts):
    every row says skipped with its bound, and the table is written with its columns."""
    pytest.importorskip("torch_harmonics", reason=HARMONICS)

    def no_child(*args, **kwargs):  # pragma: no cover - must not be called
        raise AssertionError("a child process was started")

    monkeypatch.setattr(qsv_memory, "_in_child", no_child)
    res = qsv_memory.run(grids=[(45, 90)], cap_gb=1e-6, out_dir=tmp_path, progress=False,
                         name="mem")
    rows = res["rows"]
    assert [r["layer"] for r in rows] == list(qsv_memory.LAYERS)
    for r in rows:
        assert r["status"].startswith("skipped: estimated >= ") and "cap 1e-06 GiB" in r[
            "status"]
        assert math.isnan(r["peak_mb"]) and r["fits_8gb"] is None  # bound below 8 GiB
        assert r["points"] == 4050 and r["grid"] == "45x90"
    assert rows[0]["edges"] == 4050 * rows[0]["k"]
    assert rows[0]["params"] == 64 * 4 + 4 + 64  # lin_q (weight, bias) and the bias
    header = (tmp_path / "mem.csv").read_text().splitlines()[0].split(",")
    assert header == qsv_memory.COLUMNS
    md = (tmp_path / "mem.md").read_text()
    assert "| fwd_gflop |" in md and "RLIMIT_AS" in md
    meta = json.loads((tmp_path / "mem.json").read_text())["meta"]
    assert meta["cap_gb"] == 1e-6 and meta["target_gb"] == 8.0 and "torch" in meta


def test_fits_reads_the_status():
    ok = {"status": "ok", "peak_mb": 9000.0, "reached_mb": math.nan}
    assert qsv_memory._fits(ok, 8192) is False
    assert qsv_memory._fits({**ok, "peak_mb": 100.0}, 8192) is True
    failed = {"status": "does not fit under the cap (RuntimeError)", "peak_mb": math.nan}
    assert qsv_memory._fits({**failed, "reached_mb": 9000.0}, 8192) is False
    assert qsv_memory._fits({**failed, "reached_mb": 1000.0}, 8192) is None
    assert qsv_memory._fits({**failed, "reached_mb": math.nan}, 8192) is None


def test_measure_layer_checks_its_arguments():
    with pytest.raises(ValueError, match="measure_layer: 'graph_path' must be"):
        qsv_memory.measure_layer("QSVConv", 45, 90)
    with pytest.raises(ValueError, match="measure_layer: 'cap_gb' must be"):
        qsv_memory.measure_layer("NeighborhoodAttentionS2", 45, 90, cap_gb=0)


@pytest.fixture(scope="module")
def graphs(tmp_path_factory):
    """The saved kNN graphs of the 45 x 90 and 90 x 180 grids (k = 19 and 20)."""
    pytest.importorskip("torch_harmonics", reason=HARMONICS)
    from benchmarks.qsv.harmonics import equiangular_graph

    out = {}
    for nlat, nlon in ((45, 90), (90, 180)):
        k = qsv_memory.neighbourhood_size(nlat, nlon)["k"]
        path = tmp_path_factory.mktemp("graphs") / f"g{nlat}.pt"
        edge_index = equiangular_graph(nlat, nlon, k)
        torch.save(edge_index, path)
        out[(nlat, nlon)] = (str(path), edge_index.size(1))
    return out


@LINUX
@pytest.mark.slow
def test_qsv_delta_is_positive_and_grows_with_the_points(graphs):
    small = qsv_memory.measure_layer("QSVConv", 45, 90, graphs[(45, 90)][0])
    large = qsv_memory.measure_layer("QSVConv", 90, 180, graphs[(90, 180)][0])
    for r in (small, large):
        assert r["status"] == "ok" and r["peak_reset"] is True
        assert r["peak_mb"] == pytest.approx(r["baseline_mb"] + r["delta_mb"])
        # at least x, its gradient and the output: 3 [N, 64] float32 tensors
        assert r["delta_mb"] >= 3 * 45 * 90 * 64 * 4 / 2**20
    # 4x the points: the fixed costs (allocator arenas, thread pools, about 20 MiB here)
    # cancel in the difference, which holds at least the growth of x, its gradient and the
    # output. (A ratio test, large > 2 x small, measured 1.96-2.25 across runs: fragile.)
    growth_mb = 3 * (90 * 180 - 45 * 90) * 64 * 4 / 2**20
    assert large["delta_mb"] - small["delta_mb"] >= growth_mb
    assert large["baseline_mb"] > small["baseline_mb"]  # the larger graph and input


@LINUX
@pytest.mark.slow
def test_transformer_conv_peak_is_above_its_lower_bound(graphs):
    path, edges = graphs[(90, 180)]
    r = qsv_memory.measure_layer("TransformerConv", 90, 180, path)
    assert r["status"] == "ok"
    bound_mb = qsv_memory.lower_bound_gb("TransformerConv", 90 * 180, edges) * 1024
    assert r["delta_mb"] >= bound_mb


@LINUX
@pytest.mark.slow
def test_a_cap_too_small_gives_a_does_not_fit_row(graphs):
    """Under a 50 MiB address-space cap (less than the child already maps) the call fails
    inside the child, which reports it; the parent gets a row, not an exception."""
    r = qsv_memory.measure_layer("QSVConv", 90, 180, graphs[(90, 180)][0], cap_gb=0.05)
    assert r["status"].startswith(("does not fit under the cap (RuntimeError: ",
                                   "does not fit under the cap (MemoryError: "))
    assert r["cap_gb"] == 0.05 and math.isnan(r["peak_mb"]) and math.isnan(r["delta_mb"])
    assert r["message"] and r["reached_mb"] > 0
