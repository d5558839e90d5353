"""Tests for QKProbe: every metric against an independent dense/numpy reference computed here
from q and k obtained by calling each layer's projections by hand."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from quest_geometric.analysis.metrics import attention_entropy, effective_rank, stable_rank
from quest_geometric.analysis.probe import (
    QKProbe,
    QKView,
    logit_singular_values,
    masked_softmax_entropy,
    register_attention_adapter,
    supported_attention_types,
    unregister_attention_adapter,
)
from quest_geometric.models.char_gpt import CharGPT, GPTConfig
from quest_geometric.nn.focus import FocusAttention
from quest_geometric.testing.common import np_pr

# ----------------------------------------------------------------------------- references


def np_ranks(m: np.ndarray) -> tuple[float, float]:
    s = np.linalg.svd(m, compute_uv=False)
    p = s / s.sum()
    p = p[p > 0]
    return float(np.exp(-(p * np.log(p)).sum())), float((s ** 2).sum() / s[0] ** 2)


def dense_reference(q: torch.Tensor, k: torch.Tensor, scale: float, causal: bool,
                    valid: torch.Tensor | None = None) -> dict[str, np.ndarray]:
    """Per-head PR of q/k over (valid) tokens, mean ranks of the unmasked logits per sequence,
    mean normalised entropy of the masked softmax over rows with >= 2 keys."""
    q, k = q.double(), k.double()
    B, H, T, d = q.shape
    if valid is None:
        valid = torch.ones(B, T, dtype=torch.bool)
    out: dict[str, list] = {"pr_q": [], "pr_k": [], "erank": [], "srank": [], "entropy": []}
    for h in range(H):
        out["pr_q"].append(np_pr(q[:, h][valid].numpy()))
        out["pr_k"].append(np_pr(k[:, h][valid].numpy()))
        er, sr, ents = [], [], []
        for b in range(B):
            idx = valid[b].nonzero().flatten()
            qb, kb = q[b, h, idx], k[b, h, idx]
            L = (qb @ kb.T * scale).numpy()
            e, s = np_ranks(L)
            er.append(e)
            sr.append(s)
            for i in range(len(idx)):
                row = L[i, : i + 1] if causal else L[i]
                if row.size < 2:
                    continue
                a = np.exp(row - row.max())
                a /= a.sum()
                ents.append(-(a * np.log(a)).sum() / np.log(row.size))
        out["erank"].append(np.mean(er))
        out["srank"].append(np.mean(sr))
        out["entropy"].append(np.mean(ents))
    return {key: np.array(v) for key, v in out.items()}


def concat_pr(t: torch.Tensor, valid: torch.Tensor | None = None) -> float:
    B, H, T, d = t.shape
    z = t.double().transpose(1, 2)
    z = z[valid] if valid is not None else z.reshape(B * T, H, d)
    return np_pr(z.reshape(len(z), H * d).numpy())


def head_records(records: list[dict], layer: str) -> list[dict]:
    return sorted((r for r in records if r["layer"] == layer and r["head"] is not None),
                  key=lambda r: r["head"])


def layer_record(records: list[dict], layer: str) -> dict:
    (r,) = [r for r in records if r["layer"] == layer and r["head"] is None]
    return r


def check_against(records: list[dict], layer: str, ref: dict, rtol: float = 1e-6) -> None:
    heads = head_records(records, layer)
    got = {key: np.array([r[name] for r in heads]) for key, name in
           (("pr_q", "pr_q"), ("pr_k", "pr_k"), ("erank", "qk_effective_rank"),
            ("srank", "qk_stable_rank"), ("entropy", "attention_entropy"))}
    for key, v in got.items():
        np.testing.assert_allclose(v, ref[key], rtol=rtol, err_msg=f"{layer}: {key}")
    lay = layer_record(records, layer)
    assert lay["pr_q"] == pytest.approx(ref["pr_q"].mean(), rel=rtol)
    assert lay["pr_q_minus_pr_k"] == pytest.approx(ref["pr_q"].mean() - ref["pr_k"].mean(),
                                                   rel=rtol, abs=1e-9)
    assert lay["attention_entropy"] == pytest.approx(ref["entropy"].mean(), rel=rtol)


def capture_inputs(modules: list[nn.Module]) -> tuple[dict, list]:
    """Record (args, kwargs) of every call of the given modules (a test-side hook)."""
    seen: dict[int, list] = {id(m): [] for m in modules}
    handles = [m.register_forward_pre_hook(
        lambda mod, a, kw: seen[id(mod)].append((a, kw)), with_kwargs=True) for m in modules]
    return seen, handles


def no_hooks(model: nn.Module) -> bool:
    return all(not m._forward_hooks and not m._forward_pre_hooks
               and not m._forward_hooks_with_kwargs
               and not m._forward_pre_hooks_with_kwargs for m in model.modules())


def finite_or_none(records: list[dict]) -> bool:
    for r in records:
        for key, v in r.items():
            if isinstance(v, float) and not math.isfinite(v):
                return False
    return True


# ----------------------------------------------------------------------------- spectra


@pytest.mark.parametrize("T,S,d,rank", [(20, 15, 4, 4), (20, 15, 6, 2), (3, 5, 8, 3), (9, 9, 9, 9)])
def test_logit_singular_values_fast_equals_plain(T, S, d, rank):
    g = torch.Generator().manual_seed(T + d)
    basis = torch.randn(rank, d, dtype=torch.float64, generator=g)
    q = torch.randn(2, 3, T, rank, dtype=torch.float64, generator=g) @ basis
    k = torch.randn(2, 3, S, d, dtype=torch.float64, generator=g)
    L = q @ k.transpose(-1, -2) * -0.3
    fast = logit_singular_values(q, k, -0.3)
    plain = logit_singular_values(q, k, -0.3, fast=False)
    ref = torch.from_numpy(np.linalg.svd(L.numpy(), compute_uv=False))
    r = fast.size(-1)
    torch.testing.assert_close(fast, ref[..., :r], rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(plain, ref)
    assert ref[..., r:].abs().max() < 1e-9 if ref.size(-1) > r else True
    # the probe's rank formulas on either route equal metrics.effective_rank / stable_rank of L
    from quest_geometric.analysis.probe import _ranks_from_singular_values

    for sv in (fast, plain):
        er, sr = _ranks_from_singular_values(sv)
        torch.testing.assert_close(er, effective_rank(L), rtol=1e-7, atol=1e-7)
        torch.testing.assert_close(sr, stable_rank(L))


@pytest.mark.parametrize("causal", [True, False])
def test_masked_softmax_entropy_equals_attention_entropy(causal):
    g = torch.Generator().manual_seed(7)
    logits = 3 * torch.randn(2, 3, 6, 6, dtype=torch.float64, generator=g)
    allowed = torch.rand(2, 1, 6, 6, generator=g) > 0.3
    if causal:
        allowed = allowed & torch.ones(6, 6, dtype=torch.bool).tril()
    allowed[0, 0, 2] = False  # a row without any key
    h, valid = masked_softmax_entropy(logits, allowed)
    a = torch.nan_to_num(logits.masked_fill(~allowed, float("-inf")).softmax(-1), nan=0.0)
    ref = attention_entropy(a, mask=allowed)
    assert torch.equal(valid, ref.valid) and not valid[0, :, 2].any()
    torch.testing.assert_close(h, ref.entropy)


def test_zero_logits_are_marked_undefined():
    model = tiny_gpt()
    with torch.no_grad():
        for a in model.attention_layers():
            a.k_proj.weight.zero_()
            a.k_proj.bias.zero_()
    with QKProbe(model) as probe, torch.no_grad():
        model(torch.randint(0, 23, (2, 12)))
    r = layer_record(probe.results(), "blocks.0.attn")
    assert r["qk_effective_rank"] is None and "zero" in r["undefined"]["qk_effective_rank"]
    assert r["pr_k"] is None and "zero variance" in r["undefined"]["pr_k"]
    assert r["pr_q"] is not None and r["attention_entropy"] == pytest.approx(1.0)  # uniform rows


# ----------------------------------------------------------------------------- CharGPT


def tiny_gpt(**kw) -> CharGPT:
    torch.manual_seed(0)
    cfg = dict(vocab_size=23, block_size=16, n_layer=2, n_head=2, n_embd=16)
    cfg.update(kw)
    return CharGPT(GPTConfig(**cfg))


def gpt_reference(model: CharGPT, x: torch.Tensor) -> dict[str, dict]:
    attns = model.attention_layers()
    seen, handles = capture_inputs(attns)
    with torch.no_grad():
        model(x)
    for h in handles:
        h.remove()
    refs = {}
    for i, a in enumerate(attns):
        (inp,), _ = seen[id(a)][0]
        B, T, C = inp.shape
        H, d = a.n_head, a.head_dim
        with torch.no_grad():  # projections called by hand
            q = a.q_proj(inp).view(B, T, H, d).transpose(1, 2)
            k = a.k_proj(inp).view(B, T, H, d).transpose(1, 2)
        refs[f"blocks.{i}.attn"] = dict(dense_reference(q, k, 1 / math.sqrt(d), causal=True),
                                        concat_q=concat_pr(q), concat_k=concat_pr(k), q=q, k=k)
    return refs


@pytest.mark.parametrize("concat_heads", [True, False])
def test_chargpt_matches_reference(concat_heads):
    model = tiny_gpt()
    x = torch.randint(0, 23, (3, 12))
    refs = gpt_reference(model, x)
    with QKProbe(model, concat_heads=concat_heads) as probe:
        with torch.no_grad():
            model(x)
    rec = probe.results()
    assert probe.layer_names == ["blocks.0.attn", "blocks.1.attn"]
    for name, ref in refs.items():
        check_against(rec, name, ref)
        lay = layer_record(rec, name)
        assert lay["tokens"] == 36 and lay["probe_tokens"] == 36 and lay["heads"] == 2
        assert lay["undefined"] == {}
        if concat_heads:
            assert lay["pr_q_concat"] == pytest.approx(ref["concat_q"], rel=1e-6)
            assert lay["pr_k_concat"] == pytest.approx(ref["concat_k"], rel=1e-6)
        else:
            assert lay["pr_q_concat"] is None


def test_chargpt_entropy_matches_model_attention_weights():
    # second reference: the model's own explicit causal attention matrix
    model = tiny_gpt()
    x = torch.randint(0, 23, (2, 9))
    attn0 = model.attention_layers()[0]
    seen, handles = capture_inputs([attn0])
    with QKProbe(model, layers=[0], heads=True) as probe, torch.no_grad():
        model(x)
    handles[0].remove()
    (inp,), _ = seen[id(attn0)][0]
    with torch.no_grad():
        w = attn0.attention_weights(inp)
    causal = torch.ones(9, 9, dtype=torch.bool).tril()
    ent = attention_entropy(w, mask=causal)
    per_head = (ent.entropy * ent.valid).sum((0, 2)) / ent.valid.sum((0, 2))
    got = [r["attention_entropy"] for r in head_records(probe.results(), "blocks.0.attn")]
    np.testing.assert_allclose(got, per_head.numpy(), rtol=1e-6)


def test_pr_streams_over_batches_and_probe_batch_is_first():
    model = tiny_gpt()
    x1, x2 = torch.randint(0, 23, (2, 10)), torch.randint(0, 23, (3, 7))
    r1, r2 = gpt_reference(model, x1), gpt_reference(model, x2)
    with QKProbe(model) as probe, torch.no_grad():
        model(x1)
        model(x2)
    rec = probe.results()
    for name in r1:
        heads = head_records(rec, name)
        for h, r in enumerate(heads):
            qa = torch.cat([r1[name]["q"][:, h].reshape(-1, 8), r2[name]["q"][:, h].reshape(-1, 8)])
            assert r["pr_q"] == pytest.approx(np_pr(qa.double().numpy()), rel=1e-6)
            # the ranks and the entropy come from the first batch only
            assert r["qk_effective_rank"] == pytest.approx(r1[name]["erank"][h], rel=1e-6)
            assert r["attention_entropy"] == pytest.approx(r1[name]["entropy"][h], rel=1e-6)
        assert layer_record(rec, name)["tokens"] == 20 + 21
    # reset: the next batch becomes the probe batch
    probe.reset().reattach()
    with torch.no_grad():
        model(x2)
    probe.remove()
    rec = probe.results()
    for name in r2:
        check_against(rec, name, r2[name])


def test_max_tokens_caps_probe_sequences():
    model = tiny_gpt()
    x = torch.randint(0, 23, (4, 8))
    ref_first = gpt_reference(model, x[:2])
    with QKProbe(model, max_tokens=16) as probe, torch.no_grad():
        model(x)
    rec = probe.results()
    for name, ref in ref_first.items():
        for h, r in enumerate(head_records(rec, name)):
            assert r["qk_effective_rank"] == pytest.approx(ref["erank"][h], rel=1e-6)
            assert r["attention_entropy"] == pytest.approx(ref["entropy"][h], rel=1e-6)
        assert layer_record(rec, name)["probe_tokens"] == 16
        assert layer_record(rec, name)["tokens"] == 32


@pytest.mark.parametrize("dropout", [0.0, 0.2])
def test_outputs_and_gradients_unchanged_in_training(dropout):
    model = tiny_gpt(dropout=dropout)
    model.train()
    x = torch.randint(0, 23, (2, 11))
    y = torch.randint(0, 23, (2, 11))

    def step() -> tuple[torch.Tensor, list[torch.Tensor]]:
        model.zero_grad()
        torch.manual_seed(123)
        logits, loss = model(x, y)
        loss.backward()
        return logits.detach().clone(), [p.grad.clone() for p in model.parameters()]

    ref_out, ref_grads = step()
    with QKProbe(model) as probe:
        out, grads = step()
    assert torch.equal(ref_out, out)
    assert all(torch.equal(a, b) for a, b in zip(ref_grads, grads))
    assert no_hooks(model)
    rec = probe.results()
    assert all(r["pr_q"] is not None for r in rec) and finite_or_none(rec)


def test_enabled_flag_and_hook_removal():
    model = tiny_gpt()
    x = torch.randint(0, 23, (2, 6))
    probe = QKProbe(model, enabled=False)
    assert not no_hooks(model)
    with torch.no_grad():
        model(x)
    rec = probe.results()
    assert all(r["tokens"] == 0 and r["pr_q"] is None for r in rec)
    assert "no token seen" in layer_record(rec, "blocks.0.attn")["undefined"]["pr_q"]
    probe.enabled = True
    with torch.no_grad():
        model(x)
    assert layer_record(probe.results(), "blocks.0.attn")["tokens"] == 12
    probe.remove()
    assert no_hooks(model) and not probe.attached
    with torch.no_grad():
        model(x)  # no hook: nothing accumulated
    assert layer_record(probe.results(), "blocks.0.attn")["tokens"] == 12
    with QKProbe(model) as p2:
        assert p2.attached
    assert no_hooks(model)
    assert repr(p2) == "QKProbe(CharGPT, layers=2, enabled=True, attached=False)"


def test_layer_selection():
    model = tiny_gpt(n_layer=3)
    attn = model.attention_layers()
    for sel in (["blocks.2.attn", "blocks.0.attn"], [2, 0], [attn[2], attn[0]], [-1, 0]):
        with QKProbe(model, layers=sel) as probe:
            assert probe.layer_names == ["blocks.0.attn", "blocks.2.attn"]
    assert no_hooks(model)
    with pytest.raises(ValueError, match=r"^QKProbe: 'layers' must be names among .*, "
                                         r"got 'blocks.5.attn'$"):
        QKProbe(model, layers=["blocks.5.attn"])
    with pytest.raises(ValueError, match=r"^QKProbe: 'layers' must be indices in "
                                         r"\[-3, 3\) .*, got index 3$"):
        QKProbe(model, layers=[3])
    with pytest.raises(ValueError, match=r"^QKProbe: 'layers' must be modules among "
                                         "the attention layers"):
        QKProbe(model, layers=[nn.Linear(2, 2)])
    assert no_hooks(model)


def test_heads_false_gives_layer_records_only():
    model = tiny_gpt()
    with QKProbe(model, heads=False) as probe, torch.no_grad():
        model(torch.randint(0, 23, (2, 6)))
    rec = probe.results()
    assert [r["head"] for r in rec] == [None, None]


def test_qk_trajectory_as_the_trainers_periodic_function_matches_the_reference():
    """QKTrajectory called by EveryNSteps records each layer at steps 0, 2 and 4 with the
    values of the dense reference on that step's weights, and the model's loss on the batch."""
    from quest_geometric.analysis import QKTrajectory
    from quest_geometric.training import EveryNSteps, LanguageModelTask, TrainConfig, Trainer

    model = tiny_gpt()
    gen = torch.Generator().manual_seed(0)
    x, y = (torch.randint(0, 23, (3, 12), generator=gen) for _ in range(2))
    refs = {}

    def reference(trainer, step):  # the same weights, just before the trajectory's call
        with torch.no_grad():
            refs[step] = gpt_reference(model, x), float(model(x, y)[1])

    def get_batch(split, batch_size, generator=None):
        t = torch.randint(0, 23, (batch_size, 13), generator=generator)
        return t[:, :-1], t[:, 1:]

    traj = QKTrajectory(model, (x, y))
    cfg = TrainConfig(max_steps=4, batch_size=2, lr=1e-2, device="cpu", progress=False)
    Trainer(model, LanguageModelTask(), cfg, get_batch,
            callbacks=[EveryNSteps(reference, 2, at_start=True),
                       EveryNSteps(traj, 2, at_start=True)]).fit()
    assert [(r["step"], r["layer"]) for r in traj.records] == [(s, i) for s in (0, 2, 4)
                                                               for i in (0, 1)]
    for r in traj.records:
        ref, loss = refs[r["step"]][0][f"blocks.{r['layer']}.attn"], refs[r["step"]][1]
        assert r["pr_q"] == pytest.approx(ref["pr_q"].mean(), rel=1e-6)
        assert r["pr_k"] == pytest.approx(ref["pr_k"].mean(), rel=1e-6)
        assert r["pr_q_minus_pr_k"] == pytest.approx(r["pr_q"] - r["pr_k"], abs=1e-9)
        assert r["attention_entropy"] == pytest.approx(ref["entropy"].mean(), rel=1e-6)
        assert r["qk_effective_rank"] == pytest.approx(ref["erank"].mean(), rel=1e-6)
        assert r["loss"] == pytest.approx(loss, rel=1e-6)
    assert traj.records[0]["pr_q"] != traj.records[-2]["pr_q"]  # the weights did change
    mean = traj.layer_mean("pr_k")
    assert list(mean) == [0, 2, 4]
    assert mean[4] == pytest.approx((traj.records[-2]["pr_k"] + traj.records[-1]["pr_k"]) / 2)
    assert no_hooks(model) and model.training  # the probe leaves nothing behind
    assert traj(None, 9) == traj.records[-2:] and repr(traj) == "QKTrajectory(CharGPT, records=8)"


def test_explicit_probe_batch():
    model = tiny_gpt()  # no dropout, so the train-mode forward of xs equals the reference
    model.train()
    pb = torch.randint(0, 23, (2, 10))
    xs = torch.randint(0, 23, (3, 7))
    model.eval()
    ref_pb = gpt_reference(model, pb)
    ref_x = gpt_reference(model, xs)
    model.train()
    with QKProbe(model, probe_batch=pb) as probe, torch.no_grad():
        model(xs)
    assert probe.layer_names and no_hooks(model)
    rec = probe.results()  # runs the probe batch (hooks re-attached temporarily)
    assert no_hooks(model) and model.training and all(m.training for m in model.modules())
    for name in ref_pb:
        for h, r in enumerate(head_records(rec, name)):
            assert r["qk_effective_rank"] == pytest.approx(ref_pb[name]["erank"][h], rel=1e-6)
            assert r["attention_entropy"] == pytest.approx(ref_pb[name]["entropy"][h], rel=1e-6)
            assert r["pr_q"] == pytest.approx(ref_x[name]["pr_q"][h], rel=1e-6)  # PR: xs only
        assert layer_record(rec, name)["tokens"] == 21


# ----------------------------------------------------------------------------- bad input


def test_no_attention_layer_error():
    with pytest.raises(ValueError) as e:
        QKProbe(nn.Sequential(nn.Linear(4, 4), nn.ReLU()))
    msg = str(e.value)
    assert msg.startswith("QKProbe: 'model' must be a model with a recognisable attention layer")
    assert "register_attention_adapter" in msg
    assert "GPT2Attention" in msg and "TransformerConv" in msg and "CausalSelfAttention" in msg
    with pytest.raises(TypeError, match="^QKProbe: 'model' must be a torch.nn.Module, got "
                                        "'model'$"):
        QKProbe("model")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_tokens"):
        QKProbe(tiny_gpt(), max_tokens=1)


def test_one_token_batches_are_marked_undefined():
    model = tiny_gpt()
    with QKProbe(model) as probe, torch.no_grad():
        model(torch.randint(0, 23, (1, 1)))
    rec = probe.results()
    assert finite_or_none(rec)
    for r in rec:
        for key in ("pr_q", "pr_k", "pr_q_minus_pr_k", "qk_effective_rank", "qk_stable_rank",
                    "attention_entropy"):
            assert r[key] is None and key in r["undefined"]
    assert "at least 2 samples" in rec[0]["undefined"]["pr_q"]
    with pytest.raises(ValueError, match="undefined"):
        probe.results(strict=True)
    # several one-token sequences: PR is defined, ranks and entropy are not
    probe.reset().reattach()
    with torch.no_grad():
        model(torch.randint(0, 23, (5, 1)))
    probe.remove()
    r = layer_record(probe.results(), "blocks.0.attn")
    assert r["pr_q"] is not None and r["attention_entropy"] is None
    assert "fewer than 2" in r["undefined"]["attention_entropy"]
    assert "1 by construction" in r["undefined"]["qk_effective_rank"]


def test_no_forward_and_empty_batch():
    model = tiny_gpt()
    probe = QKProbe(model)
    rec = probe.results()
    assert all(r["pr_q"] is None and "no token seen" in r["undefined"]["pr_q"] for r in rec)
    attn = model.attention_layers()[0]
    with torch.no_grad():
        attn(torch.zeros(0, 5, 16))  # empty batch: skipped, does not become the probe batch
    x = torch.randint(0, 23, (2, 6))
    ref = gpt_reference(model, x)
    with torch.no_grad():
        model(x)
    probe.remove()
    check_against(probe.results(), "blocks.0.attn", ref["blocks.0.attn"])


# ----------------------------------------------------------------------------- user adapters


class ToyAttention(nn.Module):
    def __init__(self, c: int = 12, heads: int = 3) -> None:
        super().__init__()
        self.heads = heads
        self.to_q = nn.Linear(c, c)
        self.to_k = nn.Linear(c, c)

    def split(self, t: torch.Tensor) -> torch.Tensor:
        return t.unflatten(-1, (self.heads, -1)).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


@pytest.mark.parametrize("as_view", [True, False])
def test_register_attention_adapter(as_view):
    model = nn.Sequential(nn.Linear(12, 12), ToyAttention())
    with pytest.raises(ValueError, match="^QKProbe: 'model' must be a model with a "
                                         "recognisable attention layer"):
        QKProbe(model)

    def adapter(m, args, kwargs):
        q, k = m.split(m.to_q(args[0])), m.split(m.to_k(args[0]))
        return QKView(q, k, scale=0.5, causal=False) if as_view else (q, k)

    register_attention_adapter(ToyAttention, adapter)
    try:
        assert any(s.endswith("ToyAttention") for s in supported_attention_types())
        x = torch.randn(2, 7, 12)
        with QKProbe(model) as probe, torch.no_grad():
            model(x)
        with torch.no_grad():
            h = model[0](x)
            q, k = model[1].split(model[1].to_q(h)), model[1].split(model[1].to_k(h))
        ref = dense_reference(q, k, 0.5 if as_view else 1 / 2.0, causal=False)
        check_against(probe.results(), "1", ref)
    finally:
        unregister_attention_adapter(ToyAttention)
    with pytest.raises(KeyError):
        unregister_attention_adapter(ToyAttention)
    with pytest.raises(TypeError):
        register_attention_adapter(int, adapter)  # type: ignore[arg-type]


def test_bad_adapter_output():
    class Bad(ToyAttention):
        pass

    register_attention_adapter(Bad, lambda m, a, kw: torch.zeros(3))
    try:
        probe = QKProbe(Bad())
        with pytest.raises(TypeError, match="expected \\(q, k\\), a QKView or None"):
            probe.model(torch.randn(1, 3, 12))
        probe.remove()
    finally:
        unregister_attention_adapter(Bad)


# ----------------------------------------------------------------------------- FocusAttention


def test_focus_attention_dense_and_packed():
    torch.manual_seed(1)
    fa = FocusAttention(16, 2, num_groups=2, window=2, gate=None)
    x = torch.randn(2, 9, 16)
    with torch.no_grad():
        q = fa.q_proj(x).view(2, 9, 2, 8).transpose(1, 2)
        k = fa.k_proj(x).view(2, 9, 2, 8).transpose(1, 2)
    ref = dense_reference(q, k, 1 / math.sqrt(8), causal=True)
    out_ref = fa(x)
    with QKProbe(fa) as probe, torch.no_grad():
        out = fa(x)
    assert torch.equal(out, out_ref) and no_hooks(fa)
    assert probe.layer_names == [""]
    check_against(probe.results(), "", ref)

    # packed [N, C] input with a batch vector of unequal lengths
    lengths = [5, 3]
    xs = torch.randn(8, 16)
    batch = torch.tensor([0] * 5 + [1] * 3)
    with torch.no_grad():
        qf, kf = fa.q_proj(xs).view(8, 2, 8), fa.k_proj(xs).view(8, 2, 8)
    qd = torch.zeros(2, 2, 5, 8)
    kd = torch.zeros(2, 2, 5, 8)
    valid = torch.zeros(2, 5, dtype=torch.bool)
    start = 0
    for b, n in enumerate(lengths):
        qd[b, :, :n] = qf[start:start + n].transpose(0, 1)
        kd[b, :, :n] = kf[start:start + n].transpose(0, 1)
        valid[b, :n] = True
        start += n
    ref = dense_reference(qd, kd, 1 / math.sqrt(8), causal=True, valid=valid)
    with QKProbe(fa) as probe, torch.no_grad():
        fa(xs, batch)
    check_against(probe.results(), "", ref)
    assert layer_record(probe.results(), "")["tokens"] == 8


def test_chargpt_with_focus_attention_is_found():
    model = tiny_gpt(attention="focus", focus={"num_groups": 2, "window": 2})
    model.eval()
    x = torch.randint(0, 23, (2, 8))
    ref = model(x)[0]
    with QKProbe(model) as probe, torch.no_grad():
        out = model(x)[0]
    assert torch.equal(ref, out)
    rec = probe.results()
    assert {r["type"] for r in rec} == {"FocusAttention"}
    assert all(r["pr_q"] is not None for r in rec)


# ----------------------------------------------------------------------------- TransformerConv


class TinyGraphNet(nn.Module):
    def __init__(self, edge_dim=None) -> None:
        super().__init__()
        from torch_geometric.nn import TransformerConv

        self.conv1 = TransformerConv(6, 4, heads=2, edge_dim=edge_dim)
        self.conv2 = TransformerConv(8, 4, heads=2, edge_dim=edge_dim)

    def forward(self, x, edge_index, edge_attr=None):
        x = self.conv1(x, edge_index, edge_attr).relu()
        return self.conv2(x, edge_index, edge_attr)


@pytest.mark.parametrize("edge_dim", [None, 3])
def test_transformer_conv(edge_dim):
    torch.manual_seed(2)
    model = TinyGraphNet(edge_dim)
    # two small graphs in one batch; node 0 has one in-edge (excluded from the entropy)
    ei = torch.tensor([[1, 2, 0, 2, 3, 0, 1, 5, 6, 4, 6, 4],
                       [0, 1, 1, 3, 1, 3, 2, 4, 4, 5, 5, 6]])
    x = torch.randn(7, 6)
    ea = torch.randn(ei.size(1), 3) if edge_dim else None
    ref_out = model(x, ei, ea)
    seen, handles = capture_inputs([model.conv1, model.conv2])
    with QKProbe(model) as probe, torch.no_grad():
        out = model(x, ei, ea)
    for h in handles:
        h.remove()
    assert torch.equal(out, ref_out) and no_hooks(model)
    rec = probe.results()
    for name in ("conv1", "conv2"):
        conv = getattr(model, name)
        (xi, _, _), _ = seen[id(conv)][0]
        with torch.no_grad():
            q = conv.lin_query(xi).view(-1, 2, 4)
            k = conv.lin_key(xi).view(-1, 2, 4)
            # entropy from the layer's own attention coefficients
            _, (ei_out, alpha) = conv(xi, ei, ea, return_attention_weights=True)
        dst = ei_out[1]
        heads = head_records(rec, name)
        for h in range(2):
            assert heads[h]["pr_q"] == pytest.approx(np_pr(q[:, h].double().numpy()), rel=1e-6)
            assert heads[h]["pr_k"] == pytest.approx(np_pr(k[:, h].double().numpy()), rel=1e-6)
            L = (q[:, h].double() @ k[:, h].double().T / 2.0).numpy()
            er, sr = np_ranks(L)
            assert heads[h]["qk_effective_rank"] == pytest.approx(er, rel=1e-6)
            assert heads[h]["qk_stable_rank"] == pytest.approx(sr, rel=1e-6)
            ents = []
            for i in range(7):
                a = alpha[dst == i, h].double().numpy()
                if a.size >= 2:
                    ents.append(-(a * np.log(a)).sum() / np.log(a.size))
            assert heads[h]["attention_entropy"] == pytest.approx(np.mean(ents), rel=1e-5)
        assert layer_record(rec, name)["tokens"] == 7


def test_transformer_conv_sparse_adjacency_same_as_edge_index():
    torch.manual_seed(3)
    model = TinyGraphNet()
    ei = torch.tensor([[1, 2, 0, 2, 3, 0, 1], [0, 1, 1, 3, 1, 3, 2]])
    x = torch.randn(4, 6)
    from torch_geometric.utils import to_torch_coo_tensor

    adj_t = to_torch_coo_tensor(ei.flip(0), size=(4, 4))  # PyG's transposed adjacency
    res = []
    for e in (ei, adj_t):
        with QKProbe(model) as probe, torch.no_grad():
            model(x, e)
        res.append(probe.results())
    for a, b in zip(*res):
        assert a["attention_entropy"] == pytest.approx(b["attention_entropy"], rel=1e-6)
        assert a["pr_q"] == pytest.approx(b["pr_q"], rel=1e-9)


# ----------------------------------------------------------------------------- Hugging Face


def _gpt2():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(4)
    cfg = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=50, n_positions=32,
                                  bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(cfg).eval()


def test_hf_gpt2_fused_split():
    model = _gpt2()
    x = torch.randint(0, 50, (2, 10))
    with torch.no_grad():
        ref_out = model(x).logits
    attns = [b.attn for b in model.transformer.h]
    seen, handles = capture_inputs(attns)
    with QKProbe(model) as probe, torch.no_grad():
        out = model(x).logits
    for h in handles:
        h.remove()
    assert torch.equal(out, ref_out) and no_hooks(model)
    rec = probe.results()
    assert probe.layer_names == ["transformer.h.0.attn", "transformer.h.1.attn"]
    for i, a in enumerate(attns):
        (hs,), _ = seen[id(a)][0]
        W, b = a.c_attn.weight, a.c_attn.bias  # Conv1D: y = x @ W + b, W [C, 3C]
        with torch.no_grad():
            q = (hs @ W[:, :32] + b[:32]).view(2, 10, 2, 16).transpose(1, 2)
            k = (hs @ W[:, 32:64] + b[32:64]).view(2, 10, 2, 16).transpose(1, 2)
        check_against(rec, f"transformer.h.{i}.attn", dense_reference(q, k, 0.25, causal=True),
                      rtol=1e-5)


def test_hf_gpt2_padding_mask_and_cache_skip():
    model = _gpt2()
    x = torch.randint(0, 50, (2, 8))
    am = torch.ones(2, 8, dtype=torch.long)
    am[1, 6:] = 0  # right padding in the second sequence
    valid = am.bool()
    a0 = model.transformer.h[0].attn
    seen, handles = capture_inputs([a0])
    with QKProbe(model, layers=[0]) as probe, torch.no_grad():
        model(x, attention_mask=am)
    handles[0].remove()
    (hs,), _ = seen[id(a0)][0]
    with torch.no_grad():
        q, k, _ = a0.c_attn(hs).split(32, dim=2)
    q, k = (t.view(2, 8, 2, 16).transpose(1, 2) for t in (q, k))
    ref = dense_reference(q, k, 0.25, causal=True, valid=valid)
    rec = probe.results()
    check_against(rec, "transformer.h.0.attn", ref, rtol=1e-5)
    assert layer_record(rec, "transformer.h.0.attn")["tokens"] == 14
    # incremental decoding with a KV cache: the cached step is skipped with a warning
    with QKProbe(model, layers=[0]) as probe, torch.no_grad():
        out = model(x[:, :5], use_cache=True)
        with pytest.warns(UserWarning, match="KV cache"):
            model(x[:, 5:6], cache=out.past_key_values, use_cache=True)
    assert layer_record(probe.results(), "transformer.h.0.attn")["tokens"] == 10


def test_hf_gpt2_explicit_dict_probe_batch_and_all_reduce():
    model = _gpt2()
    x = torch.randint(0, 50, (2, 9))
    with QKProbe(model) as first, torch.no_grad():
        model(x)
    probe = QKProbe(model, probe_batch={"input_ids": x})
    probe.remove()
    rec = probe.results()  # the probe batch alone: ranks and entropy, no PR samples
    ref = first.results()
    for a, b in zip(rec, ref):
        assert a["qk_effective_rank"] == pytest.approx(b["qk_effective_rank"], rel=1e-9)
        assert a["attention_entropy"] == pytest.approx(b["attention_entropy"], rel=1e-9)
        assert a["pr_q"] is None and "no token seen" in a["undefined"]["pr_q"]
    # without an initialised process group, all_reduce is the identity
    assert first.results(all_reduce=True) == ref
    assert no_hooks(model)


def _rotary_reference(q, k, positions, rot, theta):
    """Rotary embedding (GPT-NeoX, rotate-half convention) on the first ``rot`` dims."""
    inv = 1.0 / theta ** (torch.arange(0, rot, 2, dtype=torch.float64) / rot)
    ang = positions.double()[:, None] * inv[None]
    cos = torch.cat([ang.cos(), ang.cos()], -1).float()
    sin = torch.cat([ang.sin(), ang.sin()], -1).float()

    def rope(t):
        r, p = t[..., :rot], t[..., rot:]
        half = torch.cat([-r[..., rot // 2:], r[..., :rot // 2]], -1)
        return torch.cat([r * cos + half * sin, p], -1)

    return rope(q), rope(k)


def test_hf_gpt_neox_fused_split_post_rotary():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(5)
    cfg = transformers.GPTNeoXConfig(num_hidden_layers=2, num_attention_heads=2, hidden_size=32,
                                     intermediate_size=64, vocab_size=50,
                                     max_position_embeddings=32, bos_token_id=0, eos_token_id=0)
    model = transformers.GPTNeoXForCausalLM(cfg).eval()
    x = torch.randint(0, 50, (2, 10))
    with torch.no_grad():
        ref_out = model(x).logits
    attns = [layer.attention for layer in model.gpt_neox.layers]
    seen, handles = capture_inputs(attns)
    with QKProbe(model) as probe, torch.no_grad():
        out = model(x).logits
    for h in handles:
        h.remove()
    assert torch.equal(out, ref_out) and no_hooks(model)
    rec = probe.results()
    d = 16
    rot = int(d * cfg.rope_parameters.get("partial_rotary_factor", 1.0))
    theta = cfg.rope_parameters["rope_theta"]
    assert 0 < rot < d  # partial rotary: both parts exercised
    for i, a in enumerate(attns):
        (hs,), _ = seen[id(a)][0]
        with torch.no_grad():
            fused = a.query_key_value(hs).view(2, 10, 2, 3, d)  # per head [q | k | v]
            q, k = fused[..., 0, :].transpose(1, 2), fused[..., 1, :].transpose(1, 2)
            q, k = _rotary_reference(q, k, torch.arange(10), rot, theta)
        ref = dense_reference(q, k, d ** -0.5, causal=True)
        check_against(rec, f"gpt_neox.layers.{i}.attention", ref, rtol=1e-5)
    # the pre-rotary PR differs: the probe measures after the rotation
    pre = fused[..., 0, :].transpose(1, 2)
    assert head_records(rec, "gpt_neox.layers.1.attention")[0]["pr_q"] != pytest.approx(
        np_pr(pre[:, 0].reshape(-1, d).double().numpy()), rel=1e-6)
