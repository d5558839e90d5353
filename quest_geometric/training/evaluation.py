"""Evaluating a composed model: validation perplexity, causal pairs kept and the soft gate's
kept weight."""
from __future__ import annotations

import math
from typing import Any, Dict

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
    lists each block's mean loss (for a comparison paired by block).

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
