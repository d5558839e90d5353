"""Evaluating a language model, composed with Focus or not: validation loss and perplexity,
the share of causal pairs its Focus layers kept and the soft gate's kept weight."""
from __future__ import annotations

import math
from typing import Any, Callable, Dict, Optional

import torch

from quest_geometric.training.routers import router_outputs

__all__ = ["evaluate_lm"]


def _hf_loss(model: Any, x: torch.Tensor) -> torch.Tensor:
    return model(x, labels=x, use_cache=False).loss


@torch.no_grad()
def evaluate_lm(model: Any, blocks: torch.Tensor, progress: bool = False,
                desc: str = "eval", loss_fn: Optional[Callable[[Any, torch.Tensor],
                                                               torch.Tensor]] = None
                ) -> Dict[str, Any]:
    r"""Perplexity :math:`\exp(\bar\ell)` of a causal language model over ``blocks``, with
    :math:`\bar\ell` the mean next-token loss of every position but the first of each block,
    each block's mean loss and, for a model with Focus layers, what they did.

    ``pairs_kept`` is the mean over the Focus layers' calls of the share of causal pairs the
    hard pattern kept (:func:`~quest_geometric.nn.focus.focus_pair_share`, each layer's own
    window and sinks), ``balance`` the mean largest group share
    (:func:`~quest_geometric.nn.focus.group_balance`); both NaN when no call ran a hard
    pattern. ``soft_keep``: with the soft additive gate on (training mode), the mean of
    :func:`~quest_geometric.nn.focus.additive_gate_share` (NaN otherwise). ``block_loss``
    lists each block's mean loss, for a comparison of two models paired by block.

    Args:
        model: a causal language model, e.g. a Hugging Face one composed with
            :func:`~quest_geometric.nn.focus.compose_focus`.
        blocks (Tensor): ``[num_blocks, length]`` token ids, one block per call.
        progress (bool): show a progress bar (default: :obj:`False`).
        desc (str): the progress bar's label (default: :obj:`'eval'`).
        loss_fn (callable, optional): ``loss_fn(model, x)`` returns the mean next-token loss
            (nats) of the ``length - 1`` predicted tokens of ``x`` ``[1, length]``
            (default: :obj:`None`, Hugging Face's ``model(x, labels=x).loss``; a nanoGPT-style
            model such as :class:`~quest_geometric.models.CharGPT` takes
            ``lambda m, x: m(x[:, :-1], x[:, 1:])[1]``).

    Returns:
        dict: ``val_ppl``, ``val_loss``, ``block_loss``, ``pairs_kept``, ``balance``,
        ``soft_keep``, ``seconds``.
    """
    import time

    from tqdm.auto import tqdm

    from quest_geometric.nn.focus import additive_gate_share, focus_pair_share, group_balance

    loss_fn = loss_fn or _hf_loss
    nll, count, per_block = 0.0, 0, []
    shares, balances, soft = [], [], []
    t0 = time.perf_counter()
    with router_outputs(model) as routed:
        for x in tqdm(blocks, desc=desc, disable=not progress, leave=False):
            routed.clear()
            x = x.unsqueeze(0)
            n = x.size(1) - 1
            per_block.append(float(loss_fn(model, x)))
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
