"""Command-line entry of ``python -m benchmarks.qsv.ablation`` (the study itself is
:mod:`benchmarks.qsv.ablation_study`), with the merge of per-seed files (:func:`summarise`)
and the CIFAR epoch-time estimate (:func:`estimate_epoch_time`)."""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import torch
from torch_geometric.data import Data

from benchmarks.qsv import ablation_study
from benchmarks.qsv.ablation_study import report
from benchmarks.qsv.ablation_study.config import DATASETS, PAPER_SOURCE, PRESETS, VARIANTS
from benchmarks.qsv.ablation_study.config import AblationConfig
from benchmarks.qsv.ablation_study.data import graph_transform
from benchmarks.qsv.ablation_study.runs import build_model
from benchmarks.qsv.ablation_study.study import run, write_tables
from benchmarks.qsv.ablation_study.summary import aggregate, seed_rows
from quest_geometric._utils import check_choice, resolve_device
from quest_geometric.profile import write_results

#: Title and notes of the CIFAR epoch-time estimate (``--estimate-epoch``).
ESTIMATE_TITLE = "Estimated CIFAR training time per epoch (50,000 images; an estimate)"
ESTIMATE_NOTES = ("Median of a few training steps on synthetic 32x32 images (per-sample graph "
                  "transform, collation, forward, backward, AdamW) times 391 steps; evaluation "
                  "excluded.")


def summarise(seed_files: Sequence[Union[str, os.PathLike]],
              out_dir: Union[str, os.PathLike] = "benchmarks/qsv/results",
              name: str = "qsv_ablation") -> dict[str, Any]:
    """Rebuild the main and per-seed tables from per-seed result files without training:
    the way to merge seeds trained at different times into one table.

    Each file is a ``<stem>_seeds.json`` written by
    :func:`~benchmarks.qsv.ablation_study.run` (read as JSON data only).
    They must share the dataset, the ``quick`` flag and the configuration, and agree on the
    epochs of any variant trained longer (``variant_epochs``); a (variant, seed) present in
    several files must have the same result in each. The analysis table is not rewritten
    (it needs the checkpoints).

    Args:
        seed_files (sequence of path): the per-seed JSON files.
        out_dir (path): result folder. (default: ``'benchmarks/qsv/results'``)
        name (str): file stem. (default: ``'qsv_ablation'``)

    Returns:
        dict: ``rows``, ``seed_rows``, ``paths``, ``markdown``, ``summary``.

    Raises:
        ValueError: no file, or files from different settings or with conflicting rows.
    """
    if not seed_files:
        raise ValueError("summarise: 'seed_files' must name at least one _seeds.json file")
    metas, by_key = [], {}
    for f in seed_files:
        doc = json.loads(Path(f).read_text())
        if not isinstance(doc, dict) or "meta" not in doc or "rows" not in doc:
            raise ValueError(f"summarise: {os.fspath(f)!r} is not a per-seed results file "
                             f"(expected a JSON object with 'meta' and 'rows')")
        metas.append(doc["meta"])
        for r in doc["rows"]:
            key = (str(r["variant"]), int(r["seed"]))
            if key in by_key and by_key[key] != r:
                raise ValueError(f"summarise: {key[0]} seed {key[1]} differs between the "
                                 f"files ({by_key[key]} against {r})")
            by_key[key] = r
    for k in ("dataset", "quick", "config"):
        values = {json.dumps(m.get(k), sort_keys=True) for m in metas}
        if len(values) > 1:
            raise ValueError(f"summarise: the files differ in {k!r}: {sorted(values)}")
    variant_epochs: dict[str, int] = {}
    for m in metas:  # a file that ran a variant longer; files without that variant agree
        for v, e in (m.get("variant_epochs") or {}).items():
            if variant_epochs.setdefault(v, e) != e:
                raise ValueError(f"summarise: the files differ in 'variant_epochs' for {v!r}: "
                                 f"{variant_epochs[v]} and {e}")
    for (v, s), r in by_key.items():
        expected = variant_epochs.get(v, metas[0]["config"]["epochs"])
        if r.get("epochs") is not None and int(r["epochs"]) != int(expected):
            raise ValueError(f"summarise: {v} seed {s} trained {r['epochs']} epochs, the "
                             f"files' setting says {expected}")
    meta0 = metas[0]
    dataset, quick = meta0["dataset"], bool(meta0["quick"])
    check_choice(dataset, "dataset", DATASETS, where="qsv_ablation")
    config = dict(meta0["config"])
    config["sphere_sizes"] = tuple(config["sphere_sizes"])
    cfg = AblationConfig(**config)
    order = {v: i for i, v in enumerate(VARIANTS)}
    results = [{**r, "analysis": None} for _, r in
               sorted(by_key.items(), key=lambda kv: (order[kv[0][0]], kv[0][1]))]
    for r in results:
        for k in ("acc", "train_acc", "train_clean_acc", "epoch_s"):
            if r.get(k) is None:
                r[k] = math.nan
    rows = aggregate(results, dataset)
    per_seed = seed_rows(results)
    summary = report.findings(rows, [])
    seeds = sorted({int(r["seed"]) for r in results})
    meta = {"dataset": dataset, "quick": quick, "seeds": seeds, "device": meta0.get("device"),
            "threads": meta0.get("threads"), "world_size": meta0.get("world_size"),
            "config": meta0["config"], "variant_epochs": variant_epochs or None,
            "paper_numbers": PAPER_SOURCE[dataset],
            "merged_from": [{"file": Path(f).name, "date": m.get("date"),
                             "seeds": m.get("seeds")} for f, m in zip(seed_files, metas)]}
    stem = f"{name}_{dataset}{'_quick' if quick else ''}"
    paths, markdown = write_tables(stem, Path(out_dir), meta, cfg, dataset, quick, seeds, rows,
                             per_seed, [], results, summary)
    return {"rows": rows, "seed_rows": per_seed, "paths": paths, "markdown": markdown,
            "summary": summary}


def estimate_epoch_time(cfg: Optional[AblationConfig] = None, variants: Sequence[str] = VARIANTS,
                        steps: int = 3, train_size: int = 50_000,
                        device: Union[str, torch.device] = "cpu", image_size: int = 32,
                        channels: int = 3, num_classes: int = 10) -> list[dict[str, Any]]:
    """Estimated training time of one CIFAR epoch per variant, from a few training steps
    on synthetic images, the per-sample graph transform included: the median over ``steps``
    timed steps (transform ``cfg.batch_size`` random images one by one, collate, forward,
    backward, AdamW step) times ``ceil(train_size / batch_size)``. Evaluation is excluded.

    Returns:
        list[dict]: ``variant``, ``params``, ``s_per_step``, ``est_epoch_s``,
        ``est_epoch_min``.
    """
    from torch_geometric.data import Batch

    from quest_geometric.profile import time_function
    from quest_geometric.training.tasks import ClassificationTask

    cfg = cfg or PRESETS["cifar10"]["full"]
    dev = resolve_device(str(device))
    gen = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (cfg.batch_size, channels, image_size, image_size),
                           generator=gen, dtype=torch.uint8)
    labels = torch.randint(0, num_classes, (cfg.batch_size,), generator=gen)
    task = ClassificationTask()
    rows = []
    for v in variants:
        graph = graph_transform(v, cfg)

        def make_batch() -> Batch:
            items = []
            for b in range(cfg.batch_size):
                d = Data(image=images[b].float().div(255.0), y=labels[b:b + 1])
                items.append(graph(d) if graph is not None
                             else Data(image=d.image.unsqueeze(0), y=d.y))
            return Batch.from_data_list(items)

        sample = make_batch()
        in_ch, nodes = (channels, None) if graph is None else (
            sample.x.size(1), sample.num_nodes // cfg.batch_size)
        torch.manual_seed(0)
        model = build_model(v, cfg, in_ch, num_classes, nodes).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)

        def step() -> None:
            batch = make_batch().to(dev)
            loss, _ = task.training_step(model, batch)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        t = time_function(step, warmup=1, repeat=steps, device=dev)
        per_epoch = t["median_s"] * math.ceil(train_size / cfg.batch_size)
        rows.append({"variant": v, "params": sum(p.numel() for p in model.parameters()),
                     "batch_size": cfg.batch_size, "s_per_step": t["median_s"],
                     "est_epoch_s": per_epoch, "est_epoch_min": per_epoch / 60.0})
    return rows



def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    """Command-line entry of ``python -m benchmarks.qsv.ablation``."""
    p = argparse.ArgumentParser(description=ablation_study.__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="digits", choices=DATASETS)
    p.add_argument("--root", default=None, help="CIFAR root folder (torchvision layout works)")
    p.add_argument("--download", action="store_true", help="download CIFAR when absent")
    p.add_argument("--seeds", type=int, nargs="+", default=None)
    p.add_argument("--epochs", type=int, default=None)
    p.add_argument("--quick", action="store_true", help="small preset, one seed (smoke test)")
    p.add_argument("--variants", nargs="+", default=None, choices=VARIANTS)
    p.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    p.add_argument("--analyse", action="store_true",
                   help="entropy / rotation-angle histograms and test-time ablations")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    p.add_argument("--out", default="benchmarks/qsv/results")
    p.add_argument("--channels", type=int, default=None)
    p.add_argument("--heads", type=int, default=None)
    p.add_argument("--num-layers", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--positions", default=None, choices=("features", "embedding", "none"))
    p.add_argument("--train-limit", type=int, default=None,
                   help="use only the first N training images (e.g. 300)")
    p.add_argument("--augment", default=None, action=argparse.BooleanOptionalAction,
                   help="the dataset's augmentation on the training split (digits preset: off)")
    p.add_argument("--eval-every", type=int, default=None)
    p.add_argument("--name", default="qsv_ablation",
                   help="file stem of the tables (e.g. qsv_ablation_300 for --train-limit 300)")
    p.add_argument("--variant-epochs", nargs="+", default=None, metavar="VARIANT=EPOCHS",
                   help="train these variants longer (e.g. no_transport=120)")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--estimate-epoch", action="store_true",
                   help="only estimate the CIFAR epoch time from a few synthetic steps")
    p.add_argument("--estimate-steps", type=int, default=3)
    p.add_argument("--from-seeds", nargs="+", default=None, metavar="SEEDS_JSON",
                   help="train nothing: rebuild the table from these per-seed files "
                        "(<stem>_seeds.json), merging seeds trained at different times")
    args = p.parse_args(argv)
    if args.from_seeds:
        result = summarise(args.from_seeds, out_dir=args.out, name=args.name)
        print(result["markdown"])
        return result
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    overrides = dict(channels=args.channels, heads=args.heads, num_layers=args.num_layers,
                     batch_size=args.batch_size, lr=args.lr, positions=args.positions,
                     train_limit=args.train_limit, augment=args.augment,
                     eval_every=args.eval_every)
    if args.estimate_epoch:
        cfg = PRESETS["cifar10"]["full"].replace(**overrides)
        rows = estimate_epoch_time(cfg, args.variants or VARIANTS, steps=args.estimate_steps,
                                   device=args.device)
        kind = resolve_device(args.device, "--device").type
        paths = write_results(
            f"qsv_ablation_cifar_epoch_estimate_{kind}", rows, args.out,
            meta={"device": args.device, "threads": torch.get_num_threads(),
                  "config": dataclasses.asdict(cfg), "steps": args.estimate_steps},
            title=ESTIMATE_TITLE, notes=ESTIMATE_NOTES)
        print(paths["md"].read_text())
        return {"rows": rows, "paths": paths}
    result = run(dataset=args.dataset, seeds=args.seeds, epochs=args.epochs, quick=args.quick,
                 device=args.device, out_dir=args.out, progress=not args.no_progress,
                 analyse=args.analyse, variants=args.variants, root=args.root,
                 download=args.download, threads=args.threads, name=args.name,
                 variant_epochs=_parse_variant_epochs(p, args.variant_epochs), **overrides)
    if result["markdown"]:
        print(result["markdown"])
    return result


def _parse_variant_epochs(parser: argparse.ArgumentParser, items: Optional[list[str]]
                          ) -> Optional[dict[str, int]]:
    """``['no_transport=120']`` -> ``{'no_transport': 120}`` (a clear parser error otherwise)."""
    if not items:
        return None
    out = {}
    for item in items:
        variant, sep, epochs = item.partition("=")
        if not sep or not epochs.strip().isdigit():
            parser.error(f"--variant-epochs: expected VARIANT=EPOCHS (got {item!r})")
        out[variant.strip()] = int(epochs)
    return out


if __name__ == "__main__":
    main()
