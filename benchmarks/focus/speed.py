"""How fast is Focus attention against full causal attention as the sequence grows?

Forward time (``eval()``, hard top-k sets, ``torch.no_grad``) and peak memory of one
:class:`~quest_geometric.nn.focus.module.FocusAttention` layer (4 heads x 64, K = 8 groups,
top-k = 1, window 128, float32, one sequence) with the ``'blocks'`` and ``'edges'``
back-ends, routing included, against the same layer with Focus off (causal
``scaled_dot_product_attention`` through the same projections). The ``'edges'`` core
(:class:`~quest_geometric.nn.focus.edges.FocusEdgeAttention` on a prebuilt edge set) is also
compared with PyG's :class:`~torch_geometric.nn.conv.TransformerConv` on the same
``edge_index``.

    python -m benchmarks.focus.speed [--quick] [--device cuda]

(``--quick`` up to 16K tokens; ``--device cuda`` for the GPU sweep to 1M tokens.)
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any, Optional, Sequence

import torch
from tqdm.auto import tqdm

from quest_geometric._utils.plotting import optional_pyplot, save_figure
from quest_geometric.nn.focus.edges import FocusEdgeAttention
from quest_geometric.profile import (markdown_table, paired_ratio, peak_memory_mb,
                                     reuse_freed_memory, round_ratios, time_function,
                                     time_interleaved, write_results)

HEADS, HEAD_DIM, GROUPS, TOP_K, WINDOW = 4, 64, 8, 1, 128
CPU_LENGTHS = (1024, 2048, 4096, 8192, 16384, 32768, 65536)
QUICK_LENGTHS = (1024, 2048, 4096, 8192, 16384)
CUDA_LENGTHS = (1024, 4096, 16384, 32768, 65536, 131072, 262144, 524288, 1048576)
#: Upper bound on the bytes of the per-edge tensors ('edges' and TransformerConv keep about
#: four ``[E, H, D]`` float32 tensors alive); longer lengths are skipped for those two.
EDGE_BYTES_BUDGET = 8 * 2**30
#: Seed of the order of the timed functions within each round (shuffled every round).
ROUND_SEED = 0

COLUMNS = ["tokens", "rounds", "full_ms", "blocks_ms", "sdpa_ms", "blocks_attn_ms",
           "edges_ms", "edges_core_ms", "tconv_ms", "speedup_blocks", "speedup_attn",
           "edges_core_vs_tconv", "full_mb", "blocks_mb", "edges_mb", "tconv_mb", "num_edges",
           "pair_fraction", "balance", "note"]


def _layer(backend: str, device: torch.device) -> torch.nn.Module:
    from quest_geometric.nn.focus import FocusAttention

    torch.manual_seed(0)
    return FocusAttention(HEADS * HEAD_DIM, HEADS, num_groups=GROUPS, top_k=TOP_K,
                          window=WINDOW, backend=backend).to(device).eval()


def _expected_edges(n: int) -> float:
    """Edges of the pattern for balanced groups: window band plus same-group causal pairs."""
    band = n * (WINDOW + 1) - WINDOW * (WINDOW + 1) / 2
    far = max(n - WINDOW - 1, 0)
    return band + far * (far + 1) / 2 / GROUPS


def _measure(fn, device: torch.device, repeat: int, memory: bool, max_seconds: float
             ) -> tuple[float, float, float]:
    t = time_function(fn, warmup=1, repeat=repeat, device=device, max_seconds=max_seconds)
    mb = peak_memory_mb(fn, device=device) if memory else math.nan
    return 1e3 * t["median_s"], 1e3 * t["std_s"], mb


def length_row(n: int, device: torch.device, repeat: int, edges: bool, memory: bool = True,
               max_seconds: float = 90.0) -> dict[str, Any]:
    """Measure one sequence length; returns one table row (``nan`` where not measured).

    Full attention and ``'blocks'`` are timed in alternation
    (:func:`~quest_geometric.profile.time_interleaved`, order shuffled every round with
    :data:`ROUND_SEED`), and ``speedup_blocks`` is the true median over rounds of their
    ratio (every round's in ``round_ratios_*``); likewise the ``'edges'`` core against
    TransformerConv."""
    from torch_geometric.nn import TransformerConv

    from quest_geometric.nn.focus import (choose_focus_backend, focus_backend, focus_edge_index,
                                          focus_pair_share, full_attention, group_balance)

    c = HEADS * HEAD_DIM
    x = torch.randn(n, c, generator=torch.Generator().manual_seed(n)).to(device)
    row: dict[str, Any] = {**{k: math.nan for k in COLUMNS}, "tokens": n, "note": ""}
    notes = []
    with torch.no_grad():
        full = _layer("auto", device)
        full.enabled = False
        blocks = _layer("auto", device)  # the decomposition on CPU, FlexAttention on CUDA
        _, rout = blocks(x[:2], return_router=True)
        q, k, v = (p(x).view(n, HEADS, HEAD_DIM) for p in
                   (blocks.q_proj, blocks.k_proj, blocks.v_proj))

        def sdpa() -> torch.Tensor:  # the attention of the `full` layer alone
            return full_attention(q, k, v, None, True)

        hard = focus_backend(choose_focus_backend(q, GROUPS))

        def focus_core() -> torch.Tensor:  # routing + the hard back-end, same q, k, v
            groups = blocks.router(x).groups
            return hard(q, k, v, groups, WINDOW, None, True, GROUPS, 0)

        try:
            timed = time_interleaved({"full": lambda: full(x), "blocks": lambda: blocks(x),
                                      "sdpa": sdpa, "core": focus_core},
                                     repeat=repeat, device=device, max_seconds=max_seconds,
                                     shuffle_seed=ROUND_SEED)
            row["full_ms"] = 1e3 * timed["full"]["median_s"]
            row["blocks_ms"] = 1e3 * timed["blocks"]["median_s"]
            row["speedup_blocks"] = paired_ratio(timed, "full", "blocks")
            row["sdpa_ms"] = 1e3 * timed["sdpa"]["median_s"]
            row["blocks_attn_ms"] = 1e3 * timed["core"]["median_s"]
            row["speedup_attn"] = paired_ratio(timed, "sdpa", "core")
            row["rounds"] = timed["full"]["repeats"]
            row["round_ratios_blocks"] = round_ratios(timed, "full", "blocks")
            row["round_ratios_attn"] = round_ratios(timed, "sdpa", "core")
        except torch.OutOfMemoryError:
            notes.append("blocks: out of memory")
            torch.cuda.empty_cache()
            row["full_ms"] = _measure(lambda: full(x), device, repeat, False, max_seconds)[0]
        if memory:
            row["full_mb"] = peak_memory_mb(lambda: full(x), device=device)
            if row["blocks_ms"] == row["blocks_ms"]:
                row["blocks_mb"] = peak_memory_mb(lambda: blocks(x), device=device)
        groups = blocks.router(x).groups
        row["balance"] = float(group_balance(groups, GROUPS))
        # the share of causal pairs the pattern keeps, counted in query chunks at every
        # length (the edge set below is built only where it fits in memory)
        row["pair_fraction"] = focus_pair_share(groups, WINDOW)
        est = _expected_edges(n)
        if not edges:
            notes.append("edges skipped: longer than edges_max")
        elif est * HEADS * HEAD_DIM * 4 * 4 > EDGE_BYTES_BUDGET:
            notes.append(f"edges skipped: ~{est / 1e6:.1f}M edges exceed the memory budget")
        else:
            ei = focus_edge_index(groups, WINDOW)
            row["num_edges"] = ei.size(1)
            edge_layer = _layer("edges", device)
            edge_core = FocusEdgeAttention()
            row["edges_ms"], _, row["edges_mb"] = _measure(lambda: edge_layer(x), device,
                                                           repeat, memory, max_seconds)

            def core() -> torch.Tensor:
                q, k, v = (p(x).view(n, HEADS, HEAD_DIM) for p in
                           (edge_layer.q_proj, edge_layer.k_proj, edge_layer.v_proj))
                return edge_core(q, k, v, ei)

            tconv = TransformerConv(c, HEAD_DIM, heads=HEADS, root_weight=False).to(device)
            tconv.eval()
            timed = time_interleaved({"core": core, "tconv": lambda: tconv(x, ei)},
                                     repeat=repeat, device=device, max_seconds=max_seconds,
                                     shuffle_seed=ROUND_SEED)
            row["edges_core_ms"] = 1e3 * timed["core"]["median_s"]
            row["tconv_ms"] = 1e3 * timed["tconv"]["median_s"]
            row["edges_core_vs_tconv"] = paired_ratio(timed, "tconv", "core")
            row["round_ratios_edges"] = round_ratios(timed, "tconv", "core")
            if memory:
                row["tconv_mb"] = peak_memory_mb(lambda: tconv(x, ei), device=device)
            del ei
    row["note"] = "; ".join(notes)
    return row


def crossover(rows: Sequence[dict[str, Any]]) -> Optional[int]:
    """Smallest length from which ``'blocks'`` beats full attention at every longer length
    measured (:obj:`None` if it never does)."""
    best = None
    for r in sorted(rows, key=lambda r: r["tokens"], reverse=True):
        if r["speedup_blocks"] > 1.0:
            best = r["tokens"]
        else:
            break
    return best


def _plot(rows: Sequence[dict[str, Any]], path: Path, title: str) -> Optional[Path]:
    plt = optional_pyplot()
    if plt is None:  # pragma: no cover - matplotlib is in the bench extra
        return None
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for key, label in (("full_ms", "full causal SDPA"), ("blocks_ms", "Focus 'blocks'"),
                       ("edges_ms", "Focus 'edges'"), ("tconv_ms", "TransformerConv (same edges)")):
        pts = [(r["tokens"], r[key]) for r in rows if r[key] == r[key]]
        if pts:
            ax.loglog(*zip(*pts), marker="o", label=label)
    ax.set_xlabel("tokens")
    ax.set_ylabel("forward time (ms)")
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, path, dpi=120)


def run(quick: bool = False, device: torch.device | str = "cpu",
        out_dir: str | Path = "benchmarks/focus/results", progress: bool = True,
        lengths: Optional[Sequence[int]] = None, repeat: Optional[int] = None,
        edges_max: Optional[int] = None, memory: bool = True, name: Optional[str] = None,
        allocator: str = "reuse", max_seconds: float = 90.0) -> dict[str, Any]:
    """Run the sweep and write ``focus_speed[_cuda].{csv,json,md,png}`` to ``out_dir``.

    Args:
        quick (bool): up to 16K tokens and 2 timed repeats (default: :obj:`False`).
        device (str): ``'cpu'`` or ``'cuda'`` (default: ``'cpu'``).
        out_dir (str): result folder (default: ``'benchmarks/focus/results'``).
        progress (bool): progress bar (default: :obj:`True`).
        lengths (list of int, optional): override the sequence lengths (default: :obj:`None`).
        repeat (int, optional): timed repeats (default: 2 quick, 3 full).
        edges_max (int, optional): longest length for ``'edges'`` / TransformerConv
            (default: 8K on CPU, 64K on CUDA, further limited by :data:`EDGE_BYTES_BUDGET`).
        memory (bool): measure peak memory (one extra call per method) (default: :obj:`True`).
        name (str, optional): file stem (default: ``'focus_speed'`` / ``'focus_speed_cuda'``).
        allocator (str): ``'reuse'`` keeps freed CPU memory for reuse
            (:func:`~quest_geometric.profile.reuse_freed_memory`) or ``'system'`` leaves
            glibc's default (default: ``'reuse'``).
        max_seconds (float): time budget of the timed rounds of one length
            (default: :obj:`90.0`).

    Returns:
        dict: ``rows``, ``crossover``, ``markdown`` and ``summary`` lines.
    """
    if allocator not in ("reuse", "system"):
        raise ValueError(f"'allocator' must be 'reuse' or 'system', got {allocator!r}")
    device = torch.device(device)
    out_dir = Path(out_dir)
    cuda = device.type == "cuda"
    reused = allocator == "reuse" and not cuda and reuse_freed_memory()
    if lengths is None:
        lengths = CUDA_LENGTHS if cuda else (QUICK_LENGTHS if quick else CPU_LENGTHS)
        if cuda and quick:
            lengths = CUDA_LENGTHS[:5]
    repeat = repeat or (2 if quick else 3)
    edges_max = edges_max if edges_max is not None else (65536 if cuda else 8192)
    name = name or ("focus_speed_cuda" if cuda else "focus_speed")
    rows = []
    for n in tqdm(list(lengths), desc="focus_speed", disable=not progress):
        if cuda:  # 'auto' compiles FlexAttention once per length: stay under the
            torch._dynamo.reset()  # recompile limit (8) across the nine lengths
        rows.append(length_row(int(n), device, repeat, edges=n <= edges_max, memory=memory,
                               max_seconds=max_seconds))
    cross = crossover(rows)
    at32 = next((r for r in rows if r["tokens"] == 32768), None)
    summary = ["crossover (blocks faster than full from here on): "
               + (f"{cross} tokens" if cross is not None else "not reached")]
    if at32 is not None:
        summary.append(f"speedup of 'blocks' over full causal SDPA at 32K: attention alone "
                       f"(routing + 'blocks' against causal SDPA, same q, k, v) "
                       f"{at32['speedup_attn']:.2f}x; whole layer (with the four projections "
                       f"both share) {at32['speedup_blocks']:.2f}x (target >= 5x on CPU; "
                       f"paper 3.1x on H100)")
    edge_rows = [r for r in rows if r["edges_core_vs_tconv"] == r["edges_core_vs_tconv"]]
    if edge_rows:
        summary.append("'edges' core vs TransformerConv on the same edges: " + ", ".join(
            f"{r['tokens']}: {r['edges_core_vs_tconv']:.2f}x" for r in edge_rows)
            + " (> 1: 'edges' faster)")
    longest_edges = max((r["tokens"] for r in edge_rows), default=None)
    alloc_note = ("freed memory kept for reuse (`--allocator reuse`, glibc mallopt; see "
                  "`reuse_freed_memory`)" if reused else "glibc default")
    notes = (
        f"Forward only, `eval()` (hard top-k = {TOP_K} of K = {GROUPS}), window {WINDOW}, {HEADS} "
        f"heads x {HEAD_DIM}, float32, one sequence, device {device}; times are medians of up to "
        f"{repeat} calls after one warm-up (fewer where {repeat} would pass {max_seconds:g} s), "
        + ("memory (`*_mb`) the peak added by one call (CPU: resident-set high-water mark in "
           "a one-thread fork; CUDA: allocator peak). " if memory else
           "memory not measured in this run (`memory=False`: the `*_mb` columns, n/a in "
           "the CSV, are left out of this table). ")
        + "`full` is the same layer with Focus off (causal SDPA, same projections), timed in "
        f"alternation with 'blocks' (`rounds` rounds of one call each, up to {repeat}, in an "
        "order shuffled every round); `speedup_blocks` is the true median over rounds of the "
        "per-round ratio (every round's ratio in the JSON file). `sdpa_ms` and `blocks_attn_ms` "
        "time the attention alone on the same projected q, k, v, timed in the same rounds: causal "
        "SDPA against routing (router on the layer input) + `focus_blocks_attention`; "
        "`speedup_attn` is their per-round ratio. Focus times include routing. `edges_core` = "
        "projections + FocusEdgeAttention on a prebuilt edge set, compared with TransformerConv "
        "(root_weight=False) on the same `edge_index`. 'edges' and TransformerConv stop at "
        f"{longest_edges} tokens (`edges_max` = {edges_max}, and at most "
        f"{EDGE_BYTES_BUDGET / 2**30:g} GiB of per-edge tensors): the pattern has ~N(w+1) + "
        f"N^2/(2K) edges (~{_expected_edges(16384) / 1e6:.0f}M at 16K) and each keeps about four "
        "[E, 4, 64] float32 tensors (~4 KiB per edge, measured; "
        f"~{_expected_edges(4096) * 4096 / 1e9:.0f} GB at 4K), more than a small shared machine "
        "can give beyond 4K. `pair_fraction` = kept pairs / causal pairs (window or shared group; "
        "`focus_pair_share`, at every length); `balance` = the largest group's share of the "
        f"tokens (1/K is perfect balance). CPU allocator: {alloc_note}.\n\n"
        + "\n".join(f"- {s}" for s in summary))
    meta = {"heads": HEADS, "head_dim": HEAD_DIM, "num_groups": GROUPS, "top_k": TOP_K,
            "window": WINDOW, "dtype": "float32", "device": str(device), "repeat": repeat,
            "seed": "torch.manual_seed(0) for layers, length-seeded inputs", "quick": quick,
            "allocator": ("reuse (glibc mallopt: mmap/trim thresholds 1-2 GiB)" if reused
                          else "system default")}
    paths = write_results(name, rows, out_dir, meta=meta, columns=COLUMNS, notes=notes,
                          title="Focus attention speed vs sequence length")
    if not memory:  # the markdown table leaves out the memory columns it did not measure
        md = paths["md"].read_text()
        shown = [c for c in COLUMNS if not c.endswith("_mb")]
        paths["md"].write_text(md.replace(markdown_table(rows, COLUMNS),
                                          markdown_table(rows, shown), 1))
    png = None if len(rows) < 2 else _plot(
        rows, out_dir / f"{name}.png",
        f"Focus (K={GROUPS}, top-k={TOP_K}, w={WINDOW}) vs full causal, {device}")
    markdown = paths["md"].read_text()
    if png is not None:
        markdown += f"\n![speed]({png.name})\n"
    return {"rows": rows, "crossover": cross, "markdown": markdown, "summary": summary,
            "paths": {**{k: str(v) for k, v in paths.items()},
                      **({"png": str(png)} if png else {})}}


def main(argv: Optional[list[str]] = None) -> None:
    """Command-line entry of ``python -m benchmarks.focus.speed``."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="up to 16K tokens, 2 repeats")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--lengths", type=int, nargs="*", default=None)
    parser.add_argument("--repeat", type=int, default=None)
    parser.add_argument("--edges-max", type=int, default=None)
    parser.add_argument("--no-memory", action="store_true")
    parser.add_argument("--out", default="benchmarks/focus/results")
    parser.add_argument("--allocator", choices=("reuse", "system"), default="reuse",
                        help="CPU: keep freed memory for reuse (default) or glibc's default")
    parser.add_argument("--name", default=None, help="file stem of the results")
    parser.add_argument("--max-seconds", type=float, default=90.0,
                        help="time budget of the timed rounds of one length")
    args = parser.parse_args(argv)
    result = run(quick=args.quick, device=args.device, out_dir=args.out, lengths=args.lengths,
                 repeat=args.repeat, edges_max=args.edges_max, memory=not args.no_memory,
                 allocator=args.allocator, name=args.name, max_seconds=args.max_seconds)
    print(result["markdown"])


__all__ = ["run", "length_row", "crossover", "main"]


if __name__ == "__main__":
    main()
