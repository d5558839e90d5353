"""QSVConv vs TransformerConv / GATv2Conv (forward + backward, peak memory) on batched
sphere graphs.

    python -m benchmarks.qsv.layer_speed [--quick] [--threads 1] [--device cuda]

The pipeline lives in :mod:`quest_geometric.pipelines.qsv_layer_speed` (shared with the
tour); the command line and the ``--rewrite`` of a committed table live here.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Union

from quest_geometric.pipelines import qsv_layer_speed
from quest_geometric.pipelines.qsv_layer_speed import run, write_tables


def rewrite(results: Union[str, Path], out_dir: Union[str, Path, None] = None) -> dict[str, Any]:
    """Rewrite a committed table from its JSON file (read as data) with the parameter and
    FLOP columns, timing nothing: the measured columns and the metadata are kept.

    Args:
        results (path): ``qsv_layer_speed.json``.
        out_dir (path, optional): where to write (default: beside ``results``).

    Returns:
        dict: ``layers`` and ``markdown``.
    """
    path = Path(results)
    doc = json.loads(path.read_text())
    layers, meta = doc["rows"], doc["meta"]
    p = write_tables(layers, Path(out_dir) if out_dir is not None else path.parent, meta)
    return {"layers": layers, "markdown": p["md"].read_text()}


def main(argv: list[str] | None = None) -> None:
    """Command-line entry of ``python -m benchmarks.qsv.layer_speed``."""
    parser = argparse.ArgumentParser(description=qsv_layer_speed.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="batch 8")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, nargs="+", default=None,
                        help="graphs per batch (default: 16 64; 8 with --quick)")
    parser.add_argument("--threads", type=int, nargs="+", default=None,
                        help="torch intra-op thread counts (default: 1 and torch's choice)")
    parser.add_argument("--compiled", action="store_true",
                        help="also time torch.compile of QSVConv and TransformerConv")
    parser.add_argument("--backend", default="inductor",
                        help="torch.compile backend of the --compiled rows")
    parser.add_argument("--out", default="benchmarks/qsv/results")
    parser.add_argument("--rewrite", default=None, metavar="JSON",
                        help="time nothing: rewrite this committed table with the parameter "
                             "and FLOP columns")
    args = parser.parse_args(argv)
    if args.rewrite:
        print(rewrite(args.rewrite, args.out)["markdown"])
        return
    result = run(quick=args.quick, device=args.device, out_dir=args.out,
                 batch_size=args.batch_size, threads=args.threads, compiled=args.compiled,
                 backend=args.backend)
    print(result["markdown"])


if __name__ == "__main__":
    main()
