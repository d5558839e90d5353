"""The router-training pieces of ``benchmarks/focus_pretrained.py``: the block order, the
paired revisit measure of a plateau, and resuming a training (on a tiny random Llama)."""
from __future__ import annotations

import math

import pytest
import torch
from scipy import stats

from quest_geometric.experiments.focus_pretrained import (
    block_order,
    revisit_drop,
    train_routers,
)


def test_block_order_draws_every_block_equally_often():
    o = block_order(7, 20, seed=3)
    assert o.numel() == 21  # ceil(20 / 7) = 3 passes
    assert torch.bincount(o, minlength=7).tolist() == [3] * 7
    assert torch.equal(o, block_order(7, 21, seed=3))  # same number of passes: same order
    assert not torch.equal(o, block_order(7, 20, seed=4))
    with pytest.raises(ValueError, match="num_blocks"):
        block_order(0, 5)


def test_revisit_drop_by_hand():
    # blocks 0 1 0 2 1 0 with losses 5 4 3 9 1 2: revisits (0: 5->3, 3->2), (1: 4->1)
    curve, order = [5.0, 4.0, 3.0, 9.0, 1.0, 2.0], [0, 1, 0, 2, 1, 0]
    r = revisit_drop(curve, order)
    diffs = [-2.0, -3.0, -1.0]
    assert r["n"] == 3 and r["mean"] == pytest.approx(-2.0)
    assert r["sem"] == pytest.approx(stats.sem(diffs))
    assert r["share_lower"] == 1.0
    assert r["sign_p"] == pytest.approx(stats.binomtest(3, 3, 0.5).pvalue)
    # from step 2 on, block 0's first visit is dropped: pairs (0: 3->2), (1: none before 4)
    r2 = revisit_drop(curve, order, after=2)
    assert r2["n"] == 1 and r2["mean"] == pytest.approx(-1.0) and math.isnan(r2["sem"])
    assert math.isnan(revisit_drop([1.0, 2.0], [0, 1])["mean"])  # no block seen twice
    with pytest.raises(ValueError, match="order"):
        revisit_drop([1.0, 2.0, 3.0], [0, 1])


def test_revisit_drop_is_near_zero_on_a_flat_noisy_curve():
    g = torch.Generator().manual_seed(0)
    order = block_order(10, 400, seed=0)
    base = torch.rand(10, generator=g) * 3  # block-to-block spread, no trend
    curve = (base[order] + 0.01 * torch.randn(order.numel(), generator=g)).tolist()
    r = revisit_drop(curve, order.tolist())
    assert abs(r["mean"]) < 4 * r["sem"]
    trend = [c - 0.001 * i for i, c in enumerate(curve)]  # a falling curve is detected
    assert revisit_drop(trend, order.tolist())["mean"] < -5 * r["sem"]


@pytest.mark.slow
def test_train_routers_resumed_equals_uninterrupted(tmp_path):
    pytest.importorskip("transformers")
    from _hf_models import build_hf, tokens

    from quest_geometric.nn.focus import compose_focus, router_parameters

    train = tokens(5, 24, seed=2)

    def trained(run_dir, interrupted):
        model = build_hf("llama", seed=0)
        compose_focus(model, num_groups=2, top_k=1, window=4, backend="blocks")
        for p in model.parameters():
            p.requires_grad_(False)
        for p in router_parameters(model):
            p.requires_grad_(True)
        calls = 0
        while True:  # max_minutes=0 stops after every step: a resume each time
            out = train_routers(model, train, 6, 1e-2, run_dir, ckpt_every=4,
                                progress=False, max_minutes=0.0 if interrupted else None)
            calls += 1
            if out["finished"]:
                return out, [p.detach().clone() for p in router_parameters(model)], calls

    whole, p_whole, n_whole = trained(tmp_path / "a", False)
    parts, p_parts, n_parts = trained(tmp_path / "b", True)
    assert (n_whole, n_parts) == (1, 6)
    assert whole["finished"] and parts["finished"] and parts["step"] == 6
    assert parts["curve"] == pytest.approx(whole["curve"], rel=1e-5)
    for a, b in zip(p_whole, p_parts):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert whole["curve"][-1] != whole["curve"][0]  # the routers did train
    # a resume that would change the block order is refused
    model = build_hf("llama", seed=0)
    compose_focus(model, num_groups=2, top_k=1, window=4, backend="blocks")
    with pytest.raises(ValueError, match="block order"):
        train_routers(model, train, 11, 1e-2, tmp_path / "a", progress=False)
