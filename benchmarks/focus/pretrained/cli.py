"""Command line of ``python -m benchmarks.focus.pretrained``."""
from __future__ import annotations

import argparse
from typing import List, Optional

from benchmarks.focus.pretrained.bounds import write_decode_bounds
from benchmarks.focus.pretrained.config import SPEED_QUICK
from benchmarks.focus.pretrained.reeval import evaluate_saved
from benchmarks.focus.pretrained.speed import run_speed
from benchmarks.focus.pretrained.study import run

#: The command's one-line description (``--help``).
DESCRIPTION = ("Focus composed onto a real pretrained model, SmolLM2-135M (4-bit weights, "
               "offline).")


def main(argv: Optional[List[str]] = None) -> None:
    """Command line of ``python -m benchmarks.focus.pretrained``."""
    p = argparse.ArgumentParser(description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny smoke run (minutes)")
    p.add_argument("--gates", nargs="+", default=["additive", "multiplicative"],
                   choices=["additive", "multiplicative", "straight_through"],
                   help="training gates (default: the two soft gates)")
    p.add_argument("--pair-budget", nargs=2, type=float, default=None, metavar=("R", "MU"),
                   help="charge MU per unit of far-pair share kept above R (train_routers)")
    p.add_argument("--init-from", default=None,
                   help="a save_routers folder the routers of a new run start from")
    p.add_argument("--gate-bias", type=float, default=None, metavar="B",
                   help="the additive gate's b (default 0.5, the top-1 relaxation; 0.125 "
                        "relaxes the top-2 pattern); with --eval-saved, the b of the soft "
                        "rows instead of the recorded one")
    p.add_argument("--tag", default="", help="variant name, appended to run folders and rows")
    p.add_argument("--steps", type=int, default=None, help="router steps (default 300)")
    p.add_argument("--window", type=int, default=64, help="local window w (default 64)")
    p.add_argument("--block", type=int, default=None, help="tokens per block (default 1024)")
    p.add_argument("--eval-block", type=int, default=None,
                   help="evaluate the routers trained on --block blocks on blocks of this "
                        "many tokens (same validation tokens)")
    p.add_argument("--max-minutes", type=float, default=None,
                   help="stop training after this long (checkpointed; rerun to continue)")
    p.add_argument("--train-only", action="store_true",
                   help="train (or resume) the routers and stop; a later run evaluates")
    p.add_argument("--speed", action="store_true", help="only the decoding-speed part")
    p.add_argument("--routers", default=None, help="routers for --speed: a train_routers "
                   "run folder or a save_routers folder (such as the committed ones)")
    p.add_argument("--cache", choices=["dynamic", "static", "both"], default="dynamic",
                   help="KV cache of --speed (default: dynamic, Hugging Face's default)")
    p.add_argument("--contexts", nargs="+", type=int, default=None, metavar="L",
                   help="--speed: prompt lengths (default 1024 4096 8000)")
    p.add_argument("--rounds", type=int, default=None,
                   help="--speed: rounds of alternating decoding (default 3)")
    p.add_argument("--new-tokens", type=int, default=None,
                   help="--speed: tokens each mode decodes per round (default 16)")
    p.add_argument("--name", default=None, help="result file stem")
    p.add_argument("--out", default="benchmarks/focus/results", help="result folder")
    p.add_argument("--run-dir", default="runs/focus_pretrained", help="checkpoint folder")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--eval-saved", nargs="+", default=None, metavar="ROUTERS_DIR",
                   help="only evaluate these save_routers folders (no training), with "
                        "per-block spreads (evaluate_saved)")
    p.add_argument("--bounds-only", nargs="+", default=None, metavar="SPEED_JSON",
                   help="write <name>_bounds.* (decode_bounds) for committed speed tables")
    a = p.parse_args(argv)
    if a.bounds_only:
        for path in a.bounds_only:
            print(write_decode_bounds(path)["paths"]["md"].read_text())
        return
    if a.eval_saved:
        evaluate_saved(a.eval_saved, quick=a.quick, out_dir=a.out, progress=not a.no_progress,
                       gate_bias=a.gate_bias,
                       name=a.name or "focus_pretrained_reeval" + ("_quick" if a.quick else ""))
        return
    if a.speed:
        speed = dict(SPEED_QUICK) if a.quick else {}
        speed.update({k: v for k, v in (("contexts", a.contexts), ("rounds", a.rounds),
                                        ("new_tokens", a.new_tokens)) if v is not None})
        run_speed(routers=a.routers, out_dir=a.out, progress=not a.no_progress, cache=a.cache,
                  **speed,
                  name=a.name or "focus_pretrained_speed" + {"dynamic": "", "static": "_static",
                                                             "both": "_caches"}[a.cache]
                  + ("_quick" if a.quick else ""))
        return
    run(quick=a.quick, out_dir=a.out, run_dir=a.run_dir, gates=a.gates, steps=a.steps,
        block=a.block, window=a.window, progress=not a.no_progress, max_minutes=a.max_minutes,
        train_only=a.train_only, eval_block=a.eval_block,
        pair_budget=tuple(a.pair_budget) if a.pair_budget else None, init_from=a.init_from,
        tag=a.tag, gate_bias=a.gate_bias,
        name=a.name or "focus_pretrained" + ("_quick" if a.quick else "")
        + (f"_eval{a.eval_block}" if a.eval_block else ""))
