"""Summaries of the query/key geometry trajectories: probe records into trajectories, shares
and slopes, and the share over training with its exact interval (the generic statistics are
in :mod:`quest_geometric.analysis.stats`; the study's run bootstrap and intervention sign
tests are in ``benchmarks/qk_geometry/summary.py``)."""
from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Optional, Sequence

import numpy as np

from quest_geometric.analysis.stats import binomial_interval, least_squares_slope, spearman
from benchmarks.qk_geometry.trajectories.config import INITS


def _late(steps: Sequence[int], values: Sequence[float]) -> tuple[list, list]:
    """The second half of training: points with ``step >= last_step / 2``."""
    half = steps[-1] / 2
    pts = [(s, v) for s, v in zip(steps, values) if s >= half]
    return [p[0] for p in pts], [p[1] for p in pts]


def _usable(r: Mapping[str, Any]) -> bool:
    return r.get("pr_q") is not None and r.get("pr_k") is not None


def trajectory_summary(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    r"""Summarise probe records into trajectories, shares and slopes.

    A *trajectory* is one layer's curve for one (depth, init), averaged over the seeds at
    each step logged by every seed. For a trajectory with differences
    :math:`\Delta_t = \overline{\mathrm{PR}}_{Q,t} - \overline{\mathrm{PR}}_{K,t}`:

    * **end**: :math:`\Delta_{T} > 0` at the last step;
    * **throughout**: :math:`\Delta_t > 0` at every logged step after initialisation
      (:math:`t > 0`; at :math:`t = 0` a tied init has :math:`\Delta_0 = 0` by construction);
    * **slopes**: least-squares slopes of :math:`\mathrm{PR}_Q` and :math:`\mathrm{PR}_K`
      against the step, reported per 1,000 steps, over all of training and over its second
      half (``*_late``: steps :math:`\ge T/2`, after the early transient).

    The same shares are reported over the individual runs' layers (no seed averaging).
    Records whose PR is undefined (``None``) are skipped.

    Args:
        records (iterable of dict): probe rows (``depth``, ``init``, ``seed``, ``step``,
            ``layer``, ``pr_q``, ``pr_k``, ``attention_entropy``, ...).

    Returns:
        dict: ``trajectories`` (one dict per trajectory), ``rows`` (one per (depth, init)
        and an ``all`` row), ``run_layers`` (per run and layer), ``correlations``.
    """
    recs = [dict(r) for r in records if _usable(r)]
    if not recs:
        raise ValueError("trajectory_summary: no probe record with defined PR_Q and PR_K")
    groups: dict[tuple, dict[int, dict[int, dict]]] = {}
    for r in recs:
        groups.setdefault((r["depth"], r["init"], r["layer"]), {}).setdefault(r["seed"],
                                                                              {})[r["step"]] = r

    def curve_stats(steps: list[int], pq: list[float], pk: list[float]) -> dict[str, Any]:
        diff = [a - b for a, b in zip(pq, pk)]
        later = [d for s, d in zip(steps, diff) if s > 0]
        return {"steps": steps, "pr_q": pq, "pr_k": pk, "diff": diff, "pr_q_start": pq[0],
                "pr_k_start": pk[0], "pr_q_end": pq[-1], "pr_k_end": pk[-1], "diff_end": diff[-1],
                "positive_end": diff[-1] > 0,
                "positive_throughout": bool(later) and all(d > 0 for d in later),
                "slope_q": 1000.0 * least_squares_slope(steps, pq),
                "slope_k": 1000.0 * least_squares_slope(steps, pk),
                "slope_q_late": 1000.0 * least_squares_slope(*_late(steps, pq)),
                "slope_k_late": 1000.0 * least_squares_slope(*_late(steps, pk))}

    trajectories, run_layers = [], []
    for (depth, init, layer), by_seed in sorted(groups.items()):
        common = sorted(set.intersection(*(set(v) for v in by_seed.values())))
        if not common:
            continue
        pq = [float(np.mean([by_seed[s][t]["pr_q"] for s in by_seed])) for t in common]
        pk = [float(np.mean([by_seed[s][t]["pr_k"] for s in by_seed])) for t in common]
        ent = [by_seed[s][common[-1]].get("attention_entropy") for s in by_seed]
        ent = [e for e in ent if e is not None]
        t = {"depth": depth, "init": init, "layer": layer, "seeds": sorted(by_seed),
             **curve_stats(common, pq, pk),
             "entropy_end": float(np.mean(ent)) if ent else math.nan}
        trajectories.append(t)
        for seed, by_step in sorted(by_seed.items()):
            steps = sorted(by_step)
            run_layers.append({"depth": depth, "init": init, "layer": layer, "seed": seed,
                               **curve_stats(steps, [by_step[s]["pr_q"] for s in steps],
                                             [by_step[s]["pr_k"] for s in steps])})

    def share(items: list[dict], key: str) -> float:
        return float(np.mean([bool(x[key]) for x in items])) if items else math.nan

    def agg(label_depth: Any, label_init: Any, ts: list[dict], rl: list[dict]) -> dict[str, Any]:
        row = {
            "depth": label_depth, "init": label_init, "trajectories": len(ts),
            "share_end": share(ts, "positive_end"),
            "share_throughout": share(ts, "positive_throughout"),
            "run_layers": len(rl), "run_share_end": share(rl, "positive_end"),
            "run_share_throughout": share(rl, "positive_throughout"),
            **{k: float(np.mean([t[k] for t in ts]))
               for k in ("pr_q_start", "pr_q_end", "pr_k_start", "pr_k_end")},
        }
        for late in ("", "_late"):  # over all of training, then over its second half
            q, k = [t[f"slope_q{late}"] for t in ts], [t[f"slope_k{late}"] for t in ts]
            row.update({f"slope_q{late}_per_1k": float(np.mean(q)),
                        f"slope_k{late}_per_1k": float(np.mean(k)),
                        f"share_q_expands{late}": float(np.mean([v > 0 for v in q])),
                        f"share_k_shrinks{late}": float(np.mean([v < 0 for v in k]))})
        row["entropy_end"] = (float(np.nanmean([t["entropy_end"] for t in ts])) if ts
                              else math.nan)
        return row

    rows = []
    for depth, init in sorted({(t["depth"], t["init"]) for t in trajectories},
                              key=lambda k: (k[0], INITS.index(k[1]) if k[1] in INITS else 99)):
        ts = [t for t in trajectories if t["depth"] == depth and t["init"] == init]
        rl = [r for r in run_layers if r["depth"] == depth and r["init"] == init]
        rows.append(agg(depth, init, ts, rl))
    rows.append(agg("all", "all", trajectories, run_layers))
    return {"trajectories": trajectories, "rows": rows, "run_layers": run_layers,
            "correlations": _correlations(recs, trajectories)}


def _correlations(recs: list[dict], trajectories: list[dict]) -> list[dict[str, Any]]:
    """Spearman correlations of PR_K with attention entropy and with the QK^T effective rank."""
    out = []
    trained = [r for r in recs if r["step"] > 0]
    for key in ("attention_entropy", "qk_effective_rank"):
        rho, p, n = spearman([r["pr_k"] for r in trained], [r.get(key) for r in trained])
        out.append({"x": "pr_k", "y": key, "over": "all probe records (step > 0)",
                    "spearman_rho": rho, "p_value": p, "n": n})
    rho, p, n = spearman([t["pr_k_end"] for t in trajectories],
                         [t["entropy_end"] for t in trajectories])
    out.append({"x": "pr_k", "y": "attention_entropy", "over": "trajectory end points",
                "spearman_rho": rho, "p_value": p, "n": n})
    return out


def share_over_steps(summary: Mapping[str, Any], level: float = 0.95) -> list[dict[str, Any]]:
    r"""The share of trajectories with :math:`\mathrm{PR}_Q - \mathrm{PR}_K > 0` at every
    probed step, with its exact binomial (Clopper-Pearson) interval.

    For each step :math:`t` logged by every trajectory of a group, :math:`k_t` of the
    :math:`n` trajectories have :math:`\Delta_t > 0`; the row gives
    :math:`\hat p_t = k_t / n` and the interval :math:`[p_\mathrm{lo}, p_\mathrm{hi}]` with
    :math:`P(\mathrm{Bin}(n, p_\mathrm{lo}) \ge k_t) = P(\mathrm{Bin}(n, p_\mathrm{hi}) \le k_t)
    = (1 - \mathrm{level}) / 2`. Groups: every trajectory (``depth = init = 'all'``), each
    depth, each initialisation, and the individual runs' layers without seed averaging
    (``unit = 'run layer'``).

    The interval treats the trajectories as independent draws; layers of one model are
    correlated, so it is narrower than one over independent models would be.

    Args:
        summary (dict): the result of :func:`trajectory_summary`.
        level (float): confidence level of the interval. (default: ``0.95``)

    Returns:
        list of dict: one row per (group, step): ``unit``, ``depth``, ``init``, ``step``,
        ``k``, ``n``, ``share``, ``ci_low``, ``ci_high``, ``mean_diff``.
    """
    if not (0 < level < 1):
        raise ValueError(f"share_over_steps: level must be in (0, 1), got {level!r}")

    def rows_for(items: list[dict], unit: str, depth: Any, init: Any) -> list[dict[str, Any]]:
        if not items:
            return []
        steps = sorted(set.intersection(*(set(t["steps"]) for t in items)))
        out = []
        for step in steps:
            diffs = [t["diff"][t["steps"].index(step)] for t in items]
            k = int(sum(d > 0 for d in diffs))
            lo, hi = binomial_interval(k, len(diffs), level)
            out.append({"unit": unit, "depth": depth, "init": init, "step": step, "k": k,
                        "n": len(diffs), "share": k / len(diffs), "ci_low": lo, "ci_high": hi,
                        "mean_diff": float(np.mean(diffs))})
        return out

    ts = list(summary["trajectories"])
    rows = rows_for(ts, "trajectory", "all", "all")
    for depth in sorted({t["depth"] for t in ts}):
        rows += rows_for([t for t in ts if t["depth"] == depth], "trajectory", depth, "all")
    for init in [i for i in INITS if any(t["init"] == i for t in ts)]:
        rows += rows_for([t for t in ts if t["init"] == init], "trajectory", "all", init)
    rows += rows_for(list(summary.get("run_layers", [])), "run layer", "all", "all")
    return rows


def share_series(rows: Sequence[Mapping[str, Any]], unit: str = "trajectory", depth: Any = "all",
                 init: Any = "all") -> list[Mapping[str, Any]]:
    """One group's rows of :func:`share_over_steps`, in step order."""
    return sorted((r for r in rows if r["unit"] == unit and r["depth"] == depth
                   and r["init"] == init), key=lambda r: r["step"])


#: Where :func:`milestone_steps` looks by default: a quarter, half, three quarters and the end.
MILESTONES = (0.25, 0.5, 0.75, 1.0)


def milestone_steps(steps: Sequence[int], fractions: Sequence[float] = MILESTONES) -> list[int]:
    r"""For each fraction :math:`f`, the probed step nearest :math:`f \cdot T` (:math:`T` the
    last step; the earlier step on a tie), in the order of ``fractions``."""
    steps = sorted(steps)
    return [min(steps, key=lambda s: abs(s - f * steps[-1])) for f in fractions]


def first_sustained_step(rows: Sequence[Mapping[str, Any]], threshold: float = 0.9,
                         unit: str = "trajectory", depth: Any = "all", init: Any = "all"
                         ) -> Optional[int]:
    """The first probed step from which the share stays at or above ``threshold`` until the
    end of training (:obj:`None` if it never does), for one group of :func:`share_over_steps`."""
    first = None
    for r in share_series(rows, unit, depth, init):
        if r["share"] >= threshold:
            first = r["step"] if first is None else first
        else:
            first = None
    return first


#: The columns of the trajectory table.
TRAJECTORY_COLUMNS = ["depth", "init", "trajectories", "share_end", "share_throughout",
                      "run_share_end", "run_share_throughout", "pr_q_start", "pr_q_end",
                      "pr_k_start", "pr_k_end", "slope_q_per_1k", "slope_k_per_1k",
                      "share_q_expands", "share_k_shrinks", "slope_q_late_per_1k",
                      "slope_k_late_per_1k", "share_q_expands_late", "share_k_shrinks_late",
                      "entropy_end", "val_loss"]
#: The columns of the share-over-steps table.
SHARE_COLUMNS = ["unit", "depth", "init", "step", "k", "n", "share", "ci_low", "ci_high",
                 "mean_diff"]
