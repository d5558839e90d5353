"""Summaries of the query/key geometry study: probe records into trajectories, shares and
slopes, the share over training with its exact interval, and the intervention's sign
tests (the generic statistics are in :mod:`quest_geometric.analysis.stats`)."""
from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Optional, Sequence

import numpy as np

from quest_geometric.analysis.stats import (binomial_interval, directional_probability,
                                            least_squares_slope, spearman)
from quest_geometric.pipelines.qk_geometry.config import INITS, MODES


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


def run_bootstrap_shares(records: Iterable[Mapping[str, Any]], n_boot: int = 2000,
                         seed: int = 0, level: float = 0.95) -> list[dict[str, Any]]:
    r"""The share of seed-averaged trajectories with :math:`\mathrm{PR}_Q - \mathrm{PR}_K > 0`
    at each probed step, and the share positive at **every** probe from that step to the
    end, each with a percentile bootstrap interval over **runs** (not trajectories).

    The trajectories are not independent (the layers of one run share its training, and
    every trajectory averages the same runs), so the resampling unit is the run: within each
    (depth, init) cell the seeds are drawn with replacement ``n_boot`` times (generator
    seeded with ``seed``), each layer's :math:`\mathrm{PR}_Q` and :math:`\mathrm{PR}_K`
    averaged over the drawn runs, and both shares recomputed; the interval is the
    :math:`(1 \mp \mathrm{level}) / 2` quantiles of the resampled shares.

    Args:
        records (iterable of dict): probe rows (``depth``, ``init``, ``seed``, ``step``,
            ``layer``, ``pr_q``, ``pr_k``); the steps logged by every run are used.
        n_boot (int): resamples. (default: :obj:`2000`)
        seed (int): generator seed. (default: :obj:`0`)
        level (float): interval level in :math:`(0, 1)`. (default: ``0.95``)

    Returns:
        list of dict: one row per step: ``step``, ``trajectories``, ``runs``, ``share``,
        ``boot_low``, ``boot_high``, ``share_every_later``, ``every_later_boot_low``,
        ``every_later_boot_high``.
    """
    if not 0 < level < 1:
        raise ValueError(f"run_bootstrap_shares: 'level' must be in (0, 1), got {level!r}")
    if isinstance(n_boot, bool) or not isinstance(n_boot, int) or n_boot < 1:
        raise ValueError(f"run_bootstrap_shares: 'n_boot' must be an int >= 1, got {n_boot!r}")
    recs = [r for r in records if _usable(r)]
    if not recs:
        raise ValueError("run_bootstrap_shares: no probe record with defined PR_Q and PR_K")
    by_run: dict[tuple, set] = {}
    for r in recs:
        by_run.setdefault((r["depth"], r["init"], r["seed"]), set()).add(r["step"])
    steps = sorted(set.intersection(*by_run.values()))
    pos = {t: i for i, t in enumerate(steps)}
    cells: dict[tuple, dict[str, Any]] = {}
    for depth, init, s in by_run:
        cells.setdefault((depth, init), {"seeds": set(), "layers": set()})["seeds"].add(s)
    for r in recs:
        cells[(r["depth"], r["init"])]["layers"].add(r["layer"])
    arrays = {}
    for key, c in sorted(cells.items(), key=lambda kv: str(kv[0])):
        seeds, layers = sorted(c["seeds"]), sorted(c["layers"])
        q = np.full((len(seeds), len(layers), len(steps)), np.nan)
        k = q.copy()
        si, li = {s: i for i, s in enumerate(seeds)}, {x: i for i, x in enumerate(layers)}
        for r in recs:
            if (r["depth"], r["init"]) == key and r["step"] in pos:
                q[si[r["seed"]], li[r["layer"]], pos[r["step"]]] = r["pr_q"]
                k[si[r["seed"]], li[r["layer"]], pos[r["step"]]] = r["pr_k"]
        if np.isnan(q).any() or np.isnan(k).any():
            raise ValueError(f"run_bootstrap_shares: cell {key} lacks some (seed, layer, step) "
                             f"records")
        arrays[key] = (q, k)

    def shares(draws: dict[tuple, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """[B, T] shares at each step and at every later step, from drawn seed indices."""
        # draws[key]: [B, S] seed indices; each cell's difference is [B, L, T]
        positive = np.concatenate([q[draws[key]].mean(axis=1) - k[draws[key]].mean(axis=1) > 0
                                   for key, (q, k) in arrays.items()], axis=1)  # [B, traj, T]
        later = np.flip(np.logical_and.accumulate(np.flip(positive, -1), axis=-1), -1)
        return positive.mean(axis=1), later.mean(axis=1)

    point = shares({key: np.arange(q.shape[0])[None, :] for key, (q, _) in arrays.items()})
    rng = np.random.default_rng(seed)
    boot = shares({key: rng.integers(0, q.shape[0], size=(n_boot, q.shape[0]))
                   for key, (q, _) in arrays.items()})
    lo_q, hi_q = (1 - level) / 2, 1 - (1 - level) / 2
    n_traj = sum(q.shape[1] for q, _ in arrays.values())
    n_runs = sum(q.shape[0] for q, _ in arrays.values())
    rows = []
    for i, t in enumerate(steps):
        rows.append({"step": t, "trajectories": n_traj, "runs": n_runs,
                     "share": float(point[0][0, i]),
                     "boot_low": float(np.quantile(boot[0][:, i], lo_q)),
                     "boot_high": float(np.quantile(boot[0][:, i], hi_q)),
                     "share_every_later": float(point[1][0, i]),
                     "every_later_boot_low": float(np.quantile(boot[1][:, i], lo_q)),
                     "every_later_boot_high": float(np.quantile(boot[1][:, i], hi_q))})
    return rows


#: The columns of the run-bootstrap share table.
RUN_BOOTSTRAP_COLUMNS = ["step", "trajectories", "runs", "share", "boot_low", "boot_high",
                         "share_every_later", "every_later_boot_low", "every_later_boot_high"]


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


def _end_values(result: Mapping[str, Any]) -> dict[str, float]:
    recs = result["records"]
    last = max(r["step"] for r in recs)
    end = [r for r in recs if r["step"] == last]

    def mean(key: str) -> float:
        vals = [r[key] for r in end if r.get(key) is not None]
        return float(np.mean(vals)) if vals else math.nan

    return {"step": last, "entropy": mean("attention_entropy"), "pr_k": mean("pr_k"),
            "pr_q": mean("pr_q"), "pr_wk": mean("pr_wk"), "qk_erank": mean("qk_effective_rank"),
            "val_loss": float(result["final"].get("val_loss", math.nan))}


def intervention_summary(results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per-seed end values of each mode, per-mode means and the shrink-vs-hold sign tests.

    Returns:
        dict: ``per_seed`` rows (seed, mode, entropy, val_loss, pr_k, pr_wk...), ``rows``
        (one per mode: means and standard deviations over seeds), ``tests`` (sign tests of
        entropy and validation loss, shrink < hold and shrink < none, hold > none).
    """
    per_seed = [{"seed": r["meta"]["seed"], "mode": r["meta"]["mode"], **_end_values(r)}
                for r in results]
    rows = []
    for mode in MODES:
        sel = [p for p in per_seed if p["mode"] == mode]
        if not sel:
            continue
        row: dict[str, Any] = {"mode": mode, "seeds": len(sel)}
        for key in ("entropy", "val_loss", "pr_k", "pr_q", "pr_wk", "qk_erank"):
            vals = np.array([p[key] for p in sel], dtype=float)
            row[key] = float(np.mean(vals))
            row[key + "_std"] = float(np.std(vals, ddof=1)) if len(vals) > 1 else math.nan
        rows.append(row)

    def paired(mode_a: str, mode_b: str, key: str) -> Optional[dict]:
        a = {p["seed"]: p[key] for p in per_seed if p["mode"] == mode_a}
        b = {p["seed"]: p[key] for p in per_seed if p["mode"] == mode_b}
        seeds = sorted(set(a) & set(b))
        if not seeds:
            return None
        res = directional_probability([a[s] for s in seeds], [b[s] for s in seeds])
        return {"test": f"{key}({mode_a}) < {key}({mode_b})", "seeds": seeds, **res}

    tests = [t for t in (paired("shrink", "hold", "entropy"), paired("shrink", "none", "entropy"),
                         paired("none", "hold", "entropy"), paired("shrink", "hold", "val_loss"),
                         paired("shrink", "hold", "pr_k")) if t is not None]
    return {"per_seed": per_seed, "rows": rows, "tests": tests}


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
#: The columns of the intervention tables.
INTERVENTION_COLUMNS = ["mode", "seeds", "entropy", "entropy_std", "val_loss", "val_loss_std",
                        "pr_k", "pr_q", "pr_wk", "qk_erank"]
INTERVENTION_TEST_COLUMNS = ["test", "seeds", "n_untied", "k_less", "share_less", "p_value",
                             "signs", "mean_diff"]
INTERVENTION_SEED_COLUMNS = ["seed", "mode", "step", "entropy", "val_loss", "pr_k", "pr_q",
                             "pr_wk", "qk_erank"]
#: The columns of the pretrained table.
HF_COLUMNS = ["checkpoint", "step", "step_from", "tokenizer", "layer", "pr_q", "pr_k",
              "pr_q_minus_pr_k", "qk_effective_rank", "attention_entropy"]
