"""Command line: ``python -m quest_geometric tour`` (also the ``quest-geometric`` script)."""
from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    """The ``quest-geometric`` argument parser."""
    from quest_geometric.tour import PARTS

    parser = argparse.ArgumentParser(prog="quest-geometric", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    tour = sub.add_parser("tour", help="run a small version of every study and write a report")
    tour.add_argument("--out", default="tour-report", help="report folder (default: tour-report)")
    tour.add_argument(
        "--only", action="append", default=None, metavar="PART",
        help=f"run only this part ({'|'.join(PARTS)}); may be repeated",
    )
    tour.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    tour.add_argument("--force", action="store_true", help="overwrite a non-report --out folder")
    tour.add_argument("--full", action="store_true", help="larger settings than the quick default")
    tour.add_argument("--no-progress", action="store_true", help="hide progress bars")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (2 and one line on stderr for user errors)."""
    from quest_geometric.tour import TourError, run_tour

    args = build_parser().parse_args(argv)
    if args.command == "tour":
        try:
            run_tour(
                out=args.out, only=args.only, device=args.device, force=args.force,
                quick=not args.full, progress=not args.no_progress,
            )
        except TourError as e:
            print(f"quest-geometric tour: error: {e}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
