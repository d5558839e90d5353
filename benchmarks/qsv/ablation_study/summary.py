"""The QSV ablation's tables: per-seed results aggregated into one row per variant (mean,
spread, paired differences to QSV, the paper's numbers), and the analysis of the trained
models into one row per analysed variant."""
from __future__ import annotations

import math
from typing import Any, Sequence

from benchmarks.qsv.ablation_study.config import DESCRIPTIONS, PAPER, VARIANTS, _check_dataset
from quest_geometric.analysis.stats import finite_mean, mean_std, paired_differences


#: Relative difference in parameter count from QSV within which a row is parameter-matched.
PARAM_MATCH_TOLERANCE = 0.05


def _epochs(results: Sequence[dict[str, Any]]) -> Any:
    """The runs' training epochs: one number when every seed trained as long, else the
    distinct values joined by ``/``."""
    values = sorted({int(r["epochs"]) for r in results if r.get("epochs") is not None})
    if not values:
        return math.nan
    return values[0] if len(values) == 1 else "/".join(map(str, values))


def variant_row(rs: Sequence[dict[str, Any]], qsv: Sequence[dict[str, Any]],
                paper: tuple[float, float], description: str) -> dict[str, Any]:
    """The table row of one variant from its per-seed results ``rs``, beside full QSV's
    ``qsv`` (empty without a ``qsv`` row; ``rs`` itself for the ``qsv`` row), with the
    paper's ``(paper, paper_delta)`` and the row's ``description``: the columns of
    :func:`aggregate`."""
    v = rs[0]["variant"]
    qsv_mean = mean_std([r["acc"] for r in qsv])[0] if qsv else math.nan
    qsv_params = int(qsv[0]["params"]) if qsv else None
    mean, std = mean_std([r["acc"] for r in rs])
    row = {
        "variant": v, "description": description, "params": int(rs[0]["params"]),
        "seeds": len(rs), "epochs": _epochs(rs), "acc_mean": mean, "acc_std": std,
        "delta": mean - qsv_mean if math.isfinite(qsv_mean) else math.nan,
        "paper": paper[0], "paper_delta": paper[1],
        "train_acc_mean": mean_std([r["train_acc"] for r in rs])[0],
        "train_clean_acc_mean": finite_mean([r.get("train_clean_acc", math.nan) for r in rs]),
        "epoch_s": mean_std([r["epoch_s"] for r in rs])[0],
        "param_matched": ("n/a" if qsv_params is None else
                          "yes" if abs(int(rs[0]["params"]) - qsv_params)
                          <= PARAM_MATCH_TOLERANCE * qsv_params else "no"),
    }
    if v == "qsv" or not qsv:
        pd = paired_differences({}, {})
    else:
        pd = paired_differences({r["seed"]: r["acc"] for r in rs},
                                {r["seed"]: r["acc"] for r in qsv})
    row.update({"paired_n": pd["n"], "paired_delta": pd["mean"],
                "delta_ci_low": pd["ci_low"], "delta_ci_high": pd["ci_high"],
                "t_p": pd["t_p"], "perm_p": pd["perm_p"],
                "wins_vs_qsv": f"{pd['wins']}/{pd['n']}" if pd["n"] else "",
                "sign_p": pd["sign_p"]})
    return row


def aggregate(results: Sequence[dict[str, Any]], dataset: str) -> list[dict[str, Any]]:
    """One table row per variant (in :data:`VARIANTS` order) from per-seed results, with the
    paper's numbers for ``dataset``.

    Columns: ``variant``, ``description``, ``params``, ``seeds``, ``epochs`` (of the runs;
    ``'60/120'`` when seeds differ), ``acc_mean``, ``acc_std``
    (sample std over seeds, NaN for one seed), ``delta`` (``acc_mean`` minus full QSV's, NaN
    without a ``qsv`` row), ``paper`` and ``paper_delta`` (:data:`PAPER`, NaN where the
    paper has none), ``train_acc_mean`` and ``epoch_s`` (mean training time per epoch),
    ``param_matched`` (``'yes'`` within :data:`PARAM_MATCH_TOLERANCE` of QSV's parameter
    count, else ``'no'``), and the paired comparison with QSV over the seeds both have
    (:func:`~quest_geometric.analysis.paired_differences`): ``paired_n``,
    ``paired_delta``, the 95% paired :math:`t` interval ``delta_ci_low``-``delta_ci_high``
    and its ``t_p``, the exact permutation test's ``perm_p``, ``wins_vs_qsv`` and the exact
    sign test's ``sign_p``.
    """
    _check_dataset(dataset)
    by_variant = {v: [r for r in results if r["variant"] == v] for v in VARIANTS}
    return [variant_row(rs, by_variant["qsv"],
                        PAPER.get(dataset, {}).get(v, (math.nan, math.nan)), DESCRIPTIONS[v])
            for v, rs in by_variant.items() if rs]


#: The columns of the main table, in order.
TABLE_COLUMNS = ["variant", "description", "params", "param_matched", "seeds", "epochs",
                 "acc_mean", "acc_std", "delta", "paired_delta", "delta_ci_low", "delta_ci_high",
                 "t_p", "perm_p", "wins_vs_qsv", "sign_p", "paper", "paper_delta",
                 "train_clean_acc_mean", "train_acc_mean", "epoch_s"]
#: The columns of the per-seed table.
SEED_COLUMNS = ("variant", "seed", "params", "acc", "train_acc", "train_clean_acc", "epoch_s",
                "epochs")


def seed_rows(results: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (variant, seed) with the :data:`SEED_COLUMNS` (NaN where a result has
    none)."""
    return [{k: r.get(k, math.nan) for k in SEED_COLUMNS} for r in results]


_ANALYSIS_KEYS = ("entropy_mean", "entropy_frac_above_0.95", "angle_median_deg",
                  "angle_frac_below_10deg", "acc_trained", "delta_no_transport",
                  "delta_uniform", "delta_no_transport_uniform")
#: The columns of the analysis table.
ANALYSIS_COLUMNS = ["variant", "seeds"] + [c for k in _ANALYSIS_KEYS for c in (k, f"{k}_std")]


def aggregate_analysis(results: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean and std over seeds of every analysis number, one row per analysed variant."""
    rows = []
    for v in VARIANTS:
        rs = [r["analysis"] for r in results if r["variant"] == v and r.get("analysis")]
        if not rs:
            continue
        row: dict[str, Any] = {"variant": v, "seeds": len(rs)}
        for key in _ANALYSIS_KEYS:
            vals = [a[key] for a in rs if key in a]
            if vals:
                row[key], row[f"{key}_std"] = mean_std(vals)
            else:
                row[key], row[f"{key}_std"] = math.nan, math.nan
        rows.append(row)
    return rows
