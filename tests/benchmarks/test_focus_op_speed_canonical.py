"""The canonical Focus speed table (benchmarks.focus.op_speed_canonical): the latest timing
of each (configuration, length), with its own run's full-attention reference, and every
run's conditions kept; the verdict reads it."""
from __future__ import annotations

import json

from benchmarks.focus.op_speed_canonical import main, merge_runs, runs_of


def _row(config, length, prefill, decode=1.0):
    return {"config": config, "length": length, "prefill_speedup": prefill,
            "decode_speedup": decode}


def _run(date, rows, threads=1):
    return {"meta": {"date": date, "threads": threads, "cpu_model": "cpu", "torch": "t"},
            "rows": [_row("full", n, 1.0) for n in sorted({r["length"] for r in rows})]
            + rows}


def test_the_newest_run_of_each_row_wins_and_keeps_its_reference():
    old = _run("d1", [_row("A", 8192, 1.1), _row("B", 8192, 0.9), _row("A", 4096, 0.8)])
    new = _run("d2", [_row("A", 8192, 1.4)])
    rows, used = merge_runs([*runs_of(new), *runs_of(old)])
    by = {(r["config"], r["length"], r["run"]): r["prefill_speedup"] for r in rows}
    # A at 8K from the newest run; B at 8K and A at 4K only in the old one
    assert by == {("A", 8192, "d2"): 1.4, ("full", 8192, "d2"): 1.0,
                  ("B", 8192, "d1"): 0.9, ("full", 8192, "d1"): 1.0,
                  ("A", 4096, "d1"): 0.8, ("full", 4096, "d1"): 1.0}
    assert set(used) == {"d1", "d2"} and used["d2"]["date"] == "d2"
    # a run none of whose rows survives is not kept
    newest = _run("d3", [_row("A", 8192, 2.0), _row("B", 8192, 2.0), _row("A", 4096, 2.0)])
    rows, used = merge_runs([*runs_of(newest), *runs_of(old)])
    assert set(used) == {"d3"} and {r["run"] for r in rows} == {"d3"}


def test_folding_a_new_run_into_the_canonical_table(tmp_path):
    folder = tmp_path / "canon"
    first = tmp_path / "first.json"
    first.write_text(json.dumps(_run("d1", [_row("A", 8192, 1.1), _row("B", 8192, 0.9)])))
    main([str(first), "--folder", str(folder)])
    second = tmp_path / "second.json"
    second.write_text(json.dumps(_run("d2", [_row("B", 8192, 1.5)])))
    path = main([str(second), "--folder", str(folder)])
    blob = json.loads(path.read_text())
    got = {(r["config"], r["run"]): r["prefill_speedup"] for r in blob["rows"]}
    assert got == {("A", "d1"): 1.1, ("full", "d1"): 1.0, ("B", "d2"): 1.5,
                   ("full", "d2"): 1.0}
    assert set(blob["meta"]["runs"]) == {"d1", "d2"} and blob["meta"]["threads"] == 1
    md = path.with_suffix(".md").read_text()
    assert "| B | 8192 |" in md and "- d2: cpu" in md
    assert path.with_suffix(".csv").read_text().splitlines()[0].endswith(",run")
