r"""Probing a pretrained Hugging Face model with :class:`~quest_geometric.analysis.probe.QKProbe`:
:func:`probe_blocks` and :func:`summarize` measure every layer and head of one model (the
share of layers with :math:`\mathrm{PR}_Q > \mathrm{PR}_K` and the rank/entropy
correlations). The study's analysis of a series of checkpoints over training steps
(``hf_analysis``) is in ``benchmarks/qk_geometry/hf.py``.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np
import torch
from torch import Tensor, nn

from quest_geometric.analysis.probe import QKProbe
from quest_geometric.analysis.stats import binomial_interval, sign_test, spearman

__all__ = ["probe_blocks", "positive_share", "summarize", "METRICS", "RANKS"]

METRICS = ("pr_q", "pr_k", "pr_q_minus_pr_k", "qk_effective_rank", "qk_stable_rank",
           "attention_entropy")
RANKS = ("qk_effective_rank", "qk_stable_rank")

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
