"""The Focus operating-point study's pure parts: the pairs-kept extrapolation (against exact
counts of random balanced groups), row names, the content-free configurations composed onto a
tiny Llama (against the dense pattern), and the table from row files."""
from __future__ import annotations

import json
import math

import pytest
import torch

from benchmarks.focus.operating_point import (
    CONFIGS,
    compose_config,
    extrapolated_share,
    resolve_config,
    write_table,
)
from quest_geometric.nn.focus import focus_pair_share, pattern_share


def test_extrapolated_share_of_random_groups_matches_exact_counts():
    # random balanced groups share a group with a distance-independent rate, so the rate
    # measured at 256 tokens predicts the share counted at 1,024
    from quest_geometric.nn.focus import random_balanced_groups

    k, top, w = 8, 2, 16
    g_short = random_balanced_groups(torch.arange(256), k, top, seed=1)
    g_long = random_balanced_groups(torch.arange(1024), k, top, seed=2)
    s_short = focus_pair_share(g_short, w)
    s_long = focus_pair_share(g_long, w)
    assert extrapolated_share(s_short, 256, w, 1024) == pytest.approx(s_long, abs=0.01)
    # a window-only pattern (no far pair kept) extrapolates to the window's own share
    assert extrapolated_share(pattern_share(256, w), 256, w, 8192) == pytest.approx(
        pattern_share(8192, w))
    assert extrapolated_share(1.0, 256, w, 8192) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="covers all"):
        extrapolated_share(1.0, 16, 16, 64)


def test_resolve_config_names(tmp_path):
    from benchmarks.focus.operating_point import base_name

    assert resolve_config("K8_top2_w64_distill") == {**CONFIGS["K8_top2_w64_distill"],
                                                     "num_sinks": 0}
    assert resolve_config("K8_top2_w64_distill@top1")["top_k"] == 1
    # +sinks adds the 4 sinks to any row but full attention, with or without @topK
    assert resolve_config("K8_top2_w64_distill+sinks") == {**CONFIGS["K8_top2_w64_distill"],
                                                           "num_sinks": 4}
    both = resolve_config("K8_top2_w64_distill@top1+sinks")
    assert both["top_k"] == 1 and both["num_sinks"] == 4
    assert resolve_config("K8_top2_w64_random+sinks")["num_sinks"] == 4
    assert resolve_config("full") == CONFIGS["full"]
    # a configuration trained with sinks keeps them (and +sinks changes nothing)
    assert resolve_config("K8_top2_w64_distill_s4")["num_sinks"] == 4
    assert resolve_config("K8_top2_w64_distill_s4+sinks")["num_sinks"] == 4
    # a configuration may carry its own training length (the study's default otherwise)
    assert resolve_config("K8_top2_w64_distill_s4_120")["steps"] == 120
    assert "steps" not in resolve_config("K8_top2_w64_distill")
    assert base_name("K8_top2_w64_distill@top1+sinks") == "K8_top2_w64_distill"
    assert base_name("K8_top2_w64_lm+sinks") == "K8_top2_w64_lm"
    for bad in ("K3_top9", "full+sinks", "K8_top2_w64_lm@topx", "K8_top2_w64_lm+sinks@top1"):
        with pytest.raises(ValueError, match="'name' must be one of"):
            resolve_config(bad)
    with pytest.raises(FileNotFoundError, match="evaluate 'K8_top2_w64_random' before"):
        resolve_config("sinks@K8_top2_w64_random", results=tmp_path)
    (tmp_path / "K8_top2_w64_random.json").write_text(json.dumps({"pairs_kept_eval": 0.4}))
    cfg = resolve_config("sinks@K8_top2_w64_random", results=tmp_path)
    assert cfg["kind"] == "sinks" and cfg["num_sinks"] == 4
    # the smallest window that keeps at least the matched share at the evaluation length
    assert pattern_share(1024, cfg["window"], 4) >= 0.4 > pattern_share(1024, cfg["window"] - 1, 4)


@pytest.mark.parametrize("cfg", [{"kind": "sinks", "window": 3, "num_sinks": 2},
                                 {"kind": "random", "K": 4, "top_k": 1, "window": 2}])
def test_content_free_configurations_keep_their_pattern_on_a_real_model(cfg):
    from quest_geometric.nn.focus import focus_layers
    from quest_geometric.testing.hf import build_hf, tokens
    from quest_geometric.training.routers import router_outputs

    model = compose_config(build_hf("llama", seed=0), cfg).eval()
    x = tokens(1, 24, seed=3)
    with torch.no_grad(), router_outputs(model) as routed:
        model(x)
    assert len(routed) == len(focus_layers(model)) > 0
    for layer, out in routed:
        g = out.groups.flatten(0, -2)
        share = focus_pair_share(g, layer.window, num_sinks=layer.num_sinks)
        if cfg["kind"] == "sinks":
            assert share == pytest.approx(pattern_share(24, 3, 2))
        else:
            assert pattern_share(24, 2) < share < 1.0


SHA = ["a0", "b1", "c2", "d3"]  # block hashes of the synthetic full.json below


def _full(tmp_path, losses, **extra):
    full = {s: {"block_loss": list(losses)} for s in ("val", "test", "ood")}
    full["block_sha"] = {s: SHA[:len(losses)] for s in ("val", "test", "ood")}
    full.update(meta={"model": "m"}, **extra)
    (tmp_path / "full.json").write_text(json.dumps(full))
    return full


def test_write_table_from_row_files(tmp_path):
    full = _full(tmp_path, [1.0, 2.0])
    row = {"name": "K8_top2_w64_random", "config": CONFIGS["K8_top2_w64_random"],
           "pairs_kept_eval": 0.5, "pairs_kept_8k": 0.45,
           **{s: {"delta_pct": d, "delta_sem": 0.1, "blocks_worse": 2} for s, d in
              (("val", 3.0), ("test", 4.0), ("ood", 5.0))}}
    row["ood"].update(blocks=[0, 1], block_sha=SHA[:2])
    (tmp_path / "K8_top2_w64_random.json").write_text(json.dumps(row))
    out = write_table(tmp_path / "out", results=tmp_path)
    rows = out["rows"]
    assert [r["row"] for r in rows] == ["full attention", "K8_top2_w64_random"]
    assert rows[1]["ood_delta_pct"] == 5.0 and rows[1]["pairs_kept_8k"] == 0.45
    saved = json.loads((tmp_path / "out" / "focus_operating_point.json").read_text())
    assert saved["meta"]["full_attention_ppl"]["val"] == pytest.approx(math.exp(1.5))
    assert "ood_median_pct" not in rows[1]  # no per-block losses in this row file
    # with per-block losses: the median of the per-block changes against full attention,
    # on the blocks the row ran (one outlier block moves the mean, not the median)
    full["ood"]["block_loss"] = [1.0, 2.0, 1.5, 1.0]
    full["block_sha"]["ood"] = SHA
    (tmp_path / "full.json").write_text(json.dumps(full))
    row["ood"].update(block_loss=[1.1, 2.1, 0.0], blocks=[0, 1, 3],
                      block_sha=[SHA[i] for i in (0, 1, 3)])
    row["test"].update(block_loss=[1.0, 2.2], blocks=[0, 1])
    (tmp_path / "K8_top2_w64_random.json").write_text(json.dumps(row))
    got = write_table(tmp_path / "out", results=tmp_path)["rows"][1]
    assert got["ood_median_pct"] == pytest.approx(100 * math.expm1(0.1))
    # the block that gains most: block 3, 0.0 against full attention's 1.0
    assert got["ood_best_block_pct"] == pytest.approx(100 * math.expm1(-1.0))
    assert got["test_median_pct"] == pytest.approx(100 * math.expm1(0.1))
    assert "K8_top2_w64_random" in (tmp_path / "out" / "focus_operating_point.md").read_text()
    # losses computed on other blocks (another machine's out-of-domain files), or without
    # the hashes that say which blocks: refused, not compared
    row["ood"]["block_sha"] = [SHA[0], SHA[1], "ff"]
    (tmp_path / "K8_top2_w64_random.json").write_text(json.dumps(row))
    with pytest.raises(RuntimeError, match="other blocks than full.json's"):
        write_table(tmp_path / "out", results=tmp_path)
    del row["ood"]["block_sha"]
    (tmp_path / "K8_top2_w64_random.json").write_text(json.dumps(row))
    with pytest.raises(RuntimeError, match="carry no block hashes"):
        write_table(tmp_path / "out", results=tmp_path)
    # a test split without hashes predates them and is accepted; with a wrong one, refused
    row["ood"]["block_sha"] = [SHA[i] for i in (0, 1, 3)]
    row["test"]["block_sha"] = ["zz", SHA[1]]
    (tmp_path / "K8_top2_w64_random.json").write_text(json.dumps(row))
    with pytest.raises(RuntimeError, match="its test losses"):
        write_table(tmp_path / "out", results=tmp_path)


def test_block_sha_and_the_check_against_full_attention():
    import hashlib

    from benchmarks.focus.operating_point import _check_same_blocks, block_sha

    blocks = torch.tensor([[1, 2, 3], [1, 2, 4]])
    sha = block_sha(blocks)
    assert sha[0] == hashlib.sha256(
        (1).to_bytes(8, "little") + (2).to_bytes(8, "little") + (3).to_bytes(8, "little")
    ).hexdigest()[:16]
    assert sha[0] != sha[1] and block_sha(blocks.int()) == sha  # the ids, not their dtype
    _check_same_blocks({"block_sha": {"ood": sha}}, {"ood": sha}, "t")
    with pytest.raises(RuntimeError, match=r"the ood blocks on this machine differ .*blocks \[1\]"):
        _check_same_blocks({"block_sha": {"ood": [sha[0], "x"]}}, {"ood": sha}, "t")
    with pytest.raises(RuntimeError, match="records no block hashes"):
        _check_same_blocks({}, {"ood": sha}, "t")


def test_attention_share_and_prefill_bound_by_hand():
    from benchmarks.focus.operating_point import (
        attention_mac_share,
        prefill_speedup_bound,
    )

    # SmolLM2-135M at 8,192 tokens: attention 9 * 64 * 8193 multiply-adds per token and
    # layer; projections 576 * (576 + 576 + 192 + 192); MLP 3 * 576 * 1536
    att, lin = 9 * 64 * 8193, 576 * 1536 + 3 * 576 * 1536
    a = att / (att + lin)
    assert attention_mac_share(8192) == pytest.approx(a) == pytest.approx(0.5715, abs=1e-4)
    assert prefill_speedup_bound(1.0, 8192) == pytest.approx(1.0)
    assert prefill_speedup_bound(0.0, 8192) == pytest.approx(1 / (1 - a))
    assert prefill_speedup_bound(0.2, 8192) == pytest.approx(1 / (1 - a + 0.2 * a))
    # the bound falls with the pairs kept, and attention matters more at longer prompts
    assert prefill_speedup_bound(0.3, 8192) > prefill_speedup_bound(0.6, 8192)
    assert attention_mac_share(8192) > attention_mac_share(1024)
    with pytest.raises(ValueError, match="'share' must be in"):
        prefill_speedup_bound(1.5, 8192)


def _tiny_smollm2(monkeypatch):
    """Make ``load_smollm2`` return a tiny random Llama (and no tokenizer)."""
    from quest_geometric.models import smollm2
    from quest_geometric.testing.hf import build_hf

    monkeypatch.setattr(smollm2, "load_smollm2", lambda *a, **k: (build_hf("llama", seed=0),
                                                                   "tok"))


@pytest.mark.slow
def test_build_model_of_every_kind(tmp_path, monkeypatch):
    from benchmarks.focus.operating_point import build_model
    from quest_geometric.nn.focus import focus_layers, save_routers
    from quest_geometric.testing.hf import build_hf

    _tiny_smollm2(monkeypatch)
    model, tok = build_model("full", results=tmp_path)
    assert tok == "tok" and not focus_layers(model) and not model.training
    model, _ = build_model("K4_top2_w64_random", results=tmp_path)
    layers = focus_layers(model)
    assert layers and all(f.num_groups == 4 and f.top_k == 2 and f.window == 64 for f in layers)
    # a trained row: its saved routers, at the row's top-k
    name = "K8_top2_w64_distill"
    torch.manual_seed(7)
    trained = compose_config(build_hf("llama", seed=0), CONFIGS[name])
    save_routers(trained, str(tmp_path / f"routers_{name}"))
    model, _ = build_model(f"{name}@top1", results=tmp_path)
    saved = {k: v for k, v in trained.state_dict().items() if "router" in k}
    got = model.state_dict()
    assert saved and all(torch.equal(got[k], v) for k, v in saved.items())
    assert all(f.top_k == 1 and f.num_groups == 8 and f.num_sinks == 0
               for f in focus_layers(model))
    # +sinks: the same routers, run with 4 sinks; the pattern of every layer has them
    model, _ = build_model(f"{name}+sinks", results=tmp_path)
    got = model.state_dict()
    assert all(torch.equal(got[k], v) for k, v in saved.items())
    assert all(f.top_k == 2 and f.num_sinks == 4 for f in focus_layers(model))
    model, _ = build_model("K4_top2_w64_random+sinks", results=tmp_path)
    assert all(f.num_sinks == 4 for f in focus_layers(model))
    with pytest.raises(ValueError, match="'name' must be one of"):
        build_model("K3_top9", results=tmp_path)


def test_sinks_window_matched_at_a_length(tmp_path, monkeypatch):
    from benchmarks.focus.operating_point import build_model
    from quest_geometric.nn.focus import focus_layers, window_for_share

    ref = {"pairs_kept_eval": 0.4, "config": CONFIGS["K8_top2_w64_random"]}
    (tmp_path / "K8_top2_w64_random.json").write_text(json.dumps(ref))
    at_1k = resolve_config("sinks@K8_top2_w64_random", results=tmp_path)
    assert resolve_config("sinks@K8_top2_w64_random", results=tmp_path, length=1024) == at_1k
    for length in (4096, 8186):
        cfg = resolve_config("sinks@K8_top2_w64_random", results=tmp_path, length=length)
        target = extrapolated_share(0.4, 1024, 64, length)
        assert cfg["matched_share"] == pytest.approx(target) and cfg["matched_length"] == length
        assert cfg["window"] == window_for_share(length, target, num_sinks=4)
        # the band matched at L keeps the Focus row's share at L, the 1K window keeps less
        assert pattern_share(length, cfg["window"], 4) >= target
        assert pattern_share(length, at_1k["window"], 4) < target
    with pytest.raises(ValueError, match="'length'"):
        resolve_config("full", length=0)
    _tiny_smollm2(monkeypatch)
    model, _ = build_model("sinks@K8_top2_w64_random", results=tmp_path, length=4096)
    w = resolve_config("sinks@K8_top2_w64_random", results=tmp_path, length=4096)["window"]
    assert all(f.window == w and f.num_sinks == 4 for f in focus_layers(model))


def test_training_record_reads_the_run_checkpoint(tmp_path):
    from benchmarks.focus.operating_point import training_record
    from quest_geometric.testing.focus import tiny_composed_llama
    from quest_geometric.testing.hf import tokens
    from quest_geometric.training import train_routers

    train = tokens(3, 16, seed=1)
    out = train_routers(tiny_composed_llama("straight_through", 1), train, 7, 1e-2,
                        tmp_path / "K8_top2_w64_distill", progress=False, objective="distill")
    rec = training_record("K8_top2_w64_distill", 3, runs=tmp_path)
    assert rec["steps"] == 7 and rec["objective"]["loss"] == "distill"
    assert rec["loss_first"] == pytest.approx(out["curve"][0])
    assert rec["loss_last"] == pytest.approx(out["curve"][-1])
    assert rec["curve"] == out["curve"]  # the whole curve travels with the routers
    assert rec["revisit_n"] >= 1  # blocks drawn again in the second half of training
    # once the run folder is gone, the copy saved beside the routers stands in for it
    from benchmarks.focus.operating_point import (
        TRAINING_FILE,
        saved_training_record,
    )

    results = tmp_path / "results"
    same = lambda a, b: json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)  # noqa
    assert same(saved_training_record("K8_top2_w64_distill", 3, runs=tmp_path,
                                      results=results), rec)  # (NaN where n is too small)
    with pytest.raises(FileNotFoundError, match="no run checkpoint"):
        saved_training_record("K8_top2_w64_distill", 3, runs=tmp_path / "gone",
                              results=results)
    (results / "routers_K8_top2_w64_distill").mkdir(parents=True)
    (results / "routers_K8_top2_w64_distill" / TRAINING_FILE).write_text(json.dumps(rec))
    assert same(saved_training_record("K8_top2_w64_distill", 3, runs=tmp_path / "gone",
                                      results=results), rec)


def test_paired_comparisons_by_hand(tmp_path):
    from scipy import stats

    from benchmarks.focus.operating_point import paired_comparisons

    def row(name, kind, losses, share, **cfg):
        (tmp_path / f"{name}.json").write_text(json.dumps({
            "name": name, "config": {"kind": kind, **cfg}, "pairs_kept_eval": share,
            **{s: {"block_loss": losses, "blocks": [0, 1, 2, 3], "block_sha": SHA}
               for s in ("ood", "test")}}))

    _full(tmp_path, [2.0] * 4)
    focus = [2.0, 2.5, 3.0, 2.2]
    row("K8_top2_w64_lm", "trained", focus, 0.5, K=8, top_k=2, window=64)
    row("sinks@K8_top2_w64_lm", "sinks", [1.9, 2.3, 3.1, 2.0], 0.5, window=300)
    row("K8_top2_w64_random", "random", [2.4, 2.9, 3.3, 2.6], 0.53, K=8, top_k=2, window=64)
    out = paired_comparisons(tmp_path)
    assert {(r["baseline"], r["split"]) for r in out} == {
        (b, s) for b in ("sinks@K8_top2_w64_lm", "K8_top2_w64_random") for s in ("ood", "test")}
    r = next(r for r in out if r["baseline"] == "sinks@K8_top2_w64_lm" and r["split"] == "ood")
    d = [a - b for a, b in zip(focus, [1.9, 2.3, 3.1, 2.0])]
    assert r["diff_pct"] == pytest.approx(100 * math.expm1(sum(d) / 4))
    assert r["t_p"] == pytest.approx(stats.ttest_1samp(d, 0.0).pvalue)
    # |d| = 0.1, 0.2, 0.1, 0.2: sign flips with |sum| >= 0.4 are +-(all +) and +-(one 0.1 -)
    assert r["focus_worse"] == 3 and r["perm_p"] == pytest.approx(6 / 16)
    # the median block: d sorted -0.1, 0.1, 0.2, 0.2 -> (0.1 + 0.2) / 2
    assert r["median_diff_pct"] == pytest.approx(100 * math.expm1(0.15))


def test_paired_comparisons_of_a_sinks_row_fall_back_to_its_routers_window(tmp_path):
    """``NAME+sinks`` is compared with ``sinks@NAME+sinks`` when it was evaluated, else with
    ``sinks@NAME`` (the window matched to the same routers without sinks), never with the
    random row's window when one of those exists; the shares of both sides are reported."""
    from benchmarks.focus.operating_point import paired_comparisons

    def row(name, kind, share, **cfg):
        (tmp_path / f"{name}.json").write_text(json.dumps({
            "name": name, "config": {"kind": kind, **cfg}, "pairs_kept_eval": share,
            **{s: {"block_loss": [2.0, 2.1, 2.2], "blocks": [0, 1, 2], "block_sha": SHA[:3]}
               for s in ("ood", "test")}}))

    _full(tmp_path, [2.0] * 3)

    pattern = {"K": 8, "top_k": 2, "window": 64}
    row("K8_top2_w64_lm+sinks", "trained", 0.52, **pattern)
    row("sinks@K8_top2_w64_lm", "sinks", 0.50, window=300)
    row("sinks@K8_top2_w64_random", "sinks", 0.55, window=330)
    row("K8_top2_w64_random", "random", 0.55, **pattern)
    bases = lambda: {(r["focus"], r["baseline"]) for r in paired_comparisons(tmp_path)}  # noqa
    assert bases() == {("K8_top2_w64_lm+sinks", "sinks@K8_top2_w64_lm"),
                       ("K8_top2_w64_lm+sinks", "K8_top2_w64_random")}
    row("sinks@K8_top2_w64_lm+sinks", "sinks", 0.52, window=310)
    assert bases() == {("K8_top2_w64_lm+sinks", "sinks@K8_top2_w64_lm+sinks"),
                       ("K8_top2_w64_lm+sinks", "K8_top2_w64_random")}
    r = next(r for r in paired_comparisons(tmp_path)
             if r["baseline"] == "sinks@K8_top2_w64_lm+sinks")
    assert (r["focus_pairs"], r["baseline_pairs"]) == (0.52, 0.52)


def test_pin_ood_files_keeps_the_shortest_prefix_with_the_same_blocks(tmp_path, monkeypatch):
    import gzip

    from benchmarks.focus.prose import ood_prose_blocks
    from benchmarks.focus import operating_point as op

    class Bytes:
        def encode(self, text, add_special_tokens=True):
            return list(text.encode("utf-8"))

    monkeypatch.setattr(op, "OOD_BLOCKS_PER_SOURCE", 2)
    lic, doc = tmp_path / "lic", tmp_path / "doc"
    lic.mkdir()
    for name, n in (("A", 10), ("B", 30), ("C", 40)):  # blocks of 16 bytes: A+B give 2
        (lic / name).write_text("x" * n)
    for pkg in ("p", "q", "r"):
        (doc / pkg).mkdir(parents=True)
        (doc / pkg / "NEWS.Debian.gz").write_bytes(gzip.compress(pkg.encode() * 40))
    roots = {"licenses": str(lic), "debian-news": str(doc)}
    full, rec = ood_prose_blocks(Bytes(), 16, 1, roots=roots, max_blocks_per_source=2)
    files = {s: r["files"] for s, r in rec["sources"].items()}
    out = tmp_path / "pin.json"
    pin = op.pin_ood_files(Bytes(), files, block=16, out=out, want_sha=op.block_sha(full))
    # A (10) + "\n\n" + B (30) = 42 bytes >= 2 blocks; A alone is not; p alone is 40 bytes
    assert [f["path"][-1] for f in pin["files"]["licenses"]] == ["A", "B"]
    assert [f["path"].split("/")[-2] for f in pin["files"]["debian-news"]] == ["p"]
    assert json.loads(out.read_text()) == pin and op.pinned_ood_files(out) == pin["files"]
    again, _ = ood_prose_blocks(Bytes(), 16, 1, files=pin["files"], max_blocks_per_source=2)
    assert torch.equal(again, full)
    with pytest.raises(ValueError, match="differ from the recorded block hashes"):
        op.pin_ood_files(Bytes(), files, block=16, out=None,
                         want_sha=["0" * 16] * len(full))
    assert op.pinned_ood_files(tmp_path / "none.json") is None


@pytest.mark.slow  # reads every committed row (about a second)
def test_the_committed_rows_compare_and_tabulate():
    """Every file of the committed results folder is full.json or a row: the paired
    comparisons and the table read them all (a stray JSON file there broke the verdict)."""
    from benchmarks.focus import operating_point as op

    if not (op.RESULTS / "full.json").is_file():
        pytest.skip("no committed results in this checkout")
    pairs = op.paired_comparisons(op.RESULTS)
    assert pairs and all(math.isfinite(p["diff_pct"]) and p["split"] in ("ood", "test")
                         for p in pairs)
    for f in op.RESULTS.glob("*.json"):
        assert f.name == "full.json" or "config" in json.loads(f.read_text()), f.name
