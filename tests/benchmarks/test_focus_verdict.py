"""The verdict table of the Focus operating-point study, built from hand-made result files: each
criterion of the target met, missed, not measured or ruled out by the share bound."""
from __future__ import annotations

import json
import math

import pytest

from benchmarks.focus.verdict import (LONG_FILE, MIN_WINDOWS, SPEED_FILE, TARGET, verdict_rows,
                                      write_verdict)

FULL = [2.0, 2.2, 2.4, 2.6]  # full attention's per-block losses on every split
FOCUS = "K8_top2_w64_distill+sinks"


def _row(op, name, kind, losses, share_8k, training=None, full=FULL, **cfg):
    """A row file as ``evaluate_config`` writes it (per-block losses on every split, against
    full attention's ``full``)."""
    splits = {}
    n = len(losses)
    for s in ("val", "test", "ood"):
        d = 100 * math.expm1(sum(losses) / n - sum(full) / n)
        splits[s] = {"block_loss": losses, "blocks": list(range(n)),
                     "block_sha": [f"h{i}" for i in range(n)], "delta_pct": d,
                     "delta_sem": 0.1, "blocks_worse": sum(a > b for a, b in zip(losses, full))}
    (op / f"{name}.json").write_text(json.dumps({
        "name": name, "config": {"kind": kind, **cfg}, "pairs_kept_eval": share_8k,
        "pairs_kept_8k": share_8k, **splits, **({"training": training} if training else {})}))


def _passkey(results, rows):
    with open(results / "focus_passkey_trials.jsonl", "a") as f:
        for config, length, correct in rows:
            for trial, c in enumerate(correct):
                f.write(json.dumps({"config": config, "length": length, "depth": 0.5,
                                    "trial": trial, "seed": 0, "correct": c}) + "\n")


def _speed(results, threads, rows):
    (results / "focus_op_speed").mkdir(exist_ok=True)
    path = results / SPEED_FILE.format(t=threads)
    path.write_text(json.dumps({"meta": {}, "rows": [
        {"config": c, "length": n, "prefill_speedup": p, "decode_speedup": d}
        for c, n, p, d in rows]}))


def _long(results, name, pct, n, vs_window=None, vs_random=None):
    """The long-context summary's entry of ``name`` on the out-of-domain set: trailing
    perplexity change ``pct`` against full attention on ``n`` windows, and against the
    baselines as ``(pct, permutation p)``."""
    path = results / LONG_FILE
    path.parent.mkdir(exist_ok=True)
    doc = json.loads(path.read_text()) if path.is_file() else {
        "meta": {}, "sets": {"ood": {"full": {"windows": n}}}}

    def cmp(against, d):
        return None if d is None else {"against": against, "n": n, "ppl_change_pct": d[0],
                                       "p_perm": d[1]}
    doc["sets"]["ood"][name] = {
        "windows": n, "vs_full": cmp("full", (pct, 0.01)),
        "vs_window": cmp("window", vs_window), "vs_random": cmp("random", vs_random),
        "bin_diff_vs_full": [None, 0.01, math.log(1.02)]}
    path.write_text(json.dumps(doc))


@pytest.fixture
def study(tmp_path):
    """A Focus row that meets every criterion: 0.5% better than full attention on every
    block, 10% better than both baselines on every block, the passkey of full attention at
    8K and better than both baselines' there, 1.5x in prefill and decoding at 8K at both
    thread counts, 20% of the pairs kept."""
    op = tmp_path / "focus_operating_point"
    op.mkdir()
    full = {s: {"block_loss": FULL} for s in ("val", "test", "ood")}
    (op / "full.json").write_text(json.dumps({
        **full, "block_sha": {s: [f"h{i}" for i in range(len(FULL))] for s in full},
        "meta": {"model": "m"}}))
    pattern = {"K": 8, "top_k": 2, "window": 64}
    _row(op, FOCUS, "trained", [x + math.log(0.995) for x in FULL], 0.2,
         training={"steps": 50, "revisit_mean": -0.001, "revisit_sem": 0.002},
         objective="distill", num_sinks=4, **pattern)
    _row(op, "sinks@K8_top2_w64_distill", "sinks", [x + math.log(1.1) - 0.01 * i
                                                     for i, x in enumerate(FULL)], 0.2,
         window=300, num_sinks=4)
    _row(op, "K8_top2_w64_random", "random", [x + math.log(1.1) + 0.01 * i
                                              for i, x in enumerate(FULL)], 0.2, **pattern)
    # 8 trials at 8K: Focus answers what full attention answers (7), both baselines nothing
    # (McNemar: 7 discordant trials all for Focus, p = 2 / 128)
    answered = [True, True, False, True, True, True, True, True]
    _passkey(tmp_path, [("full", 8186, answered), (FOCUS, 8186, answered),
                        ("sinks@K8_top2_w64_distill", 8186, [False] * 8),
                        ("K8_top2_w64_random", 8186, [False] * 8),
                        ("full", 2048, [True, True, True, True]),
                        (FOCUS, 2048, [True, False, True, True])])
    for t in TARGET["threads"]:
        _speed(tmp_path, t, [("full", 8186, 1.0, 1.0), (FOCUS, 8186, 1.5, 1.5)])
    # at 8K on 8 windows: 0.5% better than full attention, 10% better than both baselines
    _long(tmp_path, FOCUS, -0.5, 8, vs_window=(-10.0, 0.0078), vs_random=(-10.0, 0.0078))
    return tmp_path


def _focus(results):
    return next(r for r in verdict_rows(results) if r["name"] == FOCUS)


def test_a_row_that_meets_every_criterion(study):
    r = _focus(study)
    assert r["ood_delta_pct"] == pytest.approx(-0.5) and r["ood_median_pct"] == pytest.approx(-0.5)
    assert r["vs_window_pct"] == pytest.approx(100 * (0.995 / 1.1 * math.exp(0.015) - 1))
    assert r["vs_window_name"] == "sinks@K8_top2_w64_distill"
    assert (r["passkey_8k"], r["passkey_8k_full"], r["passkey_8k_n"]) == (7 / 8, 7 / 8, 8)
    assert (r["passkey_8k_window"], r["passkey_8k_random"]) == (0.0, 0.0)
    assert r["passkey_8k_vs_window_diff"] == 7 / 8
    assert r["passkey_8k_vs_window_p"] == pytest.approx(2 / 128)
    assert (r["passkey_2k"], r["passkey_2k_full"]) == (0.75, 1.0)
    assert r["prefill_2t"] == 1.5 and r["speed_len_1t"] == 8186 and r["speed_from"] == ""
    assert r["plateau"] == "yes" and r["sinks"] == 4
    assert (r["ood_8k_pct"], r["ood_8k_windows"], r["ood_8k_vs_window_pct"]) == (-0.5, 8, -10)
    assert r["ood_8k_worst_bin_pct"] == pytest.approx(2.0)
    assert {k: r[f"{k}_check"] for k in ("quality", "passkey", "speed", "baselines")} == {
        "quality": "met", "passkey": "met", "speed": "met", "baselines": "met"}
    assert r["verdict"] == "meets the target"
    out = write_verdict(study, study / "out")
    assert out["met_by"] == [FOCUS]
    assert f"met by {FOCUS}" in (study / "out" / "focus_verdict.md").read_text()
    full = next(r for r in out["rows"] if r["name"] == "full")
    assert (full["passkey_8k"], full["passkey_2k"], full["prefill_1t"]) == (7 / 8, 1.0, 1.0)
    assert "verdict" not in full  # the criteria are asked of Focus rows only


def test_each_criterion_missed(study):
    op = study / "focus_operating_point"
    # one block much better carries the mean below 1%; the median block is 3% worse
    losses = [x + math.log(1.03) for x in FULL[:3]] + [FULL[3] - 0.5]
    _row(op, FOCUS, "trained", losses, 0.2, objective="distill", num_sinks=4, K=8, top_k=2,
         window=64, training={"steps": 50, "revisit_mean": -0.01, "revisit_sem": 0.002})
    # a window that is 1% worse than full attention (with some spread): Focus is worse than
    # it on the first three blocks
    _row(op, "sinks@K8_top2_w64_distill", "sinks", [x + math.log(1.01) + 0.002 * i
                                                     for i, x in enumerate(FULL)], 0.2,
         window=300, num_sinks=4)
    _passkey(study, [(FOCUS, 8186, [False] * 8)])  # appended rows replace the earlier ones
    for t in TARGET["threads"]:
        _speed(study, t, [(FOCUS, 8186, 1.5, 1.2)])  # decoding below 1.3x
    # at 8K 3% worse than full attention; against the baselines not told apart
    _long(study, FOCUS, 3.0, 8, vs_window=(2.0, 0.3), vs_random=(-5.0, 0.2))
    r = _focus(study)
    assert r["ood_delta_pct"] < TARGET["ood_delta_pct"] < r["ood_median_pct"]
    assert r["quality_check"] == "missed" and r["plateau"] == "no"
    assert r["passkey_check"] == "missed" and r["passkey_8k"] == 0.0
    assert r["speed_check"] == "missed"
    # worse than the window on 3 of 4 blocks, much better on one: the interval holds 0 and
    # 4 blocks cannot make a sign test small, so the comparison is undecided
    assert r["vs_window_ci_low"] < 0 < r["vs_window_ci_high"]
    assert (r["vs_window_worse"], r["vs_window_blocks"]) == (3, 4)
    assert r["vs_window_sign_p"] == pytest.approx(10 / 16)  # P(3 or more of 4, two-sided)
    assert r["baselines_check"] == "undecided"
    assert r["verdict"].startswith("quality missed; passkey missed; speed missed")
    assert write_verdict(study, study / "out")["met_by"] == []
    assert "no Focus configuration meets the target" in (
        study / "out" / "focus_verdict.md").read_text()


def test_missing_measurements_are_not_met(study):
    (study / "focus_passkey_trials.jsonl").unlink()
    _passkey(study, [("full", 2048, [True] * 4), (FOCUS, 2048, [True] * 4)])
    for t in TARGET["threads"]:
        _speed(study, t, [(FOCUS, 4096, 2.0, 2.0)])
    r = _focus(study)
    assert r["passkey_check"] == "not measured (2k only)"
    assert r["speed_check"] == "not measured at 8K (timed at 4096 tokens)"
    (study / SPEED_FILE.format(t=2)).unlink()  # one thread count only
    _speed(study, 1, [(FOCUS, 8186, 2.0, 2.0)])
    assert _focus(study)["speed_check"] == "not measured at 8K (timed at 8186 tokens)"
    # a share of pairs whose prefill bound is below the target rules the speed out
    op = study / "focus_operating_point"
    row = json.loads((op / f"{FOCUS}.json").read_text())
    row["pairs_kept_8k"] = 0.9
    (op / f"{FOCUS}.json").write_text(json.dumps(row))
    assert _focus(study)["speed_check"].startswith("cannot (bound 1.")
    # no passkey trial of a baseline at any length the row ran: that part is not measured
    assert _focus(study)["baselines_check"] == "not measured (passkey vs window, passkey vs " \
        "random)"
    (op / "K8_top2_w64_random.json").unlink()
    (study / LONG_FILE).unlink()  # without 8K windows the 1K blocks decide the perplexity
    assert _focus(study)["baselines_check"] == "not measured (perplexity, passkey vs window, " \
        "passkey vs random)"


def test_passkey_against_the_baselines(study):
    # the perplexity part met (the fixture); a window that answers more often at 8K misses it
    _passkey(study, [("sinks@K8_top2_w64_distill", 8186, [True] * 8)])
    _passkey(study, [(FOCUS, 8186, [True] + [False] * 7)])
    r = _focus(study)
    assert r["passkey_8k_vs_window_diff"] == -7 / 8 and r["passkey_8k_vs_window_p"] < 0.05
    assert r["baselines_check"] == "missed"
    # equal on every trial: not decided by the passkey (and never met without a difference)
    _passkey(study, [(FOCUS, 8186, [True] * 8)])
    r = _focus(study)
    assert r["passkey_8k_vs_window_p"] == 1.0 and r["baselines_check"] == "undecided"
    # better than both, but at 2K only: not met without 8K
    (study / "focus_passkey_trials.jsonl").unlink()
    _passkey(study, [("full", 2048, [True] * 8), (FOCUS, 2048, [True] * 8),
                     ("sinks@K8_top2_w64_distill", 2048, [False] * 8),
                     ("K8_top2_w64_random", 2048, [False] * 8)])
    assert _focus(study)["baselines_check"] == "undecided"


def test_a_window_not_run_takes_the_trials_of_the_same_window(study):
    """The window baseline run under another row's name with the same window and sinks at
    8K is the same content-free model on the same trials; one token of window apart is not."""
    from benchmarks.focus.operating_point import resolve_config

    op = study / "focus_operating_point"
    # the baseline's window at 8K is matched to the share of the row it is named after
    _row(op, "K8_top2_w64_distill", "trained", FULL, 0.2, objective="distill", K=8, top_k=2,
         window=64)
    window = resolve_config("sinks@K8_top2_w64_distill", op, length=8186)["window"]
    answered = [True, True, False, True, True, True, True, True]
    other = "sinks@K8_top2_w64_distill_s4"

    def trials(w):
        (study / "focus_passkey_trials.jsonl").unlink()
        _passkey(study, [("full", 8186, answered), (FOCUS, 8186, answered),
                         (other, 8186, [True] + [False] * 7)])
        lines = [json.loads(x) for x in
                 (study / "focus_passkey_trials.jsonl").read_text().splitlines()]
        for r in lines:
            if r["config"] == other:
                r["pattern"] = {"kind": "sinks", "window": w, "num_sinks": 4}
        (study / "focus_passkey_trials.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in lines))
        return _focus(study)

    r = trials(window)
    assert r["passkey_8k_window_from"] == other
    assert r["passkey_8k_window"] == 1 / 8 and r["passkey_8k_vs_window_diff"] == 6 / 8
    r = trials(window + 1)
    assert "passkey_8k_window_from" not in r and "passkey_8k_window" not in r
    assert "passkey vs window" in r["baselines_check"]


def test_an_untimed_row_takes_the_timing_of_its_pattern(study):
    op = study / "focus_operating_point"
    _row(op, "K8_top2_w64_distill_s4", "trained", FULL, 0.2, objective="distill", num_sinks=4,
         K=8, top_k=2, window=64)
    r = next(r for r in verdict_rows(study) if r["name"] == "K8_top2_w64_distill_s4")
    assert r["speed_from"] == FOCUS and r["prefill_1t"] == 1.5
    # a row of another pattern (no sinks) is not timed by it
    _row(op, "K8_top2_w64_distill", "trained", FULL, 0.2, objective="distill", K=8, top_k=2,
         window=64)
    r = next(r for r in verdict_rows(study) if r["name"] == "K8_top2_w64_distill")
    assert "prefill_1t" not in r and r["speed_check"] == "not measured"


def test_an_untimed_row_takes_the_longest_timing_of_its_pattern(study):
    """Of two rows of its pattern, the one timed at 8K gives the speed, though the one timed
    at 4K only comes first by name."""
    op = study / "focus_operating_point"
    pattern = dict(objective="distill", num_sinks=4, K=8, top_k=2, window=64)
    for name in ("K8_top2_w64_distill_s4", "K8_top2_w64_distill_s4_c200"):
        _row(op, name, "trained", FULL, 0.2, **pattern)
    for t in TARGET["threads"]:  # the study's own row now timed at 4K only
        _speed(study, t, [("full", 4096, 1.0, 1.0), (FOCUS, 4096, 0.5, 0.8),
                          ("full", 8192, 1.0, 1.0), ("K8_top2_w64_distill_s4", 8192, 1.2, 0.9)])
    r = next(r for r in verdict_rows(study) if r["name"] == "K8_top2_w64_distill_s4_c200")
    assert r["speed_from"] == "K8_top2_w64_distill_s4"
    assert (r["speed_len_1t"], r["prefill_1t"], r["decode_2t"]) == (8192, 1.2, 0.9)


def test_worse_on_most_blocks_by_a_sign_test_misses_the_baselines(study):
    """Twelve blocks: the row is 3% worse than the window on eleven and far better on one, so
    the paired interval holds 0 while the exact sign test (11 of 12, p = 0.006) does not.
    (The 1K blocks decide the baselines only without 8K windows: none here.)"""
    (study / LONG_FILE).unlink()
    op = study / "focus_operating_point"
    full = [2.0 + 0.05 * i for i in range(12)]
    (op / "full.json").write_text(json.dumps({
        **{s: {"block_loss": full} for s in ("val", "test", "ood")},
        "block_sha": {s: [f"h{i}" for i in range(12)] for s in ("val", "test", "ood")},
        "meta": {"model": "m"}}))
    window = [x + 0.01 for x in full]
    _row(op, "sinks@K8_top2_w64_distill", "sinks", window, 0.2, full=full, window=300,
         num_sinks=4)
    _row(op, "K8_top2_w64_random", "random", [x + 0.5 + 0.01 * (i % 3) for i, x in
                                              enumerate(full)], 0.2, full=full, K=8, top_k=2,
         window=64)
    _row(op, FOCUS, "trained", [x + math.log(1.03) for x in window[:11]] + [window[11] - 1],
         0.2, full=full, objective="distill", num_sinks=4, K=8, top_k=2, window=64)
    r = _focus(study)
    assert r["vs_window_ci_low"] < 0 < r["vs_window_ci_high"]
    assert (r["vs_window_worse"], r["vs_window_blocks"]) == (11, 12)
    assert r["vs_window_sign_p"] == pytest.approx(2 * 13 / 4096)
    assert r["baselines_check"] == "missed"


def test_the_speed_is_the_longest_timed_length_per_thread_count(study):
    """The row's speed is its longest timed length in the canonical table, per thread
    count; one thread count timed at 8K below the target misses it without the other."""
    for t in TARGET["threads"]:
        _speed(study, t, [("full", 4096, 1.0, 1.0), (FOCUS, 4096, 0.5, 0.8)])
    assert _focus(study)["speed_check"] == "not measured at 8K (timed at 4096 tokens)"
    _speed(study, 1, [(FOCUS, 4096, 0.5, 0.8), (FOCUS, 8192, 1.4, 1.35)])
    r = _focus(study)
    assert (r["speed_len_1t"], r["prefill_1t"]) == (8192, 1.4)
    assert r["speed_len_2t"] == 4096 and r["speed_check"].startswith("not measured at 8K")
    _speed(study, 2, [(FOCUS, 8192, 1.31, 1.2)])
    assert _focus(study)["speed_check"] == "missed"  # decoding at two threads below 1.3x
    (study / SPEED_FILE.format(t=2)).unlink()
    _speed(study, 1, [(FOCUS, 8192, 0.4, 0.7)])
    assert _focus(study)["speed_check"] == "missed"


def test_quality_and_baselines_are_judged_at_8k(study):
    # the 1K blocks say 0.5% better than full attention (the fixture): a second view only
    _long(study, FOCUS, 1.5, 8, vs_window=(-10.0, 0.0078), vs_random=(-10.0, 0.0078))
    r = _focus(study)
    assert r["ood_delta_pct"] == pytest.approx(-0.5) and r["quality_check"] == "missed"
    # fewer windows than a paired permutation test can decide with: not judged at 8K
    _long(study, FOCUS, -0.5, MIN_WINDOWS - 1, vs_window=(-10.0, 0.06),
          vs_random=(-10.0, 0.06))
    r = _focus(study)
    assert r["quality_check"] == f"not measured at 8K ({MIN_WINDOWS - 1} windows)"
    assert r["baselines_check"] == "met"  # the 1K blocks' intervals decide it then
    (study / LONG_FILE).unlink()
    r = _focus(study)
    assert r["quality_check"] == "not measured at 8K (0 windows)" and "ood_8k_pct" not in r
    # worse than the window at 8K with p < 0.05 misses the baselines, whatever the 1K blocks
    _long(study, FOCUS, -0.5, 8, vs_window=(3.0, 0.0078), vs_random=(-10.0, 0.0078))
    r = _focus(study)
    assert r["quality_check"] == "met" and r["baselines_check"] == "missed"
    _long(study, FOCUS, -0.5, 8, vs_window=(-3.0, 0.2), vs_random=(-10.0, 0.0078))
    assert _focus(study)["baselines_check"] == "undecided"

