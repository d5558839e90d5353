"""The QSV layer-speed benchmark runs end to end and writes consistent tables."""
import csv
import math

import pytest
import torch

from quest_geometric.experiments import qsv_layer_speed


@pytest.mark.slow
def test_quick_run_writes_tables(tmp_path):
    res = qsv_layer_speed.run(quick=True, out_dir=tmp_path, progress=False, batch_size=[1, 2],
                              threads=[1, 2], knn_sizes=[500])
    keys = [(r["graphs"], r["threads"], r["layer"]) for r in res["layers"]]
    assert keys == [(g, t, name) for g in (1, 2) for t in (1, 2)
                    for name in ("QSVConv", "TransformerConv", "GATv2Conv")]
    for row in res["layers"]:
        assert row["nodes"] == 1344 * row["graphs"] and row["edges"] == row["nodes"] * 16
        assert row["fwd_bwd_ms"] > 0 and math.isfinite(row["peak_mb"])
        assert row["speedup_vs_transformer"] > 0
        if row["layer"] == "TransformerConv":  # the paired ratio of a layer with itself
            assert row["speedup_vs_transformer"] == 1.0 and row["memory_vs_transformer"] == 1.0
    with open(tmp_path / "knn_speed.csv") as f:
        knn = list(csv.DictReader(f))
    assert {r["backend"] for r in knn} >= {"scipy", "torch"}
    assert all(float(r["seconds"]) > 0 for r in knn)
    assert (tmp_path / "qsv_layer_speed.md").read_text().count("|") > 10
    assert len(res["summary"]) == 4 and all("QSVConv" in line for line in res["summary"])


def test_layer_rows_restore_threads(monkeypatch):
    before = torch.get_num_threads()
    monkeypatch.setattr(qsv_layer_speed, "SIZES", (16, 32))
    rows = qsv_layer_speed.layer_rows(1, torch.device("cpu"), repeat=1, progress=False,
                                      threads=(1,))
    assert torch.get_num_threads() == before
    assert [r["threads"] for r in rows] == [1, 1, 1]


def test_threads_and_batch_sizes_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="threads"):
        qsv_layer_speed.run(quick=True, out_dir=tmp_path, threads=0)
    with pytest.raises(ValueError, match="batch_size"):
        qsv_layer_speed.run(quick=True, out_dir=tmp_path, batch_size=[8, 0])


def test_vs_torch_harmonics_skips_clearly_without_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(qsv_layer_speed, "harmonics_version", lambda: None)
    monkeypatch.setattr(qsv_layer_speed, "small_graph_rows",
                        lambda threads, repeat: [{"layer": "QSVConv", "ms": 1.0}])
    res = qsv_layer_speed.run_vs_torch_harmonics(quick=True, out_dir=tmp_path, progress=False)
    assert res["rows"] == [] and "pip install --no-deps torch-harmonics==0.9.3" in res["skipped"]
    assert "torch-harmonics is not installed" in capsys.readouterr().out
    assert not (tmp_path / "qsv_vs_torch_harmonics_quick.csv").exists()
    assert (tmp_path / "qsv_small_graphs_quick.csv").is_file()


@pytest.mark.slow
def test_harmonics_rows_on_a_small_grid():
    pytest.importorskip("torch_harmonics")
    rows = qsv_layer_speed.harmonics_rows(grids=((8, 16),), threads=(1,), compiled=False,
                                          repeat=1, progress=False)
    assert {(r["pass"], r["layer"]) for r in rows} == {
        (p, name) for p in ("forward", "forward+backward")
        for name in ("QSVConv", "NeighborhoodAttentionS2", "TransformerConv")}
    for r in rows:
        assert r["points"] == 128 and r["k"] == max(1, round(r["mean_nbr_th"]))
        assert r["ms"] > 0 and r["gather_ms"] > 0 and r["spmm_ms"] > 0
        if r["layer"] == "QSVConv":
            assert r["qsv_speedup"] == pytest.approx(1.0)


@pytest.mark.slow
def test_equiangular_graph_is_the_dense_layout_of_the_grid_points():
    pytest.importorskip("torch_harmonics")
    from quest_geometric.nn.qsv_conv import QSVConv

    ei = qsv_layer_speed._equiangular_graph(6, 12, 5)
    assert ei.shape == (2, 72 * 5) and QSVConv.is_dense_layout(ei, 72)
    # self loops, except at the poles, where the 12 points of a ring coincide (ties go to
    # the smaller index)
    has_self = (ei[0].view(72, 5) == torch.arange(72).view(72, 1)).any(1)
    assert bool(has_self[12:60].all())


def test_small_graph_rows():
    rows = qsv_layer_speed.small_graph_rows(threads=(1,), repeat=1, batch_size=2)
    assert {r["layer"] for r in rows} == {"QSVConv", "TransformerConv"}
    for r in rows:
        assert r["graphs"] == 2 and r["nodes"] == 160 and r["edges"] == 1600 and r["ms"] > 0


def _row(points, threads, mode, what, layer, ms, speedup, gather=10.0, spmm=2.0):
    return {"points": points, "threads": threads, "mode": mode, "pass": what, "layer": layer,
            "ms": ms, "qsv_speedup": speedup, "gather_ms": gather, "spmm_ms": spmm}


def test_harmonics_targets_by_hand():
    rows = [
        _row(100, 1, "eager", "forward", "QSVConv", 4.0, 1.0),
        _row(100, 1, "eager", "forward", "NeighborhoodAttentionS2", 5.0, 1.25),
        _row(100, 1, "eager", "forward", "TransformerConv", 9.0, 2.25),
        _row(100, 1, "eager", "forward+backward", "QSVConv", 10.0, 1.0),
        _row(100, 1, "eager", "forward+backward", "NeighborhoodAttentionS2", 20.0, 2.0),
        _row(100, 1, "eager", "forward+backward", "TransformerConv", 35.0, 3.5),
        # compiled rows and an incomplete cell are ignored
        _row(100, 1, "compiled", "forward", "QSVConv", 1.0, 1.0),
        _row(100, 2, "eager", "forward", "QSVConv", 3.0, 1.0),
    ]
    (t,) = qsv_layer_speed.harmonics_targets(rows)
    assert (t["points"], t["threads"], t["qsv_fwd_ms"]) == (100, 1, 4.0)
    assert t["fwd_vs_th"] == 1.25 and t["fwd_target_met"]
    assert t["fb_vs_th"] == 2.0 and not t["fb_target_met"]
    assert t["fb_vs_tconv"] == 3.5 and t["tconv_target_met"]
    assert t["fwd_vs_gather"] == pytest.approx(10.0 / 4.0)
    assert t["fwd_vs_spmm"] == pytest.approx(2.0 / 4.0)


def test_vs_torch_harmonics_writes_the_machine_note_and_name(tmp_path, monkeypatch):
    monkeypatch.setattr(qsv_layer_speed, "harmonics_version", lambda: None)
    monkeypatch.setattr(qsv_layer_speed, "small_graph_rows",
                        lambda threads, repeat: [{"layer": "QSVConv", "ms": 1.0}])
    qsv_layer_speed.run_vs_torch_harmonics(quick=True, out_dir=tmp_path, progress=False,
                                           machine="idle, nothing else running",
                                           name="qsv_vs_torch_harmonics_2thr")
    md = (tmp_path / "qsv_small_graphs_2thr_quick.md").read_text()
    assert "Machine: idle, nothing else running." in md
    qsv_layer_speed.run_vs_torch_harmonics(quick=True, out_dir=tmp_path, progress=False)
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
    res = qsv_layer_speed.main_vs_torch_harmonics(["--targets-only", "--out", str(tmp_path)])
    (t,) = res["targets"]
    assert t["fwd_vs_th"] == 2.0 and t["fb_target_met"] is False and t["tconv_target_met"]
    md = (tmp_path / "qsv_vs_torch_harmonics_targets.md").read_text()
    assert "machine_note: idle" in md and "targets_from: qsv_vs_torch_harmonics.json" in md
    with pytest.raises(FileNotFoundError, match="run the benchmark first"):
        qsv_layer_speed.write_targets(tmp_path / "missing.json")
