"""Focus's 'blocks' back-end, top-k > 1: how large a query block should one bucket's masked
attention run in?

    python -m benchmarks.focus.bucket_block [--quick] [--threads 1 2]
                                            [--sizes 512 1024 2048 4096]

With top-k > 1 a (sequence, group) bucket keeps a pair only when the bucket's group is the
pair's smallest shared group, so its causal attention needs an explicit mask, and the CPU
flash kernel computes every (query, key) tile of a masked call: one call over a bucket of
``c`` members computes ``c^2`` pairs where causality needs ``c^2 / 2``. The fused path of
:func:`~quest_geometric.nn.focus.focus_blocks_attention` therefore runs a causal bucket in
blocks of :data:`~quest_geometric.nn.focus.blocks.BUCKET_QUERY_BLOCK` queries over keys
``[0, e)``, which computes ``c^2 / 2 + c b / 2``. This script times that public forward
(masks, bucket and band calls, merge) on ``c`` tokens routed top-2 of K = 8 so that
one bucket holds them all (:func:`bucket_forward`), at several block sizes and with one call
per bucket, against full causal attention over the same tokens (one SDPA call), for
SmolLM2-135M's heads (9 x 64), in shuffled paired rounds at each thread count, and checks
that every block size gives the same output. The command line is
``python -m benchmarks.focus.bucket_block``, a thin wrapper around :func:`main`.
"""
from __future__ import annotations

import argparse
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch

from quest_geometric.profile import (
    paired_ratio,
    round_ratios,
    time_interleaved,
    write_results,
)

__all__ = ["BLOCKS", "bucket_forward", "full_causal", "main", "run"]

#: Query blocks timed; ``0`` is one call over the whole bucket.
BLOCKS = (0, 128, 256, 512)


def bucket_forward(c: int, block: int, heads: int = 9, dim: int = 64, num_groups: int = 8,
                   window: int = 64, seed: int = 0) -> Callable[[], torch.Tensor]:
    """The fused forward (:func:`~quest_geometric.nn.focus.focus_blocks_attention`, causal)
    of ``c`` tokens routed top-2 so that one bucket holds them all: each token in group
    ``K - 1`` and one other random group, the big bucket dropping the pairs that share their
    other group (about 1 in ``K - 1``), the other buckets about ``c / (K - 1)`` each, the
    band of ``window``. Run with ``BUCKET_QUERY_BLOCK = block`` (``0``: one call over each
    bucket); returns the output ``[c, H, D]``."""
    from quest_geometric.nn.focus import focus_blocks_attention
    from quest_geometric.nn.focus.config import blocks_config

    g = torch.Generator().manual_seed(seed)
    groups = torch.stack([torch.randint(0, num_groups - 1, (c,), generator=g),
                          torch.full((c,), num_groups - 1)], 1)
    q, k, v = (torch.randn(c, heads, dim, generator=g) for _ in range(3))

    def fn() -> torch.Tensor:
        with blocks_config(bucket_query_block=block if block > 0 else c):
            return focus_blocks_attention(q, k, v, groups, window, causal=True,
                                          num_groups=num_groups, fused=True)

    return fn


def full_causal(c: int, heads: int = 9, dim: int = 64, seed: int = 0) -> Callable[[], Any]:
    """Full causal attention over ``c`` tokens of ``heads`` x ``dim`` random features (one
    SDPA call): the reference the Focus block benchmarks time against."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, heads, c, dim, generator=g) for _ in range(3))
    return lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


def run(sizes: Sequence[int], threads: Sequence[int], rounds: int = 7,
        blocks: Sequence[int] = BLOCKS, out_dir: str = "benchmarks/focus/results",
        name: str = "focus_bucket_block", seed: int = 0) -> Dict[str, Any]:
    """Time :func:`bucket_forward` at every block size and full causal attention, per thread
    count and bucket size, in shuffled paired rounds; check that the block sizes agree; write
    the table ``name`` (CSV, JSON, markdown) to ``out_dir``.

    Returns:
        ``{"rows": [...], "paths": {...}}``: one row per (threads, bucket size, variant)
        with the median time, the median per-round ratio to one call and to full attention, and
        the largest difference from the one-call output.
    """
    rows: List[Dict[str, Any]] = []
    before = torch.get_num_threads()
    try:
        for nt in threads:
            torch.set_num_threads(nt)
            for c in sizes:
                fns = {("one call" if b == 0 else f"block {b}"): bucket_forward(c, b, seed=seed)
                       for b in blocks}
                with torch.no_grad():
                    ref = fns["one call"]() if "one call" in fns else None
                    diffs = {k: (float((f() - ref).abs().max()) if ref is not None
                                 else float("nan")) for k, f in fns.items()}
                    fns["full causal"] = full_causal(c, seed=seed)
                    t = time_interleaved(fns, warmup=1, repeat=rounds, shuffle_seed=seed)
                for key in fns:
                    r = round_ratios(t, key, "full causal")
                    rows.append({"threads": nt, "bucket": c, "variant": key,
                                 "ms": 1e3 * t[key]["median_s"],
                                 "vs_one_call": (paired_ratio(t, key, "one call")
                                                 if "one call" in fns else float("nan")),
                                 "vs_full": paired_ratio(t, key, "full causal"),
                                 "vs_full_min": min(r), "vs_full_max": max(r),
                                 "max_abs_diff": diffs.get(key, float("nan"))})
                print(f"[bucket] {nt} thread(s) c={c}: " + ", ".join(
                    f"{r['variant']} {r['ms']:.1f} ms" for r in rows[-len(fns):]), flush=True)
    finally:
        torch.set_num_threads(before)
    notes = ("c tokens routed top-2 of K = 8 so that one bucket holds them all (each token "
             "in group 7 and one other; 9 heads x 64, float32, causal, window 64), the whole "
             "fused forward of focus_blocks_attention: `one call` per bucket, `block b` with "
             "BUCKET_QUERY_BLOCK = b (query blocks of b over keys [0, e)); `full causal`: one "
             "causal SDPA call over the same c tokens. `ms`: median over rounds; "
             "`vs_one_call`, `vs_full`: median of the per-round time ratios (below 1: "
             "faster), the range against full attention beside; `max_abs_diff`: largest "
             "difference from the one-call output. Rounds in a seeded shuffled order.")
    paths = write_results(name, rows, out_dir, meta={"rounds": rounds, "seed": seed,
                                                    "blocks": list(blocks)},
                          notes=notes, title="Focus 'blocks', top-k > 1: the bucket query "
                                             "block")
    return {"rows": rows, "paths": paths}


def main(argv: Optional[List[str]] = None) -> None:
    """The command line of ``python -m benchmarks.focus.bucket_block`` (``--help`` lists it)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny smoke run (seconds)")
    p.add_argument("--sizes", type=int, nargs="+", default=[512, 1024, 2048, 4096])
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="benchmarks/focus/results")
    a = p.parse_args(argv)
    if a.quick:
        a.sizes, a.rounds = [300], 2
    t0 = time.perf_counter()
    run(a.sizes, a.threads, a.rounds, out_dir=a.out, seed=a.seed,
        name="focus_bucket_block_quick" if a.quick else "focus_bucket_block")
    print(f"done in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
