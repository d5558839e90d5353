"""evaluate_lm: a language model's validation loss, and the pairs its Focus layers kept,
counted by hand."""
from __future__ import annotations

import math

import pytest
import torch

from quest_geometric.testing.focus import tiny_composed_llama as _tiny_composed
from quest_geometric.training import evaluate_lm


def test_evaluate_lm_soft_keep_of_the_additive_gate_by_hand():
    """soft_keep: every far pair's factor is 1 at b = -1000 and 0 at b = +1000, so it is 1
    and the window's share of the causal pairs (hand-counted); NaN for the hard pattern
    and for the multiplicative gate."""
    pytest.importorskip("transformers")
    from quest_geometric.nn.focus import focus_layers
    from quest_geometric.testing.hf import tokens

    blocks = tokens(3, 24, seed=2)
    t, w = 24, 2
    window_share = (t + (t - 1) + (t - 2)) / (t * (t + 1) / 2)  # offsets 0, 1, 2 of 300 pairs
    model = _tiny_composed(top_k=2, window=w)
    model.train()
    for bias, want in ((-1000.0, 1.0), (1000.0, window_share)):
        for f in focus_layers(model):
            f.gate_bias = bias
        assert evaluate_lm(model, blocks)["soft_keep"] == pytest.approx(want, rel=1e-6)
    for f in focus_layers(model):
        f.gate_bias = 0.125
    keep = evaluate_lm(model, blocks)["soft_keep"]
    assert window_share < keep < 1.0
    model.eval()  # the hard pattern: no soft gate
    assert math.isnan(evaluate_lm(model, blocks)["soft_keep"])
    mult = _tiny_composed("multiplicative", top_k=2, window=w)
    mult.train()
    assert math.isnan(evaluate_lm(mult, blocks)["soft_keep"])


@pytest.mark.parametrize("num_sinks", [0, 3])
def test_evaluate_lm_pairs_kept_counted_by_hand_with_each_layers_window_and_sinks(num_sinks):
    """pairs_kept of the hard pattern: the mean over layer calls of the causal pairs
    (i, j), j <= i, with i - j <= w, a shared group or j < s, counted pair by pair from the
    groups each layer used; balance the mean largest group share; NaN for a model without
    Focus."""
    pytest.importorskip("transformers")
    from quest_geometric.nn.focus import focus_layers, set_focus_options
    from quest_geometric.testing.hf import build_hf, tokens
    from quest_geometric.training.routers import router_outputs

    blocks = tokens(2, 20, seed=4)
    model = _tiny_composed(top_k=1, window=3).eval()
    set_focus_options(model, num_sinks=num_sinks)
    got = evaluate_lm(model, blocks)
    with torch.no_grad(), router_outputs(model) as routed:
        shares, balances = [], []
        for x in blocks:
            routed.clear()
            model(x[None], use_cache=False)
            for f, r in routed:
                g = r.groups.reshape(-1, r.groups.size(-1)).tolist()
                kept = sum(1 for i in range(20) for j in range(i + 1)
                           if i - j <= f.window or set(g[i]) & set(g[j]) or j < num_sinks)
                shares.append(kept / (20 * 21 / 2))
                counts = [sum(gi.count(k) for gi in g) for k in range(f.num_groups)]
                balances.append(max(counts) / 20)
    assert len(shares) == 2 * len(focus_layers(model))
    assert got["pairs_kept"] == pytest.approx(sum(shares) / len(shares))
    assert got["balance"] == pytest.approx(sum(balances) / len(balances))
    assert math.isnan(evaluate_lm(build_hf("llama", seed=0), blocks)["pairs_kept"])


def test_evaluate_lm_with_a_loss_fn_for_a_nanogpt_style_model():
    """``loss_fn`` evaluates a model that is not a Hugging Face one (CharGPT): the loss is
    the cross-entropy of every block's predicted tokens by hand, and the window plus sinks
    keeps the causal pairs with i - j <= w or j < s, counted pair by pair."""
    import torch.nn.functional as F

    from quest_geometric.models import CharGPT, GPTConfig
    from quest_geometric.nn.focus import WindowOnlyRouter, compose_focus

    torch.manual_seed(0)
    model = CharGPT(GPTConfig(vocab_size=11, block_size=16, n_layer=2, n_head=2, n_embd=16))
    compose_focus(model, num_groups=1, top_k=0, window=3, num_sinks=2,
                  router=WindowOnlyRouter()).eval()
    blocks = torch.randint(11, (3, 17), generator=torch.Generator().manual_seed(1))
    got = evaluate_lm(model, blocks, loss_fn=lambda m, x: m(x[:, :-1], x[:, 1:])[1])
    with torch.no_grad():
        losses = [float(F.cross_entropy(model(b[None, :-1])[0][0], b[1:])) for b in blocks]
    assert got["block_loss"] == pytest.approx(losses, rel=1e-6)
    assert got["val_loss"] == pytest.approx(sum(losses) / 3, rel=1e-6)
    assert got["val_ppl"] == pytest.approx(math.exp(sum(losses) / 3), rel=1e-6)
    kept = sum(1 for i in range(16) for j in range(i + 1) if i - j <= 3 or j < 2)
    assert got["pairs_kept"] == pytest.approx(kept / (16 * 17 / 2))
    with pytest.raises(TypeError, match="labels"):  # the default is Hugging Face's call
        evaluate_lm(model, blocks)
