"""Focus attention ('blocks', 'edges') vs full causal SDPA: forward time and memory vs length.

    python -m benchmarks.focus.speed [--quick] [--device cuda]

The pipeline lives in :mod:`quest_geometric.pipelines.focus_speed` (shared with the tour);
the command line lives here.
"""
from __future__ import annotations

import argparse
from typing import Optional

from benchmarks.focus import focus_speed
from benchmarks.focus.focus_speed import run


def main(argv: Optional[list[str]] = None) -> None:
    """Command-line entry of ``python -m benchmarks.focus.speed``."""
    parser = argparse.ArgumentParser(description=focus_speed.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="up to 16K tokens, 2 repeats")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--lengths", type=int, nargs="*", default=None)
    parser.add_argument("--repeat", type=int, default=None)
    parser.add_argument("--edges-max", type=int, default=None)
    parser.add_argument("--no-memory", action="store_true")
    parser.add_argument("--out", default="benchmarks/focus/results")
    parser.add_argument("--allocator", choices=("reuse", "system"), default="reuse",
                        help="CPU: keep freed memory for reuse (default) or glibc's default")
    parser.add_argument("--name", default=None, help="file stem of the results")
    parser.add_argument("--max-seconds", type=float, default=90.0,
                        help="time budget of the timed rounds of one length")
    args = parser.parse_args(argv)
    result = run(quick=args.quick, device=args.device, out_dir=args.out, lengths=args.lengths,
                 repeat=args.repeat, edges_max=args.edges_max, memory=not args.no_memory,
                 allocator=args.allocator, name=args.name, max_seconds=args.max_seconds)
    print(result["markdown"])


if __name__ == "__main__":
    main()
