"""Evaluating a composed model: validation perplexity, causal pairs kept, the soft gate's
kept weight, and the paired per-block change against full attention."""
from __future__ import annotations

import math
import statistics
from typing import Any, Dict, Iterator, Mapping, Optional, Sequence

import torch

from quest_geometric.training.routers import router_outputs


@torch.no_grad()
def evaluate_lm(model: Any, blocks: torch.Tensor, progress: bool = False,
                desc: str = "eval") -> Dict[str, Any]:
    r"""Perplexity :math:`\exp(\bar\ell)` over ``blocks`` (next-token loss of every position
    but the first of each block), each block's mean loss and, for a composed model, what its
    Focus layers did.

    ``pairs_kept`` is the mean over the Focus layers' calls of the share of causal pairs the
    hard pattern kept (:func:`~quest_geometric.nn.focus.focus_pair_share`, each layer's own
    window and sinks), ``balance`` the mean largest group share
    (:func:`~quest_geometric.nn.focus.group_balance`); both NaN when no call ran a hard
    pattern. ``soft_keep``: with the soft additive gate on (training mode), the mean of
    :func:`~quest_geometric.nn.focus.additive_gate_share` (NaN otherwise). ``block_loss``
    lists each block's mean loss, for :func:`paired_block_delta`.

    Returns:
        dict: ``val_ppl``, ``val_loss``, ``block_loss``, ``pairs_kept``, ``balance``,
        ``soft_keep``, ``seconds``.
    """
    import time

    from tqdm.auto import tqdm

    from quest_geometric.nn.focus import additive_gate_share, focus_pair_share, group_balance

    nll, count, per_block = 0.0, 0, []
    shares, balances, soft = [], [], []
    t0 = time.perf_counter()
    with router_outputs(model) as routed:
        for x in tqdm(blocks, desc=desc, disable=not progress, leave=False):
            routed.clear()
            x = x.unsqueeze(0)
            out = model(x, labels=x, use_cache=False)
            n = x.size(1) - 1
            per_block.append(float(out.loss))
            nll += per_block[-1] * n
            count += n
            for f, r in routed:
                if f.training and f.gate == "additive":
                    soft.append(float(additive_gate_share(
                        r.soft.reshape(-1, r.soft.size(-1)), f.window, f.gate_scale,
                        f.gate_bias, causal=f.causal)))
                if f.training and f.gate != "straight_through":
                    continue  # a soft pattern: no pair is dropped
                g = r.groups.flatten(0, -2)
                shares.append(focus_pair_share(g, f.window, causal=f.causal,
                                               num_sinks=f.num_sinks))
                if g.size(-1) > 0:
                    balances.append(float(group_balance(g, f.num_groups)))
    mean = lambda v: sum(v) / len(v) if v else math.nan  # noqa: E731
    return {"val_ppl": math.exp(nll / count), "val_loss": nll / count,
            "block_loss": per_block, "pairs_kept": mean(shares), "balance": mean(balances),
            "soft_keep": mean(soft), "seconds": time.perf_counter() - t0}


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
            r = evaluate_lm(model, val, progress=progress, desc=f"{desc} {label}")
        yield {"eval": label, "val_ppl": r["val_ppl"],
               "delta_pct": 100 * (r["val_ppl"] / base["val_ppl"] - 1),
               **paired_block_delta(base["block_loss"], r["block_loss"]),
               "pairs_kept": 1.0 if k == num_groups else r["pairs_kept"],
               "soft_keep": r["soft_keep"], "balance": r["balance"]}
