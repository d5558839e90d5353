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
