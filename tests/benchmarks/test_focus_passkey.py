"""focus_passkey: a run on a tiny random Llama writes one row per trial to the rows file, a
rerun resumes without running the model again, and --summarize-only writes the tables with
their run conditions; --config runs a row of the operating-point study (built by
build_model, sinks@NAME matched at each length) into the same rows file."""
import json

import pytest

from benchmarks.focus import passkey as focus_passkey
from quest_geometric.testing.hf import build_hf

ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz .,?:\n"


class SmallChars:
    def encode(self, text, add_special_tokens=False):
        sp = 3 + ALPHABET.index(" ")
        return [3 + ALPHABET.index(c) if c in ALPHABET else sp for c in text.lower()]

    def decode(self, ids):
        return "".join(ALPHABET[i - 3] if 3 <= i < 3 + len(ALPHABET) else "#" for i in ids)


class Counting:
    def __init__(self, model):
        self.model, self.calls = model, 0
        self.generation_config = model.generation_config

    def generate(self, *a, **kw):
        self.calls += 1
        return self.model.generate(*a, **kw)


@pytest.mark.slow
def test_run_resume_and_summary(tmp_path):
    model = Counting(build_hf("llama"))
    rows_file = tmp_path / "rows.jsonl"
    kw = dict(lengths=[250], depths=[0.0, 1.0], trials_per_depth=2, seed=5, jsonl=str(rows_file),
              log=False)
    rows, summary = focus_passkey.run(model, SmallChars(), **kw)
    assert model.calls == 4 and len(rows) == 4
    lines = [json.loads(x) for x in rows_file.read_text().splitlines()]
    assert len(lines) == 4 and all(r["length"] == 250 and r["config"] == "full" for r in lines)
    assert [r["trial"] for r in lines] == [0, 0, 1, 1]  # trial-major order
    assert [a["n"] for a in summary] == [4, 2, 2]
    # resume: nothing left to run, the same rows
    rows2, summary2 = focus_passkey.run(model, SmallChars(), **kw)
    assert model.calls == 4 and summary2 == summary
    assert sorted(r["key"] for r in rows2) == sorted(r["key"] for r in rows)
    # another seed is other trials
    focus_passkey.run(model, SmallChars(), **{**kw, "seed": 6, "trials_per_depth": 1})
    assert model.calls == 6
    focus_passkey.main(["--summarize-only", "--jsonl", str(rows_file), "--out", str(tmp_path),
                        "--name", "pk", "--seed", "5"])
    out = json.loads((tmp_path / "pk.json").read_text())
    assert out["meta"]["rows"] == 4 and out["meta"]["seed"] == 5 and "loadavg_start" in out["meta"]
    # one row per (configuration, length); the depths in the JSON file
    assert [(r["config"], r["length"], r["n"]) for r in out["rows"]] == [("full", 250, 4)]
    assert out["rows"][0]["correct"] == sum(r["correct"] for r in lines)
    assert [(r["depth"], r["n"]) for r in out["meta"]["by_depth"]] == [("0.0", 2), ("1.0", 2)]
    assert "Passkey" in (tmp_path / "pk.md").read_text()


def test_a_length_beyond_the_models_positions_is_refused():
    """A prompt whose answer would run past the model's positions (SmolLM2: 8,192 tokens,
    so 8,186 + 6) is refused by name before any trial runs, not scored past them."""
    model = Counting(build_hf("llama"))
    limit = model.model.config.max_position_embeddings
    model.config = model.model.config
    with pytest.raises(ValueError, match=rf"'lengths' \[{limit - 5}\] plus the 6 generated "
                       rf"tokens exceed the model's {limit} positions"):
        focus_passkey.run(model, SmallChars(), lengths=[limit - 6, limit - 5], log=False)
    assert model.calls == 0


def test_filler_source_is_checked():
    with pytest.raises(ValueError, match="'source'"):
        focus_passkey.filler_tokens(SmallChars(), source="wiki")


@pytest.mark.slow
def test_configs_share_one_rows_file(tmp_path, monkeypatch):
    from quest_geometric.analysis.stats import binomial_interval
    from benchmarks.focus.operating_point import CONFIGS, resolve_config
    from quest_geometric.models import smollm2
    from quest_geometric.nn.focus import focus_layers

    loads = []

    def fake_load(*a, **k):
        loads.append(build_hf("llama", seed=0, max_position_embeddings=512))
        return loads[-1], SmallChars()

    monkeypatch.setattr(smollm2, "load_smollm2", fake_load)
    results = tmp_path / "rows"
    results.mkdir()
    (results / "K8_top2_w64_random.json").write_text(json.dumps(
        {"pairs_kept_eval": 0.4, "config": CONFIGS["K8_top2_w64_random"]}))
    common = ["--results", str(results), "--lengths", "250", "400", "--depths", "0.0", "1.0",
              "--trials-per-depth", "1", "--out", str(tmp_path), "--name", "pk"]
    focus_passkey.main(["--config", "K8_top2_w64_random", *common])
    assert len(loads) == 1 and focus_layers(loads[0])  # one model for every length
    focus_passkey.main(["--config", "sinks@K8_top2_w64_random", *common])
    assert len(loads) == 3  # sinks@NAME: one model per length, its window matched there
    windows = [focus_layers(m)[0].window for m in loads[1:]]
    lines = [json.loads(x) for x in (tmp_path / "pk_trials.jsonl").read_text().splitlines()]
    assert [(r["config"], r["length"]) for r in lines] == [
        (c, n) for c in ("K8_top2_w64_random", "sinks@K8_top2_w64_random")
        for n in (250, 250, 400, 400)]
    for n, w in zip((250, 400), windows):
        want = resolve_config("sinks@K8_top2_w64_random", results, length=n)
        assert w == want["window"]
        assert all(r["pattern"] == want for r in lines if r["config"].startswith("sinks@")
                   and r["length"] == n)
    out = json.loads((tmp_path / "pk.json").read_text())
    assert [(r["config"], r["length"], r["n"]) for r in out["rows"]] == [
        ("K8_top2_w64_random", 250, 2), ("K8_top2_w64_random", 400, 2),
        ("sinks@K8_top2_w64_random", 250, 2), ("sinks@K8_top2_w64_random", 400, 2)]
    for r in out["rows"]:
        k = sum(x["correct"] for x in lines if (x["config"], x["length"]) ==
                (r["config"], r["length"]))
        assert r["correct"] == k
        assert (r["ci_low"], r["ci_high"]) == pytest.approx(binomial_interval(k, 2))
    assert out["meta"]["configs"] == ["K8_top2_w64_random", "sinks@K8_top2_w64_random"]
    with pytest.raises(ValueError, match="'name' must be one of"):
        focus_passkey.main(["--config", "K3_top9", *common])
    assert len(loads) == 3


def test_paired_with_full_counts_matched_trials_by_hand():
    def rows(config, correct, length=2048, seed=0):
        return [{"config": config, "length": length, "depth": d, "trial": t, "seed": seed,
                 "correct": c} for (d, t), c in zip([(0.0, 0), (0.0, 1), (0.5, 0), (0.5, 1),
                                                     (1.0, 0), (1.0, 1)], correct)]

    full = rows("full", [1, 1, 1, 0, 1, 0])
    focus = rows("sinks@X", [1, 0, 0, 0, 1, 1])
    # a trial full attention never ran (other seed) is not matched
    extra = rows("sinks@X", [1] * 6, seed=3)[:1]
    out = focus_passkey.paired_with_full(full + focus + extra)
    assert len(out) == 1
    r = out[0]
    # trial by trial: both, lost, lost, neither, both, gained
    assert (r["matched"], r["both"], r["lost"], r["gained"], r["neither"]) == (6, 2, 2, 1, 1)
    assert r["diff"] == pytest.approx((1 - 2) / 6)
    # 2 lost of 3 discordant: 2 P(X <= 1), X ~ Bin(3, 1/2), = 2 (1 + 3) / 8, capped at 1
    assert r["mcnemar_p"] == 1.0
    # no discordant trial: p = 1; a configuration with no matched trial: no row
    same = focus_passkey.paired_with_full(full + rows("Y", [1, 1, 1, 0, 1, 0]))
    assert same[0]["mcnemar_p"] == 1.0 and same[0]["diff"] == 0.0
    assert focus_passkey.paired_with_full(full + rows("Z", [1] * 6, length=4096)) == []
    # six lost, none gained: p = 2 / 2**6
    worse = focus_passkey.paired_with_full(rows("full", [1] * 6) + rows("W", [0] * 6))
    assert worse[0]["mcnemar_p"] == pytest.approx(2 / 64)
