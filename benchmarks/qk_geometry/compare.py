r"""Side-by-side comparison of finished trajectory studies (different horizons or widths).

Each study named here has already written ``<name>_records.jsonl.gz`` (every probe record) to
the result folder; nothing is trained. For each, the records are summarised with
:func:`~benchmarks.qk_geometry.trajectories.summary.trajectory_summary` and the share of
trajectories with :math:`\mathrm{PR}_Q - \mathrm{PR}_K > 0` is followed over the training
steps (:func:`~benchmarks.qk_geometry.trajectories.summary.share_over_steps`), so a
600-step run, a 2,400-step run and a wider model can be read on one axis.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

from benchmarks.qk_geometry.records import read_records
from quest_geometric._utils import optional_pyplot, save_figure
from quest_geometric.profile import markdown_table, write_results
from benchmarks.qk_geometry.trajectories.plots import share_band
from benchmarks.qk_geometry.trajectories.records import records_path
from benchmarks.qk_geometry.trajectories.summary import (
    first_sustained_step,
    milestone_steps,
    share_over_steps,
    share_series,
    trajectory_summary,
)


def _records(out: Path, stem: str) -> list[dict[str, Any]]:
    path = records_path(out, stem)
    if not path.is_file():
        raise FileNotFoundError(f"compare_studies: {path} not found; run the study with "
                                f"--name {stem} first")
    return read_records(path)


def compare_studies(names: Sequence[str],
                    out_dir: Union[str, os.PathLike] = "benchmarks/qk_geometry/results",
                    labels: Optional[Sequence[str]] = None, name: str = "qk_geometry_compare",
                    meta: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
    """Compare finished studies: one row per study with the share of trajectories with
    PR_Q - PR_K > 0 at a quarter, half, three quarters and the end of its training (exact 95%
    interval, and the step), and the first step from which the share stays >= 90%;
    writes ``<name>.{csv,json,md}`` and ``<name>.png`` (the share curves on one axis).

    Args:
        names (sequence of str): result stems (``qk_geometry``, ``qk_geometry_long``...).
        out_dir (path): the result folder holding ``<stem>_records.jsonl.gz``.
            (default: ``'benchmarks/qk_geometry/results'``)
        labels (sequence of str, optional): legend labels (default: the stems).
        name (str): output stem. (default: ``'qk_geometry_compare'``)
        meta (dict, optional): extra metadata written under the table.

    Returns:
        dict: ``rows`` (one per study) and ``curves`` (stem -> share rows of every trajectory).
    """
    if not names:
        raise ValueError("compare_studies: names must name at least one finished study")
    labels = list(labels) if labels is not None else list(names)
    if len(labels) != len(names):
        raise ValueError(f"compare_studies: {len(labels)} labels for {len(names)} studies")
    out = Path(out_dir)
    rows, curves = [], {}
    for stem, label in zip(names, labels):
        recs = _records(out, stem)
        summ = trajectory_summary(recs)
        sos = share_over_steps(summ)
        allr = share_series(sos)
        curves[stem] = allr
        by_step = {r["step"]: r for r in allr}
        row: dict[str, Any] = {"study": label, "trajectories": allr[-1]["n"],
                               "seeds": len({r["seed"] for r in recs}), "steps": allr[-1]["step"]}
        for key, step in zip(("quarter", "half", "three quarters", "end"),
                             milestone_steps(by_step)):
            r = by_step[step]
            row[key] = (f"{r['share']:.0%} [{r['ci_low']:.0%}, {r['ci_high']:.0%}] "
                        f"at step {r['step']}")
        first = first_sustained_step(sos, 0.9)
        row["stays >= 90% from"] = "never" if first is None else f"step {first}"
        row["pr_q_end"] = summ["rows"][-1]["pr_q_end"]
        row["pr_k_end"] = summ["rows"][-1]["pr_k_end"]
        rows.append(row)
    write_results(name, rows, out, meta=dict(meta or {}),
                  title="PR_Q - PR_K > 0: share of trajectories over training, per study",
                  notes="Shares of seed-averaged trajectories (one layer of one depth and "
                        "initialisation, averaged over the seeds), with the exact (Clopper-"
                        "Pearson) 95% interval treating trajectories as independent.")
    plt = optional_pyplot()
    if plt is not None:
        fig, ax = plt.subplots(figsize=(6.5, 4))
        for allr, label in zip(curves.values(), labels):
            share_band(ax, allr, f"{label} (n = {allr[0]['n']})", alpha=0.12)
        ax.axhline(0.9, color="tab:green", lw=0.8, ls=":", label="90% (the paper: every one)")
        ax.axhline(0.5, color="0.5", lw=0.8, ls=":")
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("training step")
        ax.set_ylabel("share with PR_Q - PR_K > 0")
        ax.set_title("Share of trajectories with PR_Q > PR_K (bands: exact 95% interval)",
                     fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
        save_figure(fig, out / f"{name}.png", dpi=110)
    return {"rows": rows, "curves": curves, "markdown": markdown_table(rows)}
