"""The query/key geometry trajectories: train the grid, write the tables,
figures and the report (the study's other parts are in ``benchmarks/qk_geometry/study.py``)."""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Mapping, Union

import numpy as np
import torch

from quest_geometric._utils import atomic_write_text
from quest_geometric.profile import markdown_table, write_results
from benchmarks.qk_geometry.trajectories import report
from benchmarks.qk_geometry.trajectories.config import QUICK, StudyConfig
from benchmarks.qk_geometry.trajectories.plots import (plot_diff, plot_prk_entropy,
                                                         plot_share_over_steps, plot_trajectories)
from benchmarks.qk_geometry.trajectories.records import records_path, write_records
from benchmarks.qk_geometry.trajectories.runs import run_trajectories
from benchmarks.qk_geometry.trajectories.summary import (SHARE_COLUMNS, TRAJECTORY_COLUMNS,
                                                           share_over_steps, trajectory_summary)

#: The file stem of what :func:`run` writes.
NAME = "qk_geometry"


def configure(base: StudyConfig, overrides: Mapping[str, Any]) -> StudyConfig:
    """``base`` with the ``overrides`` (fields of its class; :obj:`None` values are
    ignored) applied and validated; an unknown name is a :class:`TypeError`."""
    known = {f.name for f in dataclasses.fields(base)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise TypeError(f"qk_geometry.run: unknown overrides {unknown}; expected StudyConfig "
                        "fields")
    return base.replace(**overrides)


def study_meta(cfg: StudyConfig, quick: bool, device: str) -> dict[str, Any]:
    """The settings written under every table: ``quick``, the device, the torch threads and
    every field of ``cfg``."""
    return {"quick": quick, "device": str(device), "torch_threads": torch.get_num_threads(),
            **{k: (list(v) if isinstance(v, tuple) else v)
               for k, v in dataclasses.asdict(cfg).items()}}


def run(out_dir: Union[str, os.PathLike], device: str = "cpu", progress: bool = True,
        **overrides: Any) -> dict[str, Any]:
    """Train the trajectory grid of the quick configuration and write its tables, JSON lines
    and plots to ``out_dir``.

    Files: ``qk_geometry_trajectories.{csv,json,md}``, ``qk_geometry_records.jsonl.gz``
    (every probe record), the figures and the report ``qk_geometry.md``. Training runs live
    in ``out_dir/qk_geometry_runs/<config hash>/<run>/`` (resumed or reused).

    Args:
        out_dir (path): result folder.
        device (str): training device. (default: ``'cpu'``)
        progress (bool): progress bars. (default: :obj:`True`)
        **overrides: :class:`StudyConfig` fields changed from :data:`QUICK` (``depths``,
            ``inits``, ``seeds``, ``steps``, ``n_embd``...); :obj:`None` values are ignored.

    Returns:
        dict: ``config``, ``trajectories`` (the summary), ``markdown`` (the report),
        ``summary`` (the findings, one line each) and ``run_root``.
    """
    cfg = configure(QUICK, overrides)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    run_root = out / f"{NAME}_runs" / cfg.run_tag()
    meta = study_meta(cfg, True, device)
    traj, pieces = write_trajectories(cfg, run_root, out, NAME, meta, device, progress)
    summary = report.findings(traj)
    markdown = report.assemble(["## Query/key geometry study (quick configuration)\n", *pieces],
                               summary, report.config_notes(cfg))
    atomic_write_text(out / f"{NAME}.md", markdown)
    return {"config": cfg, "trajectories": traj, "markdown": markdown, "summary": summary,
            "run_root": run_root}


def write_trajectories(cfg: StudyConfig, run_root: Path, out: Path, name: str,
                       meta: dict[str, Any], device: str, progress: bool
                       ) -> tuple[dict[str, Any], list[str]]:
    """Train the grid, summarise it, write its tables and figures (``<name>_*`` in
    ``out``); return the summary and the report's markdown pieces."""
    traj_results = run_trajectories(cfg, run_root, device, progress)
    records = [r for res in traj_results for r in res["records"]]
    write_records(records_path(out, name),
                  ({k: v for k, v in r.items() if not k.endswith("_heads")} for r in records))
    traj = trajectory_summary(records)
    for row in traj["rows"]:
        losses = [res["final"].get("val_loss") for res in traj_results
                  if row["depth"] in ("all", res["meta"]["depth"]) and row["init"] in ("all",
                                                                                       res["meta"]["init"])]
        row["val_loss"] = float(np.mean([v for v in losses if v is not None]))
    p = write_results(f"{name}_trajectories", traj["rows"], out, meta=meta,
                      columns=TRAJECTORY_COLUMNS, notes=report.TRAJ_NOTES,
                      title="PR_Q - PR_K over training, per depth and initialisation")
    write_results(f"{name}_correlations", traj["correlations"], out, meta=meta,
                  title="PR_K vs attention entropy and QK^T effective rank (Spearman)")
    traj["share_over_steps"] = share_over_steps(traj)
    write_results(f"{name}_share_over_steps", traj["share_over_steps"], out, meta=meta,
                  columns=SHARE_COLUMNS, notes=report.SHARE_NOTES,
                  title="Share of trajectories with PR_Q - PR_K > 0 at each probed step")
    plot_trajectories(traj, out / f"{name}_trajectories.png")
    plot_diff(traj, out / f"{name}_diff.png")
    plot_prk_entropy(records, out / f"{name}_prk_entropy.png")
    plot_share_over_steps(traj["share_over_steps"], out / f"{name}_share_over_steps.png",
                          title=f"Share of trajectories with PR_Q > PR_K (width {cfg.n_embd}, "
                                f"{cfg.steps} steps)")
    return traj, [p["md"].read_text(), "\n", markdown_table(traj["correlations"]),
                  f"\n![PR_Q - PR_K]({name}_diff.png)\n\n![share over steps]"
                  f"({name}_share_over_steps.png)\n\n![trajectories]({name}_trajectories.png)"
                  f"\n\n![PR_K vs entropy]({name}_prk_entropy.png)\n",
                  "\n" + report.share_milestones_table(traj["share_over_steps"]) + "\n"]
