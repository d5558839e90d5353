"""Smoke tests of the Focus benchmarks (tiny settings; results checked for shape, not speed)."""
from __future__ import annotations

import csv
import importlib
import json
import math
import re
from pathlib import Path

import pytest
import torch

from benchmarks.focus import lm as focus_lm
from benchmarks.focus import speed as focus_speed


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


@pytest.mark.slow
def test_focus_speed_quick(tmp_path):
    out = focus_speed.run(quick=True, out_dir=tmp_path, progress=False, lengths=[160, 256],
                          repeat=1, memory=False, allocator="system")
    for ext in ("csv", "json", "md", "png"):
        assert (tmp_path / f"focus_speed.{ext}").is_file()
    with open(tmp_path / "focus_speed.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["tokens"]) for r in rows] == [160, 256]
    assert set(focus_speed.COLUMNS) <= set(rows[0])
    for r in out["rows"]:
        for key in ("full_ms", "blocks_ms", "sdpa_ms", "blocks_attn_ms", "edges_ms",
                    "edges_core_ms", "tconv_ms", "speedup_blocks", "speedup_attn",
                    "edges_core_vs_tconv", "balance", "pair_fraction"):
            assert _finite(r[key]) and r[key] > 0, key
        # every round's ratio is kept, and the summary is their median (one round here)
        assert r["round_ratios_blocks"] == [r["speedup_blocks"]]
        assert r["round_ratios_attn"] == [r["speedup_attn"]]
        assert r["round_ratios_edges"] == [r["edges_core_vs_tconv"]]
        # the edge set holds at least the causal window band and at most every causal pair
        n = r["tokens"]
        assert n * 129 - 128 * 129 // 2 <= r["num_edges"] <= n * (n + 1) // 2
        # the share of pairs kept (counted without edges) is the edge set's share
        assert r["pair_fraction"] == pytest.approx(r["num_edges"] / (n * (n + 1) // 2))
    meta = json.loads((tmp_path / "focus_speed.json").read_text())["meta"]
    assert meta["top_k"] == 1 and meta["allocator"] == "system default"
    one = focus_speed.run(out_dir=tmp_path / "one", progress=False, lengths=[160], repeat=1,
                          memory=False, allocator="system", edges_max=128)
    assert "png" not in one["paths"]  # no plot of a single length
    # without the edge set the share is still counted, and is the same pattern's
    (skipped,) = one["rows"]
    assert "edges skipped" in skipped["note"] and not _finite(skipped["num_edges"])
    assert skipped["pair_fraction"] == pytest.approx(out["rows"][0]["pair_fraction"])
    with pytest.raises(ValueError, match="allocator"):
        focus_speed.run(quick=True, out_dir=tmp_path, lengths=[256], allocator="jemalloc")
    assert "crossover" in out["summary"][0]


def test_crossover_definition():
    rows = [{"tokens": n, "speedup_blocks": s} for n, s in
            [(1, 0.5), (2, 1.2), (4, 0.9), (8, 1.5), (16, 3.0)]]
    assert focus_speed.crossover(rows) == 8
    assert focus_speed.crossover(rows[:1]) is None


TINY = dict(block_size=24, n_layer=1, n_head=2, n_embd=16, window=4, batch_size=2,
            steps_full=2, steps_focus=2, steps_router=2, eval_batches=1)


@pytest.mark.slow
def test_focus_lm_quick(tmp_path):
    out = focus_lm.run(quick=True, out_dir=tmp_path, run_dir=tmp_path / "runs", progress=False,
                       gates=("additive", "multiplicative"), **TINY)
    for ext in ("csv", "json", "md"):
        assert (tmp_path / f"focus_lm.{ext}").is_file()
    rows = out["rows"]
    labels = [(r["model"][:3], r["gate"], r["mode"], r["top_k"]) for r in rows]
    expected = [("(a)", "", "full", "")]
    for model in ("(b)", "(c)"):
        for gate in ("additive", "multiplicative"):
            expected += [(model, gate, "soft", 2)] + [(model, gate, "hard", k) for k in (1, 2, 4)]
    assert labels == expected
    for r in rows:
        assert _finite(r["val_bpc"]) and r["val_bpc"] > 0
        if r["mode"] == "hard":
            assert 0.25 <= r["balance"] <= 1.0 and 0 < r["pair_fraction"] <= 1.0
    for gate in ("additive", "multiplicative"):
        # top-k = K keeps every causal pair, so (c) hard at K is exactly the frozen model (a)
        c_full = next(r for r in rows if r["model"].startswith("(c)") and r["gate"] == gate
                      and r["top_k"] == 4 and r["mode"] == "hard")
        assert c_full["pair_fraction"] == 1.0
        assert math.isclose(c_full["val_bpc"], rows[0]["val_bpc"], rel_tol=1e-5)
        assert (tmp_path / "runs" / f"b_focus_scratch_{gate}" / "checkpoint.pt").is_file()
    # the two gates train different models: their soft (b) rows differ
    b_soft = [r["val_bpc"] for r in rows if r["model"].startswith("(b)") and r["mode"] == "soft"]
    assert b_soft[0] != b_soft[1]
    # only the routers were trained in (c): L * (d * d_g + K * d_g)
    assert rows[-1]["trainable_params"] == 1 * (16 * 16 + 4 * 16)
    assert (tmp_path / "runs" / "a_full" / "metrics.jsonl").is_file()
    assert len(out["summary"]) == 4 and "additive gate" in out["summary"][1]
    # a smoke run states its numbers but gives no target verdicts
    assert all("not tested (smoke run)" in line for line in out["summary"][1:])
    assert not any(re.search(r"\b(met|MISSED)\b", line) for line in out["summary"])
    # one soft-against-hard line per gate, with the gap the rows give
    assert [s.split(" ")[0] for s in out["gate_summary"]] == ["additive", "multiplicative"]
    md = out["markdown"]
    for gate, line in zip(("additive", "multiplicative"), out["gate_summary"]):
        soft = next(r for r in rows if r["model"].startswith("(b)") and r["gate"] == gate
                    and r["mode"] == "soft")["val_bpc"]
        hard = next(r for r in rows if r["model"].startswith("(b)") and r["gate"] == gate
                    and r["mode"] == "hard" and r["top_k"] == 2)["val_bpc"]
        assert f"hard - soft {hard - soft:+.4f}" in line and line in md

    # a second run reloads every finished checkpoint instead of retraining: same numbers
    again = focus_lm.run(quick=True, out_dir=tmp_path / "again", run_dir=tmp_path / "runs",
                         progress=False, gates=("multiplicative",), **TINY)
    assert json.loads((tmp_path / "again" / "focus_lm.json").read_text())["meta"][
        "reused_runs"] == ["a_full", "b_focus_scratch_multiplicative",
                           "c_compose_routers_multiplicative"]
    mult = [r for r in rows if r["gate"] in ("", "multiplicative")]
    for r, s in zip(mult, again["rows"]):
        assert (r["model"], r["gate"], r["mode"], r["top_k"]) == \
            (s["model"], s["gate"], s["mode"], s["top_k"])
        assert math.isclose(r["val_bpc"], s["val_bpc"], rel_tol=1e-6)
        assert r["train_s"] == s["train_s"]
    # without the additive rows the targets refer to the first gate given
    assert "multiplicative gate" in again["summary"][1]


RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "focus" / "results"


def _table(md: str) -> list[dict[str, str]]:
    """The rows of the first markdown table of ``md``, by heading."""
    lines = [ln for ln in md.splitlines() if ln.startswith("|")]
    heads = [c.strip() for c in lines[0].strip("|").split("|")]
    return [dict(zip(heads, (c.strip() for c in ln.strip("|").split("|"))))
            for ln in lines[2:]]


@pytest.mark.parametrize("name", ["focus_lm", "focus_lm_seed1", "focus_lm_seed2"])
def test_focus_lm_rewrite_shows_the_change_vs_full_in_percent(name, tmp_path):
    """The committed tables are what rewrite() renders from their JSON: the rows, date,
    machine and versions as measured, the change against full attention as a signed
    percentage (100 x the stored fraction), the same number the targets quote."""
    committed = {ext: (RESULTS / f"{name}.{ext}").read_text() for ext in ("csv", "json", "md")}
    out = focus_lm.rewrite(RESULTS / f"{name}.json", tmp_path)
    for ext, text in committed.items():  # nothing measured changes, and the table is current
        assert (tmp_path / f"{name}.{ext}").read_text() == text, ext
    doc = json.loads(committed["json"])
    meta = doc["meta"]
    assert f"- date: {meta['date']}" in out["markdown"]
    assert f"- torch: {meta['torch']}" in out["markdown"]
    table = _table(out["markdown"])
    assert "rel_to_full" not in table[0] and len(table) == len(doc["rows"])
    full = doc["rows"][0]["val_bpc"]
    for shown, row in zip(table, doc["rows"]):
        cell = shown["vs full (%)"]
        assert re.fullmatch(r"[+-]\d+\.\d\d", cell), cell
        assert abs(float(cell) - 100 * row["rel_to_full"]) <= 0.005
        # the stored fraction is the change of val_bpc against row (a)
        assert math.isclose(row["rel_to_full"], row["val_bpc"] / full - 1, abs_tol=1e-12)
    # the percentage the summary quotes for (b) hard top-2 is the table's
    b_hard = next(s for s, r in zip(table, doc["rows"]) if r["model"].startswith("(b)")
                  and r["gate"] == "additive" and r["mode"] == "hard" and r["top_k"] == 2)
    assert f"({b_hard['vs full (%)']}% vs (a)" in out["summary"][1]


def test_focus_lm_rejects_bad_gates(tmp_path):
    for gates in ((), ("additive", "additive"), ("sigmoid",)):
        with pytest.raises(ValueError, match="gates"):
            focus_lm.run(quick=True, out_dir=tmp_path, run_dir=tmp_path / "runs",
                         progress=False, gates=gates, **TINY)


@pytest.mark.slow
def test_focus_decode_split_quick_times_every_part(tmp_path):
    pytest.importorskip("transformers")
    from quest_geometric.nn.focus.config import current_decode_config

    split = importlib.import_module("benchmarks.focus.decode_split")
    import transformers.cache_utils as cu

    before = cu.Cache.update
    out = split.run(contexts=[200], threads=[1], layers=2, steps=2, rounds=1,
                    out_dir=tmp_path, progress=False)
    assert cu.Cache.update is before  # the timers are removed afterwards
    rows = {r["mode"]: r for r in out["rows"]}
    assert set(rows) == {"full", "top-1", "top-2"}
    for m, r in rows.items():
        # every timed part fired (the SDPA registry hook included) and fits in the step
        assert r["cache_ms"] > 0 and r["attention_ms"] > 0 and r["rest_ms"] > 0, m
        assert r["cache_ms"] + r["attention_ms"] + r["routing_ms"] <= r["step_ms"] + 1e-9
        assert (r["routing_ms"] > 0) == (m != "full")
    assert rows["top-1"]["keys_read"] < 1.0 and rows["full"]["keys_read"] == 1.0
    assert (tmp_path / "focus_decode_split.md").is_file()
    assert current_decode_config().masked_share == 0.75


@pytest.mark.slow
def test_focus_decode_step_compare_paths_restores_the_rule(tmp_path):
    pytest.importorskip("transformers")
    from quest_geometric.nn.focus.config import current_decode_config

    step = importlib.import_module("benchmarks.focus.decode_step")
    out = step.run(contexts=[200], threads=[1], caches=["dynamic"], layers=2, steps=2,
                   rounds=1, out_dir=tmp_path, progress=False, compare_paths=True)
    modes = [r["mode"] for r in out["rows"]]
    assert modes == ["full", "top-1", "top-2", *step.PATH_MODES]
    assert current_decode_config().masked_share == 0.75  # the forced modes put the rule back
    by = {r["mode"]: r for r in out["rows"]}
    assert by["top-2 masked"]["keys_read"] == pytest.approx(by["top-2"]["keys_read"], abs=0.2)


def test_focus_masked_layout_quick_both_layouts_attend_alike(tmp_path):
    lay = importlib.import_module("benchmarks.focus.masked_layout")
    h, hkv, d, s = 9, 3, 8, 50
    fns = lay.layouts(h, hkv, d, s, seed=3)
    # the same inputs, rebuilt: a dense masked softmax per query head
    g = torch.Generator().manual_seed(3)
    q = torch.randn(1, h, 1, d, generator=g)
    k = torch.randn(1, hkv, s, d, generator=g)
    v = torch.randn(1, hkv, s, d, generator=g)
    mask = torch.rand(s, generator=g) < 5 / 6
    mask[-64:] = True
    kh, vh = k.repeat_interleave(h // hkv, 1), v.repeat_interleave(h // hkv, 1)
    logits = (q @ kh.transpose(-1, -2)) * d ** -0.5
    want = torch.softmax(logits.masked_fill(~mask, float("-inf")), -1) @ vh
    for name, fn in fns.items():
        torch.testing.assert_close(fn(), want, msg=name)
    before = torch.get_num_threads()
    out = lay.run([64], [1], calls=2, rounds=1, shapes=[(4, 2, 8)], out_dir=tmp_path)
    assert torch.get_num_threads() == before
    assert [r["layout"] for r in out["rows"]] == ["packed", "gqa"]
    assert all(r["max_abs_diff"] < 1e-5 and r["us_per_call"] > 0 for r in out["rows"])
    assert out["rows"][0]["vs_packed"] == 1.0
    assert (tmp_path / "focus_masked_layout.md").is_file()


def test_focus_lm_evaluate_counts_each_sequences_pairs(focus_mask_reference):
    """``pair_fraction`` is the share of causal pairs the routed groups keep, each sequence
    of a batch on its own (the dense reference mask, averaged over the sequences)."""
    from quest_geometric.nn.focus import FocusRouter

    class Toy(torch.nn.Module):  # one router on [B, T, d] hidden states, loss 0
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(11, 8)
            self.router = FocusRouter(8, num_groups=4, top_k=2)
            self.groups = []

        def forward(self, x, y):
            self.groups.append(self.router(self.emb(x)).groups)
            return None, torch.zeros(())

    torch.manual_seed(0)
    model = Toy().eval()
    x = torch.randint(0, 11, (3, 30))
    out = focus_lm.evaluate(model, [(x, x)], window=3, num_groups=4)
    g = model.groups[0].reshape(3, 30, 2)
    want = [float(focus_mask_reference(g[b], 3, None, True).sum()) / (30 * 31 // 2)
            for b in range(3)]
    assert out["pair_fraction"] == pytest.approx(sum(want) / 3)
    assert 0 < out["pair_fraction"] < 1 and out["val_bpc"] == 0.0


def test_focus_bucket_block_every_block_size_attends_as_the_definition(tmp_path,
                                                                     focus_mask_reference):
    """The fused top-2 forward the benchmark times, at every query block and with one call
    per bucket, equals a dense softmax over the Focus pattern of the same routing (rebuilt
    here from the same seeded draws)."""
    bb = importlib.import_module("benchmarks.focus.bucket_block")
    c, h, d, K, w = 40, 3, 8, 5, 4
    g = torch.Generator().manual_seed(2)
    groups = torch.stack([torch.randint(0, K - 1, (c,), generator=g),
                          torch.full((c,), K - 1)], 1)
    q, k, v = (torch.randn(c, h, d, generator=g).double() for _ in range(3))
    mask = focus_mask_reference(groups, w, None, True)
    s = torch.einsum("ihd,jhd->hij", q, k) * d ** -0.5
    want = torch.einsum("hij,jhd->ihd", torch.softmax(s.masked_fill(~mask, float("-inf")), -1),
                        v)
    for block in (0, 1, 7, 64):
        got = bb.bucket_forward(c, block, heads=h, dim=d, num_groups=K, window=w, seed=2)()
        torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-5, msg=str(block))
    before = torch.get_num_threads()
    out = bb.run([24], [1], rounds=1, blocks=(0, 8), out_dir=tmp_path)
    assert torch.get_num_threads() == before
    assert [r["variant"] for r in out["rows"]] == ["one call", "block 8", "full causal"]
    assert out["rows"][0]["vs_one_call"] == 1.0 and out["rows"][2]["vs_full"] == 1.0
    assert out["rows"][1]["max_abs_diff"] < 1e-5
    assert (tmp_path / "focus_bucket_block.md").is_file()


def test_focus_band_block_every_block_size_attends_as_the_definition(tmp_path,
                                                                   focus_mask_reference):
    """The window-plus-sinks forward the benchmark times, at every band query block (below,
    at and above the window) and by the library's rule, equals a dense softmax over the
    pattern: the window band plus the first 4 tokens."""
    bb = importlib.import_module("benchmarks.focus.band_block")
    n, h, d, w = 70, 3, 8, 9
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(n, h, d, generator=g).double() for _ in range(3))
    i = torch.arange(n)
    mask = (i[:, None] >= i[None]) & ((i[:, None] - i[None] <= w) | (i[None] < 4))
    s = torch.einsum("ihd,jhd->hij", q, k) * d ** -0.5
    want = torch.einsum("hij,jhd->ihd", torch.softmax(s.masked_fill(~mask, float("-inf")), -1),
                        v)
    for block, split in ((1, False), (5, False), (16, False), (64, False), (None, None),
                         (None, True)):
        got = bb.band_forward(n, w, block, heads=h, dim=d, seed=3, split=split)()
        torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-5,
                                   msg=f"{block} {split}")
    before = torch.get_num_threads()
    out = bb.run(60, [7], [1], rounds=1, blocks=(4, 16), out_dir=tmp_path)
    assert torch.get_num_threads() == before
    assert [r["variant"] for r in out["rows"]] == ["block 4", "block 16", "split", "rule",
                                                   "full causal"]
    assert out["rows"][4]["vs_full"] == 1.0 and out["rows"][2]["max_abs_diff"] < 1e-5
    assert out["rows"][0]["rule_splits"] is False  # window 7 is below the threshold
    assert (tmp_path / "focus_band_block.md").is_file()


def test_band_block_size_reads_the_table_and_the_override():
    from quest_geometric.nn.focus.config import BlocksConfig

    cfg = BlocksConfig(band_blocks=((10, 4), (100, 32), (float("inf"), 128)))
    assert [cfg.band_block_size(w) for w in (0, 10, 11, 100, 101, 10**6)] == \
        [4, 4, 32, 32, 128, 128]
    assert BlocksConfig(band_block=7).band_block_size(5000) == 7
