"""The torch-harmonics comparison and the small-graph table: skipping without
torch-harmonics, the rows, the targets by hand, and the targets rewritten from a finished run."""
import pytest
import torch

from benchmarks.qsv import vs_torch_harmonics as qsv_vs_torch_harmonics
from benchmarks.qsv.harmonics import equiangular_graph


#: torch-harmonics is no extra of the package: 0.9.3 declares torch 2.14, so pip must install it
#: without its dependencies to keep torch 2.13 (see the experiment's own message).
HARMONICS = ("torch-harmonics not installed; install it with "
             "`pip install --no-deps torch-harmonics==0.9.3`")


def test_vs_torch_harmonics_skips_clearly_without_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(qsv_vs_torch_harmonics, "harmonics_version", lambda: None)
    monkeypatch.setattr(qsv_vs_torch_harmonics, "small_graph_rows",
                        lambda threads, repeat: [{"layer": "QSVConv", "ms": 1.0}])
    res = qsv_vs_torch_harmonics.run(quick=True, out_dir=tmp_path, progress=False)
    assert res["rows"] == [] and "pip install --no-deps torch-harmonics==0.9.3" in res["skipped"]
    assert "torch-harmonics is not installed" in capsys.readouterr().out
    assert not (tmp_path / "qsv_vs_torch_harmonics_quick.csv").exists()
    assert (tmp_path / "qsv_small_graphs_quick.csv").is_file()


@pytest.mark.slow
def test_harmonics_rows_on_a_small_grid():
    pytest.importorskip("torch_harmonics", reason=HARMONICS)
    rows = qsv_vs_torch_harmonics.harmonics_rows(grids=((8, 16),), threads=(1,),
                                                 compiled=False, repeat=1, progress=False)
    from quest_geometric.nn import qsv_native_available

    # the PyTorch path (native kernels off) is timed beside the layer where they are built
    extra = (qsv_vs_torch_harmonics.TORCH_PATH,) if qsv_native_available() else ()
    floors = {(p, name) for p, names in qsv_vs_torch_harmonics.FLOORS.items() for name in names}
    assert {(r["pass"], r["layer"]) for r in rows} == {
        (p, name) for p in ("forward", "forward+backward")
        for name in ("QSVConv", "NeighborhoodAttentionS2", "TransformerConv") + extra} | floors
    for r in rows:
        assert r["points"] == 128 and r["k"] == max(1, round(r["mean_nbr_th"]))
        assert r["ms"] > 0 and r["qsv_speedup"] > 0
        if (r["pass"], r["layer"]) in floors:  # timed in QSVConv's rounds, no parameters
            assert "params" not in r
        else:
            assert r["params"] > 0 and r["fwd_gflop"] > 0
        if r["layer"] == "QSVConv":
            assert r["qsv_speedup"] == pytest.approx(1.0)
    # the targets take the floors' paired ratios from those rows
    (t,) = qsv_vs_torch_harmonics.harmonics_targets(rows)
    spmm = next(r for r in rows if r["layer"] == qsv_vs_torch_harmonics.FLOOR_SPMM)
    assert t["fwd_vs_spmm"] == spmm["qsv_speedup"]


@pytest.mark.slow
def test_equiangular_graph_is_the_dense_layout_of_the_grid_points():
    pytest.importorskip("torch_harmonics", reason=HARMONICS)
    from quest_geometric.nn.qsv_conv import QSVConv

    ei = equiangular_graph(6, 12, 5)
    assert ei.shape == (2, 72 * 5) and QSVConv.is_dense_layout(ei, 72)
    # self loops, except at the poles, where the 12 points of a ring coincide (ties go to
    # the smaller index)
    has_self = (ei[0].view(72, 5) == torch.arange(72).view(72, 1)).any(1)
    assert bool(has_self[12:60].all())


def test_small_graph_rows():
    rows = qsv_vs_torch_harmonics.small_graph_rows(threads=(1,), repeat=1, batch_size=2)
    assert {r["layer"] for r in rows} == {"QSVConv", "TransformerConv"}
    for r in rows:
        assert r["graphs"] == 2 and r["nodes"] == 160 and r["edges"] == 1600 and r["ms"] > 0


def _row(points, threads, mode, what, layer, ms, speedup, gather=10.0, spmm=2.0, spmm_fb=None):
    row = {"points": points, "threads": threads, "mode": mode, "pass": what, "layer": layer,
           "ms": ms, "qsv_speedup": speedup, "gather_ms": gather, "spmm_ms": spmm}
    if spmm_fb is not None:
        row["spmm_fb_ms"] = spmm_fb
    return row


def _eager_cell(spmm_fb: float) -> list[dict]:
    """QSVConv and its two peers in one eager cell (100 points, one thread), both passes."""
    return [
        _row(100, 1, "eager", "forward", "QSVConv", 4.0, 1.0),
        _row(100, 1, "eager", "forward", "NeighborhoodAttentionS2", 5.0, 1.25),
        _row(100, 1, "eager", "forward", "TransformerConv", 9.0, 2.25),
        _row(100, 1, "eager", "forward+backward", "QSVConv", 10.0, 1.0, spmm_fb=spmm_fb),
        _row(100, 1, "eager", "forward+backward", "NeighborhoodAttentionS2", 20.0, 2.0),
        _row(100, 1, "eager", "forward+backward", "TransformerConv", 35.0, 3.5),
    ]


def test_harmonics_targets_by_hand():
    eager = qsv_vs_torch_harmonics.PAIRED_EAGER
    torch_path = qsv_vs_torch_harmonics.TORCH_PATH
    rows = _eager_cell(spmm_fb=4.0) + [
        # the PyTorch path (native kernels off) in the eager rounds
        _row(100, 1, "eager", "forward", torch_path, 8.0, 2.0),
        _row(100, 1, "eager", "forward+backward", torch_path, 15.0, 1.5),
        # a compiled cell, with the eager layer timed in its rounds
        _row(100, 1, "compiled", "forward", "QSVConv", 3.0, 1.0),
        _row(100, 1, "compiled", "forward", "NeighborhoodAttentionS2", 6.0, 2.0),
        _row(100, 1, "compiled", "forward", eager, 4.5, 1.5),
        _row(100, 1, "compiled", "forward+backward", "QSVConv", 12.0, 1.0, spmm_fb=4.0),
        _row(100, 1, "compiled", "forward+backward", "NeighborhoodAttentionS2", 36.0, 3.0),
        _row(100, 1, "compiled", "forward+backward", "TransformerConv", 24.0, 2.0),
        _row(100, 1, "compiled", "forward+backward", eager, 10.8, 0.9),
        # an incomplete cell is left out
        _row(100, 2, "eager", "forward", "QSVConv", 3.0, 1.0),
    ]
    t, c = qsv_vs_torch_harmonics.harmonics_targets(rows)
    assert (t["points"], t["threads"], t["mode"], t["qsv_fwd_ms"]) == (100, 1, "eager", 4.0)
    assert t["fwd_vs_th"] == 1.25 and t["fwd_target_met"]
    assert t["fb_vs_th"] == 2.0 and not t["fb_target_met"]
    assert t["fb_vs_tconv"] == 3.5 and t["tconv_target_met"]
    assert t["fwd_vs_gather"] == pytest.approx(10.0 / 4.0)
    assert t["fwd_vs_spmm"] == pytest.approx(2.0 / 4.0) and t["floor_target_met"]  # 0.5: met
    assert t["fb_vs_spmm"] == pytest.approx(4.0 / 10.0) and t["fb_floor_target_met"]
    assert "fwd_vs_eager" not in t and "compiled_target_met" not in t
    assert (t["native_fwd_speedup"], t["native_fb_speedup"]) == (2.0, 1.5)
    assert "native_fwd_speedup" not in c
    assert (c["mode"], c["qsv_fwd_ms"], c["qsv_fb_ms"]) == ("compiled", 3.0, 12.0)
    assert c["fwd_vs_spmm"] == pytest.approx(2.0 / 3.0)
    assert c["fb_vs_spmm"] == pytest.approx(1.0 / 3.0) and c["fb_floor_target_met"]
    assert c["fb_vs_th"] == 3.0 and c["fb_target_met"] and not c["tconv_target_met"]
    # compiled faster in the forward (1.5x), slower in forward + backward (0.9x): missed
    assert (c["fwd_vs_eager"], c["fb_vs_eager"], c["compiled_target_met"]) == (1.5, 0.9, False)
    # a run from before the floor of forward + backward was measured has no such column
    old = [r for r in rows if r["mode"] == "eager"]
    for r in old:
        r.pop("spmm_fb_ms", None)
    (t_old,) = qsv_vs_torch_harmonics.harmonics_targets(old)
    assert "fb_vs_spmm" not in t_old and t_old["fwd_vs_spmm"] == pytest.approx(0.5)


def test_harmonics_targets_take_the_floors_paired_in_the_same_rounds():
    """Floors timed in QSVConv's rounds: the targets use their paired ratio (the median of
    the per-round ratios), not the ratio of the medians, nor a floor timed apart."""
    F = qsv_vs_torch_harmonics
    rows = _eager_cell(spmm_fb=9.0) + [
        # paired ratios that differ from ms / QSVConv's ms (2.0 / 4.0, 4.0 / 10.0)
        {"points": 100, "threads": 1, "mode": "eager", "pass": "forward",
         "layer": F.FLOOR_SPMM, "ms": 2.0, "qsv_speedup": 0.45},
        {"points": 100, "threads": 1, "mode": "eager", "pass": "forward",
         "layer": F.FLOOR_GATHER, "ms": 8.0, "qsv_speedup": 1.9},
        {"points": 100, "threads": 1, "mode": "eager", "pass": "forward+backward",
         "layer": F.FLOOR_SPMM_FB, "ms": 4.0, "qsv_speedup": 0.35},
    ]
    (t,) = F.harmonics_targets(rows)
    assert (t["fwd_vs_spmm"], t["floor_target_met"]) == (0.45, False)
    assert t["fwd_vs_gather"] == 1.9
    # the paired floor wins over the column of a floor timed apart (9.0 / 10.0)
    assert (t["fb_vs_spmm"], t["fb_floor_target_met"]) == (0.35, True)


def test_vs_torch_harmonics_writes_the_machine_note_and_name(tmp_path, monkeypatch):
    monkeypatch.setattr(qsv_vs_torch_harmonics, "harmonics_version", lambda: None)
    monkeypatch.setattr(qsv_vs_torch_harmonics, "small_graph_rows",
                        lambda threads, repeat: [{"layer": "QSVConv", "ms": 1.0}])
    qsv_vs_torch_harmonics.run(quick=True, out_dir=tmp_path, progress=False,
                               machine="idle, nothing else running",
                               name="qsv_vs_torch_harmonics_2thr")
    md = (tmp_path / "qsv_small_graphs_2thr_quick.md").read_text()
    assert "Machine: idle, nothing else running." in md
    qsv_vs_torch_harmonics.run(quick=True, out_dir=tmp_path, progress=False)
    assert "Machine: not stated" in (tmp_path / "qsv_small_graphs_quick.md").read_text()


def test_write_targets_from_a_finished_run(tmp_path):
    import json

    rows = [_row(100, 1, "eager", p, layer, ms, sp)
            for p, ms_q in (("forward", 4.0), ("forward+backward", 10.0))
            for layer, ms, sp in (("QSVConv", ms_q, 1.0),
                                  ("NeighborhoodAttentionS2", 2 * ms_q, 2.0),
                                  ("TransformerConv", 4 * ms_q, 4.0))]
    path = tmp_path / "qsv_vs_torch_harmonics.json"
    path.write_text(json.dumps({"rows": rows, "meta": {"machine_note": "idle"}}))
    res = qsv_vs_torch_harmonics.main(["--targets-only", "--out", str(tmp_path)])
    (t,) = res["targets"]
    assert t["fwd_vs_th"] == 2.0 and t["fb_target_met"] is False and t["tconv_target_met"]
    md = (tmp_path / "qsv_vs_torch_harmonics_targets.md").read_text()
    assert "machine_note: idle" in md and "targets_from: qsv_vs_torch_harmonics.json" in md
    with pytest.raises(FileNotFoundError, match="run the benchmark first"):
        qsv_vs_torch_harmonics.write_targets(tmp_path / "missing.json")


def test_torch_path_switches_the_native_kernels_off_for_its_call_only(monkeypatch):
    from quest_geometric.nn import _qsv_native, qsv_native_enabled
    from quest_geometric.nn.qsv_conv import QSVConv
    from quest_geometric.testing.qsv import knn_edges

    conv = QSVConv(16, 16, heads=2)
    x, ei = torch.randn(12, 16), knn_edges(12, 4)
    calls = []
    attend = _qsv_native.attend
    monkeypatch.setattr(_qsv_native, "attend", lambda *a: calls.append(1) or attend(*a))
    wrapped = qsv_vs_torch_harmonics.TorchPath(conv)
    torch.testing.assert_close(wrapped(x, ei, dense=True), conv(x, ei, dense=True),
                               atol=1e-5, rtol=1e-5)
    assert qsv_native_enabled()  # restored after the call
    assert len(calls) == (1 if _qsv_native.qsv_native_available() else 0)  # conv's call only
