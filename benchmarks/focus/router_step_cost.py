"""Cost of one router-training step at long sequences (issue 54, part 2): seconds, CPU
seconds and peak resident memory of :func:`~quest_geometric.training.train_routers` steps
on blocks of ``--length`` tokens of the training split, a verdict row's routers continued.

    python -m benchmarks.focus.router_step_cost --row K16_top2_w256_distill_s4_c200 --length 4096
    python -m benchmarks.focus.router_step_cost --length 4096 --checkpointing --loss-chunk 512

One JSON line per run is appended to
``benchmarks/focus/results/focus_long_context/router_step_cost.jsonl``; the routers are trained in
a throw-away folder under ``runs/`` and not saved. Run it under an address-space limit
(``ulimit -v``) on a shared machine: a step the allocator refuses is recorded with the limit
(``failed``) instead of inviting the kernel's out-of-memory killer. The step is the
study's own (the same objective, learning rate and straight-through gate,
:data:`~benchmarks.focus.operating_point.TRAIN`), so its time is what a
long-context training run would pay per step on this machine.

``--checkpointing`` trains with ``train_routers(..., gradient_checkpointing=True)`` (each
decoder layer recomputed in the backward, the activations of one layer alive at a time) and
``--loss-chunk C`` with ``loss_chunk=C`` (the LM head and the loss over chunks of ``C``
positions); each line records both (``gradient_checkpointing``, ``loss_chunk``).
"""
import argparse
import json
import resource
import shutil
import time
from pathlib import Path
from typing import Optional

import torch

from benchmarks.focus import long_context as lc

OUT = Path("benchmarks/focus/results/focus_long_context/router_step_cost.jsonl")


def step_cost(row: str, length: int, steps: int, objective: str,
              checkpointing: bool = False, loss_chunk: Optional[int] = None) -> dict:
    """Run ``steps`` training steps of row ``row``'s routers (loaded, then trained on) on
    training-split blocks of ``length`` tokens, with the memory options
    ``gradient_checkpointing=checkpointing`` and ``loss_chunk``; return the timings and peak
    memory."""
    from quest_geometric.datasets.pydoc_text import pydoc_splits
    from benchmarks.focus.operating_point import TRAIN, apply_config
    from quest_geometric.models import load_smollm2
    from quest_geometric.training import freeze_all_but_routers, train_routers

    torch.manual_seed(TRAIN["seed"])
    model, tok = load_smollm2()
    blocks = pydoc_splits(tok, block_size=length).train
    apply_config(model, row)
    freeze_all_but_routers(model)
    run = Path("runs/router_step_cost") / f"{row}_{length}_{objective}"
    shutil.rmtree(run, ignore_errors=True)
    cpu0, t0 = time.process_time(), time.perf_counter()
    out = train_routers(model, blocks, steps, TRAIN["lr"], run, seed=TRAIN["seed"],
                        ckpt_every=10 ** 6, progress=False, objective=objective,
                        gradient_checkpointing=checkpointing, loss_chunk=loss_chunk)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    shutil.rmtree(run, ignore_errors=True)
    return {"row": row, "length": length, "objective": objective, "steps": steps,
            **_options(checkpointing, loss_chunk), "train_blocks": int(blocks.size(0)),
            "seconds_per_step": wall / steps,
            "cpu_seconds_per_step": cpu / steps, "loss": out["curve"],
            "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20,
            **lc.conditions(torch.get_num_threads())}


def _options(checkpointing: bool, loss_chunk: Optional[int]) -> dict:
    return {"gradient_checkpointing": checkpointing, "loss_chunk": loss_chunk}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--row", default=lc.ROWS[0])
    p.add_argument("--length", type=int, default=4096)
    p.add_argument("--steps", type=int, default=1)
    p.add_argument("--objective", default="distill", choices=("distill", "lm"))
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--checkpointing", action="store_true",
                   help="checkpoint the decoder layers (train_routers' gradient_checkpointing)")
    p.add_argument("--loss-chunk", type=int, default=None,
                   help="positions per chunk of the loss (train_routers' loss_chunk)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    limit_gib = None if limit < 0 else limit / 2 ** 30
    try:
        rec = step_cost(args.row, args.length, args.steps, args.objective,
                        args.checkpointing, args.loss_chunk)
        rec["address_space_limit_gib"] = limit_gib
    except RuntimeError as e:  # the allocator refused: record the limit it ran under
        if "allocate" not in str(e):
            raise
        rec = {"row": args.row, "length": args.length, "objective": args.objective,
               "steps": args.steps, **_options(args.checkpointing, args.loss_chunk),
               "failed": str(e).splitlines()[0][:300],
               "address_space_limit_gib": limit_gib,
               "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20,
               **lc.conditions(torch.get_num_threads())}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with OUT.open("a") as fh:
        fh.write(json.dumps(rec) + "\n")
    print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
