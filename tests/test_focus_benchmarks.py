"""Smoke tests of the Focus benchmarks (tiny settings; results checked for shape, not speed)."""
from __future__ import annotations

import csv
import json
import math

from quest_geometric.experiments import focus_lm, focus_speed


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


def test_focus_speed_quick(tmp_path):
    out = focus_speed.run(quick=True, out_dir=tmp_path, progress=False, lengths=[256],
                          repeat=1, memory=False)
    for ext in ("csv", "json", "md", "png"):
        assert (tmp_path / f"focus_speed.{ext}").is_file()
    with open(tmp_path / "focus_speed.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["tokens"]) for r in rows] == [256]
    assert set(focus_speed.COLUMNS) <= set(rows[0])
    for r in out["rows"]:
        for key in ("full_ms", "blocks_ms", "edges_ms", "edges_core_ms", "tconv_ms",
                    "speedup_blocks", "edges_core_vs_tconv", "balance", "pair_fraction"):
            assert _finite(r[key]) and r[key] > 0, key
        # the edge set holds at least the causal window band and at most every causal pair
        n = r["tokens"]
        assert n * 129 - 128 * 129 // 2 <= r["num_edges"] <= n * (n + 1) // 2
    assert json.loads((tmp_path / "focus_speed.json").read_text())["meta"]["top_k"] == 1
    assert "crossover" in out["summary"][0]


def test_crossover_definition():
    rows = [{"tokens": n, "speedup_blocks": s} for n, s in
            [(1, 0.5), (2, 1.2), (4, 0.9), (8, 1.5), (16, 3.0)]]
    assert focus_speed.crossover(rows) == 8
    assert focus_speed.crossover(rows[:1]) is None


def test_focus_lm_quick(tmp_path):
    out = focus_lm.run(quick=True, out_dir=tmp_path, run_dir=tmp_path / "runs", progress=False,
                       block_size=24, n_layer=1, n_head=2, n_embd=16, window=4, batch_size=2,
                       steps_full=2, steps_focus=2, steps_router=2, eval_batches=1)
    for ext in ("csv", "json", "md"):
        assert (tmp_path / f"focus_lm.{ext}").is_file()
    rows = out["rows"]
    labels = [(r["model"][:3], r["mode"], r["top_k"]) for r in rows]
    assert labels == [("(a)", "full", ""), ("(b)", "soft", 2), ("(b)", "hard", 1),
                      ("(b)", "hard", 2), ("(b)", "hard", 4), ("(c)", "soft", 2),
                      ("(c)", "hard", 1), ("(c)", "hard", 2), ("(c)", "hard", 4)]
    for r in rows:
        assert _finite(r["val_bpc"]) and r["val_bpc"] > 0
        if r["mode"] == "hard":
            assert 0.25 <= r["balance"] <= 1.0 and 0 < r["pair_fraction"] <= 1.0
    # top-k = K keeps every causal pair, so (c) hard at K is exactly the frozen model (a)
    c_full = next(r for r in rows if r["model"].startswith("(c)") and r["top_k"] == 4
                  and r["mode"] == "hard")
    assert c_full["pair_fraction"] == 1.0
    assert math.isclose(c_full["val_bpc"], rows[0]["val_bpc"], rel_tol=1e-5)
    # only the routers were trained in (c): L * (d * d_g + K * d_g)
    assert rows[-1]["trainable_params"] == 1 * (16 * 16 + 4 * 16)
    assert (tmp_path / "runs" / "a_full" / "metrics.jsonl").is_file()
    assert len(out["summary"]) == 4
