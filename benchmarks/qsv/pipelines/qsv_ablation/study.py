"""The QSV ablation table on digits: train every variant over seeds, aggregate, write the
files."""
from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Union

import torch
from tqdm.auto import tqdm

from quest_geometric.profile import write_results
from benchmarks.qsv.pipelines.qsv_ablation import report
from benchmarks.qsv.pipelines.qsv_ablation.config import (DIGITS, PAPER_SOURCE, VARIANTS,
                                                           _check_seeds)
from benchmarks.qsv.pipelines.qsv_ablation.data import digits_splits
from benchmarks.qsv.pipelines.qsv_ablation.runs import train_variant
from benchmarks.qsv.pipelines.qsv_ablation.summary import TABLE_COLUMNS, aggregate, seed_rows


def run(seeds: Optional[Sequence[int]] = None, epochs: Optional[int] = None,
        device: str = "cpu", out_dir: Union[str, os.PathLike] = "benchmarks/qsv/results",
        progress: bool = True) -> dict[str, Any]:
    """Train every variant (:data:`VARIANTS`) of the :data:`DIGITS` model over seeds on
    scikit-learn's digits and write the table to ``out_dir``.

    Files: ``qsv_ablation_digits.{csv,json,md}`` (the table) and
    ``qsv_ablation_digits_seeds.*`` (per-seed rows). Runs live in
    ``<out_dir>/qsv_ablation_runs/digits/<config hash>/<variant>_s<seed>/``: a killed run
    resumes and a finished one is never trained twice; under ``torchrun`` every rank trains
    and rank 0 writes. The benchmark (``python -m benchmarks.qsv.ablation``) adds the other
    datasets, ResNet-20, the analysis and the quick preset.

    Args:
        seeds (sequence of int, optional): seeds; :obj:`None` uses ``(0, 1, 2, 3, 4)``.
            (default: :obj:`None`)
        epochs (int, optional): overrides the :data:`DIGITS` epochs. (default: :obj:`None`)
        device (str): ``'cpu'``, ``'cuda'`` or ``'auto'``. (default: ``'cpu'``)
        out_dir (path): result folder. (default: ``'benchmarks/qsv/results'``)
        progress (bool): progress bars. (default: :obj:`True`)

    Returns:
        dict: ``rows`` (the table), ``seed_rows``, ``results`` (per seed), ``config``,
        ``paths``, ``markdown``, ``summary`` (findings, one per line) and ``run_root``.
    """
    seeds = _check_seeds(seeds)
    cfg = DIGITS.replace(epochs=epochs)
    from quest_geometric.training.distributed import init_distributed

    info = init_distributed()
    out = Path(out_dir)
    run_root = out / "qsv_ablation_runs" / "digits" / cfg.tag()
    t0 = time.perf_counter()
    data: dict[str, Any] = {}

    def train(v: str, s: int) -> dict[str, Any]:
        kind = "lattice" if v == "lattice" else "sphere"
        if kind not in data:
            data[kind] = digits_splits(v, cfg)
        return train_variant(v, s, cfg, data[kind], run_root, device, progress)

    results = train_all(VARIANTS, seeds, train, "digits", progress and info.is_main, t0)
    rows = aggregate(results)
    per_seed = seed_rows(results)
    summary = report.findings(rows)
    markdown = ""
    paths: dict[str, Any] = {}
    if info.is_main:
        # the study's metadata keys, so the table reads like the benchmark's full digits run
        meta = {"dataset": "digits", "quick": False, "seeds": list(seeds), "device": str(device),
                "threads": torch.get_num_threads(), "world_size": info.world_size,
                "config": dataclasses.asdict(cfg), "variant_epochs": None,
                "paper_numbers": PAPER_SOURCE, "wall_s": round(time.perf_counter() - t0, 1)}
        head = report.headline(rows, report.setting("digits", report.DIGITS_TEST_SET, rows, cfg))
        paths, markdown = write_tables(
            "qsv_ablation_digits", out, meta, rows, per_seed,
            report.table_notes(cfg, seeds, summary, head), "QSV ablation on digits",
            "QSV ablation on digits: per-seed results")
    return {"rows": rows, "seed_rows": per_seed, "results": results, "config": cfg,
            "paths": paths, "markdown": markdown, "summary": summary, "run_root": run_root}


def train_all(variants: Sequence[str], seeds: Sequence[int],
              train: Callable[[str, int], dict[str, Any]], label: str, show: bool,
              t0: float) -> list[dict[str, Any]]:
    """``train(variant, seed)`` for every (variant, seed), variants outermost (so one data
    cache serves each graph kind), with a line per run when ``show`` (``label`` names the
    dataset, ``t0`` is the start time)."""
    results: list[dict[str, Any]] = []
    total = len(variants) * len(seeds)
    for v in variants:
        for s in seeds:
            if show:
                tqdm.write(f"[qsv_ablation] {label} {v} seed {s} ({len(results) + 1}/{total}, "
                           f"{time.perf_counter() - t0:.0f} s)")
            results.append(train(v, s))
    return results


def write_tables(stem: str, out: Path, meta: dict[str, Any], rows: list[dict[str, Any]],
                 per_seed: list[dict[str, Any]], notes: str, title: str,
                 seeds_title: str) -> tuple[dict[str, Any], str]:
    """Write the table ``<stem>.*`` (with ``notes`` and ``title``) and the per-seed table
    ``<stem>_seeds.*`` (``seeds_title``); return the paths and the table's markdown."""
    paths: dict[str, Any] = {}
    paths["table"] = write_results(stem, rows, out, meta=meta, columns=TABLE_COLUMNS,
                                   title=title, notes=notes)
    paths["seeds"] = write_results(f"{stem}_seeds", per_seed, out, meta=meta,
                                   title=seeds_title)
    return paths, paths["table"]["md"].read_text()
