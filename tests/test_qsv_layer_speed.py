"""The QSV layer-speed benchmark runs end to end and writes consistent tables."""
import csv
import math

import pytest

from quest_geometric.experiments import qsv_layer_speed


def test_quick_run_writes_tables(tmp_path):
    res = qsv_layer_speed.run(quick=True, out_dir=tmp_path, progress=False, batch_size=1,
                              threads=1, knn_sizes=[500])
    names = [r["layer"] for r in res["layers"]]
    assert names == ["QSVConv", "TransformerConv", "GATv2Conv"]
    ref = res["layers"][1]["fwd_bwd_ms"]
    for row in res["layers"]:
        assert row["nodes"] == 1344 and row["edges"] == 1344 * 16
        assert row["fwd_bwd_ms"] > 0 and math.isfinite(row["peak_mb"])
        assert row["speedup_vs_transformer"] == pytest.approx(ref / row["fwd_bwd_ms"])
    with open(tmp_path / "knn_speed.csv") as f:
        knn = list(csv.DictReader(f))
    assert {r["backend"] for r in knn} >= {"scipy", "torch"}
    assert all(float(r["seconds"]) > 0 for r in knn)
    assert (tmp_path / "qsv_layer_speed.md").read_text().count("|") > 10
    assert res["summary"] and "QSVConv" in res["summary"][0]


def test_threads_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="threads"):
        qsv_layer_speed.run(quick=True, out_dir=tmp_path, threads=0)
