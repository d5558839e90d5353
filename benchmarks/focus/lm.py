"""Focus language-model quality: full attention, Focus from scratch, routers on a frozen model.

    python -m benchmarks.focus.lm [--quick] [--data PATH] [--gates additive multiplicative]

The pipeline lives in :mod:`quest_geometric.pipelines.focus_lm` (shared with the tour); the
command line and the ``--rewrite`` of a committed table live here.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Optional

from benchmarks.focus import focus_lm
from benchmarks.focus.focus_lm import GATES, run, write_tables


def rewrite(results: str | Path, out_dir: str | Path | None = None) -> dict[str, Any]:
    """Rewrite a committed table from its JSON file (read as data), training nothing: the
    rows and the metadata are kept; the table, targets and notes are rendered again.

    Args:
        results (path): ``<name>.json`` written by
            :func:`~quest_geometric.pipelines.focus_lm.run`.
        out_dir (path, optional): where to write ``<name>.{csv,json,md}`` (default: beside
            ``results``).

    Returns:
        dict: as :func:`~quest_geometric.pipelines.focus_lm.run` (``rows``, ``markdown``,
        ``summary``, ``gate_summary``, ``config``, ``paths``).
    """
    path = Path(results)
    doc = json.loads(path.read_text())
    meta = doc["meta"]
    # the run stored its setting's gates as a tuple (JSON reads a list): the same metadata text
    meta["config"] = {**meta["config"], "gates": tuple(meta["config"]["gates"])}
    return write_tables(doc["rows"], meta, path.stem,
                  Path(out_dir) if out_dir is not None else path.parent)


def main(argv: Optional[list[str]] = None) -> None:
    """Command-line entry of ``python -m benchmarks.focus.lm``."""
    parser = argparse.ArgumentParser(description=focus_lm.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a few-minute smoke run")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--data", default=None,
                        help="text file or WikiText-103 raw directory (default: embedded)")
    parser.add_argument("--run-dir", default=None)
    parser.add_argument("--steps", type=int, default=None,
                        help="override the steps of (a) and (b) (and a third of it for (c))")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--out", default="benchmarks/focus/results")
    parser.add_argument("--gates", nargs="+", choices=GATES, default=list(GATES),
                        help="soft gates to train (b) and (c) with (default: both)")
    parser.add_argument("--name", default="focus_lm", help="file stem of the results")
    parser.add_argument("--no-reuse", action="store_true",
                        help="retrain even where the run folder holds a matching checkpoint")
    parser.add_argument("--rewrite", default=None, metavar="JSON",
                        help="train nothing: rewrite the table of this results file (rows, "
                             "date, machine and versions kept) into --out")
    args = parser.parse_args(argv)
    if args.rewrite:
        print(rewrite(args.rewrite, args.out)["markdown"])
        return
    over: dict[str, Any] = {}
    if args.steps is not None:
        over.update(steps_full=args.steps, steps_focus=args.steps,
                    steps_router=max(1, args.steps // 3))
    if args.seed is not None:
        over["seed"] = args.seed
    result = run(quick=args.quick, device=args.device, out_dir=args.out, data=args.data,
                 run_dir=args.run_dir, reuse=not args.no_reuse, gates=tuple(args.gates),
                 name=args.name, **over)
    print(result["markdown"])


if __name__ == "__main__":
    main()
