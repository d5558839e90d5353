"""Smoke tests of the Focus decoding benchmarks (:mod:`benchmarks.focus.decode_step`,
:mod:`benchmarks.focus.decode_split`, :mod:`benchmarks.focus.masked_layout`) at their smallest
settings: the tables hold the rows asked for, the ratios are finite and positive, and the
checks the benchmarks make (outputs agree, timers restored) hold. Timings are never asserted."""
from __future__ import annotations

import math

import pytest

from benchmarks.focus import decode_split as focus_decode_split
from benchmarks.focus import decode_step as focus_decode_step
from benchmarks.focus import masked_layout as focus_masked_layout


def _positive(v) -> bool:
    return isinstance(v, float) and math.isfinite(v) and v > 0


def test_masked_layout_rows_and_agreement(tmp_path):
    out = focus_masked_layout.run([96, 128], [1], calls=1, rounds=1,
                                  shapes=focus_masked_layout.SHAPES[:2], out_dir=tmp_path,
                                  name="layout")
    rows = out["rows"]
    assert [(r["H"], r["H_kv"], r["context"], r["layout"]) for r in rows] == [
        (h, hkv, s, lay) for h, hkv, _ in focus_masked_layout.SHAPES[:2] for s in (96, 128)
        for lay in ("packed", "gqa")]
    for r in rows:
        assert _positive(r["us_per_call"]) and _positive(r["vs_packed"])
        assert r["max_abs_diff"] < 1e-5  # the two layouts compute the same attention
        if r["layout"] == "packed":
            assert r["vs_packed"] == r["min_ratio"] == r["max_ratio"] == 1.0
    assert all((tmp_path / f"layout.{ext}").is_file() for ext in ("csv", "json", "md"))


@pytest.mark.slow
def test_decode_step_rows(tmp_path):
    out = focus_decode_step.run(contexts=[80], threads=[1], caches=("dynamic", "static"),
                                layers=1, window=16, steps=1, rounds=1, out_dir=tmp_path,
                                name="step", progress=False, compare_paths=True)
    rows = out["rows"]
    modes = [*focus_decode_step.MODES, *focus_decode_step.PATH_MODES]
    assert [(r["cache"], r["mode"]) for r in rows] == [
        (c, m) for c in ("dynamic", "static") for m in modes]
    for r in rows:
        assert r["context"] == 80 and r["threads"] == 1
        for key in ("ms_per_step", "speed_vs_full", "cpu_ms_per_step", "cpu_speed_vs_full"):
            assert _positive(r[key]), key
        assert 0 < r["keys_read"] <= 1
    for r in rows:
        if r["mode"] == "full":
            assert r["speed_vs_full"] == 1.0 and r["keys_read"] == 1.0
            assert r["round_ratios"] == [1.0] and r["cpu_round_ratios"] == [1.0]
        # one round: the median is that round's ratio
        assert r["round_ratios"] == [r["speed_vs_full"]]
    share = {r["mode"]: r["keys_read"] for r in rows if r["cache"] == "dynamic"}
    # top-1's group is one of top-2's, so top-2 reads at least the keys top-1 reads
    assert share["top-1"] <= share["top-2"] < 1.0
    assert (tmp_path / "step.md").is_file()


@pytest.mark.slow
def test_decode_split_parts(tmp_path):
    import transformers.cache_utils as cu

    update = cu.Cache.update
    out = focus_decode_split.run(contexts=[80], threads=[1], layers=1, window=16, steps=1,
                                 rounds=3, out_dir=tmp_path, name="split", progress=False)
    assert cu.Cache.update is update  # the timers are taken off again
    rows = out["rows"]
    assert [r["mode"] for r in rows] == list(focus_decode_step.MODES)
    for r in rows:
        assert _positive(r["cache_ms"]) and _positive(r["attention_ms"])
        assert (r["routing_ms"] > 0) == (r["mode"] != "full")
        # the speed-up is the true median of the three rounds' ratios, each saved
        assert len(r["round_ratios"]) == 3
        assert r["speed_vs_full"] == sorted(r["round_ratios"])[1]
        if r["mode"] == "full":
            assert r["round_ratios"] == [1.0, 1.0, 1.0]
    one = focus_decode_split.run(contexts=[80], threads=[1], layers=1, window=16, steps=1,
                                 rounds=1, out_dir=tmp_path, name="split1", progress=False)
    for r in one["rows"]:
        parts = [r[p] for p in focus_decode_split.PARTS]
        # one round: each column is that round's value, so the parts and the rest add up
        assert math.isclose(sum(parts) + r["rest_ms"], r["step_ms"], rel_tol=1e-9)
    assert (tmp_path / "split.csv").is_file()
