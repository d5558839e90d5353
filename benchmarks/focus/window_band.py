"""Focus's 'blocks' back-end on the window plus sinks at 8K, against full causal SDPA and its
peer, the plain loop of masked SDPA calls over window-sized chunks.

    python -m benchmarks.focus.window_band [--quick] [--threads 1 2] [--length 8192]
                                           [--windows 708 1281] [--rounds 5]

The sliding window plus 4 sinks (:class:`~quest_geometric.nn.focus.WindowOnlyRouter`) keeps
about :math:`w / (N / 2)` of the causal pairs; a loop of masked SDPA calls, each chunk of
:math:`w` queries against itself, the chunk before and the sinks (:func:`chunk_loop`, the
15-line peer), is what any user could write. This script times, in one process, in
shuffled rounds at each thread count, the forward (a prefill) of SmolLM2-135M's attention
shape (9 query heads of 64, its 3 key/value heads expanded to 9 as the composed layer passes
them): one causal SDPA call, the peer, the 'blocks' back-end by the library's rule
(:func:`~quest_geometric.nn.focus.focus_blocks_attention`, empty group sets), then each of
the two paths that rule chooses between: the query chunks at every window
(``BlocksConfig.window_chunks_max_window = None``) and the general band
(``BlocksConfig.window_chunks = None``: split from ``BlocksConfig.split_band_min_window``),
and checks that they agree. ``python -m benchmarks.focus.window_band`` runs
:func:`main`.
"""
from __future__ import annotations

import argparse
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch
import torch.nn.functional as F

from quest_geometric.profile import (
    paired_ratio,
    round_ratios,
    time_interleaved,
    write_results,
)

__all__ = ["WINDOWS", "chunk_loop", "inputs", "variants", "run", "main"]

#: Windows timed: the window plus 4 sinks at 17%, 29% and 85% of the causal pairs at 8,192
#: tokens, on either side of ``BlocksConfig.window_chunks_max_window``.
WINDOWS = (708, 1281, 5036)
#: SmolLM2-135M's attention: query heads, key/value heads, head size.
HEADS, KV_HEADS, DIM = 9, 3, 64


def inputs(n: int, seed: int = 0):
    """``q, k, v`` ``[n, 9, 64]`` (keys and values of 3 heads expanded to 9), float32."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(n, HEADS, DIM, generator=g)
    k, v = (torch.randn(n, KV_HEADS, DIM, generator=g).repeat_interleave(HEADS // KV_HEADS, 1)
            for _ in range(2))
    return q, k, v


def chunk_loop(q, k, v, window: int, num_sinks: int = 4):
    """The peer: per chunk of ``window`` queries, one masked SDPA call over the sinks, the
    chunk before and itself (causal by position). ``[N, H, D]`` in and out."""
    n = q.size(0)
    qh, kh, vh = (x.transpose(0, 1) for x in (q, k, v))
    out = torch.empty_like(qh)
    pos = torch.arange(n)
    for a in range(0, n, window):
        e, lo = min(n, a + window), max(0, a - window)
        keys = torch.cat([pos[:min(num_sinks, lo)], pos[lo:e]])
        i, j = pos[a:e, None], keys[None]
        ok = (j <= i) & ((i - j <= window) | (j < num_sinks))
        out[:, a:e] = F.scaled_dot_product_attention(qh[:, a:e], kh[:, keys], vh[:, keys],
                                                     attn_mask=ok)
    return out.transpose(0, 1)


def variants(n: int, window: int, num_sinks: int = 4, seed: int = 0
             ) -> Dict[str, Callable[[], torch.Tensor]]:
    """The timed forwards, each returning ``[n, H, D]``."""
    from quest_geometric.nn.focus import focus_blocks_attention
    from quest_geometric.nn.focus.config import blocks_config

    q, k, v = inputs(n, seed)
    qh, kh, vh = (x.transpose(0, 1).unsqueeze(0).contiguous() for x in (q, k, v))
    groups = torch.zeros(n, 0, dtype=torch.long)

    def blocks(**tuning):
        def fn():
            with blocks_config(**tuning):
                return focus_blocks_attention(q, k, v, groups, window, None, True, 1,
                                              fused=True, num_sinks=num_sinks)
        return fn

    return {"causal sdpa": lambda: F.scaled_dot_product_attention(
                qh, kh, vh, is_causal=True)[0].transpose(0, 1),
            "chunk loop": lambda: chunk_loop(q, k, v, window, num_sinks),
            "blocks": blocks(),
            "blocks, chunks": blocks(window_chunks_max_window=None),
            "blocks, general band": blocks(window_chunks=None)}


def run(length: int, windows: Sequence[int], threads: Sequence[int], rounds: int = 5,
        out_dir: str = "benchmarks/focus/results", name: str = "focus_window_band",
        seed: int = 0) -> Dict[str, Any]:
    """Time :func:`variants` per thread count and window in shuffled rounds (forward only,
    no autograd), check they agree with the peer, write the table ``name`` to ``out_dir``.

    Returns:
        ``{"rows": [...], "paths": {...}}``: per (threads, window, variant) the median time,
        the median per-round ratio of causal SDPA's time to it (above 1: faster) with its
        range, and the largest difference from the peer's output.
    """
    from quest_geometric.nn.focus.config import current_blocks_config

    cfg = current_blocks_config()
    rows: List[Dict[str, Any]] = []
    before = torch.get_num_threads()
    try:
        for nt in threads:
            torch.set_num_threads(nt)
            for w in windows:
                fns = variants(length, w, seed=seed)
                with torch.no_grad():
                    ref = fns["chunk loop"]()
                    diffs = {key: float((f() - ref).abs().max()) for key, f in fns.items()}
                    t = time_interleaved(fns, warmup=1, repeat=rounds, shuffle_seed=seed)
                for key in fns:
                    r = [1.0 / x for x in round_ratios(t, key, "causal sdpa")]
                    rows.append({"threads": nt, "tokens": length, "window": w, "variant": key,
                                 "ms": 1e3 * t[key]["median_s"],
                                 "speedup": 1.0 / paired_ratio(t, key, "causal sdpa"),
                                 "speedup_min": min(r), "speedup_max": max(r),
                                 "max_abs_diff": diffs[key]})
                print(f"[window band] {nt} thread(s) w={w}: " + ", ".join(
                    f"{r['variant']} {r['ms']:.0f} ms" for r in rows[-len(fns):]), flush=True)
    finally:
        torch.set_num_threads(before)
    notes = (f"{length} tokens, SmolLM2-135M's attention (9 query heads of 64; 3 key/value "
             "heads expanded to 9), float32, causal, forward only, the window plus 4 sinks. "
             "`causal sdpa`: one causal SDPA call over all pairs; `chunk loop`: the peer, one "
             "masked SDPA call per chunk of w queries against the sinks, the chunk before and "
             "itself; `blocks`: focus_blocks_attention with empty group sets by the library's "
             "rule (query chunks of `window_chunk_size(w)` tokens up to "
             "`window_chunks_max_window`, wider the split band); `blocks, chunks`: the same "
             "with BlocksConfig.window_chunks_max_window = None (the query chunks at every "
             "window); `blocks, general band`: "
             "the same with BlocksConfig.window_chunks = None (the split band from "
             "`split_band_min_window` on one causal sequence, else the masked band). `ms`: "
             "median over rounds; "
             "`speedup`: median of the per-round ratios causal sdpa / variant, range beside; "
             "`max_abs_diff`: largest difference from the peer's output. Rounds in a seeded "
             "shuffled order.")
    meta = {"rounds": rounds, "seed": seed, "length": length,
            "window_chunks": repr(cfg.window_chunks),
            "window_chunks_max_window": cfg.window_chunks_max_window,
            "split_band_min_window": cfg.split_band_min_window}
    paths = write_results(name, rows, out_dir, meta=meta, notes=notes,
                          title="Focus 'blocks' on the window plus sinks against causal SDPA "
                                "and the chunked SDPA loop")
    return {"rows": rows, "paths": paths}


def main(argv: Optional[List[str]] = None) -> None:
    """The command line, ``python -m benchmarks.focus.window_band`` (``--help`` lists it)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny smoke run (seconds)")
    p.add_argument("--length", type=int, default=8192)
    p.add_argument("--windows", type=int, nargs="+", default=list(WINDOWS))
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="benchmarks/focus/results")
    a = p.parse_args(argv)
    if a.quick:
        a.length, a.windows, a.rounds = 1024, [100], 2
    t0 = time.perf_counter()
    run(a.length, a.windows, a.threads, a.rounds, out_dir=a.out, seed=a.seed,
        name="focus_window_band_quick" if a.quick else "focus_window_band")
    print(f"done in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
