"""Command-line entry of ``python -m benchmarks.qsv.ablation``."""
from __future__ import annotations

import argparse
import dataclasses
from typing import Any, Optional

import torch

from quest_geometric._utils import resolve_device
from quest_geometric.profile import write_results
from quest_geometric.pipelines.qsv_ablation import report
from quest_geometric.pipelines.qsv_ablation.config import DATASETS, PRESETS, VARIANTS
from quest_geometric.pipelines.qsv_ablation.runs import estimate_epoch_time
from quest_geometric.pipelines.qsv_ablation.study import run, summarise


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    """Command-line entry of ``python -m benchmarks.qsv.ablation``."""
    from quest_geometric.pipelines import qsv_ablation

    p = argparse.ArgumentParser(description=qsv_ablation.__doc__,
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
            title=report.ESTIMATE_TITLE, notes=report.ESTIMATE_NOTES)
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
