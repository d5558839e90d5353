"""The QSV ablation study: every variant (ResNet-20 included) on digits or CIFAR over seeds,
with the analysis of the trained models and variants trained longer."""
from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence, Union

import torch
from torch import nn
from tqdm.auto import tqdm

from benchmarks.qsv.ablation_study import report
from benchmarks.qsv.ablation_study.analyse import analyse_model
from benchmarks.qsv.ablation_study.config import (PAPER_SOURCE, PRESETS, VARIANTS,
                                                  AblationConfig, _check_dataset, _check_seeds,
                                                  _check_variants)
from benchmarks.qsv.ablation_study.data import load_splits
from benchmarks.qsv.ablation_study.plots import plot_histograms
from benchmarks.qsv.ablation_study.runs import train_run
from benchmarks.qsv.ablation_study.summary import (ANALYSIS_COLUMNS, TABLE_COLUMNS, aggregate,
                                                   aggregate_analysis, seed_rows)
from quest_geometric._utils import check_choice
from quest_geometric.profile import write_results


def train_variant(variant: str, seed: int, cfg: AblationConfig, dataset: str = "digits",
                  root: Optional[Union[str, os.PathLike]] = None,
                  run_root: Optional[Union[str, os.PathLike]] = None, device: str = "cpu",
                  progress: bool = False, analyse: bool = False, download: bool = False,
                  data: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """Train (or resume, or reuse) one variant with one seed on ``dataset``: its splits
    (:func:`~benchmarks.qsv.ablation_study.data.load_splits`, cached in ``data``) through
    :func:`~benchmarks.qsv.ablation_study.runs.train_run`.

    Args:
        variant (str): one of :data:`VARIANTS`.
        seed (int): model-init and training seed.
        cfg (AblationConfig): the settings.
        dataset (str): one of :data:`DATASETS`. (default: ``'digits'``)
        root (path, optional): CIFAR root. (default: :obj:`None`)
        run_root (path, optional): parent of the run folder; :obj:`None` keeps nothing on
            disk. (default: :obj:`None`)
        device (str): training device. (default: ``'cpu'``)
        progress (bool): the harness's progress bar. (default: :obj:`False`)
        analyse (bool): also run :func:`analyse_model` (rank 0, not for ``'resnet20'``), on
            a reused run too when its result lacks it. (default: :obj:`False`)
        download (bool): let CIFAR download when absent. (default: :obj:`False`)
        data (dict, optional): a cache ``{graph kind: (train, test, clean train)}`` shared
            across runs. (default: :obj:`None`)

    Returns:
        dict: the result of :func:`~benchmarks.qsv.ablation_study.runs.train_run`, with
        ``analysis`` (or :obj:`None`).
    """
    check_choice(variant, "variant", VARIANTS, where="qsv_ablation")
    _check_dataset(dataset)
    kind = "image" if variant == "resnet20" else ("lattice" if variant == "lattice" else "sphere")
    data = {} if data is None else data
    if kind not in data:
        data[kind] = load_splits(variant, cfg, dataset, root, download)

    def analysis(model: nn.Module, result: dict[str, Any]) -> dict[str, Any]:
        return analyse_model(model, variant, data[kind][1], cfg, next(model.parameters()).device)

    return train_run(variant, seed, cfg, data[kind], run_root, device, progress,
                     dataset=dataset, analyse=analysis if analyse and variant != "resnet20"
                     else None)


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
    seeds = _check_seeds((0,) if seeds is None and quick else seeds)
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
    data: dict[str, Any] = {}

    def train(v: str, s: int) -> dict[str, Any]:
        vcfg, vroot = cfg, run_root
        if variant_epochs and v in variant_epochs:
            vcfg = cfg.replace(epochs=variant_epochs[v])
            vroot = run_root.parent / vcfg.tag()
        return train_variant(v, s, vcfg, dataset, root, vroot, device, progress, analyse,
                             download, data)

    results = train_all(variants, seeds, train, dataset, progress and info.is_main, t0)
    rows = aggregate(results, dataset)
    per_seed = seed_rows(results)
    analysis_rows = aggregate_analysis(results) if analyse else []
    summary = report.findings(rows, analysis_rows)
    markdown = ""
    paths: dict[str, Any] = {}
    if info.is_main:
        meta = {"dataset": dataset, "quick": quick, "seeds": list(seeds), "device": str(device),
                "threads": torch.get_num_threads(), "world_size": info.world_size,
                "config": dataclasses.asdict(cfg), "variant_epochs": variant_epochs,
                "paper_numbers": PAPER_SOURCE[dataset],
                "wall_s": round(time.perf_counter() - t0, 1)}
        paths, markdown = write_tables(stem, out, meta, cfg, dataset, quick, seeds, rows,
                                       per_seed, analysis_rows, results, summary)
    return {"rows": rows, "seed_rows": per_seed, "analysis_rows": analysis_rows,
            "results": results, "config": cfg, "paths": paths, "markdown": markdown,
            "summary": summary, "run_root": run_root}


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


def write_tables(stem: str, out: Path, meta: dict[str, Any], cfg: AblationConfig, dataset: str,
                 quick: bool, seeds: Sequence[int], rows: list[dict[str, Any]],
                 per_seed: list[dict[str, Any]], analysis_rows: list[dict[str, Any]],
                 results: list[dict[str, Any]], summary: list[str]) -> tuple[dict[str, Any], str]:
    """Write the table ``<stem>.*`` with its notes, the per-seed table ``<stem>_seeds.*`` and,
    when there are analysis rows, the analysis table and its two histograms; return the paths
    and the markdown of everything written (for :func:`run`, and for the merge of per-seed
    files)."""
    paths: dict[str, Any] = {}
    paths["table"] = write_results(
        stem, rows, out, meta=meta, columns=TABLE_COLUMNS,
        title=f"QSV ablation on {dataset}" + (" (quick)" if quick else ""),
        notes=report.table_notes(cfg, dataset, seeds, summary, meta.get("variant_epochs"),
                                 rows))
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
