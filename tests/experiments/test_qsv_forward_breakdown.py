import math

import pytest
import torch

from quest_geometric.experiments import qsv_forward_breakdown as B
from quest_geometric.nn import qsv_native_available, set_qsv_native_enabled


def _cell(rows, op):
    return next(r for r in rows if r["op"] == op)


@pytest.mark.parametrize("native", [True, False])
def test_breakdown_rows_split_the_forward(native):
    if native and not qsv_native_available():
        pytest.skip("native kernels not built here")
    previous = set_qsv_native_enabled(native)
    try:
        rows = B.breakdown_rows(grids=((8, 16),), threads=(1,), calls=2,
                                k_by_grid={(8, 16): 5})
    finally:
        set_qsv_native_enabled(previous)
    ops = [r for r in rows if r["op"] not in ("total", B.FLOOR)]
    total, floor = _cell(rows, "total"), _cell(rows, B.FLOOR)
    assert {r["points"] for r in rows} == {128} and {r["k"] for r in rows} == {5}
    # the stages add up to the total, their shares to 1, and in_spmm is ms over the floor's
    assert sum(r["ms"] for r in ops) == pytest.approx(total["ms"])
    assert sum(r["share"] for r in ops) == pytest.approx(1.0)
    for r in ops + [total]:
        assert r["in_spmm"] == pytest.approx(r["ms"] / floor["ms"])
    assert floor["in_spmm"] == 1.0 and math.isnan(floor["share"])
    # the operators are the layer's: its kernels where they run, the scatter path elsewhere
    names = {r["op"] for r in ops}
    if native:
        assert {"quest_geometric::qsv_attend", "quest_geometric::qsv_rotate"} <= names
    else:
        assert not any(n.startswith("quest_geometric::qsv_attend") for n in names)
    assert total["wall_ms"] > 0 and floor["wall_ms"] > 0


def test_self_ms_counts_each_operator_per_call():
    x = torch.randn(64, 64)
    ops, wall = B._self_ms(lambda: x @ x, calls=4)
    assert set(ops) >= {"aten::mm"} and wall > 0
    # per call: not more than the wall time of a call (the profiled calls' sum over calls)
    assert sum(ops.values()) <= wall * 1.5


def test_run_writes_the_table_with_other(tmp_path, monkeypatch):
    rows = [{"points": 4, "k": 2, "threads": 1, "op": "a", "ms": 3.0, "share": 0.75,
             "in_spmm": 3.0},
            {"points": 4, "k": 2, "threads": 1, "op": "b", "ms": 0.02, "share": 0.005,
             "in_spmm": 0.02},
            {"points": 4, "k": 2, "threads": 1, "op": "c", "ms": 0.02, "share": 0.005,
             "in_spmm": 0.02},
            {"points": 4, "k": 2, "threads": 1, "op": "total", "ms": 4.0, "share": 1.0,
             "in_spmm": 4.0, "wall_ms": 4.1},
            {"points": 4, "k": 2, "threads": 1, "op": B.FLOOR, "ms": 1.0,
             "share": float("nan"), "in_spmm": 1.0, "wall_ms": 1.1}]
    monkeypatch.setattr(B, "breakdown_rows", lambda grids, threads, calls: rows)
    out = B.run(quick=True, out_dir=tmp_path, threads=(1,), machine="idle")
    assert [r["op"] for r in out["shown"]] == ["a", "other", "total", B.FLOOR]
    other = _cell(out["shown"], "other")
    assert other["ms"] == pytest.approx(0.04) and other["in_spmm"] == pytest.approx(0.04)
    md = (tmp_path / "qsv_forward_breakdown_quick.md").read_text()
    assert "Machine: idle." in md and "| other |" in md
