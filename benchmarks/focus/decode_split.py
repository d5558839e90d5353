"""Where one cached decoding step's time goes: full attention against Focus hard top-1 and
top-2 on a SmolLM2-135M-shaped stack, split into the KV-cache update, the attention over the
cached keys, Focus's routing and the rest (projections, MLPs, norms, LM head, Python).

    python -m benchmarks.focus.decode_split [--quick] [--threads 1 2] [--contexts 1024 4096 8192]

The model and the synthetic contexts are those of
:mod:`benchmarks.focus.decode_step`
(random weights, each layer's cache filled with random keys and values and its Focus state
with the routing of random hidden states). Each part is timed with ``time.perf_counter``
around the function that does it, summed over the 30 layers:

* ``cache_ms``: ``Cache.update`` (Hugging Face's dynamic cache concatenates the keys and
  values at every step; both modes call it);
* ``attention_ms``: ``sdpa_attention_forward`` for full attention (Hugging Face's SDPA
  call), ``focus_decode_attention`` for Focus (its fast step: the window and the group-set
  stores, or one masked SDPA when most keys are kept);
* ``routing_ms``: Focus's routing of the new token (``route_step``);
* ``rest_ms``: the step's time minus the three.

The question it answers: how much of the difference between the modes is the attention
itself, how much Focus's routing, and how much a cost both pay (the cache update). The
command line is ``python -m benchmarks.focus.decode_split``, a thin wrapper around :func:`main`.
"""
from __future__ import annotations

import random
import statistics
import time
from collections import defaultdict
from typing import Any, Dict, List, Optional

import torch

from quest_geometric.profile import write_results
from benchmarks.focus.time_split import Timers
from benchmarks.focus.decode_step import (
    MODES,
    ROUND_SEED,
    DecodeMode,
    build_model,
    common_arguments,
    kept_share,
    synthetic_cache,
)

__all__ = ["PARTS", "main", "run"]

#: The parts of a step timed on their own (the rest is ``rest_ms``).
PARTS = ("cache_ms", "attention_ms", "routing_ms")


def _install() -> Timers:
    import transformers.cache_utils as cu
    import transformers.integrations.sdpa_attention as sd

    import quest_geometric.nn.focus.composed as comp

    t = Timers()
    t.wrap(cu.Cache, "update", "cache_ms")
    t.wrap(sd, "sdpa_attention_forward", "attention_ms")
    t.wrap(comp, "focus_decode_attention", "attention_ms")
    t.wrap(comp, "route_step", "routing_ms")
    return t


def run(contexts=(1024, 4096, 8192), threads=(1, 2), layers: int = 30, window: int = 64,
        num_groups: int = 4, steps: int = 4, rounds: int = 5,
        out_dir: str = "benchmarks/focus/results", name: str = "focus_decode_split",
        progress: bool = True) -> Dict[str, Any]:
    """Time each decoding mode (full attention, Focus top-1 and top-2) on a dynamic cache,
    split into its parts (:data:`PARTS` and the rest), for every context length and thread
    count, and write the table ``name`` (CSV, JSON, markdown) to ``out_dir``.

    Returns:
        ``{"rows": [...], "paths": {...}}``: one row per (context, threads, mode) with the
        median step time and parts (ms), the ratio to full attention and the share of the
        cached keys read; the paths of the files written.
    """
    import transformers.integrations.sdpa_attention as sd
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    model = build_model(layers, window, num_groups)
    timers = _install()
    # the Llama layers call the SDPA kernel through this registry: point it at the timed one
    saved_kernel = ALL_ATTENTION_FUNCTIONS["sdpa"]
    ALL_ATTENTION_FUNCTIONS["sdpa"] = sd.sdpa_attention_forward
    rows: List[Dict[str, Any]] = []
    try:
        for ctx in contexts:
            cap = ctx + (rounds + 2) * steps * len(MODES) + 8
            caches = {m: synthetic_cache(model, ctx, k, "dynamic", cap) for m, k in MODES.items()}
            share = {m: (kept_share(model, caches[m], window) if k else 1.0)
                     for m, k in MODES.items()}
            for nt in threads:
                torch.set_num_threads(nt)
                fns = {m: DecodeMode(model, caches[m], k, steps) for m, k in MODES.items()}
                per: Dict[str, Dict[str, List[float]]] = {
                    m: defaultdict(list) for m in MODES}
                load_before = open("/proc/loadavg").read().split()[0]
                order = list(fns)
                shuffle = random.Random(ROUND_SEED)
                for r in range(rounds + 1):  # round 0 warms up, in the given order
                    if r > 0:
                        shuffle.shuffle(order)  # a fresh order every timed round
                    for m in order:
                        fn = fns[m]
                        timers.acc.clear()
                        t0 = time.perf_counter()
                        fn()
                        total = time.perf_counter() - t0
                        if r == 0:
                            continue
                        per[m]["step_ms"].append(total / steps * 1e3)
                        for part in PARTS:
                            per[m][part].append(timers.acc.get(part, 0.0) / steps * 1e3)
                        per[m]["rest_ms"].append(
                            (total - sum(timers.acc.get(p, 0.0) for p in PARTS)) / steps * 1e3)
                load = open("/proc/loadavg").read().split()[0]
                for m in MODES:
                    row = {"context": ctx, "threads": nt, "mode": m}
                    for key in ("step_ms", *PARTS, "rest_ms"):
                        row[key] = statistics.median(per[m][key])
                    ratios = [f / t for f, t in zip(per["full"]["step_ms"], per[m]["step_ms"])]
                    row["speed_vs_full"] = statistics.median(ratios)
                    row["round_ratios"] = ratios
                    row["keys_read"] = share[m]
                    row["load1"] = f"{load_before}->{load}"
                    rows.append(row)
                if progress:
                    print(f"[{ctx} x{nt}] " + "; ".join(
                        f"{r['mode']} {r['step_ms']:.1f} ms (cache {r['cache_ms']:.1f}, attn "
                        f"{r['attention_ms']:.1f}, route {r['routing_ms']:.1f})"
                        for r in rows[-len(MODES):]), flush=True)
            del caches
    finally:
        timers.restore()
        ALL_ATTENTION_FUNCTIONS["sdpa"] = saved_kernel
    meta = {"model": f"random-weight Llama of SmolLM2-135M's shape, {layers} layers",
            "cache": "dynamic", "window": window, "K": num_groups, "steps_per_round": steps,
            "rounds": rounds, "round_order": f"shuffled every round (seed {ROUND_SEED})",
            "routers": "fresh (untrained), routing random hidden states",
            "seed": 0, "loadavg_end": open("/proc/loadavg").read().strip()}
    notes = ("Medians over the rounds of the per-step times (ms), each part summed over the "
             "layers: `cache_ms` Cache.update, `attention_ms` the attention over the cached "
             "keys (Hugging Face's sdpa_attention_forward / Focus's focus_decode_attention), "
             "`routing_ms` Focus's routing of the new token, `rest_ms` the remainder; "
             "`speed_vs_full` the true median over rounds of full attention's step time over "
             "the mode's (the modes in an order shuffled every round; every round's ratio in "
             "the JSON file, `round_ratios`); `keys_read` the "
             "mean share of the cached keys the newest token attends to. load1: "
             "/proc/loadavg's 1-minute load before->after each block.")
    paths = write_results(name, rows, out_dir, meta=meta, notes=notes,
                          title="Where a cached decoding step goes, SmolLM2-135M shape")
    return {"rows": rows, "paths": paths}


def main(argv: Optional[List[str]] = None) -> None:
    """The command line of ``python -m benchmarks.focus.decode_split`` (``--help`` lists it)."""
    a = common_arguments(__doc__).parse_args(argv)
    if a.quick:
        a.contexts, a.layers, a.rounds, a.steps = [256, 1024], 4, 2, 2
    t0 = time.perf_counter()
    run(a.contexts, a.threads, a.layers, steps=a.steps, rounds=a.rounds, out_dir=a.out,
        name=a.name or ("focus_decode_split_quick" if a.quick else "focus_decode_split"))
    print(f"done in {time.perf_counter() - t0:.0f} s")



if __name__ == "__main__":
    from benchmarks._entry import quiet_tokenizers

    quiet_tokenizers()
    main()
