"""passkey prompts: exact length, the needle at the intended depth between untouched filler,
seeded trials, the answer parser, and the bad-input errors."""
import numpy as np
import pytest

from quest_geometric.datasets import (
    PASSKEY_INTRO,
    PASSKEY_NEEDLE,
    PASSKEY_QUESTION,
    parse_passkey,
    passkey_prompt,
    passkey_trials,
)


class Chars:
    """One id per character (no special tokens)."""

    def encode(self, text, add_special_tokens=False):
        assert add_special_tokens is False
        return [ord(c) for c in text]

    def decode(self, ids):
        return "".join(map(chr, ids))


class Words:
    """One id per whitespace-separated word; a tokenizer whose pieces differ from a char one."""

    def __init__(self):
        self.vocab = {}

    def encode(self, text, add_special_tokens=False):
        return [self.vocab.setdefault(w, len(self.vocab)) for w in text.split()]


FILLER = [1000 + i for i in range(5000)]  # distinct ids: any reordering would show


@pytest.mark.parametrize("tok", [Chars(), Words()])
@pytest.mark.parametrize("length", [300, 1000, 2048])
@pytest.mark.parametrize("depth", [0.0, 0.1, 0.5, 0.77, 1.0])
def test_prompt_has_exact_length_and_needle_at_depth(tok, length, depth):
    off = 123
    p = passkey_prompt(tok, FILLER, length, depth, "40213", filler_offset=off)
    ids = p.input_ids.tolist()
    intro = tok.encode(PASSKEY_INTRO, add_special_tokens=False)
    needle = tok.encode(PASSKEY_NEEDLE.format(key="40213"), add_special_tokens=False)
    question = tok.encode(PASSKEY_QUESTION, add_special_tokens=False)
    F = length - len(intro) - len(needle) - len(question)
    m = round(depth * F)  # hand rule
    assert len(ids) == p.length == length and p.filler_len == F
    assert ids[:len(intro)] == intro
    assert p.needle_start == len(intro) + m and p.needle_len == len(needle)
    assert ids[p.needle_start:p.needle_start + len(needle)] == needle
    assert ids[len(intro):p.needle_start] == FILLER[off:off + m]
    assert ids[p.needle_start + len(needle):length - len(question)] == FILLER[off + m:off + F]
    assert ids[length - len(question):] == question
    assert p.actual_depth == pytest.approx(m / F)
    assert abs(p.actual_depth - depth) <= 0.5 / F + 1e-12


def test_needle_text_holds_the_key():
    p = passkey_prompt(Chars(), FILLER, 500, 0.5, "98765")
    text = Chars().decode(p.input_ids[p.needle_start:p.needle_start + p.needle_len].tolist())
    assert text == "\nThe pass key is 98765. Remember it. 98765 is the pass key.\n"
    assert Chars().decode(p.input_ids.tolist()).endswith("What is the pass key? The pass key is")


def test_trials_are_seeded_spread_and_reproducible():
    tok = Chars()
    a = passkey_trials(tok, FILLER, 600, depths=(0.0, 0.5, 1.0), trials_per_depth=4, seed=3)
    b = passkey_trials(tok, FILLER, 600, depths=(0.0, 0.5, 1.0), trials_per_depth=4, seed=3)
    c = passkey_trials(tok, FILLER, 600, depths=(0.0, 0.5, 1.0), trials_per_depth=4, seed=4)
    assert len(a) == 12 and [p.depth for p in a] == [0.0] * 4 + [0.5] * 4 + [1.0] * 4
    assert [p.trial for p in a] == [0, 1, 2, 3] * 3
    assert all(len(p.key) == 5 and p.key.isdigit() and p.key[0] != "0" for p in a)
    assert all(p.length == 600 for p in a)
    assert [(p.key, p.filler_offset) for p in a] == [(p.key, p.filler_offset) for p in b]
    assert [(p.key, p.filler_offset) for p in a] != [(p.key, p.filler_offset) for p in c]
    assert len({p.key for p in a}) > 6  # keys vary across trials
    for p in a:  # each filler slice lies inside the stream
        assert p.filler_offset + p.filler_len <= len(FILLER)


def test_a_trial_does_not_depend_on_the_other_depths():
    # runs are paired by (length, depth, trial, seed): a run over some of the depths must draw
    # at those depths the trials a run over all of them draws
    tok = Chars()

    def drawn(trials):
        return {(p.depth, p.trial): (p.key, p.filler_offset) for p in trials}

    every = drawn(passkey_trials(tok, FILLER, 600, trials_per_depth=3, seed=0))
    part = drawn(passkey_trials(tok, FILLER, 600, depths=(0.75, 1.0), trials_per_depth=3))
    assert part == {k: v for k, v in every.items() if k[0] >= 0.75}
    # the committed trials' draw: default depth number d (0-4) seeds [seed, length, d, j]
    rng = np.random.default_rng([0, 600, 3, 1])
    assert part[(0.75, 1)][0] == str(int(rng.integers(10000, 100000)))
    # depths off the quarter grid draw their own trials, whatever the order asked
    odd = drawn(passkey_trials(tok, FILLER, 600, depths=(0.1, 0.3), trials_per_depth=3))
    assert odd == drawn(passkey_trials(tok, FILLER, 600, depths=(0.3, 0.1), trials_per_depth=3))
    assert [odd[(0.1, j)] for j in range(3)] != [odd[(0.3, j)] for j in range(3)]
    assert [odd[(0.1, j)] for j in range(3)] != [every[(0.0, j)] for j in range(3)]


def test_parse_passkey():
    assert parse_passkey(" 12345") == "12345"
    assert parse_passkey(" 12345.\nThe") == "12345"
    assert parse_passkey("is 123456") == "123456"  # not a match for 12345: whole digit run
    assert parse_passkey(" 12 345") == "12"
    assert parse_passkey(" unknown") is None and parse_passkey("") is None
    with pytest.raises(TypeError, match="'text'"):
        parse_passkey(12345)


def test_bad_input():
    tok = Chars()
    for key in ("1234", "123456", "12a45", 12345):
        with pytest.raises(ValueError, match="'key'"):
            passkey_prompt(tok, FILLER, 500, 0.5, key)
    for depth in (-0.1, 1.5, True, "0.5"):
        with pytest.raises(ValueError, match="'depth'"):
            passkey_prompt(tok, FILLER, 500, depth, "12345")
    with pytest.raises(ValueError, match="shorter than the fixed text"):
        passkey_prompt(tok, FILLER, 50, 0.5, "12345")
    with pytest.raises(ValueError, match="filler stream"):
        passkey_prompt(tok, FILLER[:100], 500, 0.5, "12345")
    with pytest.raises(ValueError, match="filler stream"):
        passkey_trials(tok, FILLER[:100], 500)
    with pytest.raises(TypeError, match="'tokenizer'"):
        passkey_prompt(object(), FILLER, 500, 0.5, "12345")
    with pytest.raises(ValueError, match="'depths'"):
        passkey_trials(tok, FILLER, 500, depths=())
    for depth in (1.5, -0.25, True, "0.5"):
        with pytest.raises(ValueError, match="^passkey_trials: every depth must be a number in"):
            passkey_trials(tok, FILLER, 500, depths=(0.5, depth))
