"""The QSV ablation table: train every variant over seeds, aggregate, write the files."""
from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

import torch
from tqdm.auto import tqdm

from quest_geometric.profile import write_results
from quest_geometric.pipelines.qsv_ablation import report
from quest_geometric.pipelines.qsv_ablation.config import (PAPER_SOURCE, PRESETS, AblationConfig,
                                                           _check_dataset, _check_seeds,
                                                           _check_variants)
from quest_geometric.pipelines.qsv_ablation.plots import plot_histograms
from quest_geometric.pipelines.qsv_ablation.runs import train_variant
from quest_geometric.pipelines.qsv_ablation.summary import (ANALYSIS_COLUMNS, TABLE_COLUMNS,
                                                            aggregate, aggregate_analysis,
                                                            seed_rows)


def run(dataset: str = "digits", seeds: Optional[Sequence[int]] = None,
        epochs: Optional[int] = None, quick: bool = False, device: str = "cpu",
        out_dir: Union[str, os.PathLike] = "benchmarks/qsv/results", progress: bool = True,
        analyse: bool = False, variants: Optional[Sequence[str]] = None,
        root: Optional[Union[str, os.PathLike]] = None, download: bool = False,
        threads: Optional[int] = None, name: str = "qsv_ablation",
        variant_epochs: Optional[Mapping[str, int]] = None, **overrides: Any) -> dict[str, Any]:
    """Train every variant over seeds and write the table (and, with ``analyse``, the
    analysis table and two histograms) to ``out_dir``.

    Files (``<stem>`` = ``<name>_<dataset>``, plus ``_quick`` so a smoke test never
    overwrites a full run): ``<stem>.{csv,json,md}``, ``<stem>_seeds.*`` (per-seed rows),
    ``<stem>_analysis.*``, ``<stem>_entropy.png`` and ``<stem>_angles.png``. Runs live in
    ``<out_dir>/<name>_runs/<dataset>[_quick]/<config hash>/``.

    Args:
        dataset (str): ``'cifar10'``, ``'cifar100'`` or ``'digits'``. (default: ``'digits'``)
        seeds (sequence of int, optional): seeds; :obj:`None` uses ``(0, 1, 2, 3, 4)``
            (``(0,)`` with ``quick``). (default: :obj:`None`)
        epochs (int, optional): overrides the preset's epochs. (default: :obj:`None`)
        quick (bool): the small preset. (default: :obj:`False`)
        device (str): ``'cpu'``, ``'cuda'`` or ``'auto'``. (default: ``'cpu'``)
        out_dir (path): result folder. (default: ``'benchmarks/qsv/results'``)
        progress (bool): progress bars. (default: :obj:`True`)
        analyse (bool): measure entropy, angles and test-time ablations. (default: :obj:`False`)
        variants (sequence of str, optional): a subset of :data:`VARIANTS`.
            (default: all)
        root (path, optional): the CIFAR root folder. (default: :obj:`None`)
        download (bool): download CIFAR when absent. (default: :obj:`False`)
        threads (int, optional): ``torch.set_num_threads`` (1 is fastest on a shared CPU).
            (default: :obj:`None`)
        name (str): file stem. (default: ``'qsv_ablation'``)
        variant_epochs (dict, optional): variant -> epochs, for a variant that needs longer
            to fit its training set (for example ``{'no_transport': 120}``); its runs live
            under the hash of the configuration with those epochs. (default: :obj:`None`)
        **overrides: :class:`AblationConfig` fields (``channels``, ``num_layers``, ...).

    Returns:
        dict: ``rows`` (the table), ``seed_rows``, ``analysis_rows``, ``results`` (per
        seed), ``config``, ``paths``, ``markdown`` and ``summary`` (findings, one per line).
    """
    _check_dataset(dataset)
    variants = _check_variants(variants)
    seeds = _check_seeds(seeds, quick)
    cfg = PRESETS[dataset]["quick" if quick else "full"].replace(epochs=epochs, **overrides)
    variant_epochs = _check_variant_epochs(variant_epochs, variants)
    if threads is not None:
        torch.set_num_threads(int(threads))
    from quest_geometric.training.distributed import init_distributed

    info = init_distributed()
    out = Path(out_dir)
    suffix = "_quick" if quick else ""
    stem = f"{name}_{dataset}{suffix}"
    run_root = out / f"{name}_runs" / f"{dataset}{suffix}" / cfg.tag()
    t0 = time.perf_counter()
    results = _train_all(variants, seeds, cfg, dataset, root, run_root, device, progress,
                         analyse, download, info.is_main, t0, variant_epochs)
    rows = aggregate(results, dataset)
    per_seed = seed_rows(results)
    analysis_rows = aggregate_analysis(results) if analyse else []
    summary = report.findings(rows, analysis_rows, dataset)
    markdown = ""
    paths: dict[str, Any] = {}
    if info.is_main:
        meta = {"dataset": dataset, "quick": quick, "seeds": list(seeds), "device": str(device),
                "threads": torch.get_num_threads(), "world_size": info.world_size,
                "config": dataclasses.asdict(cfg), "variant_epochs": variant_epochs,
                "paper_numbers": PAPER_SOURCE[dataset],
                "wall_s": round(time.perf_counter() - t0, 1)}
        paths, markdown = write_tables(stem, out, meta, cfg, dataset, quick, seeds, rows, per_seed,
                                 analysis_rows, results, summary)
    return {"rows": rows, "seed_rows": per_seed, "analysis_rows": analysis_rows,
            "results": results, "config": cfg, "paths": paths, "markdown": markdown,
            "summary": summary, "run_root": run_root}


def _train_all(variants: Sequence[str], seeds: Sequence[int], cfg: AblationConfig, dataset: str,
               root: Optional[Union[str, os.PathLike]], run_root: Path, device: str,
               progress: bool, analyse: bool, download: bool, is_main: bool, t0: float,
               variant_epochs: Optional[Mapping[str, int]] = None) -> list[dict[str, Any]]:
    """Every (variant, seed) run, variants outermost (one data cache shared by all)."""
    data: dict[str, Any] = {}
    results: list[dict[str, Any]] = []
    total = len(variants) * len(seeds)
    for v in variants:
        vcfg, vroot = cfg, run_root
        if variant_epochs and v in variant_epochs:
            vcfg = cfg.replace(epochs=variant_epochs[v])
            vroot = run_root.parent / vcfg.tag()
        for s in seeds:
            if progress and is_main:
                tqdm.write(f"[qsv_ablation] {dataset} {v} seed {s} ({len(results) + 1}/{total}, "
                           f"{time.perf_counter() - t0:.0f} s)")
            results.append(train_variant(v, s, vcfg, dataset, root, vroot, device, progress,
                                         analyse, download, data))
    return results


def _check_variant_epochs(variant_epochs: Optional[Mapping[str, int]],
                          variants: Sequence[str]) -> Optional[dict[str, int]]:
    if not variant_epochs:
        return None
    out = {}
    for v, e in dict(variant_epochs).items():
        if v not in variants:
            raise ValueError(f"qsv_ablation: variant_epochs names {v!r}, which is not among the "
                             f"variants run ({', '.join(variants)})")
        if isinstance(e, bool) or not isinstance(e, int) or e < 1:
            raise ValueError(f"qsv_ablation: variant_epochs[{v!r}] must be a positive integer "
                             f"(got {e!r})")
        out[v] = e
    return out


def write_tables(stem: str, out: Path, meta: dict[str, Any], cfg: AblationConfig, dataset: str,
           quick: bool, seeds: Sequence[int], rows: list[dict[str, Any]],
           per_seed: list[dict[str, Any]], analysis_rows: list[dict[str, Any]],
           results: list[dict[str, Any]], summary: list[str]) -> tuple[dict[str, Any], str]:
    """Write the tables (and the analysis ones when there are analysis rows); return the
    paths and the markdown of everything written (for :func:`run`, and for the benchmark's
    merge of per-seed files)."""
    paths: dict[str, Any] = {}
    paths["table"] = write_results(
        stem, rows, out, meta=meta, columns=TABLE_COLUMNS,
        title=f"QSV ablation on {dataset}" + (" (quick)" if quick else ""),
        notes=report.table_notes(cfg, dataset, seeds, summary,
                                 meta.get("variant_epochs"), rows))
    paths["seeds"] = write_results(f"{stem}_seeds", per_seed, out, meta=meta,
                                   title=f"QSV ablation on {dataset}: per-seed results")
    markdown = paths["table"]["md"].read_text()
    if analysis_rows:
        paths["analysis"] = write_results(
            f"{stem}_analysis", analysis_rows, out, meta=meta, columns=ANALYSIS_COLUMNS,
            title=f"Where the pairwise computation lives ({dataset})",
            notes=report.ANALYSIS_NOTES)
        paths["entropy_png"] = plot_histograms(results, "entropy", out / f"{stem}_entropy.png")
        paths["angles_png"] = plot_histograms(results, "angle", out / f"{stem}_angles.png",
                                              variants=("qsv", "lattice", "uniform"))
        markdown += "\n" + paths["analysis"]["md"].read_text()
        markdown += "".join(f"\n![{key}]({Path(paths[key]).name})\n"
                            for key in ("entropy_png", "angles_png") if paths[key] is not None)
    return paths, markdown
