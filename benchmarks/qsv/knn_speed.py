"""The time of each kNN back-end (SciPy, exact torch, torch-cluster) on 10K to 1M points.

    python -m benchmarks.qsv.knn_speed [--quick] [--device cuda]

The pipeline lives in :mod:`quest_geometric.pipelines.knn_speed` (shared with the tour); the
command line lives here.
"""
from __future__ import annotations

import argparse

from benchmarks.qsv.pipelines import knn_speed
from benchmarks.qsv.pipelines.knn_speed import run


def main(argv: list[str] | None = None) -> None:
    """Command-line entry of ``python -m benchmarks.qsv.knn_speed``."""
    parser = argparse.ArgumentParser(description=knn_speed.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="up to 100K points")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default="benchmarks/qsv/results")
    args = parser.parse_args(argv)
    result = run(quick=args.quick, device=args.device, out_dir=args.out)
    print(result["markdown"])


if __name__ == "__main__":
    main()
