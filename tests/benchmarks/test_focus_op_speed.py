"""focus_op_speed: the true median, the seeded shuffled order of the rounds, the per-round
ratio bookkeeping against hand-computed values, and a --quick run end to end on a tiny Llama
(monkeypatched loader) whose JSON file holds every round's raw times and ratios."""
from __future__ import annotations

import json
import statistics

import pytest
import torch

from benchmarks.focus import op_speed as focus_op_speed
from benchmarks.focus.op_speed import round_orders, summarize_rounds


def test_true_median_of_even_and_odd_counts():
    assert focus_op_speed._median([3.0, 1.0, 10.0]) == 3.0
    assert focus_op_speed._median([4.0, 1.0, 2.0, 10.0]) == 3.0  # (2 + 4) / 2, not 2 or 4
    assert focus_op_speed._median([1.0, 2.0]) == 1.5
    for values in ([0.3, 0.1, 0.7, 0.2, 0.9, 0.4], [5.0], [2.0, 8.0, 1.0, 1.0, 3.0]):
        assert focus_op_speed._median(values) == statistics.median(values)
    with pytest.raises(ValueError, match="no value"):
        focus_op_speed._median([])


def test_round_orders_are_seeded_permutations():
    names = ["full", "a", "b", "sinks@a", "c"]
    orders = round_orders(names, 20, seed=3)
    assert len(orders) == 20 and all(sorted(o) == sorted(names) for o in orders)
    assert orders == round_orders(names, 20, seed=3)
    assert orders != round_orders(names, 20, seed=4)
    assert len({tuple(o) for o in orders}) > 1  # shuffled again every round
    assert {o[0] for o in orders} == set(names)  # over 20 rounds, everyone comes first
    with pytest.raises(ValueError, match="'rounds'"):
        round_orders(names, 0)
    with pytest.raises(ValueError, match="'names'"):
        round_orders(["a", "a"], 2)


def test_summarize_rounds_ratios_and_medians():
    full_p, a_p = [2.0, 4.0, 3.0, 5.0], [1.0, 1.0, 2.0, 2.5]
    full_d, a_d = [1.0, 1.0, 2.0, 2.0], [0.5, 2.0, 1.0, 1.0]
    records = [{"length": 64, "prefill_s": {"a": a_p[i], "full": full_p[i]},
                "decode_s": {"a": a_d[i], "full": full_d[i]},
                "prefill_ratio": {"a": a_p[i] / full_p[i], "full": 1.0},
                "decode_ratio": {"a": a_d[i] / full_d[i], "full": 1.0}} for i in range(4)]
    rows = summarize_rounds(records, new_tokens=8)
    assert [r["config"] for r in rows] == ["full", "a"]
    a = rows[1]
    # prefill speed-ups per round 2, 4, 1.5, 2 -> median (2 + 2) / 2; ratios 0.5 .25 .667 .5
    assert a["prefill_speedup"] == pytest.approx(2.0)
    assert a["prefill_ratio"] == pytest.approx(0.5)
    assert (a["prefill_speedup_min"], a["prefill_speedup_max"]) == pytest.approx((1.5, 4.0))
    assert a["prefill_s"] == pytest.approx(1.5) and rows[0]["prefill_s"] == pytest.approx(3.5)
    # decoding speed-ups 2, 0.5, 2, 2 -> 2; tokens/s 16, 4, 8, 8 -> 8
    assert a["decode_speedup"] == pytest.approx(2.0) and a["decode_tok_s"] == pytest.approx(8.0)
    assert rows[0]["decode_tok_s"] == pytest.approx(statistics.median([8, 8, 4, 4]))
    assert rows[0]["prefill_speedup"] == rows[0]["decode_speedup"] == 1.0
    assert all(r["rounds"] == 4 and r["length"] == 64 for r in rows)


class Codes:
    """A character tokenizer within the tiny Llama's vocabulary."""

    def encode(self, text, add_special_tokens=False):
        return [3 + ord(c) % 50 for c in text]


@pytest.mark.slow
@pytest.mark.parametrize("load1", [0.0, 1.4, 1.6, 99.0])
def test_quick_run_end_to_end(tmp_path, monkeypatch, load1):
    from benchmarks.focus.operating_point import CONFIGS
    from quest_geometric.models import smollm2
    from quest_geometric.testing.hf import build_hf

    loads = []

    def fake_load(*a, **k):
        loads.append(build_hf("llama", seed=0))
        return loads[-1], Codes()

    def quiet_or_busy():
        return {"threads": torch.get_num_threads(), "loadavg": f"{load1} 0 0", "load1": load1,
                "time": 0.0}

    from benchmarks import load as bench_load

    waits = []
    monkeypatch.setattr(smollm2, "load_smollm2", fake_load)
    monkeypatch.setattr(focus_op_speed, "machine_state", quiet_or_busy)
    monkeypatch.setattr(bench_load, "wait_for_load", waits.append)
    results = tmp_path / "rows"
    results.mkdir()
    (results / "K8_top2_w64_random.json").write_text(json.dumps(
        {"pairs_kept_eval": 0.4, "config": CONFIGS["K8_top2_w64_random"]}))
    configs = ["K4_top2_w64_random", "sinks@K8_top2_w64_random"]
    threads = torch.get_num_threads()
    try:
        focus_op_speed.main(["--quick", "--threads", "1", "--lengths", "32", "64", "--configs",
                             *configs, "--results", str(results), "--out", str(tmp_path),
                             "--seed", "5", "--no-progress"])
    finally:
        torch.set_num_threads(threads)
    # full and the random row once, sinks@ once per length
    assert len(loads) == 4
    assert waits == [1, 1]  # after each length's warm-up, for the run's one thread
    out = json.loads((tmp_path / "focus_op_speed_1t_quick.json").read_text())
    meta, names = out["meta"], ["full", *configs]
    assert meta["threads"] == 1 and meta["new_tokens"] == 8 and meta["rounds_per_length"] == 3
    rounds = meta["rounds"]
    assert [(r["length"], r["round"]) for r in rounds] == [(n, i) for n in (32, 64)
                                                          for i in range(3)]
    assert [r["order"] for r in rounds] == round_orders(names, 6, seed=5)
    for r in rounds:
        assert r["prompt_tokens"] == r["length"] - 8
        assert r["before"]["threads"] == r["after"]["threads"] == 1
        for part in ("prefill", "decode"):
            assert set(r[f"{part}_s"]) == set(names) and all(
                v > 0 for v in r[f"{part}_s"].values())
            for n in names:
                assert r[f"{part}_ratio"][n] == pytest.approx(
                    r[f"{part}_s"][n] / r[f"{part}_s"]["full"])
    rows = out["rows"]
    assert [(r["config"], r["length"]) for r in rows] == [(n, L) for L in (32, 64)
                                                         for n in names]
    for row in rows:
        mine = [r for r in rounds if r["length"] == row["length"]]
        assert row["decode_speedup"] == pytest.approx(statistics.median(
            [1 / r["decode_ratio"][row["config"]] for r in mine]))
    assert meta["patterns"]["64"]["sinks@K8_top2_w64_random"]["matched_length"] == 64
    md = (tmp_path / "focus_op_speed_1t_quick.md").read_text()
    # one thread: the run itself is a load of 1, other work shows above 1 + 0.5
    if load1 > 1.5:
        assert meta["under_load"] and "measured under load" in md
        assert {r["verdict"] for r in rows} == {"reference", "none (under load)"}
    else:
        assert not meta["under_load"] and "measured under load" not in md
        assert all(r["verdict"] in ("meets 1.3x", "below 1.3x") for r in rows[1:3])
    assert md.startswith("### Focus operating point")
    # --rewrite rebuilds the same table from the saved rounds, keeping the conditions
    again = focus_op_speed.main(["--rewrite", str(tmp_path / "focus_op_speed_1t_quick.json"),
                                 "--out", str(tmp_path / "again")])
    assert again["rows"] == rows and again["under_load"] == meta["under_load"]
    saved = json.loads((tmp_path / "again" / "focus_op_speed_1t_quick.json").read_text())
    assert saved["meta"]["date"] == meta["date"] and saved["meta"]["rounds"] == rounds


def test_decoding_steps_extend_the_prefill_cache():
    from benchmarks.focus.operating_point import compose_config
    from quest_geometric.testing.hf import build_hf, tokens

    model = compose_config(build_hf("llama", seed=0), {"kind": "random", "K": 4, "top_k": 1,
                                                       "window": 2}).eval()
    calls = []

    def record(_module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        cache = kwargs.get("cache")
        calls.append((ids.shape[1], None if cache is None else cache.get_seq_length(),
                      kwargs.get("logits_to_keep")))

    model.register_forward_pre_hook(record, with_kwargs=True)
    out = focus_op_speed.time_prefill_decode(model, tokens(1, 20, seed=1), 4)
    assert set(out) == {"prefill_s", "decode_s"} and min(out.values()) > 0
    # one prefill of the prompt (last logits only), then one token per step on its cache
    assert calls == [(20, None, 1), (1, 20, None), (1, 21, None), (1, 22, None), (1, 23, None)]
