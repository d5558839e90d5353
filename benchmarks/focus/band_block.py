"""Focus's 'blocks' back-end: how large a query block should the fused window band run in,
as the window grows, and from which window should the band of the window-plus-sinks pattern
run split into unmasked calls instead?

    python -m benchmarks.focus.band_block [--quick] [--threads 1 2] [--length 8192]
                                          [--windows 64 256 1024 2048] [--blocks 16 32 64]

The fused path of :func:`~quest_geometric.nn.focus.focus_blocks_attention` runs the window
band as one batched masked call over blocks of ``b`` queries, each reading its own
``b + w`` keys through an overlapping strided view: it computes ``b (b + w)`` pairs per block
where the band needs about ``b w + b^2 / 2``, so small blocks waste few pairs, but a masked
flash call over many tiny query blocks runs the kernel far below its speed on large tiles.
With the window of a budget-matched sliding-window baseline (thousands of tokens at 8K) the
balance moves. This script times the fused forward of the window-plus-sinks pattern
(:class:`~quest_geometric.nn.focus.WindowOnlyRouter`'s empty group sets, 4 sinks: the band
is all of the work besides the sink part) at several windows and block sizes
(``BlocksConfig.band_block`` set for the call, the split off), split
(``BlocksConfig.split_band_min_window`` = 1 for the call: chunks of
``w`` tokens, two unmasked flash calls, each kept pair computed once, but the kernel's causal
tiles waste part of each chunk's triangles), against full causal
attention over the same tokens (one SDPA call), for SmolLM2-135M's heads (9 x 64), in
shuffled paired rounds at each thread count, and checks that every variant gives the same
output. The rule ``BlocksConfig.band_blocks`` and the threshold
``BlocksConfig.split_band_min_window`` are read off its table. The
command line is ``python -m benchmarks.focus.band_block``, a thin wrapper around :func:`main`.
"""
from __future__ import annotations

import argparse
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch

from benchmarks.focus.bucket_block import full_causal
from quest_geometric.profile import (
    paired_ratio,
    round_ratios,
    time_interleaved,
    write_results,
)

__all__ = ["BLOCKS", "WINDOWS", "band_forward", "main", "run"]

#: Query blocks timed.
BLOCKS = (16, 32, 64, 128, 256)
#: Windows timed: the trained rows' 64 and 256, and budget-matched baselines' larger ones.
WINDOWS = (64, 256, 1024, 2048)


def band_forward(n: int, window: int, block: Optional[int], heads: int = 9, dim: int = 64,
                 num_sinks: int = 4, seed: int = 0, split: Optional[bool] = None
                 ) -> Callable[[], torch.Tensor]:
    """The fused causal forward (:func:`~quest_geometric.nn.focus.focus_blocks_attention`)
    of ``n`` tokens under the window-plus-sinks pattern (empty group sets, ``window``,
    ``num_sinks``), run with ``band_block = block`` (:obj:`None`: the library's rule) and
    the band split (``split`` true: ``split_band_min_window = 1``), masked (false:
    :obj:`None`) or as the library decides (:obj:`None`); returns the output ``[n, H, D]``."""
    from quest_geometric.nn.focus import focus_blocks_attention
    from quest_geometric.nn.focus.config import blocks_config

    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(n, heads, dim, generator=g) for _ in range(3))
    groups = torch.zeros(n, 0, dtype=torch.long)

    tuning = {"band_block": block}
    if split is not None:
        tuning["split_band_min_window"] = 1 if split else None
    if block is not None or split is not None:  # the band (masked or split), not the chunks
        tuning["window_chunks"] = None

    def fn() -> torch.Tensor:
        with blocks_config(**tuning):
            return focus_blocks_attention(q, k, v, groups, window, causal=True, num_groups=1,
                                          fused=True, num_sinks=num_sinks)

    return fn


def run(length: int, windows: Sequence[int], threads: Sequence[int], rounds: int = 5,
        blocks: Sequence[int] = BLOCKS, out_dir: str = "benchmarks/focus/results",
        name: str = "focus_band_block", seed: int = 0) -> Dict[str, Any]:
    """Time :func:`band_forward` at every window and block size (masked), split, the
    library's rule, and full causal attention, per thread count, in shuffled paired rounds;
    check that the variants agree; write the table ``name`` (CSV, JSON, markdown) to
    ``out_dir``.

    Returns:
        ``{"rows": [...], "paths": {...}}``: one row per (threads, window, variant) with the
        median time, the median per-round ratio to full attention (and its range), the
        largest difference from the first block size's output, the block the rule picks
        and whether the rule splits the band.
    """
    from quest_geometric.nn.focus.config import current_blocks_config

    rule = current_blocks_config()

    rows: List[Dict[str, Any]] = []
    before = torch.get_num_threads()
    try:
        for nt in threads:
            torch.set_num_threads(nt)
            for w in windows:
                fns = {f"block {b}": band_forward(length, w, b, seed=seed, split=False)
                       for b in blocks}
                fns["split"] = band_forward(length, w, None, seed=seed, split=True)
                with torch.no_grad():
                    first = next(iter(fns))
                    ref = fns[first]()
                    diffs = {key: float((f() - ref).abs().max()) for key, f in fns.items()}
                    fns["rule"] = band_forward(length, w, None, seed=seed)
                    fns["full causal"] = full_causal(length, seed=seed)
                    t = time_interleaved(fns, warmup=1, repeat=rounds, shuffle_seed=seed)
                for key in fns:
                    r = round_ratios(t, key, "full causal")
                    rows.append({"threads": nt, "tokens": length, "window": w,
                                 "variant": key, "rule_block": rule.band_block_size(w),
                                 "rule_splits": rule.band_splits(w),
                                 "ms": 1e3 * t[key]["median_s"],
                                 "vs_full": paired_ratio(t, key, "full causal"),
                                 "vs_full_min": min(r), "vs_full_max": max(r),
                                 "max_abs_diff": diffs.get(key, float("nan"))})
                print(f"[band] {nt} thread(s) w={w}: " + ", ".join(
                    f"{r['variant']} {r['ms']:.0f} ms" for r in rows[-len(fns):]), flush=True)
    finally:
        torch.set_num_threads(before)
    notes = (f"{length} tokens, the window-plus-sinks pattern (empty group sets, 4 sinks), "
             "9 heads x 64, float32, causal: the whole fused forward of "
             "focus_blocks_attention with band_block = b and the band masked (`block b`), "
             "the band split into unmasked calls over chunks of w tokens (`split`), or the "
             "library's rule (`rule`: block `rule_block`, split when `rule_splits`); "
             "`full causal`: one causal SDPA call over the same "
             "tokens. `ms`: median over rounds; `vs_full`: median of the per-round time ratios "
             "(below 1: faster than full attention), the range beside; `max_abs_diff`: "
             "largest difference from the first block size's output. Rounds in a seeded "
             "shuffled order.")
    paths = write_results(name, rows, out_dir, meta={"rounds": rounds, "seed": seed,
                                                    "blocks": list(blocks), "length": length},
                          notes=notes,
                          title="Focus 'blocks': the window band's query block, or split")
    return {"rows": rows, "paths": paths}


def main(argv: Optional[List[str]] = None) -> None:
    """The command line of ``python -m benchmarks.focus.band_block`` (``--help`` lists it)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny smoke run (seconds)")
    p.add_argument("--length", type=int, default=8192)
    p.add_argument("--windows", type=int, nargs="+", default=list(WINDOWS))
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--blocks", type=int, nargs="+", default=list(BLOCKS),
                   help="query blocks of the masked band timed")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="benchmarks/focus/results")
    a = p.parse_args(argv)
    if a.quick:
        a.length, a.windows, a.rounds = 600, [16, 100], 2
    t0 = time.perf_counter()
    run(a.length, a.windows, a.threads, a.rounds, blocks=a.blocks, out_dir=a.out, seed=a.seed,
        name="focus_band_block_quick" if a.quick else "focus_band_block")
    print(f"done in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
