"""Reading a router training curve: the paired revisit measure of a plateau and the mean
loss over the last steps, as table columns."""
from __future__ import annotations

import math
from typing import Dict, List, Sequence


def revisit_drop(curve: Sequence[float], order: Sequence[int], after: int = 0
                 ) -> Dict[str, float]:
    r"""A paired test of whether the router loss still falls: for every training block
    drawn at two consecutive steps :math:`s < s'` (both at least ``after``), the change
    :math:`\ell_{s'} - \ell_s` of its training loss between the two visits.

    The same block at two times removes the block-to-block spread that dominates a noisy
    one-block-per-step curve: a model at a plateau has a mean change near zero, a still
    learning one a negative mean.

    Args:
        curve (sequence of float): training loss per step.
        order (sequence of int): the block of each step (:func:`block_order`).
        after (int): ignore visits before this step (0-based). (default: :obj:`0`)

    Returns:
        dict: ``n`` (pairs), ``mean`` and ``sem`` (standard error) of the change in nats,
        ``share_lower`` (pairs whose later loss is lower) and ``sign_p`` (two-sided exact
        sign test); NaN where there are no pairs.
    """
    from quest_geometric.analysis.stats import sign_test

    order = [int(o) for o in order]
    if len(order) < len(curve):
        raise ValueError(f"revisit_drop: order has {len(order)} entries for {len(curve)} "
                         "steps")
    last: Dict[int, int] = {}
    diffs: List[float] = []
    for step in range(after, len(curve)):
        blk = order[step]
        if blk in last:
            diffs.append(float(curve[step]) - float(curve[last[blk]]))
        last[blk] = step
    n = len(diffs)
    if n == 0:
        return {"n": 0, "mean": math.nan, "sem": math.nan, "share_lower": math.nan,
                "sign_p": math.nan}
    mean = sum(diffs) / n
    sem = (math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1) / n) if n > 1
           else math.nan)
    lower = sum(d < 0 for d in diffs)
    return {"n": n, "mean": mean, "sem": sem, "share_lower": lower / n,
            "sign_p": sign_test(lower, sum(d > 0 for d in diffs))}


def revisit_columns(curve: Sequence[float], order: Sequence[int]) -> Dict[str, float]:
    """:func:`revisit_drop` over the second half of the curve, as table columns."""
    r = revisit_drop(curve, order, after=len(curve) // 2)
    return {"revisit_n": r["n"], "revisit_mean": r["mean"], "revisit_sem": r["sem"]}


def plateau_columns(curve: Sequence[float]) -> Dict[str, float]:
    """Mean training loss over the first and the second half of the last 40% of steps: a
    flat curve has a small drop."""
    n = len(curve)
    if n < 10:
        return {"loss_last_a": math.nan, "loss_last_b": math.nan}
    tail = curve[int(0.6 * n):]
    h = len(tail) // 2
    return {"loss_last_a": sum(tail[:h]) / h, "loss_last_b": sum(tail[h:]) / (len(tail) - h)}


