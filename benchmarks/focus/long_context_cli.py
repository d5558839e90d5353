"""Focus at 8K (issue 54, part 1): trailing loss and loss by position of SmolLM2-135M on
single long documents, full attention, context cuts and the operating-point rows.

    python -m benchmarks.focus.long_context_cli run [--windows 6] [--max-minutes M]  # resumable
    python -m benchmarks.focus.long_context_cli run --configs NAME [NAME ...]  # some only
    python -m benchmarks.focus.long_context_cli run --sets ood   # one set's windows only
    python -m benchmarks.focus.long_context_cli table
    python -m benchmarks.focus.long_context_cli windows   # only the windows' record
    python -m benchmarks.focus.long_context_cli --quick   # tiny random-weight Llama, seconds

See :mod:`benchmarks.focus.long_context` (the logic) and ``long_context_report`` (the table).
"""
import argparse
import json
from pathlib import Path

import torch

from benchmarks.focus import long_context as lc

OUT = Path("benchmarks/focus/results/focus_long_context")


def _windows(tok, args: argparse.Namespace) -> dict:
    """The windows of both sets, their record written to ``OUT/windows.json``."""
    windows = {"ood": lc.ood_windows(tok)[:args.windows + args.extra_ood],
               "test": lc.test_windows(tok, args.windows)}
    lc.train_coverage(tok, windows)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "windows.json").write_text(json.dumps(lc.window_records(windows), indent=1) + "\n")
    return windows


def _run(args: argparse.Namespace) -> None:
    from quest_geometric.models import load_smollm2

    torch.set_num_threads(args.threads)
    base, tok = load_smollm2()
    windows = _windows(tok, args)
    configs = args.configs or lc.configurations()
    if args.sets:  # the windows of the other sets stay in windows.json, only not run now
        windows = {s: w for s, w in windows.items() if s in args.sets}
    n = lc.run_grid(base, windows, configs, OUT / "cells.jsonl",
                    max_minutes=args.max_minutes, log=lambda m: print(m, flush=True))
    print(f"{n} cells run", flush=True)


def _table(args: argparse.Namespace) -> None:
    from benchmarks.focus import long_context_report as report

    report.write_report(OUT)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny random-weight smoke run")
    sub = p.add_subparsers(dest="cmd")
    r = sub.add_parser("run")
    r.add_argument("--windows", type=int, default=6)
    r.add_argument("--extra-ood", type=int, default=2)
    r.add_argument("--threads", type=int, default=1)
    r.add_argument("--max-minutes", type=float, default=None)
    r.add_argument("--configs", nargs="+", default=None,
                   help="run only these configurations (default: every row's grid)")
    r.add_argument("--sets", nargs="+", choices=("ood", "test"), default=None,
                   help="run only the windows of these sets (default: both)")
    sub.add_parser("table")
    w = sub.add_parser("windows", help="only write windows.json (tokenizer, no model)")
    w.add_argument("--windows", type=int, default=6)
    w.add_argument("--extra-ood", type=int, default=2)
    args = p.parse_args(argv)
    if args.quick:
        from benchmarks.focus import long_context_report as report

        print(json.dumps(report.quick(), indent=1))
    elif args.cmd == "run":
        _run(args)
    elif args.cmd == "windows":
        import transformers

        from quest_geometric.models.smollm2 import SMOLLM2_GGUF, smollm2_path

        _windows(transformers.AutoTokenizer.from_pretrained(smollm2_path(),
                                                            gguf_file=SMOLLM2_GGUF), args)
    elif args.cmd == "table":
        _table(args)
    else:
        p.print_help()


if __name__ == "__main__":
    main()
