r"""Query/key geometry: a short training run of tiny CharGPTs, and the probe of a pretrained
model.

:func:`run` trains one :class:`~quest_geometric.models.CharGPT` per query/key initialisation
and follows the participation ratios of queries and keys (:math:`\mathrm{PR}_Q`,
:math:`\mathrm{PR}_K`) and the attention entropy on a fixed validation batch with
:class:`~quest_geometric.analysis.QKTrajectory` (Gupta et al., "Query Expansion and Key
Specialization in Transformer Attention Geometry": queries come to spread over more
directions than keys, :math:`\mathrm{PR}_Q > \mathrm{PR}_K`, late in training). It is the
tour's smoke run, far too short to test that finding; the study (depths 4 to 8, four seeds,
2,400 steps, the key-spectrum intervention) is ``python -m benchmarks.qk_geometry.study``.

:func:`probe_blocks` and :func:`summarize` measure every layer and head of one pretrained
Hugging Face model (the share of layers with :math:`\mathrm{PR}_Q > \mathrm{PR}_K` and the
rank/entropy correlations); a series of checkpoints is in ``benchmarks/qk_geometry/hf.py``.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Mapping, Sequence, Union

import numpy as np
import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from quest_geometric._utils import check_int, optional_pyplot, save_figure
from quest_geometric.analysis.probe import QKProbe, QKTrajectory
from quest_geometric.analysis.stats import binomial_interval, sign_test, spearman
from quest_geometric.datasets import CharCorpus
from quest_geometric.models import CharGPT, GPTConfig
from quest_geometric.profile import markdown_table, write_results
from quest_geometric.training import EveryNSteps, LanguageModelTask, TrainConfig, Trainer
from quest_geometric.training.seed import seed_everything

__all__ = ["run", "INITS", "probe_blocks", "positive_share", "summarize", "METRICS", "RANKS"]

#: The query/key initialisations of :class:`~quest_geometric.models.GPTConfig` that
#: :func:`run` compares: independent draws, :math:`W_K = W_Q`, orthogonal row spaces.
INITS = ("independent", "tied", "orthogonal")
METRICS = ("pr_q", "pr_k", "pr_q_minus_pr_k", "qk_effective_rank", "qk_stable_rank",
           "attention_entropy")
RANKS = ("qk_effective_rank", "qk_stable_rank")


def run(out_dir: Union[str, os.PathLike], device: str = "cpu", progress: bool = True,
        steps: int = 200, depth: int = 2, probe_every: int = 25) -> dict[str, Any]:
    r"""Train one CharGPT per initialisation of :data:`INITS` and tabulate its query/key
    geometry at the start and the end of training.

    Each model (width 32, 4 heads, context 32, seed 0) trains ``steps`` AdamW steps on
    batches of 8 blocks of the embedded Python language reference; every ``probe_every``
    steps (and at steps 0 and ``steps``) a :class:`~quest_geometric.analysis.QKTrajectory`
    probes 16 fixed validation blocks. The table gives the layer means of
    :math:`\mathrm{PR}_Q`, :math:`\mathrm{PR}_K` (start and end) and the normalised attention
    entropy (end), and the validation loss on 8 fixed batches of 16 blocks, beside the
    content-free baseline: uniform attention (entropy 1) and each character predicted from
    its training-split frequency. Writes ``qk_geometry.{csv,json,md}`` and
    ``qk_geometry_diff.png`` (:math:`\mathrm{PR}_Q - \mathrm{PR}_K` over the steps) to
    ``out_dir``. Two layers keep a first layer and a later one (in the study the first
    separates first) in a run short enough for the tour on one CPU thread.

    Args:
        out_dir (str or os.PathLike): result folder (created if missing).
        device (str): training device. (default: ``'cpu'``)
        progress (bool): a progress bar over the models. (default: :obj:`True`)
        steps (int): optimiser steps per model. (default: ``200``)
        depth (int): layers per model. (default: ``2``)
        probe_every (int): steps between probes. (default: ``25``)

    Returns:
        dict: ``rows`` (one per initialisation, then the baseline), ``markdown``, ``summary``
        (one line per row), ``config`` (``steps``, ``depth``, ``probe_every``, ``device``),
        ``models`` and ``trajectories`` (by initialisation), ``probe``
        (the probe batch) and ``val_batches``.
    """
    for name, v in (("steps", steps), ("depth", depth), ("probe_every", probe_every)):
        check_int(v, name, 1, where="qk_geometry.run")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    corpus = CharCorpus("python-reference", block_size=32)
    probe = corpus.get_batch("val", 16, generator=torch.Generator().manual_seed(1234))
    gen = torch.Generator().manual_seed(0)
    val = [corpus.get_batch("val", 16, generator=gen) for _ in range(8)]
    rows, models, trajectories = [], {}, {}
    for init in tqdm(INITS, desc="qk models", disable=not progress):
        seed_everything(0)
        model = CharGPT(GPTConfig(vocab_size=corpus.vocab_size, block_size=32, n_layer=depth,
                                  n_head=4, n_embd=32, qk_init=init))
        traj = QKTrajectory(model, probe)
        cfg = TrainConfig(max_steps=steps, batch_size=8, lr=3e-3, min_lr=3e-4,
                          warmup_steps=min(20, steps // 5), weight_decay=0.1, grad_clip=1.0,
                          device=device, progress=False)
        Trainer(model, LanguageModelTask(), cfg, corpus.get_batch,
                callbacks=[EveryNSteps(traj, probe_every, at_start=True)]).fit()
        if steps % probe_every:
            traj(None, steps)
        model.eval()
        dev = next(model.parameters()).device
        with torch.no_grad():
            loss = np.mean([float(model(x.to(dev), y.to(dev))[1]) for x, y in val])
        q, k, h = (traj.layer_mean(m) for m in ("pr_q", "pr_k", "attention_entropy"))
        rows.append({"init": init, "pr_q_start": q[0], "pr_q_end": q[steps], "pr_k_start": k[0],
                     "pr_k_end": k[steps], "entropy_end": h[steps], "val_loss": float(loss)})
        models[init], trajectories[init] = model, traj
    counts = torch.bincount(corpus.splits["train"].long(), minlength=corpus.vocab_size) + 1.0
    logp = (counts / counts.sum()).log()
    base = float(torch.cat([-logp[y].flatten() for _, y in val]).mean())
    rows.append({"init": "content-free baseline", "entropy_end": 1.0, "val_loss": base})
    config = {"steps": steps, "depth": depth, "probe_every": probe_every, "device": device}
    write_results("qk_geometry", rows, out, meta=config)
    plot = _plot_diff(trajectories, out / "qk_geometry_diff.png")
    markdown, summary = _report(rows, depth, steps, plot)
    return {"rows": rows, "markdown": markdown, "summary": summary, "config": config,
            "models": models, "trajectories": trajectories, "probe": probe, "val_batches": val}


def _report(rows: Sequence[Mapping[str, Any]], depth: int, steps: int, plot: Path | None
            ) -> tuple[str, list[str]]:
    """The part's markdown (its table, a note and the plot's link) and its summary lines."""
    def arrow(r: Mapping[str, Any], m: str) -> str:
        return f"{r[m + '_start']:.2f} -> {r[m + '_end']:.2f}" if m + "_end" in r else "-"

    table = [{"initialisation": r["init"], "PR_Q start -> end": arrow(r, "pr_q"),
              "PR_K start -> end": arrow(r, "pr_k"),
              "attention entropy (end)": f"{r['entropy_end']:.3f}",
              "validation loss (nats/char)": f"{r['val_loss']:.3f}"} for r in rows]
    summary = [f"{t['initialisation']}: " + ", ".join(f"{k} {v}" for k, v in list(t.items())[1:]
                                                     if v != "-") for t in table]
    markdown = (f"### Query/key geometry of {depth}-layer CharGPTs after {steps} steps\n\n"
                + markdown_table(table) + "\nLayer means on 16 fixed validation blocks; the "
                "baseline attends uniformly and predicts each character from its frequency.\n"
                + (f"\n![PR_Q - PR_K over training]({plot.name})\n" if plot else ""))
    return markdown, summary


def _plot_diff(trajectories: Mapping[str, QKTrajectory], path: Path) -> Path | None:
    """PR_Q - PR_K (mean over layers) against the step, one line per initialisation."""
    plt = optional_pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(5.5, 3.5))
    for init, traj in trajectories.items():
        diff = traj.layer_mean("pr_q_minus_pr_k")
        ax.plot(list(diff), list(diff.values()), marker="o", ms=3, label=init)
    ax.axhline(0.0, color="k", lw=0.8)
    ax.set(xlabel="training step", ylabel="PR_Q - PR_K (mean over layers)")
    ax.legend(title="query/key init")
    ax.grid(alpha=0.3)
    return save_figure(fig, path)


@torch.no_grad()
def probe_blocks(model: nn.Module, blocks: Tensor) -> dict[str, list[dict[str, Any]]]:
    r"""Probe every attention layer and head of ``model`` on token ``blocks``.

    Two probes see the same forwards, one block at a time (eval mode, no cache): one
    :class:`QKProbe` for all blocks accumulates :math:`\mathrm{PR}_Q` and
    :math:`\mathrm{PR}_K` over every token (post-rotary; with grouped-query attention the
    heads of one group share their :math:`\mathrm{PR}_K`), and a fresh probe per block
    measures the ranks of the logit matrix and the causal entropy, averaged over the blocks.

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
                         f"{getattr(blocks, 'dtype', type(blocks))} "
                         f"{tuple(getattr(blocks, 'shape', ()))}")
    n, T = blocks.shape
    if n < 1 or T < 2:
        raise ValueError("probe_blocks: need at least one block of 2 or more tokens, got "
                         f"{tuple(blocks.shape)}")
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


def positive_share(values: Sequence[float], confidence: float = 0.95) -> dict[str, Any]:
    """Share of ``values > 0`` with its exact (Clopper-Pearson) binomial interval
    (:func:`~quest_geometric.analysis.stats.binomial_interval`) and the two-sided binomial
    test against 1/2 (:func:`~quest_geometric.analysis.stats.sign_test` of the positive
    values against the others)."""
    vals = [float(v) for v in values]
    if not vals or not all(math.isfinite(v) for v in vals):
        raise ValueError("positive_share: need a non-empty list of finite values")
    k, n = sum(v > 0 for v in vals), len(vals)
    lo, hi = binomial_interval(k, n, confidence)
    return {"k_positive": k, "n": n, "share": k / n, "ci_low": lo, "ci_high": hi,
            "confidence": confidence, "p_value_vs_half": sign_test(k, n - k)}


def _spearman(x: Sequence[float], y: Sequence[float]) -> dict[str, Any]:
    """:func:`~quest_geometric.analysis.stats.spearman` as the record's columns."""
    rho, p, n = spearman(x, y)
    return {"spearman_rho": rho, "p_value": p, "n": n}


def summarize(result: Mapping[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Share of layers (and heads) with PR_Q - PR_K > 0, and the Spearman correlations of
    the interaction ranks (and PR_Q, PR_K) with the attention entropy across layers and
    heads, of PR_K and PR_Q with the effective rank, and of depth with the layer values
    (:func:`~quest_geometric.analysis.stats.spearman`: NaN with fewer than 3 pairs).

    ``heads, within layers`` correlates the head values after subtracting each layer's mean
    (both variables), so that a depth trend shared by both does not make the correlation."""
    layers, heads = result["layers"], result["heads"]
    corr = []
    for over, recs in (("layers", layers), ("heads", heads)):
        for x in (*RANKS, "pr_k", "pr_q"):
            corr.append({"x": x, "y": "attention_entropy", "over": over,
                         **_spearman([r[x] for r in recs], [r["attention_entropy"] for r in recs])})
        for x in ("pr_k", "pr_q"):  # key shrinkage <-> a narrower QK^T spectrum
            corr.append({"x": x, "y": "qk_effective_rank", "over": over,
                         **_spearman([r[x] for r in recs], [r["qk_effective_rank"] for r in recs])})
    means = {r["layer"]: r for r in layers}
    for x in RANKS:
        dx = [h[x] - means[h["layer"]][x] for h in heads]
        dy = [h["attention_entropy"] - means[h["layer"]]["attention_entropy"] for h in heads]
        corr.append({"x": x, "y": "attention_entropy", "over": "heads, within layers",
                     **_spearman(dx, dy)})
    depth = [r["layer"] for r in layers]
    for y in ("pr_q_minus_pr_k", "qk_effective_rank", "attention_entropy"):
        corr.append({"x": "layer_index", "y": y, "over": "layers",
                     **_spearman(depth, [r[y] for r in layers])})
    return {"layers_pr_q_gt_pr_k": positive_share([r["pr_q_minus_pr_k"] for r in layers]),
            "heads_pr_q_gt_pr_k": positive_share([r["pr_q_minus_pr_k"] for r in heads]),
            "correlations": corr}
