"""The QSV layer-speed benchmark runs end to end and writes a consistent table."""
import math

import pytest
import torch

from quest_geometric.experiments import qsv_layer_speed


@pytest.mark.slow
def test_quick_run_writes_tables(tmp_path):
    res = qsv_layer_speed.run(quick=True, out_dir=tmp_path, progress=False, batch_size=[1, 2],
                              threads=[1, 2])
    keys = [(r["graphs"], r["threads"], r["layer"]) for r in res["layers"]]
    assert keys == [(g, t, name) for g in (1, 2) for t in (1, 2)
                    for name in ("QSVConv", "TransformerConv", "GATv2Conv")]
    for row in res["layers"]:
        assert row["nodes"] == 1344 * row["graphs"] and row["edges"] == row["nodes"] * 16
        assert row["fwd_bwd_ms"] > 0 and math.isfinite(row["peak_mb"])
        assert row["speedup_vs_transformer"] > 0
        if row["layer"] == "TransformerConv":  # the paired ratio of a layer with itself
            assert row["speedup_vs_transformer"] == 1.0 and row["memory_vs_transformer"] == 1.0
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
