"""The masked SDPA of Focus's fast decoding step: which query layout is faster, per thread
count?

    python -m benchmarks.focus.masked_layout [--quick] [--threads 1 2]
                                             [--contexts 1024 4096 8192]

When most cached keys are kept (top-2 of K = 4), the fast decoding step of one sequence runs
one SDPA over the whole cache with a boolean mask (``quest_geometric.nn.focus.decode``). The
H query heads of the new token can sit in two layouts over the H_kv key heads:

* ``packed``: the H / H_kv query heads of a key head on the query axis,
  ``q [1, H_kv, H / H_kv, D]`` against ``k, v [1, H_kv, S, D]`` (what the step does);
* ``gqa``: one query per head, ``q [1, H, 1, D]`` with ``enable_gqa=True``.

Both read every key once per key head and give the same values up to rounding. PyTorch's
CPU kernel spreads its work over (batch x heads x query blocks): ``packed`` has H_kv items,
``gqa`` H. This script times one call of each layout in alternation (median over rounds of
``--calls`` calls; ratio per round) for SmolLM2-135M's heads (H = 9, H_kv = 3, D = 64) and
two other grouped layouts, at each thread count, and checks that the outputs agree. The
command line is ``python -m benchmarks.focus.masked_layout``, a thin wrapper around :func:`main`.
"""
from __future__ import annotations

import argparse
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from quest_geometric.profile import (
    paired_ratio,
    time_interleaved,
    write_results,
)
from quest_geometric.nn.focus.decode import masked_decode_attention

__all__ = ["SHAPES", "layouts", "main", "run"]

#: (H, H_kv, D): SmolLM2-135M, and two other grouped-query layouts
SHAPES: Tuple[Tuple[int, int, int], ...] = ((9, 3, 64), (8, 2, 64), (16, 4, 64))


def layouts(h: int, hkv: int, d: int, s: int, seed: int = 0) -> Dict[str, Any]:
    """The two calls for one new token over ``s`` cached keys (5/6 of them allowed, the
    share top-2 of K = 4 keeps), and their outputs ``[1, H, 1, D]``."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, h, 1, d, generator=g)
    k = torch.randn(1, hkv, s, d, generator=g)
    v = torch.randn(1, hkv, s, d, generator=g)
    mask = torch.rand(s, generator=g) < 5 / 6
    mask[-64:] = True  # the window
    scale = d ** -0.5
    # the fast step's own call (decode.masked_decode_attention), in each layout
    return {"packed": lambda: masked_decode_attention(q, k, v, mask, scale, True),
            "gqa": lambda: masked_decode_attention(q, k, v, mask, scale, False)}


def run(contexts: Sequence[int], threads: Sequence[int], calls: int = 200, rounds: int = 7,
        shapes: Sequence[Tuple[int, int, int]] = SHAPES, out_dir: str = "benchmarks/focus/results",
        name: str = "focus_masked_layout") -> Dict[str, Any]:
    """Time the two query layouts of the masked SDPA (:func:`layouts`) against each other
    for every thread count, head shape and context length, check that their outputs agree,
    and write the table ``name`` (CSV, JSON, markdown) to ``out_dir``.

    Returns:
        ``{"rows": [...], "paths": {...}}``: one row per (threads, shape, context, layout)
        with the time per call, the ratio to the packed layout and its range, and the largest
        difference between the outputs; the paths of the files written.
    """
    rows: List[Dict[str, Any]] = []
    before = torch.get_num_threads()
    try:
        for nt in threads:
            torch.set_num_threads(nt)
            for h, hkv, d in shapes:
                for s in contexts:
                    fns = layouts(h, hkv, d, s)
                    with torch.no_grad():
                        diff = float((fns["packed"]() - fns["gqa"]()).abs().max())

                        def many(fn):
                            return lambda: [fn() for _ in range(calls)]

                        t = time_interleaved({k: many(f) for k, f in fns.items()}, warmup=1,
                                             repeat=rounds)
                    for lay in fns:
                        ratios = sorted(a / b for a, b in zip(t[lay]["times"],
                                                              t["packed"]["times"]))
                        rows.append({"threads": nt, "H": h, "H_kv": hkv, "context": s,
                                     "layout": lay,
                                     "us_per_call": 1e6 * t[lay]["median_s"] / calls,
                                     "vs_packed": paired_ratio(t, lay, "packed"),
                                     "min_ratio": ratios[0], "max_ratio": ratios[-1],
                                     "max_abs_diff": diff})
                    print(f"[layout] {nt} thread(s) H={h} H_kv={hkv} s={s}: " + ", ".join(
                        f"{r['layout']} {r['us_per_call']:.0f} us" for r in rows[-2:]),
                        flush=True)
    finally:
        torch.set_num_threads(before)
    notes = ("`us_per_call`: median over rounds of one masked SDPA call (one new token, "
             "5/6 of the cached keys allowed); `vs_packed`: time against the packed layout, "
             "median of the per-round ratios (below 1: faster than packed), with its range; "
             "`max_abs_diff`: largest difference between the two layouts' outputs.")
    paths = write_results(name, rows, out_dir, meta={"calls_per_round": calls,
                                                    "rounds": rounds}, notes=notes,
                          title="Focus decoding: the masked SDPA's query layout")
    return {"rows": rows, "paths": paths}


def main(argv: Optional[List[str]] = None) -> None:
    """The command line of ``python -m benchmarks.focus.masked_layout`` (``--help`` lists it)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny smoke run (seconds)")
    p.add_argument("--contexts", type=int, nargs="+", default=[1024, 4096, 8192])
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--out", default="benchmarks/focus/results")
    p.add_argument("--name", default=None)
    a = p.parse_args(argv)
    if a.quick:
        a.contexts, a.calls, a.rounds = [256], 5, 2
    t0 = time.perf_counter()
    run(a.contexts, a.threads, a.calls, a.rounds, shapes=SHAPES[:1] if a.quick else SHAPES,
        out_dir=a.out, name=a.name or ("focus_masked_layout_quick" if a.quick
                                       else "focus_masked_layout"))
    print(f"done in {time.perf_counter() - t0:.0f} s")



if __name__ == "__main__":
    main()
