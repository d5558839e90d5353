"""The compile benchmark: the verdict by hand, and the rows of tiny subjects (traced with
``aot_eager``, which runs the compiled graph without generating code)."""
import pytest

from benchmarks.qsv import compile as qsv_compile


def _row(subject, what, variant, ms, ratios, breaks=None, threads=1, size=10):
    return {"subject": subject, "size": size, "threads": threads, "pass": what,
            "variant": variant, "ms": ms, "vs_eager": sorted(ratios)[len(ratios) // 2],
            "round_ratios": ratios, "graph_breaks": breaks}


def test_verdict_rows_by_hand():
    rows = [
        _row("layer", "forward", "eager", 10.0, [1.0, 1.0, 1.0]),
        _row("layer", "forward", "compiled", 5.0, [2.0, 1.8, 2.2], breaks=0),
        _row("layer", "forward+backward", "eager", 30.0, [1.0, 1.0, 1.0]),
        _row("layer", "forward+backward", "compiled", 33.0, [0.9, 0.95, 0.85], breaks=0),
        _row("net", "forward", "compiled", 5.0, [1.2, 1.3, 1.1], breaks=1),
        _row("net", "forward+backward", "compiled", 5.0, [1.5, 1.4, 1.6], breaks=1),
        # rotation: ratios are time(eager, bmm) / time(variant) per round
        _row("rotation", "forward", "eager, bmm", 4.0, [1.0, 1.0, 1.0]),
        _row("rotation", "forward", "eager, elementwise", 2.0, [2.0, 1.0, 4.0]),
        _row("rotation", "forward", "compiled, bmm", 4.0, [1.0, 0.5, 1.0]),
        _row("rotation", "forward", "compiled, elementwise", 1.0, [4.0, 4.0, 3.0]),
    ]
    by = {r["subject"]: r for r in qsv_compile.verdict_rows(rows)}
    layer, net, rot = by["layer"], by["net"], by["rotation"]
    assert (layer["fwd_vs_eager"], layer["fb_vs_eager"]) == (2.0, 0.9)
    assert layer["target_met"] is False  # slower than eager in forward + backward
    assert net["graph_breaks"] == 1 and net["target_met"] is False  # faster, but breaks
    # per round time(bmm) / time(elementwise): eager [2, 1, 4] -> 2; compiled [4, 8, 3] -> 4
    assert rot["eager_forward_elementwise_vs_bmm"] == 2.0
    assert rot["compiled_forward_elementwise_vs_bmm"] == 4.0
    assert "eager_forward+backward_elementwise_vs_bmm" not in rot  # not measured


@pytest.mark.slow
def test_compile_rows_on_tiny_subjects(monkeypatch, tmp_path):
    monkeypatch.setattr(qsv_compile, "QUICK_LAYER_POINTS", (64,))
    monkeypatch.setattr(qsv_compile, "QUICK_NET_GRAPHS", (1,))
    res = qsv_compile.run(quick=True, out_dir=tmp_path, threads=(1,), progress=False,
                          backend="aot_eager", machine="test")
    rows = res["rows"]
    from quest_geometric.nn import qsv_native_available

    forms = ("bmm", "elementwise") + (("native",) if qsv_native_available() else ())
    assert {(r["subject"], r["variant"]) for r in rows} == {
        ("rotation", f"{m}, {f}") for m in ("eager", "compiled") for f in forms
    } | {(s, v) for s in ("layer", "net") for v in ("eager", "compiled")} | {
        ("net", "compiled, dense=True")}
    (rotation,) = [t for t in res["targets"] if t["subject"] == "rotation"]
    assert ("eager_forward_native_vs_bmm" in rotation) == qsv_native_available()
    for r in rows:
        assert r["ms"] > 0 and len(r["round_ratios"]) == 3
        if r["variant"] in ("eager", "eager, bmm"):  # the reference against itself
            assert r["round_ratios"] == [1.0, 1.0, 1.0]
        if r["variant"].startswith("compiled"):
            assert r["graph_breaks"] == 0 and r["compile_s"] > 0
    assert {t["subject"] for t in res["targets"]} == {"rotation", "layer", "net"}
    (net,) = [t for t in res["targets"] if t["subject"] == "net"]
    assert net["dense_fb_vs_eager"] > 0 and net["dense_fwd_vs_eager"] > 0
    assert (tmp_path / "qsv_compile_quick.md").is_file()
    assert "Machine: test." in (tmp_path / "qsv_compile_targets_quick.md").read_text()
