"""focus_passkey: a run on a tiny random Llama writes one row per trial to the rows file, a
rerun resumes without running the model again, and --summarize-only writes the tables with
their run conditions."""
import json

import pytest

from quest_geometric.experiments import focus_passkey
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
    assert [r["depth"] for r in out["rows"]] == ["all", "0.0", "1.0"]
    assert "Passkey" in (tmp_path / "pk.md").read_text()


def test_filler_source_is_checked():
    with pytest.raises(ValueError, match="'source'"):
        focus_passkey.filler_tokens(SmallChars(), source="wiki")
