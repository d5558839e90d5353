"""The query/key geometry study: run its parts, write the tables, figures and the report."""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np
import torch

from quest_geometric._utils import atomic_write_text
from quest_geometric.profile import markdown_table, write_results
from quest_geometric.pipelines.qk_geometry import report
from quest_geometric.pipelines.qk_geometry.config import FULL, QUICK, StudyConfig
from quest_geometric.pipelines.qk_geometry.plots import (plot_diff, plot_hf, plot_intervention,
                                                         plot_prk_entropy, plot_share_over_steps,
                                                         plot_trajectories)
from quest_geometric.pipelines.qk_geometry.pretrained import hf_analysis
from quest_geometric.pipelines.qk_geometry.records import records_path, write_records
from quest_geometric.pipelines.qk_geometry.runs import (measure_overhead, run_intervention,
                                                        run_trajectories)
from quest_geometric.pipelines.qk_geometry.summary import (HF_COLUMNS, INTERVENTION_COLUMNS,
                                                           INTERVENTION_SEED_COLUMNS,
                                                           INTERVENTION_TEST_COLUMNS,
                                                           RUN_BOOTSTRAP_COLUMNS, SHARE_COLUMNS,
                                                           TRAJECTORY_COLUMNS, intervention_summary,
                                                           run_bootstrap_shares, share_over_steps,
                                                           trajectory_summary)

#: The parts of :func:`run`.
PARTS = ("trajectories", "intervention", "overhead", "hf")


def run(quick: bool = False, device: str = "cpu",
        out_dir: Union[str, os.PathLike] = "benchmarks/qk_geometry/results",
        progress: bool = True, parts: Sequence[str] = ("trajectories", "intervention", "overhead"),
        hf_models: Optional[Sequence[Union[str, os.PathLike]]] = None,
        hf_byte_fallback: bool = False, name: str = "qk_geometry", **overrides: Any
        ) -> dict[str, Any]:
    """Run the study and write its tables, JSON lines and plots to ``out_dir``.

    Files: ``<name>_trajectories.{csv,json,md}``, ``<name>_records.jsonl.gz`` (every probe
    record), the figures, ``<name>_intervention.*``, ``<name>_overhead.*``, ``<name>_hf.*``
    and the report ``<name>.md``. Training runs live in
    ``out_dir/<name>_runs/<config hash>/<run>/`` (resumed or reused).

    Args:
        quick (bool): :data:`QUICK` instead of :data:`FULL`. (default: :obj:`False`)
        device (str): training device. (default: ``'cpu'``)
        out_dir (path): result folder. (default: ``'benchmarks/qk_geometry/results'``)
        progress (bool): progress bars. (default: :obj:`True`)
        parts (sequence of str): any of ``'trajectories'``, ``'intervention'``,
            ``'overhead'``, ``'hf'``. (default: the first three)
        hf_models (sequence of path, optional): checkpoint folders for ``'hf'`` (implies it).
            (default: :obj:`None`)
        hf_byte_fallback (bool): see :func:`hf_analysis`. (default: :obj:`False`)
        name (str): file stem. (default: ``'qk_geometry'``)
        **overrides: :class:`StudyConfig` fields (``depths``, ``inits``, ``seeds``,
            ``steps``, ``n_embd``...); :obj:`None` values are ignored.

    Returns:
        dict: ``trajectories``, ``intervention``, ``overhead``, ``hf`` (each a summary or
        :obj:`None`), ``markdown`` (the report) and ``summary`` (the findings, one line each).
    """
    known = {f.name for f in dataclasses.fields(StudyConfig)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise TypeError(f"qk_geometry.run: unknown overrides {unknown}; expected StudyConfig "
                        "fields")
    cfg = (QUICK if quick else FULL).replace(**overrides)
    parts = list(parts)
    if hf_models:
        parts = list(dict.fromkeys(parts + ["hf"]))
    bad = [p for p in parts if p not in PARTS]
    if bad:
        raise ValueError(f"qk_geometry.run: unknown parts {bad}")
    if "hf" in parts and not hf_models:
        raise ValueError("qk_geometry.run: part 'hf' needs hf_models (checkpoint folders)")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    run_root = out / f"{name}_runs" / cfg.run_tag()
    meta = {"quick": quick, "device": str(device), "torch_threads": torch.get_num_threads(),
            **{k: (list(v) if isinstance(v, tuple) else v)
               for k, v in dataclasses.asdict(cfg).items()}}
    md = [f"## Query/key geometry study ({'quick' if quick else 'full'} configuration)\n"]
    traj = inter = over = hf = None
    if "trajectories" in parts:
        traj, pieces = _trajectories_part(cfg, run_root, out, name, meta, device, progress)
        md += pieces
    if "intervention" in parts:
        inter, pieces = _intervention_part(cfg, run_root, out, name, meta, device, progress)
        md += pieces
    if "overhead" in parts:
        over, pieces = _overhead_part(cfg, run_root, out, name, meta, device, progress)
        md += pieces
    if "hf" in parts:
        hf, pieces = _hf_part(cfg, hf_models, hf_byte_fallback, out, name, device, progress)
        md += pieces
    summary = report.findings(traj, inter, smoke=quick)
    if over is not None:
        summary.append(report.overhead_finding(over))
    markdown = report.assemble(md, summary, cfg, quick)
    if {"trajectories", "intervention", "overhead"} & set(parts):
        atomic_write_text(out / f"{name}.md", markdown)
    return {"config": cfg, "trajectories": traj, "intervention": inter, "overhead": over, "hf": hf,
            "markdown": markdown, "summary": summary, "run_root": run_root}


def _trajectories_part(cfg: StudyConfig, run_root: Path, out: Path, name: str,
                       meta: dict[str, Any], device: str, progress: bool
                       ) -> tuple[dict[str, Any], list[str]]:
    """Train the grid, summarise it, write its tables and figures; return the summary and
    the report's markdown pieces."""
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
    write_run_bootstrap(records, out, name, meta)
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


def write_run_bootstrap(records: Sequence[Mapping[str, Any]], out: Union[str, os.PathLike],
                        name: str, meta: Optional[Mapping[str, Any]] = None,
                        n_boot: int = 2000, seed: int = 0) -> dict[str, Any]:
    """Write ``<name>_share_bootstrap.{csv,json,md}``: the share of trajectories with
    PR_Q - PR_K > 0 at each step and at every later step, with percentile bootstrap intervals
    over runs (:func:`~quest_geometric.pipelines.qk_geometry.summary.run_bootstrap_shares`).

    Returns:
        dict: ``rows`` and ``paths``.
    """
    rows = run_bootstrap_shares(records, n_boot=n_boot, seed=seed)
    paths = write_results(f"{name}_share_bootstrap", rows, Path(out),
                          meta={**dict(meta or {}), "n_boot": n_boot, "bootstrap_seed": seed},
                          columns=RUN_BOOTSTRAP_COLUMNS, title=report.RUN_BOOTSTRAP_TITLE,
                          notes=report.RUN_BOOTSTRAP_NOTES)
    return {"rows": rows, "paths": paths}


def _intervention_part(cfg: StudyConfig, run_root: Path, out: Path, name: str,
                       meta: dict[str, Any], device: str, progress: bool
                       ) -> tuple[dict[str, Any], list[str]]:
    """Train the control modes over seeds, summarise and write them."""
    inter_results = run_intervention(cfg, run_root, device, progress)
    inter = intervention_summary(inter_results)
    p1 = write_results(f"{name}_intervention", inter["rows"], out, meta=meta,
                       columns=INTERVENTION_COLUMNS,
                       title=f"Key-spectrum control at depth {cfg.intervention_depth} "
                             f"({cfg.intervention_init} init), end of training",
                       notes=report.INTER_NOTES.format(decay=cfg.shrink_decay))
    tests = [{k: (str(v) if isinstance(v, list) else v) for k, v in t.items()}
             for t in inter["tests"]]
    p2 = write_results(f"{name}_intervention_tests", tests, out, meta=meta,
                       columns=INTERVENTION_TEST_COLUMNS,
                       title="Directional probability across seeds (one-sided sign test)")
    write_results(f"{name}_intervention_seeds", inter["per_seed"], out, meta=meta,
                  columns=INTERVENTION_SEED_COLUMNS, title="Intervention: per-seed end values")
    plot_intervention(inter_results, out / f"{name}_intervention.png")
    return inter, [p1["md"].read_text(), "\n", p2["md"].read_text(),
                   "\n", markdown_table(inter["per_seed"]),
                   f"\n![intervention]({name}_intervention.png)\n"]


def _overhead_part(cfg: StudyConfig, run_root: Path, out: Path, name: str, meta: dict[str, Any],
                   device: str, progress: bool) -> tuple[dict[str, Any], list[str]]:
    """Measure (or reload) the probing overhead and write its table."""
    over = measure_overhead(cfg, device, progress, cache=run_root / "overhead.json")
    row = {k: v for k, v in over.items() if not k.startswith(("times_", "walls_"))}
    p = write_results(f"{name}_overhead", [row], out,
                      meta={**meta, **{k: v for k, v in over.items() if k.startswith(("times_",
                                                                                      "walls_"))}},
                      title="Training-time overhead of probing (target < 10%)",
                      notes=report.OVERHEAD_NOTES)
    return over, [p["md"].read_text()]


def _hf_part(cfg: StudyConfig, hf_models: Sequence[Union[str, os.PathLike]],
             hf_byte_fallback: bool, out: Path, name: str, device: str, progress: bool
             ) -> tuple[dict[str, Any], list[str]]:
    """Probe the pretrained checkpoints and write their tables and figure."""
    hf = hf_analysis(hf_models, byte_fallback=hf_byte_fallback, corpus=cfg.corpus,
                     progress=progress, device=device)
    p = write_results(f"{name}_hf", hf["rows"], out, meta={"device": str(device)},
                      columns=HF_COLUMNS,
                      title="Pretrained checkpoints: per-layer query/key geometry")
    p2 = write_results(f"{name}_hf_pivot", hf["pivot"], out, meta={"device": str(device)},
                       title="PR_Q - PR_K per layer (rows) against training step (columns)")
    plot_hf(hf, out / f"{name}_hf.png")
    return hf, [p2["md"].read_text(), "\n", p["md"].read_text(), "\n",
                markdown_table(hf["correlations"]), f"\n![hf]({name}_hf.png)\n"]
