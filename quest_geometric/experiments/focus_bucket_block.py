"""Focus's 'blocks' back-end, top-k > 1: how large a query block should one bucket's masked
attention run in?

    python benchmarks/focus_bucket_block.py [--quick] [--threads 1 2]
                                            [--sizes 512 1024 2048 4096]

With top-k > 1 a (sequence, group) bucket keeps a pair only when the bucket's group is the
pair's smallest shared group, so its causal attention needs an explicit mask, and the CPU
flash kernel computes every (query, key) tile of a masked call: one call over a bucket of
``c`` members computes ``c^2`` pairs where causality needs ``c^2 / 2``. The fused path
(:class:`quest_geometric.nn.focus.blocks._BlocksPlan.bucket_chunks`) therefore runs a causal
bucket in blocks of :data:`~quest_geometric.nn.focus.blocks.BUCKET_QUERY_BLOCK` queries over
keys ``[0, e)``, which computes ``c^2 / 2 + c b / 2``. This script times one bucket's whole
forward as the fused path runs it (the masks built by ``bucket_chunks``, the flash calls of
:mod:`quest_geometric.nn.focus._aten`) at several block sizes and as one call, against the
unmasked causal kernel over the same bucket (the floor: no mask, causal tiles skipped), for
SmolLM2-135M's heads (9 x 64), top-2 of K = 8 groups, in shuffled paired rounds at each
thread count, and checks that every block size gives the same output. The command line is
``benchmarks/focus_bucket_block.py``, a thin wrapper around :func:`main`.
"""
from __future__ import annotations

import argparse
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch

from quest_geometric.experiments.common import (
    paired_ratio,
    round_ratios,
    time_interleaved,
    write_results,
)

__all__ = ["BLOCKS", "bucket_forward", "main", "run"]

#: Query blocks timed; ``0`` is one call over the whole bucket.
BLOCKS = (0, 128, 256, 512)


def bucket_forward(c: int, block: int, heads: int = 9, dim: int = 64, num_groups: int = 8,
                   seed: int = 0) -> Callable[[], torch.Tensor]:
    """The forward of a bucket of ``c`` members of a random top-2 routing as the
    fused path runs it with ``BUCKET_QUERY_BLOCK = block`` (``0``: one call), returning its
    output ``[c, H, D]`` with the rows that keep no key zeroed."""
    from quest_geometric.nn.focus import _aten, blocks

    g = torch.Generator().manual_seed(seed)
    # c tokens in group K - 1 and one other random group: the bucket of group K - 1 holds
    # all of them and drops the pairs that share their other group (about 1 in K - 1)
    groups = torch.stack([torch.randint(0, num_groups - 1, (c,), generator=g),
                          torch.full((c,), num_groups - 1)], 1)
    plan = blocks._BlocksPlan(groups, torch.zeros(c, dtype=torch.long), 1, num_groups, 64,
                              True, torch.float32)
    st, size, grp = max(plan.spans, key=lambda s: s[1])
    idx = plan.order[st:st + size]
    q, k, v = (torch.randn(1, heads, size, dim, generator=g) for _ in range(3))
    scale = dim ** -0.5

    def fn() -> torch.Tensor:
        old = blocks.BUCKET_QUERY_BLOCK
        blocks.BUCKET_QUERY_BLOCK = block if block > 0 else size
        try:
            out = q.new_zeros(size, heads, dim)
            for s, e, lk, bias, row_any in plan.bucket_chunks(idx, grp, q.dtype):
                o, _ = _aten.flash_forward(q[:, :, s:e], k[:, :, :lk], v[:, :, :lk], False,
                                           attn_mask=bias, scale=scale)
                out[s:e] = torch.where(row_any.view(-1, 1, 1), o[0].transpose(0, 1), 0.0)
            return out
        finally:
            blocks.BUCKET_QUERY_BLOCK = old

    return fn


def _floor(c: int, heads: int = 9, dim: int = 64, seed: int = 0) -> Callable[[], Any]:
    """The unmasked causal flash kernel over ``c`` queries and keys (no mask to build)."""
    from quest_geometric.nn.focus import _aten

    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, heads, c, dim, generator=g) for _ in range(3))
    return lambda: _aten.flash_forward(q, k, v, True, scale=dim ** -0.5)


def run(sizes: Sequence[int], threads: Sequence[int], rounds: int = 7,
        blocks: Sequence[int] = BLOCKS, out_dir: str = "benchmarks/results",
        name: str = "focus_bucket_block", seed: int = 0) -> Dict[str, Any]:
    """Time :func:`bucket_forward` at every block size and the causal floor, per thread
    count and bucket size, in shuffled paired rounds; check that the block sizes agree; write
    the table ``name`` (CSV, JSON, markdown) to ``out_dir``.

    Returns:
        ``{"rows": [...], "paths": {...}}``: one row per (threads, bucket size, variant)
        with the median time, the median per-round ratio to one call and to the floor, and
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
                    fns["causal floor"] = _floor(c, seed=seed)
                    t = time_interleaved(fns, warmup=1, repeat=rounds, shuffle_seed=seed)
                for key in fns:
                    r = round_ratios(t, key, "causal floor")
                    rows.append({"threads": nt, "bucket": c, "variant": key,
                                 "ms": 1e3 * t[key]["median_s"],
                                 "vs_one_call": (paired_ratio(t, key, "one call")
                                                 if "one call" in fns else float("nan")),
                                 "vs_floor": paired_ratio(t, key, "causal floor"),
                                 "vs_floor_min": min(r), "vs_floor_max": max(r),
                                 "max_abs_diff": diffs.get(key, float("nan"))})
                print(f"[bucket] {nt} thread(s) c={c}: " + ", ".join(
                    f"{r['variant']} {r['ms']:.1f} ms" for r in rows[-len(fns):]), flush=True)
    finally:
        torch.set_num_threads(before)
    notes = ("One bucket of a random top-2 routing over K = 8 groups (9 heads x 64, float32, "
             "causal, its mask keeping only the pairs whose smallest shared group is the "
             "bucket's), run as the fused path runs it: `one call` over the whole bucket, "
             "`block b` in query blocks of b over keys [0, e) (masks built in the timing); "
             "`causal floor`: the unmasked causal kernel over the same size (no mask). `ms`: "
             "median over rounds; `vs_one_call`, `vs_floor`: median of the per-round time "
             "ratios (below 1: faster), the floor's range beside; `max_abs_diff`: largest "
             "difference from the one-call output. Rounds in a seeded shuffled order.")
    paths = write_results(name, rows, out_dir, meta={"rounds": rounds, "seed": seed,
                                                    "blocks": list(blocks)},
                          notes=notes, title="Focus 'blocks', top-k > 1: one bucket's query "
                                             "block")
    return {"rows": rows, "paths": paths}


def main(argv: Optional[List[str]] = None) -> None:
    """The command line of ``benchmarks/focus_bucket_block.py`` (``--help`` lists it)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny smoke run (seconds)")
    p.add_argument("--sizes", type=int, nargs="+", default=[512, 1024, 2048, 4096])
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="benchmarks/results")
    a = p.parse_args(argv)
    if a.quick:
        a.sizes, a.rounds = [300], 2
    t0 = time.perf_counter()
    run(a.sizes, a.threads, a.rounds, out_dir=a.out, seed=a.seed,
        name="focus_bucket_block_quick" if a.quick else "focus_bucket_block")
    print(f"done in {time.perf_counter() - t0:.0f} s")
