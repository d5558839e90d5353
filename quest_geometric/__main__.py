"""Command line: ``python -m quest_geometric tour`` (also the ``quest-geometric`` script)."""
from __future__ import annotations

import argparse
import sys

# Plain text for --help (the module docstring is reStructuredText for the docs).
DESCRIPTION = """\
quest_geometric: QSV quaternion attention, query/key geometry probes and Focus sparse
attention for PyTorch Geometric. The one command, 'tour', runs a small version of each
study on embedded data (no download) and writes a report."""

TOUR_DESCRIPTION = """\
Run a small version of each study on embedded data, with no download: QSV against
standard attention on scikit-learn's digits as sphere graphs (part 'qsv'), Focus
composed onto a small frozen language model against a sliding window (part 'focus'),
a short query/key-geometry run (part 'qk'), and, where the SmolLM2 weights are
installed, a short real-pretrained-model part (part 'pretrained': probe and committed
routers on two validation blocks; otherwise the report says how to add the model).
Minutes on a CPU, peak memory bounded below 2 GB. Writes <out>/report.md with
tables, plots and the files behind them, and prints a summary. The parts are smoke
runs: they show the library at work, not the studies' targets, and the report quotes
the committed full-run results (speed included: the tour times nothing). The torch
threads are chosen from the cores free at the start (printed with the reason)."""

EPILOG = """\
examples:
  python -m quest_geometric tour                    # everything, into ./tour-report
  python -m quest_geometric tour --only focus       # one part
  OMP_NUM_THREADS=1 quest-geometric tour --no-progress --out /tmp/report

errors (a refused --out folder, another tour running on it, a read-only folder, a full
disk, ...) print one line on stderr and exit with status 2; Ctrl-C prints one line and
exits with status 130, leaving a previous report whole."""


#: The tour's parts, in order (the keys of :data:`quest_geometric.tour.PARTS`), named here
#: so that ``--help`` and argument errors answer without importing the tour (and torch).
PART_NAMES = ("qsv", "focus", "qk", "pretrained")


def build_parser() -> argparse.ArgumentParser:
    """The ``quest-geometric`` argument parser; imports nothing heavy."""
    parser = argparse.ArgumentParser(
        prog="quest-geometric", description=DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    tour = sub.add_parser(
        "tour", help="run a small version of every study and write a report",
        description=TOUR_DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    tour.add_argument("--out", default="tour-report", help="report folder (default: tour-report)")
    tour.add_argument("--only", action="append", default=None, metavar="PART",
                      help=f"run only this part ({'|'.join(PART_NAMES)}); may be repeated")
    tour.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    tour.add_argument("--force", action="store_true",
                      help="replace a previous tour report in --out: only the files that tour "
                           "listed in its manifest; a folder holding anything else, the working "
                           "folder, the home folder, a root and a symbolic link are refused")
    tour.add_argument("--results", default=None, metavar="DIR",
                      help="folder of committed results to quote and to load the committed "
                           "routers from, laid out as benchmarks/ (default: the copies shipped "
                           "with the package; the routers of the source checkout where there is "
                           "one)")
    tour.add_argument("--threads", type=int, default=None, metavar="N",
                      help="torch threads (default: OMP_NUM_THREADS if set, else the cores "
                           "free when the tour starts: available cores minus the load "
                           "average; the choice and its reason are printed)")
    tour.add_argument("--no-progress", action="store_true",
                      help="hide every progress bar, the model loader's included (one line per "
                           "part is still printed)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status: 2 and one line on stderr for a user error, 130
    and one line for Ctrl-C. The tour (and torch) is imported only after parsing."""
    args = build_parser().parse_args(argv)
    if args.command != "tour":  # pragma: no cover - argparse allows only 'tour'
        return 0
    unknown = [n for n in dict.fromkeys(args.only or []) if n not in PART_NAMES]
    if unknown:  # the tour says the same; here it answers before torch is imported
        print(f"quest-geometric tour: error: --only: unknown part(s) {', '.join(unknown)}; "
              f"choose from {', '.join(PART_NAMES)}", file=sys.stderr)
        return 2
    try:
        from quest_geometric.tour import TourError, run_tour

        try:
            run_tour(out=args.out, only=args.only, device=args.device, force=args.force,
                     progress=not args.no_progress, results=args.results, threads=args.threads)
        except TourError as e:
            print(f"quest-geometric tour: error: {e}", file=sys.stderr)
            return 2
    except KeyboardInterrupt:
        print("quest-geometric tour: interrupted (Ctrl-C); the report was not written (a "
              "previous one is left as it was)", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
