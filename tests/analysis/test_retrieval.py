"""retrieval: the scorer counts an oracle's answers as correct and a liar's as wrong, the
accuracy table's intervals equal SciPy's exact ones, and greedy decoding through ``generate``
equals an argmax loop on a tiny random Llama."""
import math

import pytest
import torch

from quest_geometric.analysis import (
    greedy_continuation,
    passkey_accuracy,
    score_passkey,
)
from quest_geometric.datasets import parse_passkey, passkey_trials
from quest_geometric.testing.hf import build_hf

ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz .,?:\n"


class SmallChars:
    """Lower-cased characters of a 42-symbol alphabet, ids 3..44 (fits a 61-token model);
    anything else reads as a space."""

    def encode(self, text, add_special_tokens=False):
        return [3 + ALPHABET.index(c) if c in ALPHABET else 3 + ALPHABET.index(" ")
                for c in text.lower()]

    def decode(self, ids):
        return "".join(ALPHABET[i - 3] if 3 <= i < 3 + len(ALPHABET) else "#" for i in ids)


TOK = SmallChars()
FILLER = TOK.encode("the quick brown fox jumps over the lazy dog, again and again. " * 60)
MARK = TOK.encode("the pass key is ")


class Oracle:
    """A fake model whose ``generate`` finds the needle and copies its key (or, as a liar,
    the key with its last digit changed; or answers only when the needle is in the first
    half of the prompt)."""

    def __init__(self, mode="copy"):
        self.mode, self.calls = mode, 0

    def generate(self, ids, max_new_tokens, **kw):
        self.calls += 1
        seq = ids[0].tolist()
        at = next(i for i in range(len(seq)) if seq[i:i + len(MARK)] == MARK)
        key = seq[at + len(MARK):at + len(MARK) + 5]
        if self.mode == "liar":
            key = key[:4] + [3 + (key[4] - 3 + 1) % 10]
        if self.mode == "front" and at > len(seq) / 2:
            key = TOK.encode("none.")
        new = (TOK.encode(" ") + key + TOK.encode(". and more"))[:max_new_tokens]
        return torch.cat([ids, torch.tensor([new])], dim=1)


def prompts(n=4):
    return passkey_trials(TOK, FILLER, 400, depths=(0.0, 0.25, 0.5, 0.75, 1.0),
                          trials_per_depth=n, seed=1)


def test_oracle_scores_all_correct_and_liar_none():
    ps = prompts()
    rows = score_passkey(Oracle(), TOK, ps)
    assert len(rows) == 20 and all(r["correct"] for r in rows)
    assert all(r["parsed"] == r["key"] for r in rows)
    rows = score_passkey(Oracle("liar"), TOK, ps)
    assert not any(r["correct"] for r in rows) and all(len(r["parsed"]) == 5 for r in rows)
    acc = passkey_accuracy(rows)
    assert acc[0]["depth"] == "all" and acc[0]["correct"] == 0 and acc[0]["ci_low"] == 0.0


def test_accuracy_per_depth_by_hand_and_intervals_match_scipy():
    from scipy.stats import binomtest

    ps = prompts()
    rows = score_passkey(Oracle("front"), TOK, ps)
    # the needle sits in the first half of the prompt exactly at depths 0 and 0.25
    by_depth = {r["depth"]: r["correct"] for r in rows}
    assert by_depth == {0.0: True, 0.25: True, 0.5: False, 0.75: False, 1.0: False}
    acc = passkey_accuracy(rows)
    assert [a["depth"] for a in acc] == ["all", 0.0, 0.25, 0.5, 0.75, 1.0]
    assert [a["correct"] for a in acc] == [8, 4, 4, 0, 0, 0] and acc[0]["n"] == 20
    assert acc[0]["accuracy"] == 0.4
    for a in acc:
        ci = binomtest(a["correct"], a["n"]).proportion_ci(0.95, method="exact")
        assert (a["ci_low"], a["ci_high"]) == pytest.approx((ci.low, ci.high), abs=1e-12)
    lo, hi = passkey_accuracy(rows, level=0.5)[0]["ci_low"], passkey_accuracy(rows,
                                                                              level=0.5)[0]["ci_high"]
    assert acc[0]["ci_low"] < lo < 0.4 < hi < acc[0]["ci_high"]


def test_skip_and_on_row():
    ps = prompts(2)
    seen, model = [], Oracle()
    rows = score_passkey(model, TOK, ps, on_row=seen.append, skip=lambda p: p.depth == 0.5)
    assert len(rows) == 8 and model.calls == 8 and seen == rows
    assert all(r["depth"] != 0.5 for r in rows)
    assert all(math.isfinite(r["seconds"]) for r in rows)


class NoGenerate(torch.nn.Module):
    """The same model seen as a plain module: greedy_continuation falls back to argmax."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, ids):
        return self.m(ids).logits


@pytest.mark.slow
def test_generate_path_equals_argmax_loop_on_tiny_llama():
    model = build_hf("llama")
    p = prompts(1)[2]
    a = greedy_continuation(model, p.input_ids, 6)
    b = greedy_continuation(NoGenerate(model), p.input_ids, 6)
    assert len(a) == 6 and a == b
    rows = score_passkey(model, TOK, [p])
    assert rows[0]["answer"] == TOK.decode(a)
    assert rows[0]["correct"] is (parse_passkey(TOK.decode(a)) == p.key)


def test_bad_input():
    with pytest.raises(ValueError, match="'max_new_tokens'"):
        greedy_continuation(Oracle(), torch.zeros(3, dtype=torch.long), 0)
    with pytest.raises(TypeError, match="'input_ids'"):
        greedy_continuation(Oracle(), [1, 2, 3])
