"""The 8K study's measures (benchmarks/focus/long_context.py) against a dense computation: the
per-position loss, the trailing loss, the position bins and the context cut are checked
against a direct cross-entropy of a tiny random-weight Llama's logits; the grid resumes and
its paired summary matches a hand computation."""
import gzip
import hashlib
import json
import math

import pytest
import torch

pytest.importorskip("transformers")
from benchmarks.focus import long_context as lc  # noqa: E402
from benchmarks.focus import long_context_report as report  # noqa: E402
from benchmarks.focus.operating_point import resolve_config  # noqa: E402

L = 40


@pytest.fixture(scope="module")
def model():
    return report.tiny_llama()


@pytest.fixture(scope="module")
def ids():
    return torch.randint(0, 97, (L,), generator=torch.Generator().manual_seed(3)).tolist()


def _dense(model, x):
    """Per-target cross-entropy of the model's own logits, float64."""
    x = torch.tensor([x])
    with torch.no_grad():
        logits = model(x).logits[0, :-1].double()
    return torch.nn.functional.cross_entropy(logits, x[0, 1:], reduction="none")


def test_window_nll_is_the_dense_cross_entropy(model, ids):
    nll = lc.window_nll(model, ids, chunk=7)  # chunks that do not divide the length
    assert math.isnan(nll[0])
    torch.testing.assert_close(nll[1:], _dense(model, ids), atol=1e-5, rtol=0)


def test_cut_context_sees_only_the_last_tokens(model, ids):
    c = 12
    nll = lc.window_nll(model, ids, context=c)
    # the model sees ids[L-1-c : L-1] and predicts ids[L-c : L]: the dense loss of
    # ids[L-1-c : L] as a sequence of its own, all but its first token scored
    ref = _dense(model, ids[L - 1 - c:])
    torch.testing.assert_close(nll[L - c:], ref, atol=1e-5, rtol=0)
    assert torch.isnan(nll[:L - c]).all()
    # a cut to L - 1 tokens is full attention on every target
    full = lc.window_nll(model, ids)
    torch.testing.assert_close(lc.window_nll(model, ids, context=L - 1)[1:], full[1:],
                               atol=1e-5, rtol=0)
    assert not torch.allclose(nll[L - c:], full[L - c:])  # the far context matters


def test_trailing_loss_and_bins_by_hand(model, ids):
    ref = _dense(model, ids)  # ref[i] is the loss of position i + 1
    row = lc.run_cell(model, "full", ids, length=L, trail=10, width=8)
    assert row["trailing_loss"] == pytest.approx(float(ref[-10:].mean()), abs=1e-6)
    assert row["bin_loss"][0] == pytest.approx(float(ref[:7].mean()), abs=1e-6)  # 1..7
    for b in range(1, L // 8):
        assert row["bin_loss"][b] == pytest.approx(float(ref[8 * b - 1:8 * b + 7].mean()),
                                                   abs=1e-6)
    cut = lc.run_cell(model, "cut16", ids, length=L, trail=10, width=8)
    assert cut["bin_loss"][:3] == [None, None, None]  # positions < 24 are not scored
    assert cut["bin_loss"][3] is not None and cut["pairs_kept"] == 1.0


@pytest.mark.slow
def test_focus_cell_measures_its_share(model, ids):
    cfg = {"kind": "sinks", "window": 4, "num_sinks": 2}
    row = lc.run_cell(model, "w4", ids, length=L, cfg=cfg, trail=10, width=8)
    # window 4 + 2 sinks at 40 tokens: pairs with i - j <= 4 or j < 2, of 40 * 41 / 2
    kept = sum(1 for i in range(L) for j in range(i + 1) if i - j <= 4 or j < 2)
    assert row["pairs_kept"] == pytest.approx(kept / (L * (L + 1) / 2), abs=1e-6)
    full = lc.run_cell(model, "full", ids, length=L, trail=10, width=8)
    assert row["bin_loss"][0] == pytest.approx(full["bin_loss"][0], abs=1e-5)  # same pattern
    assert row["trailing_loss"] != pytest.approx(full["trailing_loss"], abs=1e-4)


def test_bad_inputs_name_the_function(model, ids):
    with pytest.raises(ValueError, match="window_nll.*context"):
        lc.window_nll(model, ids, context=L)
    with pytest.raises(ValueError, match="trailing_loss"):
        lc.trailing_loss(torch.full((8,), math.nan, dtype=torch.float64), 4)


class Chars:
    def encode(self, text, add_special_tokens=False):
        return [ord(c) % 97 for c in text]


def test_ood_windows_record_the_files(tmp_path):
    plain, packed, short = tmp_path / "a.txt", tmp_path / "b.txt.gz", tmp_path / "c.txt"
    plain.write_text("  alpha beta gamma delta  ")
    packed.write_bytes(gzip.compress(b"epsilon zeta eta theta"))
    short.write_text("tiny")
    wins = lc.ood_windows(Chars(), [str(plain), str(packed)], length=10)
    assert wins[0]["ids"] == Chars().encode("alpha beta")  # stripped, tokens [0, 10)
    assert wins[1]["ids"] == Chars().encode("epsilon ze")
    assert wins[1]["file"]["sha256"] == hashlib.sha256(packed.read_bytes()).hexdigest()
    assert wins[1]["file"]["bytes"] == packed.stat().st_size
    with pytest.raises(ValueError, match="c.txt has 4 tokens"):
        lc.ood_windows(Chars(), [str(short)], length=10)


@pytest.mark.slow
def test_grid_resumes_and_pairs_by_window(tmp_path):
    first = report.quick(tmp_path, windows=3)
    cells = first["cells"]
    assert len(cells) == 2 * 3 * 5
    again = report.quick(tmp_path, windows=3)  # every cell is in the file: nothing reruns
    assert len(again["cells"]) == len(cells)
    s = first["summary"]["a"]["cut16"]["vs_full"]
    by = {(c["window"], c["config"]): c["trailing_loss"] for c in cells if c["set"] == "a"}
    d = [by[(w, "cut16")] - by[(w, "full")] for w in range(3)]
    assert s["mean_diff"] == pytest.approx(sum(d) / 3)
    assert s["worse"] == sum(x > 0 for x in d) and s["n"] == 3
    assert first["summary"]["a"]["K4_top2_w8_random"]["vs_window"]["against"] == "win8"
    bins = {(c["window"], c["config"]): c["bin_loss"] for c in cells if c["set"] == "a"}
    diff = first["summary"]["a"]["cut32"]["bin_diff_vs_full"]  # 64 tokens: bins 4..7 scored
    assert diff[:4] == [None] * 4
    for b in range(4, 8):
        want = sum(bins[(w, "cut32")][b] - bins[(w, "full")][b] for w in range(3)) / 3
        assert diff[b] == pytest.approx(want)
    line = json.loads((tmp_path / "cells.jsonl").read_text().splitlines()[0])
    line["sha"] = "0" * 64
    (tmp_path / "cells.jsonl").write_text(json.dumps(line) + "\n")
    with pytest.raises(ValueError, match="run_grid.*other tokens"):
        report.quick(tmp_path, windows=3)


def test_long_trained_row_is_paired_with_its_start_and_its_window():
    row, parent = next(iter(lc.LONG_TRAINED.items()))
    loss = {row: [2.0, 2.5, 3.0, 2.2], parent: [2.1, 2.4, 3.3, 2.4],
            f"sinks@{parent}": [2.2, 2.6, 3.1, 2.3], "full": [1.9, 2.3, 2.9, 2.1]}
    cells = [{"set": "ood", "window": w, "config": name, "trailing_loss": v, "pairs_kept": 0.3,
              "bin_loss": [v], "window_cfg": None}
             for name, vals in loss.items() for w, v in enumerate(vals)]
    summary = report.summarize(cells)
    mine = summary["ood"][row]
    d = [a - b for a, b in zip(loss[row], loss[parent])]
    assert mine["vs_parent"]["against"] == parent
    assert mine["vs_parent"]["mean_diff"] == pytest.approx(sum(d) / 4)
    assert mine["vs_parent"]["worse"] == 1 and mine["vs_parent"]["better"] == 3
    assert mine["vs_window"]["against"] == f"sinks@{parent}"
    assert summary["ood"][parent]["vs_parent"] is None
    text = "\n".join(report.long_trained_lines(summary))
    assert f"| {parent} | {100 * math.expm1(sum(d) / 4):+.1f}% (n=4) |" in text


def test_training_info_reads_the_configuration_and_the_training_record(tmp_path):
    row = next(iter(lc.LONG_TRAINED))
    cfg = resolve_config(row)
    info = report.training_info(row, tmp_path)
    assert info == {"objective": cfg["objective"], "block": cfg["block"], "steps": cfg["steps"]}
    (tmp_path / f"training_{row}.json").write_text(json.dumps(
        {"loss_first": 0.5, "loss_last": 0.25, "revisit_n": 2, "revisit_mean": -0.01,
         "revisit_sem": 0.002, "curve": [0.5, 0.25]}))
    info = report.training_info(row, tmp_path)
    assert info["revisit_mean"] == -0.01 and info["loss_last"] == 0.25
    assert info["plateau"] == "no"  # -0.01 + 1.96 * 0.002 < 0: still learning
    (tmp_path / f"training_{row}.json").write_text(json.dumps(
        {"loss_first": 0.5, "loss_last": 0.25, "revisit_n": 0, "revisit_mean": float("nan"),
         "revisit_sem": float("nan")}))
    assert "revisit_mean" not in report.training_info(row, tmp_path)  # no block seen twice
    summary = {"ood": {row: {"vs_parent": {"against": "x", "n": 2, "ppl_change_pct": -1.0,
                                           "p_perm": 0.5, "worse": 0, "better": 2,
                                           "mean_diff": -0.01}, "training": info}}}
    line = report.long_trained_lines(summary)[4]
    assert line.startswith(f"| ood | {row} | {cfg['objective']}, {cfg['block']:,}, "
                           f"{cfg['steps']} | -0.0100 +- 0.0020 | x | -1.0% (n=2) |")
