"""The QSV layer-speed benchmark (benchmarks/qsv/layer_speed.py) runs end to end and writes a
consistent table."""
import math

import pytest
import torch

from benchmarks.qsv import layer_speed


@pytest.mark.slow
def test_quick_run_writes_tables(tmp_path):
    res = layer_speed.run(quick=True, out_dir=tmp_path, progress=False, batch_size=[1, 2],
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
    monkeypatch.setattr(layer_speed, "SIZES", (16, 32))
    rows = layer_speed.layer_rows(1, torch.device("cpu"), repeat=1, progress=False,
                                  threads=(1,))
    assert torch.get_num_threads() == before
    assert [r["threads"] for r in rows] == [1, 1, 1]


def test_one_batch_at_one_thread_count(tmp_path, monkeypatch):
    """One batch size at one thread count: the table, its metadata and its summary."""
    import json

    monkeypatch.setattr(layer_speed, "SIZES", (16, 32))
    res = layer_speed.run(quick=True, out_dir=tmp_path, progress=False, batch_size=1, threads=1)
    assert [(r["graphs"], r["threads"], r["layer"]) for r in res["layers"]] == [
        (1, 1, name) for name in ("QSVConv", "TransformerConv", "GATv2Conv")]
    doc = json.loads((tmp_path / "qsv_layer_speed.json").read_text())
    assert doc["meta"]["batch_sizes"] == [1] and doc["meta"]["threads"] == [1]
    assert doc["meta"]["quick"] is True and doc["meta"]["rounds"] == 5
    for r in res["layers"]:
        assert r["fwd_gflop"] == pytest.approx(layer_speed.forward_flops(
            r["layer"], r["nodes"], r["edges"]) / 1e9)
        assert math.isfinite(r["flops_vs_transformer"]) and math.isfinite(r["peak_mb"])
    assert len(res["summary"]) == 1 and res["summary"][0].startswith("QSVConv forward+backward")
    assert res["markdown"] == (tmp_path / "qsv_layer_speed.md").read_text()


@pytest.mark.slow
def test_compiled_rows_are_wired(monkeypatch):
    # wiring only, on a tiny graph and the code-generation-free backend; no timing is read
    monkeypatch.setattr(layer_speed, "SIZES", (16, 32))
    rows = layer_speed.layer_rows(1, torch.device("cpu"), repeat=1, progress=False,
                                  threads=(1,), compiled=True, backend="aot_eager")
    by_name = {r["layer"]: r for r in rows}
    assert list(by_name) == ["QSVConv", "TransformerConv", "GATv2Conv", "QSVConv (compiled)",
                             "TransformerConv (compiled)"]
    for name in layer_speed.COMPILED_LAYERS:
        eager, comp = by_name[name], by_name[name + " (compiled)"]
        assert comp["params"] == eager["params"] and comp["fwd_gflop"] == eager["fwd_gflop"]
        assert comp["fwd_bwd_ms"] > 0 and comp["speedup_vs_transformer"] > 0


def test_cli_passes_compiled(monkeypatch):
    seen = {}
    monkeypatch.setattr(layer_speed, "run",
                        lambda **kw: seen.update(kw) or {"markdown": ""})
    layer_speed.main(["--quick", "--compiled", "--backend", "aot_eager"])
    assert seen["compiled"] is True and seen["backend"] == "aot_eager"
    layer_speed.main(["--quick"])
    assert seen["compiled"] is False and seen["backend"] == "inductor"
    assert layer_speed.base_layer("QSVConv (compiled)") == "QSVConv"
    assert layer_speed.base_layer("GATv2Conv") == "GATv2Conv"


def test_threads_and_batch_sizes_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="threads"):
        layer_speed.run(quick=True, out_dir=tmp_path, threads=0)
    with pytest.raises(ValueError, match="batch_size"):
        layer_speed.run(quick=True, out_dir=tmp_path, batch_size=[8, 0])
    for kwargs in ({"threads": True}, {"batch_size": 0}, {"batch_size": True}):
        name = next(iter(kwargs))
        with pytest.raises(ValueError, match=f"run: '{name}' must be positive integers"):
            layer_speed.run(quick=True, out_dir=tmp_path, **kwargs)


def test_forward_flops_dense_terms_match_torch_flop_counter_and_params_are_exact():
    """The matrix-product part of each formula equals what torch's FLOP counter counts on
    the real layer (it counts matrix products and the native kernels, whose formulas are
    registered, not PyG's element-wise per-edge work); the per-edge terms are the formula's
    rest.  Where QSVConv's native kernels run, its whole per-edge work is in a kernel, so the
    counter sees the whole formula."""
    from torch.utils.flop_counter import FlopCounterMode

    edge_index, n, x, layers = layer_speed.problem(1, torch.device("cpu"))
    E, C, H = edge_index.size(1), layer_speed.CHANNELS, layer_speed.HEADS
    per_edge = {"QSVConv": 8 * E * H + 2 * E * C, "TransformerConv": 4 * E * C,
                "GATv2Conv": 6 * E * C}
    params = {"QSVConv": C * 4 * H + 4 * H + C,              # quaternion map + output bias
              "TransformerConv": 4 * (C * C + C),              # query, key, value, skip
              "GATv2Conv": 2 * (C * C + C) + C + C}            # two maps, att, bias
    for name, layer in layers.items():
        kwargs = {"dense": False} if name == "QSVConv" else {}  # scatter path: no CSR product
        with FlopCounterMode(display=False) as counter:
            layer(x, edge_index, **kwargs)
        flops = layer_speed.forward_flops(name, n, E, C, H)
        assert flops - per_edge[name] == counter.get_total_flops(), name
        assert sum(p.numel() for p in layer.parameters()) == params[name], name
    assert params["QSVConv"] == 1104 and params["TransformerConv"] == 16640
    from quest_geometric.nn import qsv_native_available

    if qsv_native_available():  # the default dense path: rotations and attention native
        layer = layers["QSVConv"]
        with FlopCounterMode(display=False) as counter:
            layer(x, edge_index)
        assert counter.get_total_flops() == layer_speed.forward_flops("QSVConv", n, E, C, H)
    with pytest.raises(ValueError, match="forward_flops: 'layer' must be"):
        layer_speed.forward_flops("GCNConv", 1, 1)


def test_rewrite_adds_parameter_and_flop_columns_and_keeps_the_measurements(tmp_path):
    import json
    from pathlib import Path

    committed = Path(__file__).resolve().parents[2] / "benchmarks/qsv/results/qsv_layer_speed.json"
    before = json.loads(committed.read_text())
    res = layer_speed.rewrite(committed, tmp_path)
    after = json.loads((tmp_path / "qsv_layer_speed.json").read_text())
    assert after["meta"] == before["meta"]
    for old, new in zip(before["rows"], after["rows"]):
        for key, value in old.items():
            assert new[key] == value, key  # every measured column unchanged
        assert new["fwd_gflop"] == pytest.approx(layer_speed.forward_flops(
            new["layer"], new["nodes"], new["edges"]) / 1e9)
    q = next(r for r in after["rows"] if r["layer"] == "QSVConv")
    assert q["flops_vs_transformer"] == pytest.approx(
        (8 * 64 * 4 + 9 * 64 + (8 * 4 + 2 * 64) * 16) / (8 * 64 * 64 + 4 * 64 * 16))  # k = 16
    assert "| params | fwd_gflop | flops_vs_transformer |" in res["markdown"]
