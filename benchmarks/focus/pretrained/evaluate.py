"""The evaluation rows of the pretrained study: a composed model in each mode the tables
report (:func:`evaluate_modes`), and the paired per-block change against full attention
(:func:`paired_block_delta`)."""
from __future__ import annotations

import math
import statistics
from typing import Any, Dict, Iterator, Mapping, Optional, Sequence

import torch

from quest_geometric.training import evaluate_lm


def paired_block_delta(reference: Sequence[float], other: Sequence[float]) -> Dict[str, float]:
    r"""The spread of a perplexity change over validation blocks, paired by block: with
    :math:`\ell_b` and :math:`\ell'_b` the mean losses of block :math:`b` under the reference
    (full attention) and the other model, the per-block change is
    :math:`d_b = 100\,(e^{\ell'_b - \ell_b} - 1)` percent.

    Returns:
        dict: ``delta_block_mean`` (mean of :math:`d_b`), ``delta_sem`` (its standard error,
        :math:`s_d / \sqrt{B}`; NaN for one block), ``delta_median`` (:math:`100\,(e^{m} - 1)`
        with :math:`m` the median of :math:`\ell'_b - \ell_b`, robust to one outlier block)
        and ``blocks_worse`` (blocks with :math:`\ell'_b > \ell_b`).
    """
    if len(reference) != len(other) or len(reference) < 1:
        raise ValueError(f"paired_block_delta: needs the same number (>= 1) of blocks, got "
                         f"{len(reference)} and {len(other)}")
    d = [100.0 * math.expm1(b - a) for a, b in zip(reference, other)]
    n = len(d)
    mean = sum(d) / n
    sem = (math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1) / n) if n > 1 else math.nan)
    median = 100.0 * math.expm1(statistics.median(b - a for a, b in zip(reference, other)))
    return {"delta_block_mean": mean, "delta_sem": sem, "delta_median": median,
            "blocks_worse": sum(b > a for a, b in zip(reference, other))}


def evaluate_modes(model: Any, val: torch.Tensor, base: Mapping[str, Any], gate: Optional[str],
                   num_groups: int, progress: bool, desc: str) -> Iterator[Dict[str, Any]]:
    """Evaluate a composed model as the tables report it: its soft gate (not for
    ``straight_through``, which trains the hard pattern), then hard top-1, top-2 and
    top-:math:`K`. Yields each row's measured columns (``eval``, ``val_ppl``, ``delta_pct``
    and the :func:`paired_block_delta` columns against ``base``, full attention's
    :func:`~quest_geometric.training.evaluate_lm` result, then ``pairs_kept``,
    ``soft_keep`` and ``balance``)."""
    from quest_geometric.nn.focus import set_focus_options

    evals = ([] if gate == "straight_through" else [("soft", None)]) \
        + [(f"hard top-{k}", k) for k in (1, 2, num_groups)]
    for label, k in evals:
        if k is None:
            model.train()  # the soft gate (SmolLM2 has no dropout)
            r = evaluate_lm(model, val, progress=progress, desc=f"{desc} {label}")
            model.eval()
        else:
            set_focus_options(model, top_k=k)
            r = evaluate_lm(model, val, progress=progress, desc=f"{desc} {label}")
        yield {"eval": label, "val_ppl": r["val_ppl"],
               "delta_pct": 100 * (r["val_ppl"] / base["val_ppl"] - 1),
               **paired_block_delta(base["block_loss"], r["block_loss"]),
               "pairs_kept": 1.0 if k == num_groups else r["pairs_kept"],
               "soft_keep": r["soft_keep"], "balance": r["balance"]}
