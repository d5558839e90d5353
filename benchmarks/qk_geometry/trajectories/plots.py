"""The figures of the query/key geometry trajectories (the study's intervention and
pretrained-checkpoint figures are in ``benchmarks/qk_geometry/plots.py``)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from quest_geometric._utils import optional_pyplot, save_figure
from benchmarks.qk_geometry.trajectories.config import INITS
from benchmarks.qk_geometry.trajectories.summary import share_series


def _layer_grid(plt: Any, summary: Mapping[str, Any], extra: float, ylabel: str, draw: Any,
                zero: bool = False, **share: bool) -> tuple[Any, int]:
    """One panel per (depth, init) of the trajectories of ``summary``, one line colour per
    layer: ``draw(ax, trajectory, colour)`` draws each, ``zero`` adds the zero line, and
    each row's layers are named in a legend beside the row. Returns the figure and the
    number of rows."""
    ts = summary["trajectories"]
    depths = sorted({t["depth"] for t in ts})
    inits = [i for i in INITS if any(t["init"] == i for t in ts)]
    fig, axes = plt.subplots(len(depths), len(inits),
                             figsize=(4.2 * len(inits) + 1.2, 3.0 * len(depths) + extra),
                             squeeze=False, sharex=True, **share)
    cmap = plt.get_cmap("viridis")
    for a, depth in enumerate(depths):
        for b, init in enumerate(inits):
            ax = axes[a][b]
            sel = [t for t in ts if t["depth"] == depth and t["init"] == init]
            for t in sel:
                draw(ax, t, cmap(t["layer"] / max(depth - 1, 1)))
            if zero:
                ax.axhline(0.0, color="k", lw=0.8)
            ax.set_title(f"depth {depth}, {init} init", fontsize=10)
            ax.grid(alpha=0.3)
            ax.set_ylabel(ylabel)
            ax.set_xlabel("training step")
            if b == len(inits) - 1 and sel:
                ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0),
                          title=f"depth {depth}", title_fontsize=8)
    return fig, len(depths)


def plot_trajectories(summary: Mapping[str, Any], path: Path) -> Optional[Path]:
    """Per-layer seed-averaged PR_Q (solid) and PR_K (dashed), one panel per (depth, init),
    with a legend above the panels saying which line style is which."""
    plt = optional_pyplot()
    if plt is None:
        return None
    from matplotlib.lines import Line2D

    def draw(ax: Any, t: Mapping[str, Any], c: Any) -> None:
        ax.plot(t["steps"], t["pr_q"], color=c, lw=1.4, label=f"layer {t['layer']}")
        ax.plot(t["steps"], t["pr_k"], color=c, lw=1.4, ls="--")

    fig, rows = _layer_grid(plt, summary, 0.6, "participation ratio", draw)
    styles = [Line2D([], [], color="0.3", lw=1.4, label="PR_Q (queries)"),
              Line2D([], [], color="0.3", lw=1.4, ls="--", label="PR_K (keys)")]
    fig.legend(handles=styles, loc="upper center", ncol=2, fontsize=9, frameon=False)
    return save_figure(fig, path, dpi=110, rect=(0, 0, 1, 1 - 0.35 / (3.0 * rows + 0.6)))


def plot_diff(summary: Mapping[str, Any], path: Path) -> Optional[Path]:
    """PR_Q - PR_K per layer over training, one panel per (depth, init): the line is the
    seed mean, the band spans the seeds (min to max), the black line is zero (above it,
    queries are spread over more directions than keys, the paper's ordering)."""
    plt = optional_pyplot()
    if plt is None:
        return None
    runs = summary.get("run_layers", [])

    def draw(ax: Any, t: Mapping[str, Any], c: Any) -> None:
        ax.plot(t["steps"], t["diff"], color=c, lw=1.3, label=f"layer {t['layer']}")
        per_seed = [r for r in runs if r["depth"] == t["depth"] and r["init"] == t["init"]
                    and r["layer"] == t["layer"]]
        if len(per_seed) > 1:
            vals = np.array([[r["diff"][r["steps"].index(st)] for st in t["steps"]]
                             for r in per_seed])
            ax.fill_between(t["steps"], vals.min(0), vals.max(0), color=c, alpha=0.15, lw=0)

    fig, rows = _layer_grid(plt, summary, 0.8, "PR_Q - PR_K", draw, zero=True, sharey=True)
    n_seeds = len({r["seed"] for r in runs}) if runs else 1
    fig.suptitle(trajectory_title(n_seeds), fontsize=11)
    return save_figure(fig, path, dpi=110, rect=(0, 0, 1, 1 - 0.3 / (3.0 * rows + 0.8)))


def trajectory_title(n_seeds: int) -> str:
    """The trajectory figure's title: a band of the seed range only with several seeds."""
    if n_seeds <= 1:
        return "PR_Q - PR_K per layer (one seed)"
    return f"PR_Q - PR_K per layer (line: mean of {n_seeds} seeds; band: seed range)"


def share_band(ax: Any, series: Sequence[Mapping[str, Any]], label: str,
               color: Optional[str] = None, band_label: Optional[str] = None,
               alpha: float = 0.2) -> Any:
    """Draw one share curve of
    :func:`~benchmarks.qk_geometry.trajectories.summary.share_over_steps`
    on ``ax`` with its interval as a band; returns the line."""
    st = [r["step"] for r in series]
    line, = ax.plot(st, [r["share"] for r in series], color=color, lw=1.6, label=label)
    ax.fill_between(st, [r["ci_low"] for r in series], [r["ci_high"] for r in series],
                    color=line.get_color(), alpha=alpha, lw=0, label=band_label)
    return line


def plot_share_over_steps(rows: Sequence[Mapping[str, Any]], path: Path,
                          title: str = "Share of trajectories with PR_Q > PR_K") -> Optional[Path]:
    """Left: the share over all trajectories (with its exact 95% interval) and over the
    runs' layers; right: the share per depth. Both against the training step."""
    plt = optional_pyplot()
    if plt is None:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)

    allr = share_series(rows)
    if allr:
        share_band(axes[0], allr, f"seed-averaged trajectories (n = {allr[0]['n']})",
                   color="tab:blue", band_label="exact 95% interval")
    runr = share_series(rows, unit="run layer")
    if runr:
        axes[0].plot([r["step"] for r in runr], [r["share"] for r in runr], color="tab:orange",
                     lw=1.2, ls="--", label=f"individual runs' layers (n = {runr[0]['n']})")
    depths = sorted({r["depth"] for r in rows if r["depth"] != "all"})
    cmap = plt.get_cmap("plasma")
    for i, depth in enumerate(depths):
        d = share_series(rows, depth=depth)
        axes[1].plot([r["step"] for r in d], [r["share"] for r in d], lw=1.4,
                     color=cmap(i / max(len(depths), 1)), label=f"depth {depth} (n = {d[0]['n']})")
    for ax, sub in zip(axes, ("all trajectories", "per depth")):
        ax.axhline(0.5, color="0.5", lw=0.8, ls=":")
        ax.axhline(0.9, color="tab:green", lw=0.8, ls=":", label="90% (the paper: every one)")
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("training step")
        ax.set_ylabel("share with PR_Q - PR_K > 0")
        ax.set_title(sub, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7.5, loc="lower right")
    fig.suptitle(title, fontsize=11)
    return save_figure(fig, path, dpi=110)


def plot_prk_entropy(records: Sequence[Mapping[str, Any]], path: Path) -> Optional[Path]:
    """Scatter of PR_K against attention entropy over all probe records (colour = step)."""
    plt = optional_pyplot()
    if plt is None:
        return None
    pts = [(r["pr_k"], r["attention_entropy"], r["step"]) for r in records
           if r.get("pr_k") is not None and r.get("attention_entropy") is not None]
    fig, ax = plt.subplots(figsize=(5, 4))
    if pts:
        x, y, s = zip(*pts)
        sc = ax.scatter(x, y, c=s, s=6, cmap="plasma", alpha=0.6)
        fig.colorbar(sc, ax=ax, label="step")
    ax.set_xlabel("PR_K (per-head mean)")
    ax.set_ylabel("normalised attention entropy")
    ax.set_title("Key participation ratio vs attention entropy", fontsize=9)
    ax.grid(alpha=0.3)
    return save_figure(fig, path, dpi=110)
