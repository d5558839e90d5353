"""Evaluating a composed model: validation perplexity, causal pairs kept, the soft gate's
kept weight, and the paired per-block change against full attention."""
from __future__ import annotations

import math
from typing import Any, Dict, Iterator, Mapping, Optional, Sequence

import torch

from quest_geometric.training.routers import router_outputs




@torch.no_grad()
def evaluate_lm(model: Any, blocks: torch.Tensor, window: Optional[int] = None,
                num_groups: Optional[int] = None, progress: bool = False,
                desc: str = "eval") -> Dict[str, float]:
    r"""Validation perplexity :math:`\exp(\bar\ell)` over ``blocks`` (next-token loss of
    every position but the first of each block) and, when Focus is on and hard, the mean
    share of causal pairs kept and the mean largest group share over layers and blocks;
    when the soft additive gate is on (training mode), ``soft_keep``, the mean over layers
    and blocks of :func:`~quest_geometric.nn.focus.additive_gate_share` (how much of the
    causal pairs' weight the gate keeps; NaN otherwise). ``block_loss`` lists each block's
    mean loss, for paired comparisons (:func:`paired_block_delta`)."""
    from tqdm.auto import tqdm

    from quest_geometric.experiments.focus_lm import causal_pair_share
    from quest_geometric.nn.focus import additive_gate_share, group_balance

    nll, count, per_block = 0.0, 0, []
    with router_outputs(model) as routed:
        for x in tqdm(blocks, desc=desc, disable=not progress, leave=False):
            x = x.unsqueeze(0)
            out = model(x, labels=x, use_cache=False)
            n = x.size(1) - 1
            per_block.append(float(out.loss))
            nll += per_block[-1] * n
            count += n
    captured = [r.groups for _, r in routed]
    soft = [float(additive_gate_share(r.soft.reshape(-1, r.soft.size(-1)), f.window,
                                      f.gate_scale, f.gate_bias, causal=f.causal))
            for f, r in routed if f.training and f.gate == "additive"]
    res = {"val_ppl": math.exp(nll / count), "val_loss": nll / count,
           "block_loss": per_block, "pairs_kept": math.nan, "balance": math.nan,
           "soft_keep": sum(soft) / len(soft) if soft else math.nan}
    if captured and window is not None and num_groups is not None:
        res["pairs_kept"] = sum(causal_pair_share(g, window, num_groups)
                                for g in captured) / len(captured)
        res["balance"] = float(torch.stack([group_balance(g, num_groups) for g in captured])
                               .mean())
    return res


def paired_block_delta(reference: Sequence[float], other: Sequence[float]
                       ) -> Dict[str, float]:
    r"""The spread of a perplexity change over validation blocks, paired by block: with
    :math:`\ell_b` and :math:`\ell'_b` the mean losses of block :math:`b` under the reference
    (full attention) and the other model, the per-block change is
    :math:`d_b = 100\,(e^{\ell'_b - \ell_b} - 1)` percent.

    Returns:
        dict: ``delta_block_mean`` (mean of :math:`d_b`), ``delta_sem`` (its standard error,
        :math:`s_d / \sqrt{B}`; NaN for one block) and ``blocks_worse`` (blocks with
        :math:`\ell'_b > \ell_b`).
    """
    if len(reference) != len(other) or len(reference) < 1:
        raise ValueError(f"paired_block_delta: needs the same number (>= 1) of blocks, got "
                         f"{len(reference)} and {len(other)}")
    d = [100.0 * math.expm1(b - a) for a, b in zip(reference, other)]
    n = len(d)
    mean = sum(d) / n
    sem = (math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1) / n) if n > 1 else math.nan)
    return {"delta_block_mean": mean, "delta_sem": sem,
            "blocks_worse": sum(b > a for a, b in zip(reference, other))}



def evaluate_modes(model: Any, val: torch.Tensor, base: Mapping[str, Any],
                    gate: Optional[str], window: int, num_groups: int, progress: bool,
                    desc: str) -> Iterator[Dict[str, Any]]:
    """Evaluate a composed model as the tables report it: its soft gate (not for
    ``straight_through``, which trains the hard pattern), then hard top-1, top-2 and
    top-:math:`K`. Yields each row's measured columns (``eval``, ``val_ppl``, ``delta_pct``
    and the :func:`paired_block_delta` columns against ``base``, full attention's
    :func:`evaluate_lm` result, then ``pairs_kept``, ``soft_keep`` and ``balance``)."""
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
            r = evaluate_lm(model, val, window, num_groups, progress=progress,
                            desc=f"{desc} {label}")
        yield {"eval": label, "val_ppl": r["val_ppl"],
               "delta_pct": 100 * (r["val_ppl"] / base["val_ppl"] - 1),
               **paired_block_delta(base["block_loss"], r["block_loss"]),
               "pairs_kept": 1.0 if k == num_groups else r["pairs_kept"],
               "soft_keep": r["soft_keep"], "balance": r["balance"]}


