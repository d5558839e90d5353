"""Tests of the query/key geometry study: its trajectory pipeline
(benchmarks/qk_geometry/trajectories) and the study built on it (benchmarks/qk_geometry)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from benchmarks.qk_geometry import study
from benchmarks.qk_geometry.config import FULL, QUICK, StudyConfig
from benchmarks.qk_geometry.hf import hf_analysis
from benchmarks.qk_geometry.records import read_records
from benchmarks.qk_geometry.runs import measure_overhead, run_intervention
from benchmarks.qk_geometry.runs import train_run as study_train_run
from benchmarks.qk_geometry.study import main as study_main
from benchmarks.qk_geometry.summary import intervention_summary, run_bootstrap_shares
from quest_geometric.analysis import directional_probability
from benchmarks.qk_geometry import trajectories as qk
from benchmarks.qk_geometry.trajectories import trajectory_summary
from benchmarks.qk_geometry.trajectories.records import write_records
from benchmarks.qk_geometry.trajectories.runs import _dedupe

# A trajectory grid small enough for a test: 1 depth, 1 init, 1 seed, 10 steps.
TINY_TRAJ = dict(n_embd=16, n_head=2, block_size=16, batch_size=4, steps=10, warmup_steps=2,
                 probe_every=5, probe_batch_size=4, probe_max_tokens=64, eval_batches=2,
                 depths=(2,), inits=("independent",), seeds=(0,))
# ... and the study's other parts as small.
TINY = dict(TINY_TRAJ, intervention_depth=1, intervention_init="independent",
            intervention_seeds=(0,), overhead_depth=1, overhead_steps=4, overhead_probe_every=2,
            overhead_repeats=1)


def _tiny_cfg(**kw) -> StudyConfig:
    return QUICK.replace(**{**TINY, **kw})


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# --------------------------------------------------------------------------- trajectories
@pytest.mark.slow
def test_trajectory_part_writes_files_and_summary_matches_records(tmp_path):
    torch.set_num_threads(1)
    res = study.run(quick=True, out_dir=tmp_path, progress=False, parts=["trajectories"], **TINY)
    for suffix in ("_trajectories.csv", "_trajectories.json", "_trajectories.md",
                   "_records.jsonl.gz",
                   "_trajectories.png", "_prk_entropy.png", "_correlations.md", ".md",
                   "_share_over_steps.csv", "_share_over_steps.md", "_share_over_steps.png",
                   "_diff.png", "_share_bootstrap.md"):
        assert (tmp_path / f"qk_geometry{suffix}").is_file(), suffix
    run_dir = res["run_root"] / "L2_independent_none_s0"
    for f in ("checkpoint.pt", "probe.jsonl", "run.json", "metrics.jsonl"):
        assert (run_dir / f).is_file(), f

    rows = read_records(tmp_path / "qk_geometry_records.jsonl.gz")
    assert sorted({r["step"] for r in rows}) == [0, 5, 10]
    assert sorted({r["layer"] for r in rows}) == [0, 1]
    assert len(rows) == 6
    for r in rows:
        assert r["pr_q_minus_pr_k"] == pytest.approx(r["pr_q"] - r["pr_k"], rel=1e-4, abs=1e-4)
        assert 1.0 <= r["pr_q"] <= 8.0 and 1.0 <= r["pr_k"] <= 8.0  # head_dim 8
        assert 0.0 <= r["attention_entropy"] <= 1.0

    # Recompute the shares and slopes from the logged rows (one seed: no averaging).
    ends, throughout, slopes_q = [], [], []
    for layer in (0, 1):
        lr = sorted((r for r in rows if r["layer"] == layer), key=lambda r: r["step"])
        d = [r["pr_q"] - r["pr_k"] for r in lr]
        ends.append(d[-1] > 0)
        throughout.append(all(x > 0 for x, r in zip(d, lr) if r["step"] > 0))
        from scipy.stats import linregress
        slopes_q.append(1000 * linregress([r["step"] for r in lr], [r["pr_q"] for r in lr]).slope)
    summary = json.loads((tmp_path / "qk_geometry_trajectories.json").read_text())["rows"]
    all_row = next(r for r in summary if r["depth"] == "all")
    assert all_row["trajectories"] == 2
    assert all_row["share_end"] == pytest.approx(np.mean(ends))
    assert all_row["share_throughout"] == pytest.approx(np.mean(throughout))
    assert all_row["slope_q_per_1k"] == pytest.approx(np.mean(slopes_q), rel=1e-3)
    assert math.isfinite(all_row["val_loss"])
    # a quick (smoke) run gives its numbers without verdicts on the paper's findings
    assert "too small to test the paper's finding" in res["summary"][0]
    assert "reproduced" not in res["summary"][0]

    # A second call reuses the finished run (no retraining: the checkpoint is untouched).
    mtime = (run_dir / "checkpoint.pt").stat().st_mtime_ns
    again = qk.run_trajectories(_tiny_cfg(), res["run_root"], progress=False)
    assert (run_dir / "checkpoint.pt").stat().st_mtime_ns == mtime
    assert again[0]["records"] == _dedupe(_read_jsonl(run_dir / "probe.jsonl"))

    # The package's pipeline (what the tour runs) trains and tabulates the same grid.
    pipe = qk.run(tmp_path / "pipeline", progress=False, **TINY_TRAJ)
    rows = json.loads((tmp_path / "pipeline" / "qk_geometry_trajectories.json").read_text())
    assert rows["rows"] == summary
    assert pipe["summary"] == res["summary"]
    assert not (tmp_path / "pipeline" / "qk_geometry_share_bootstrap.md").exists()


@pytest.mark.slow
def test_train_run_resumes_from_checkpoint_without_duplicate_records(tmp_path):
    torch.set_num_threads(1)
    # a 4-step session leaves a checkpoint at step 4; without run.json the next call resumes
    qk.train_run(_tiny_cfg(steps=4, probe_every=4), 1, "tied", 3, run_root=tmp_path)
    run_dir = tmp_path / "L1_tied_none_s3"
    (run_dir / "run.json").unlink()
    first_lines = (run_dir / "probe.jsonl").read_text().splitlines()
    assert len(first_lines) == 2  # steps 0 and 4, one layer
    res = qk.train_run(_tiny_cfg(steps=8, probe_every=4), 1, "tied", 3, run_root=tmp_path)
    assert [(r["step"], r["layer"]) for r in res["records"]] == [(0, 0), (4, 0), (8, 0)]
    lines = (run_dir / "probe.jsonl").read_text().splitlines()
    assert lines[:2] == first_lines and len(lines) == 3  # resumed at step 4, not restarted
    metrics = _read_jsonl(run_dir / "metrics.jsonl")
    assert metrics[-1]["step"] == 8 and math.isfinite(metrics[-1]["val_loss"])
    # tied init: W_K = W_Q (and zero biases), so PR_Q = PR_K exactly at step 0
    r0 = res["records"][0]
    assert r0["pr_q"] == pytest.approx(r0["pr_k"], rel=1e-9)


def test_trajectory_summary_seed_averaging_by_hand():
    def rec(seed, step, layer, pq, pk, ent=0.5):
        return {"depth": 1, "init": "independent", "seed": seed, "step": step, "layer": layer,
                "pr_q": pq, "pr_k": pk, "attention_entropy": ent, "qk_effective_rank": pk}

    recs = [
        # seed 0 diff +1 everywhere; seed 1 diff -3 at the end: mean diff at end = -1
        rec(0, 0, 0, 2.0, 2.0), rec(0, 10, 0, 4.0, 3.0), rec(0, 20, 0, 5.0, 4.0),
        rec(1, 0, 0, 2.0, 2.0), rec(1, 10, 0, 4.0, 3.0), rec(1, 20, 0, 2.0, 5.0),
    ]
    s = trajectory_summary(recs)
    (t,) = s["trajectories"]
    assert t["pr_q"] == [2.0, 4.0, 3.5] and t["pr_k"] == [2.0, 3.0, 4.5]
    assert t["positive_end"] is False and t["positive_throughout"] is False
    # least squares through (0, 2), (10, 4), (20, 3.5): slope 0.075 per step
    assert t["slope_q"] == pytest.approx(75.0)
    # second half (steps >= 10): (10, 4), (20, 3.5) for Q and (10, 3), (20, 4.5) for K
    assert t["slope_q_late"] == pytest.approx(-50.0) and t["slope_k_late"] == pytest.approx(150.0)
    all_row = s["rows"][-1]
    assert all_row["share_end"] == 0.0
    assert all_row["run_layers"] == 2 and all_row["run_share_end"] == 0.5
    assert all_row["run_share_throughout"] == 0.5
    with pytest.raises(ValueError, match="no probe record"):
        trajectory_summary([{**recs[0], "pr_q": None}])


# --------------------------------------------------------------------------- intervention
def test_directional_probability_against_hand_binomial():
    shrink = [0.50, 0.61, 0.40, 0.70, 0.90]
    hold = [0.60, 0.62, 0.45, 0.80, 0.85]
    res = directional_probability(shrink, hold)
    assert res["signs"] == [-1, -1, -1, -1, 1]
    assert (res["n_untied"], res["k_less"]) == (5, 4)
    assert res["share_less"] == pytest.approx(0.8)
    assert res["p_value"] == pytest.approx((math.comb(5, 4) + math.comb(5, 5)) / 2 ** 5)
    assert res["mean_diff"] == pytest.approx(np.mean(np.subtract(shrink, hold)))
    # ties are dropped: 2 untied seeds, both lower -> p = 1/4
    tied = directional_probability([1.0, 1.0, 2.0], [1.0, 2.0, 3.0])
    assert (tied["n_untied"], tied["k_less"], tied["signs"]) == (2, 2, [0, -1, -1])
    assert tied["p_value"] == pytest.approx(0.25)
    assert math.isnan(directional_probability([1.0], [1.0])["p_value"])


@pytest.mark.parametrize("a,b,match", [([1.0, 2.0], [1.0], "paired"), ([], [], "non-empty"),
                                       ([float("nan")], [1.0], "finite")])
def test_directional_probability_errors(a, b, match):
    with pytest.raises(ValueError, match=match):
        directional_probability(a, b)


@pytest.mark.slow
def test_intervention_hold_keeps_spectrum_shape_and_summary(tmp_path):
    torch.set_num_threads(1)
    cfg = _tiny_cfg(steps=6, probe_every=3, shrink_decay=0.2)
    results = run_intervention(cfg, tmp_path, progress=False)
    assert sorted(r["meta"]["mode"] for r in results) == ["hold", "none", "shrink"]
    by_mode = {r["meta"]["mode"]: r["records"] for r in results}
    start = {m: by_mode[m][0]["pr_wk"] for m in by_mode}
    end = {m: by_mode[m][-1]["pr_wk"] for m in by_mode}
    assert start["hold"] == pytest.approx(start["shrink"]) == pytest.approx(start["none"])
    assert end["hold"] == pytest.approx(start["hold"], rel=1e-4)  # shape held at init
    assert end["shrink"] < end["hold"]                              # extra decay
    summ = intervention_summary(results)
    assert [r["mode"] for r in summ["rows"]] == ["none", "hold", "shrink"]
    test = next(t for t in summ["tests"] if t["test"] == "entropy(shrink) < entropy(hold)")
    ps = {p["mode"]: p for p in summ["per_seed"]}
    expected = directional_probability([ps["shrink"]["entropy"]], [ps["hold"]["entropy"]])
    assert test["k_less"] == expected["k_less"] and test["signs"] == expected["signs"]
    # the end entropy is the mean over layers of the last probe record
    last = max(r["step"] for r in by_mode["hold"])
    ent = np.mean([r["attention_entropy"] for r in by_mode["hold"] if r["step"] == last])
    assert ps["hold"]["entropy"] == pytest.approx(ent)


# --------------------------------------------------------------------------- overhead
def test_measure_overhead_fields_and_cache(tmp_path):
    torch.set_num_threads(1)
    cache = tmp_path / "overhead.json"
    res = measure_overhead(_tiny_cfg(), cache=cache)
    assert res["probes"] == 2  # every 2 of 4 steps, no probe at step 0
    assert res["overhead_pct"] == pytest.approx(
        100 * (res["seconds_probed"] - res["seconds_plain"]) / res["seconds_plain"])
    assert res["overhead_wall_pct"] == pytest.approx(
        100 * (res["wall_probed"] - res["wall_plain"]) / res["wall_plain"])
    assert res["clock"] == "process CPU time" and res["ms_per_probe"] > 0
    assert json.loads(cache.read_text())["overhead_pct"] == pytest.approx(res["overhead_pct"])
    assert measure_overhead(_tiny_cfg(overhead_steps=1000), cache=cache)["steps"] == 4


# --------------------------------------------------------------------------- Hugging Face
def _tiny_tokenizer(path: Path, text: str) -> int:
    tokenizers = pytest.importorskip("tokenizers")
    from transformers import PreTrainedTokenizerFast

    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=290, initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False)
    tok.train_from_iterator([text], trainer)
    PreTrainedTokenizerFast(tokenizer_object=tok).save_pretrained(path)
    return tok.get_vocab_size()


def _save_model(arch: str, path: Path, vocab: int) -> None:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    if arch == "gpt2":
        cfg = transformers.GPT2Config(vocab_size=vocab, n_positions=32, n_embd=16, n_layer=2,
                                      n_head=2, bos_token_id=0, eos_token_id=0)
        model = transformers.GPT2LMHeadModel(cfg)
    else:
        cfg = transformers.GPTNeoXConfig(vocab_size=vocab, hidden_size=16, num_hidden_layers=2,
                                         num_attention_heads=2, intermediate_size=32,
                                         max_position_embeddings=32, bos_token_id=0, eos_token_id=0)
        model = transformers.GPTNeoXForCausalLM(cfg)
    model.save_pretrained(path)


TEXT = "def f(x):\n    return x + 1  # the Python language reference\n" * 40


@pytest.mark.parametrize("arch", ["gpt2", "neox"])
def test_hf_analysis_orders_by_step_and_tabulates(tmp_path, arch):
    pytest.importorskip("transformers")
    late, early = tmp_path / f"{arch}-step200", tmp_path / f"{arch}-step10"
    vocab = _tiny_tokenizer(late, TEXT)
    _tiny_tokenizer(early, TEXT)
    _save_model(arch, late, vocab)
    _save_model(arch, early, vocab)
    res = hf_analysis([late, early], text=TEXT, seq_len=16, batch_size=4)
    assert res["steps"] == [10, 200]
    assert [(r["step"], r["layer"]) for r in res["rows"]] == [(10, 0), (10, 1), (200, 0), (200, 1)]
    assert all(r["step_from"] == "folder name" for r in res["rows"])
    for r in res["rows"]:
        assert r["pr_q_minus_pr_k"] == pytest.approx(r["pr_q"] - r["pr_k"])
        assert 1.0 <= r["pr_k"] <= 8.0 and 0.0 < r["attention_entropy"] <= 1.0
    # same weights (seed 0) and same tokens -> same measurements at both steps
    assert res["pivot"][0]["step 10"] == pytest.approx(res["pivot"][0]["step 200"])
    assert [p["layer"] for p in res["pivot"]] == [0, 1]


@pytest.mark.slow
def test_hf_cli_and_errors(tmp_path):
    pytest.importorskip("transformers")
    bare = tmp_path / "bare"
    _save_model("gpt2", bare, 300)
    with pytest.raises(ValueError, match="holds no tokenizer"):
        hf_analysis([bare], text=TEXT, seq_len=16, batch_size=2)
    # byte-level fallback through the command line; order given = step when no step is named
    out = tmp_path / "out"
    res = study_main(["--hf-model", str(bare), "--hf-byte-fallback", "--out", str(out),
                   "--no-progress", "--threads", "0"])
    assert res["hf"]["rows"][0]["tokenizer"].startswith("utf-8 bytes")
    assert res["hf"]["rows"][0]["step_from"] == "order given"
    assert (out / "qk_geometry_hf.csv").is_file() and (out / "qk_geometry_hf_pivot.md").is_file()
    small = tmp_path / "small"
    _save_model("gpt2", small, 100)
    with pytest.raises(ValueError, match="vocab_size >= 256"):
        hf_analysis([small], text=TEXT, byte_fallback=True)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="does not hold a Hugging Face model"):
        hf_analysis([empty])
    (empty / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="no weights"):
        hf_analysis([empty])
    with pytest.raises(ValueError, match="is not a directory"):
        hf_analysis([tmp_path / "missing"])
    with pytest.raises(ValueError, match="no checkpoint path"):
        hf_analysis([])


# --------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("kw,err,match", [
    (dict(inits=("bogus",)), ValueError, "inits"),
    (dict(depths=(0,)), ValueError, "depths"),
    (dict(depths=(2.5,)), TypeError, "^StudyConfig: 'depths\\[0\\]'"),
    (dict(intervention_init="random"), ValueError, "intervention_init"),
    (dict(seeds=(0, 0)), ValueError, "duplicates"),
    (dict(n_embd=10, n_head=4), ValueError, "divisible"),
    (dict(widht=3), TypeError, "unknown overrides"),
])
def test_run_rejects_bad_configuration(tmp_path, kw, err, match):
    with pytest.raises(err, match=match):
        study.run(quick=True, out_dir=tmp_path, progress=False, parts=["trajectories"], **kw)


def test_pipeline_run_rejects_the_study_only_fields(tmp_path):
    # the package's run knows the trajectory grid's fields only
    with pytest.raises(TypeError, match="unknown overrides \\['intervention_seeds'\\]"):
        qk.run(tmp_path, progress=False, intervention_seeds=(0,))
    with pytest.raises(ValueError, match="depths"):
        qk.run(tmp_path, progress=False, depths=(0,))


def test_train_run_and_run_errors(tmp_path):
    cfg = _tiny_cfg()
    with pytest.raises(ValueError, match="^qk_geometry: 'init' must be one of"):
        qk.train_run(cfg, 2, "xavier", 0)
    with pytest.raises(ValueError, match="depth must be a positive int"):
        qk.train_run(cfg, -1, "tied", 0)
    with pytest.raises(ValueError, match="^qk_geometry: 'mode' must be one of"):
        study_train_run(cfg, 1, "tied", 0, mode="clamp")
    with pytest.raises(ValueError, match="unknown parts"):
        study.run(quick=True, out_dir=tmp_path, parts=["nope"])
    with pytest.raises(ValueError, match="needs hf_models"):
        study.run(quick=True, out_dir=tmp_path, parts=["hf"])


# --------------------------------------------------------------------------- share over steps
def _fake_summary(diffs_by_traj: dict, steps: list, runs: list = ()) -> dict:
    ts = [{"depth": d, "init": i, "layer": ly, "steps": list(steps), "diff": list(v)}
          for (d, i, ly), v in diffs_by_traj.items()]
    return {"trajectories": ts, "run_layers": [
        {"depth": d, "init": i, "layer": ly, "seed": s, "steps": list(steps), "diff": list(v)}
        for (d, i, ly, s), v in runs]}


def test_share_over_steps_counts_and_clopper_pearson_interval():
    from scipy.stats import beta

    steps = [0, 100, 200]
    diffs = {(4, "independent", 0): [-1.0, 0.5, 0.2], (4, "independent", 1): [0.0, -0.1, 0.3],
             (6, "tied", 0): [0.0, 0.4, 0.1], (6, "tied", 1): [0.0, 0.2, -0.2],
             (6, "tied", 2): [0.1, 0.3, 0.6]}
    rows = qk.share_over_steps(_fake_summary(diffs, steps))
    allr = {r["step"]: r for r in rows if r["unit"] == "trajectory" and r["depth"] == "all"
            and r["init"] == "all"}
    # hand count: step 0 -> only +0.1 (zero is not > 0); step 100 -> 4 of 5; step 200 -> 4 of 5
    assert [allr[s]["k"] for s in steps] == [1, 4, 4] and {r["n"] for r in allr.values()} == {5}
    for r in allr.values():  # the exact interval from the beta quantiles, independently
        k, n = r["k"], r["n"]
        lo = 0.0 if k == 0 else beta.ppf(0.025, k, n - k + 1)
        hi = 1.0 if k == n else beta.ppf(0.975, k + 1, n - k)
        assert r["ci_low"] == pytest.approx(lo, abs=1e-9) and r["ci_high"] == pytest.approx(hi,
                                                                                            abs=1e-9)
        assert r["ci_low"] <= r["share"] <= r["ci_high"]
    d6 = {r["step"]: r for r in rows if r["depth"] == 6}
    assert [d6[s]["k"] for s in steps] == [1, 3, 2] and d6[0]["n"] == 3
    tied = {r["step"]: r for r in rows if r["init"] == "tied"}
    assert tied[200]["share"] == pytest.approx(2 / 3)
    assert allr[100]["mean_diff"] == pytest.approx(np.mean([0.5, -0.1, 0.4, 0.2, 0.3]))
    assert not any(r["unit"] == "run layer" for r in rows)  # no run layers given
    with pytest.raises(ValueError, match="level"):
        qk.share_over_steps(_fake_summary(diffs, steps), level=1.0)


def test_first_sustained_step_needs_the_share_to_stay_up():
    rows = [{"unit": "trajectory", "depth": "all", "init": "all", "step": s, "share": v}
            for s, v in [(0, 0.2), (100, 0.95), (200, 0.8), (300, 0.9), (400, 1.0)]]
    assert qk.first_sustained_step(rows, 0.9) == 300  # the dip at 200 resets it
    assert qk.first_sustained_step(rows, 0.99) == 400
    assert qk.first_sustained_step(rows[:3], 0.9) is None  # ends below


# --------------------------------------------------------------------------- the layout
def test_run_tag_of_the_full_configuration_is_pinned():
    """``FULL.run_tag()`` names the folders of the long background runs
    (``<out>/qk_geometry_runs/<tag>/``): a later invocation must find them again. The value
    was computed before the study became a subpackage."""
    assert FULL.run_tag() == "e13b87bd27"
    assert StudyConfig().run_tag() == "e13b87bd27"
    # and it still follows every field that shapes a run
    assert FULL.replace(steps=601).run_tag() != "e13b87bd27"
    assert FULL.replace(shrink_decay=0.02).run_tag() != "e13b87bd27"
    assert FULL.replace(seeds=(0, 1, 2)).run_tag() == "e13b87bd27"  # seeds are per run folder


def test_probe_model_equals_a_manual_qkprobe_and_restores_the_mode():
    from quest_geometric.analysis import QKProbe, probe_model
    from quest_geometric.models.char_gpt import CharGPT, GPTConfig

    torch.manual_seed(0)
    model = CharGPT(GPTConfig(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=8))
    x = torch.randint(0, 11, (3, 8), generator=torch.Generator().manual_seed(1))
    y = torch.randint(0, 11, (3, 8), generator=torch.Generator().manual_seed(2))
    model.train()
    layers, heads, loss = probe_model(model, (x, y), max_tokens=64)
    assert model.training  # the mode is restored
    model.eval()
    with torch.no_grad(), QKProbe(model, heads=True, max_tokens=64) as probe:
        _, ref_loss = model(x, y)
    ref = probe.results()
    assert loss == pytest.approx(float(ref_loss))
    assert [r["layer_index"] for r in layers] == [0, 1] and len(heads) == 2 * 2
    ref_layers = [r for r in ref if r["head"] is None]
    for got, want in zip(layers, ref_layers):
        for key in ("pr_q", "pr_k", "attention_entropy", "qk_effective_rank"):
            assert got[key] == pytest.approx(want[key]), key
    # a bare tensor of ids: no loss
    assert probe_model(model, x, max_tokens=64)[2] is None


@pytest.mark.slow
def test_compare_studies_reads_records_and_matches_share_over_steps(tmp_path):
    from benchmarks.qk_geometry.compare import compare_studies

    # two synthetic "studies": records of 2 layers x 2 seeds at steps 0, 100, 200 (and 400)
    def write(stem, steps, sign_at_end):
        rows = []
        for seed in (0, 1):
            for layer in (0, 1):
                for s in steps:
                    d = (0.3 if (s == steps[-1] and sign_at_end[layer]) else -0.2) + 0.01 * seed
                    rows.append({"depth": 2, "init": "independent", "seed": seed, "step": s,
                                 "layer": layer, "pr_q": 3.0 + d, "pr_k": 3.0,
                                 "attention_entropy": 0.5})
        write_records(tmp_path / f"{stem}_records.jsonl.gz", rows)
    write("short", [0, 100, 200], [True, False])
    write("long", [0, 100, 200, 300, 400], [True, True])
    res = compare_studies(["short", "long"], tmp_path, labels=["600", "2400"])
    short, long_ = res["rows"]
    assert short["study"] == "600" and short["trajectories"] == 2 and short["seeds"] == 2
    assert short["end"].startswith("50%") and long_["end"].startswith("100%")
    assert long_["stays >= 90% from"] == "step 400" and short["stays >= 90% from"] == "never"
    assert short["steps"] == 200 and long_["steps"] == 400
    for suffix in (".csv", ".json", ".md", ".png"):
        assert (tmp_path / f"qk_geometry_compare{suffix}").is_file()
    with pytest.raises(FileNotFoundError, match="--name missing"):
        compare_studies(["missing"], tmp_path)
    with pytest.raises(ValueError, match="labels"):
        compare_studies(["short"], tmp_path, labels=["a", "b"])


def _records(cells):
    """Probe rows from {(depth, init): {seed: {layer: [(pr_q, pr_k) per step]}}}."""
    out = []
    for (depth, init), seeds in cells.items():
        for seed, layers in seeds.items():
            for layer, curve in layers.items():
                for i, (q, k) in enumerate(curve):
                    out.append({"depth": depth, "init": init, "seed": seed, "layer": layer,
                                "step": 100 * i, "pr_q": q, "pr_k": k})
    return out


def test_run_bootstrap_shares_point_values_and_every_later_share():
    # one cell, two runs, two layers, three steps; seed-averaged diffs:
    # layer 0: (+1, -1, +1) -> positive at steps 0, 200; every-later only from 200
    # layer 1: (+1, +1, +1) -> positive everywhere
    cells = {(2, "independent"): {
        0: {0: [(3, 1), (1, 2), (3, 2)], 1: [(2, 1), (2, 1), (2, 1)]},
        1: {0: [(1, 1), (1, 2), (2, 1)], 1: [(2, 1), (2, 1), (2, 1)]}}}
    rows = run_bootstrap_shares(_records(cells), n_boot=200, seed=1)
    assert [r["step"] for r in rows] == [0, 100, 200]
    assert [r["share"] for r in rows] == [1.0, 0.5, 1.0]
    assert [r["share_every_later"] for r in rows] == [0.5, 0.5, 1.0]
    assert all(r["trajectories"] == 2 and r["runs"] == 2 for r in rows)
    for r in rows:
        assert 0 <= r["boot_low"] <= r["boot_high"] <= 1
        assert r["every_later_boot_low"] <= r["every_later_boot_high"]
    # layer 1 is positive in every resample, so no resample's share falls below 1/2
    assert all(r["boot_low"] >= 0.5 for r in rows)
    assert run_bootstrap_shares(_records(cells), n_boot=200, seed=1) == rows  # seeded


def test_run_bootstrap_resamples_runs_not_trajectories():
    # one run per cell: every resample is the data itself, whatever the number of layers,
    # so the interval is the point (a trajectory bootstrap would spread over 4 layers)
    cells = {(4, "tied"): {0: {layer: [(1.0 + (layer % 2), 1.5)] for layer in range(4)}}}
    rows = run_bootstrap_shares(_records(cells), n_boot=100)
    assert rows[0]["share"] == rows[0]["boot_low"] == rows[0]["boot_high"] == 0.5
    with pytest.raises(ValueError, match="'level' must be in"):
        run_bootstrap_shares(_records(cells), level=1.0)
    with pytest.raises(ValueError, match="'n_boot' must be an int"):
        run_bootstrap_shares(_records(cells), n_boot=0)
    missing = _records({(4, "tied"): {0: {0: [(1, 1), (2, 1)]}, 1: {0: [(1, 1), (2, 1)],
                                                                     1: [(1, 1), (2, 1)]}}})
    with pytest.raises(ValueError, match="lacks some"):
        run_bootstrap_shares(missing)


def test_run_bootstrap_point_shares_match_the_committed_share_table():
    import json
    from pathlib import Path

    res = Path(__file__).resolve().parents[2] / "benchmarks" / "qk_geometry" / "results"
    records = read_records(res / "qk_geometry_long_records.jsonl.gz")
    rows = {r["step"]: r for r in run_bootstrap_shares(records, n_boot=50)}
    committed = json.loads((res / "qk_geometry_long_share_over_steps.json").read_text())["rows"]
    for c in committed:
        if c["unit"] == "trajectory" and c["depth"] == "all" and c["init"] == "all":
            assert rows[c["step"]]["share"] == pytest.approx(c["share"]), c["step"]


def test_trajectory_plot_title_draws_no_band_for_one_seed():
    from benchmarks.qk_geometry.trajectories.plots import trajectory_title

    assert trajectory_title(1) == "PR_Q - PR_K per layer (one seed)"
    assert "band: seed range" in trajectory_title(4) and "mean of 4 seeds" in trajectory_title(4)
