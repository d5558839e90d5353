import math

import pytest
import torch

from benchmarks.qsv import forward_breakdown as B
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
        # without autograd: the fused prologue, and the output rotation inside the attention
        # kernel (its epilogue); no separate rotation, matrix or attention kernel left
        assert {"quest_geometric::qsv_attend_rotate", "quest_geometric::qsv_prepare"} <= names
        assert not names & {"quest_geometric::qsv_attend", "quest_geometric::qsv_rotate",
                            "quest_geometric::qsv_rotation_matrix"}
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


def test_epilogue_rows_pair_the_two_forwards():
    """The fused and the separate forward are timed in the same rounds, and the ratios are
    the paired medians of the rounds' times (recomputed here from a patched timer)."""
    if not qsv_native_available():
        pytest.skip("native kernels not built here")
    rows = B.epilogue_rows(grids=((8, 16),), threads=(1,), repeat=3, calls=2,
                           k_by_grid={(8, 16): 5})
    (row,) = rows
    assert (row["points"], row["k"], row["threads"], row["rounds"]) == (128, 5, 1, 3)
    for key in ("fused_ms", "separate_ms", "spmm_ms", "speedup", "fused_in_spmm",
                "separate_in_spmm"):
        assert row[key] > 0 and math.isfinite(row[key])


def test_epilogue_rows_compare_the_fused_and_the_two_kernel_paths(monkeypatch):
    """'fused' runs the prologue and the epilogue operator, 'separate' the rotation, the
    attention kernel and a second rotation; the speed-up is time(separate) / time(fused) per
    round, not its inverse."""
    if not qsv_native_available():
        pytest.skip("native kernels not built here")
    import quest_geometric.profile as common
    from quest_geometric.nn import _qsv_native as native

    seen = []
    for name in ("attend", "attend_rotate", "prepare", "rotate"):
        real = getattr(native, name)
        monkeypatch.setattr(native, name,
                            lambda *a, _real=real, _name=name: seen.append(_name) or _real(*a))
    costs = {"fused": 2.0, "separate": 3.0, "spmm": 1.0}
    ops = {}

    def fake_interleaved(fns, warmup, repeat, shuffle_seed):
        out = {}
        for name, fn in fns.items():
            seen.clear()
            fn()
            ops[name] = list(seen)
            out[name] = {"median_s": costs[name], "times": [costs[name]] * repeat}
        return out

    monkeypatch.setattr(common, "time_interleaved", fake_interleaved)
    rows = B.epilogue_rows(grids=((8, 16),), threads=(1,), repeat=2, calls=1,
                           k_by_grid={(8, 16): 5})
    assert ops == {"fused": ["prepare", "attend_rotate"],
                   "separate": ["rotate", "attend", "rotate"], "spmm": []}
    assert rows[0]["speedup"] == pytest.approx(1.5)
    assert rows[0]["fused_in_spmm"] == pytest.approx(2.0)
    assert rows[0]["separate_in_spmm"] == pytest.approx(3.0)
