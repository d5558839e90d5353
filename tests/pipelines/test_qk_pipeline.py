"""The tour's small query/key geometry pipeline (quest_geometric.pipelines.qk_geometry.run):
its table recomputed from the returned models and the corpus by plain computations."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from quest_geometric.models import CharGPT
from quest_geometric.pipelines import qk_geometry as qk
from quest_geometric.testing.common import np_pr


def plain_geometry(model: CharGPT, x: torch.Tensor) -> tuple[float, float, float]:
    """Mean over layers and heads of PR_Q, PR_K (numpy covariance of every token's q, k) and
    of the normalised causal attention entropy (rows with 2 or more keys), from the q and k
    that each layer's identity hooks see."""
    seen = []
    hooks = [m.register_forward_hook(lambda mod, i, o: seen.append(o.double()))
             for b in model.blocks for m in (b.attn.hook_q, b.attn.hook_k)]
    model.eval()
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    pq, pk, ent = [], [], []
    for q, k in zip(seen[::2], seen[1::2]):
        B, H, T, d = q.shape
        for h in range(H):
            pq.append(np_pr(q[:, h].reshape(-1, d).numpy()))
            pk.append(np_pr(k[:, h].reshape(-1, d).numpy()))
            logits = (q[:, h] @ k[:, h].transpose(1, 2) / math.sqrt(d)).numpy()
            rows = []
            for b in range(B):
                for t in range(1, T):
                    a = np.exp(logits[b, t, :t + 1] - logits[b, t, :t + 1].max())
                    a /= a.sum()
                    rows.append(-(a * np.log(a)).sum() / np.log(t + 1))
            ent.append(np.mean(rows))
    return float(np.mean(pq)), float(np.mean(pk)), float(np.mean(ent))


@pytest.mark.slow
def test_run_table_recomputed_from_the_models_and_the_corpus(tmp_path):
    res = qk.run(tmp_path, progress=False, steps=12, depth=2, probe_every=5)
    rows = res["rows"]
    assert [r["init"] for r in rows] == [*qk.INITS, "content-free baseline"]
    x, _ = res["probe"]
    for r in rows[:3]:
        model = res["models"][r["init"]]
        pr_q, pr_k, entropy = plain_geometry(model, x)
        assert r["pr_q_end"] == pytest.approx(pr_q, rel=1e-6), r["init"]
        assert r["pr_k_end"] == pytest.approx(pr_k, rel=1e-6), r["init"]
        assert r["entropy_end"] == pytest.approx(entropy, rel=1e-6), r["init"]
        with torch.no_grad():
            losses = [torch.nn.functional.cross_entropy(model(xv)[0].flatten(0, 1), yv.flatten())
                      for xv, yv in res["val_batches"]]
        assert r["val_loss"] == pytest.approx(float(torch.stack(losses).mean()), rel=1e-6)
        torch.manual_seed(0)  # the same draw of the initial weights
        pr_q0, pr_k0, _ = plain_geometry(CharGPT(model.config), x)
        assert (r["pr_q_start"], r["pr_k_start"]) == pytest.approx((pr_q0, pr_k0), rel=1e-6)
        assert sorted(res["trajectories"][r["init"]].layer_mean("pr_q")) == [0, 5, 10, 12]
    tied = rows[1]
    assert tied["pr_q_start"] == pytest.approx(tied["pr_k_start"], rel=1e-9)  # W_K = W_Q
    # the baseline: each character from its add-one training frequency, whatever the context
    from quest_geometric.datasets import CharCorpus

    corpus = CharCorpus("python-reference", block_size=32)
    counts = np.bincount(corpus.splits["train"].numpy(), minlength=corpus.vocab_size) + 1.0
    targets = np.concatenate([yv.numpy().ravel() for _, yv in res["val_batches"]])
    base = rows[3]
    assert base["val_loss"] == pytest.approx(-np.log(counts[targets] / counts.sum()).mean())
    assert base["entropy_end"] == 1.0 and "pr_q_end" not in base
    assert len(res["markdown"].split("\n| ")) == 6 and len(res["summary"]) == 4
    for suffix in (".csv", ".json", ".md"):
        assert (tmp_path / f"qk_geometry{suffix}").is_file()
    if "qk_geometry_diff.png" in res["markdown"]:
        assert (tmp_path / "qk_geometry_diff.png").is_file()


@pytest.mark.parametrize("kw,err,arg", [(dict(steps=0), ValueError, "steps"),
                                        (dict(depth=True), TypeError, "depth"),
                                        (dict(probe_every=2.5), TypeError, "probe_every")])
def test_run_rejects_bad_arguments_before_training(tmp_path, kw, err, arg):
    with pytest.raises(err, match=f"^qk_geometry.run: '{arg}' must be"):
        qk.run(tmp_path / "out", progress=False, **kw)
    assert not (tmp_path / "out").exists()
