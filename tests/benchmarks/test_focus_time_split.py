"""benchmarks.focus.time_split: the timers see each part of a composed model's prefill and
decoding, leave its outputs unchanged, and are removed afterwards."""
import pytest
import torch

from benchmarks.focus import time_split as ts


def test_split_prefill_hand_case():
    acc = {"focus": 5.0, "routing": 1.0, "planning": 0.5, "gathers": 0.25, "kernels": 2.0,
           "merge": 0.25}
    out = ts.split_prefill(acc, total=12.0)
    assert out == {"routing": 1.0, "planning": 0.5, "gathers": 0.25, "kernels": 2.0,
                   "merge": 0.25, "glue": 1.0, "rest": 7.0}
    # full attention: the SDPA call is the kernel, everything else the rest
    assert ts.split_prefill({"sdpa": 3.0}, total=10.0) == {
        "routing": 0.0, "planning": 0.0, "gathers": 0.0, "kernels": 3.0, "merge": 0.0,
        "glue": 0.0, "rest": 7.0}


def test_split_step_hand_case():
    out = ts.split_step({"cache": 0.4, "step_routing": 0.2, "step_attention": 0.8}, 2.0, 4)
    assert out == pytest.approx({"cache": 0.1, "step_routing": 0.05, "step_attention": 0.2,
                                 "step_rest": 0.15})
    assert ts.split_step({"sdpa": 1.0, "cache": 0.5}, 2.0, 2) == pytest.approx(
        {"cache": 0.25, "step_routing": 0.0, "step_attention": 0.5, "step_rest": 0.25})


def test_timers_see_every_part_and_change_nothing():
    from benchmarks.focus.operating_point import compose_config
    from quest_geometric.nn.focus import _aten, blocks
    from quest_geometric.nn.focus.module import FocusAttention
    from quest_geometric.testing.hf import build_hf, tokens

    if not _aten.FLASH_AVAILABLE:
        pytest.skip("the flash kernel is not available")
    model = compose_config(build_hf("llama", seed=0), {"kind": "random", "K": 4, "top_k": 2,
                                                        "window": 8}).eval()
    prompt = tokens(1, 96)
    with torch.no_grad():
        ref = model(prompt).logits
    originals = (FocusAttention.__dict__["attend"], blocks._gather_rows, _aten.flash_forward)
    timers = ts.install()
    try:
        with torch.no_grad():
            timed = model(prompt).logits
        parts = ts._time_one(model, prompt, 3, timers)
    finally:
        timers.restore()
    torch.testing.assert_close(timed, ref, rtol=0, atol=0)
    assert (FocusAttention.__dict__["attend"], blocks._gather_rows,
            _aten.flash_forward) == originals
    for p in ("routing", "planning", "gathers", "kernels", "merge", "rest", "cache",
              "step_routing", "step_attention"):
        assert parts[p] > 0, p
    # the prefill's parts add up to the prefill (glue is what the timers did not name)
    total = sum(parts[p] for p in (*ts.PREFILL_PARTS, "glue", "rest"))
    assert total == pytest.approx(parts["prefill_s"], rel=1e-9)


def _doc(loads=("1.0", "1.1")):
    """A saved run by hand: two rounds at one thread, full attention and one row."""
    rounds = [({"full": (10.0, 0.2), "row": (5.0, 0.1)}, loads[0]),
              ({"full": (12.0, 0.2), "row": (8.0, 0.25)}, loads[1])]
    records = [{"threads": 1, "round": i, "order": ["row", "full"], "load1": load,
                **{k: {"prefill_s": p, "step_s": s} for k, (p, s) in r.items()}}
               for i, (r, load) in enumerate(rounds)]
    return {"meta": {"date": "2026-12-06 10:14 UTC", "length": 8192, "new_tokens": 4,
                     "records": records}, "rows": []}


def test_a_saved_run_becomes_an_op_speed_run():
    run = ts.op_speed_run(_doc(), 1)
    row = next(r for r in run["rows"] if r["config"] == "row")
    assert row["prefill_speedup"] == pytest.approx((10 / 5 + 12 / 8) / 2)
    assert row["decode_speedup"] == pytest.approx((0.2 / 0.1 + 0.2 / 0.25) / 2)
    assert (row["prefill_speedup_min"], row["prefill_speedup_max"]) == (1.5, 2.0)
    assert row["decode_tok_s"] == pytest.approx((1 / 0.1 + 1 / 0.25) / 2)
    assert row["verdict"] == "meets 1.3x" and run["meta"]["under_load"] is False  # 1.75, 1.4
    busy = ts.op_speed_run(_doc(("1.0", "2.0")), 1)  # one round began beside other work
    assert busy["meta"]["under_load"] is True
    assert next(r for r in busy["rows"] if r["config"] == "row")["verdict"] == \
        "none (under load)"
    with pytest.raises(ValueError, match="no round at 2 thread"):
        ts.op_speed_run(_doc(), 2)


def test_fold_replaces_the_rows_it_timed(tmp_path):
    import json

    from benchmarks.focus import op_speed_canonical as canon

    older = {"meta": {"date": "2026-12-01 00:00 UTC", "threads": 1}, "rows": [
        {"config": "full", "length": 8192, "prefill_speedup": 1.0, "decode_speedup": 1.0},
        {"config": "row", "length": 8192, "prefill_speedup": 3.0, "decode_speedup": 3.0},
        {"config": "other", "length": 8192, "prefill_speedup": 0.5, "decode_speedup": 0.5}]}
    rows, used = canon.merge_runs(canon.runs_of(older))
    canon.write_canonical(rows, used, 1, tmp_path)
    saved = tmp_path / "run.json"
    saved.write_text(json.dumps(_doc()))
    (path,) = ts.fold(saved, tmp_path)
    got = {r["config"]: r for r in json.loads(path.read_text())["rows"]
           if not r["config"].startswith("full")}
    assert got["row"]["prefill_speedup"] == pytest.approx(1.75)  # the newer run's
    assert got["row"]["run"] == "2026-12-06 10:14 UTC"
    assert got["other"]["prefill_speedup"] == 0.5  # a row the new run did not time stays


