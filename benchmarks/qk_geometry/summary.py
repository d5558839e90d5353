"""Summaries of the whole query/key geometry study beyond the pipeline's
(:mod:`benchmarks.qk_geometry.trajectories.summary`): the share of trajectories with
intervals over runs, and the intervention's sign tests (the generic statistics are in
:mod:`quest_geometric.analysis.stats`)."""
from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Optional, Sequence

import numpy as np

from benchmarks.qk_geometry.config import MODES
from quest_geometric.analysis.stats import directional_probability


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
    recs = [r for r in records if r.get("pr_q") is not None and r.get("pr_k") is not None]
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
