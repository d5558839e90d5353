"""How fast is :class:`~quest_geometric.nn.QSVConv` against PyG's attention layers?

Forward + backward time and peak memory of ``QSVConv``, ``TransformerConv`` and ``GATv2Conv``
at the same width and heads on the same batched sphere graph (3 concentric Fibonacci shells,
64 + 256 + 1024 = 1,344 nodes per image, in-degree 16 = 12 within-shell + 4 cross-shell
neighbours).

Run ``python benchmarks/qsv_layer_speed.py`` (``--quick`` for a smaller batch).
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import torch
from tqdm.auto import tqdm

from quest_geometric.experiments.common import (
    load_average,
    paired_ratio,
    peak_memory_mb,
    time_interleaved,
    write_results,
)

SIZES = (64, 256, 1024)
K_WITHIN, K_CROSS = 12, 4
CHANNELS, HEADS = 64, 4


def _batched_sphere(batch_size: int, device: torch.device):
    from quest_geometric.geometry.graphs import sphere_graph

    template = sphere_graph(SIZES, k=K_WITHIN, k_cross=K_CROSS)
    n = template.num_nodes
    offsets = (torch.arange(batch_size) * n).repeat_interleave(template.edge_index.size(1))
    edge_index = template.edge_index.repeat(1, batch_size) + offsets
    return edge_index.to(device), n * batch_size


def _layers() -> dict[str, torch.nn.Module]:
    from torch_geometric.nn import GATv2Conv, TransformerConv

    from quest_geometric.nn.qsv_conv import QSVConv

    return {
        "QSVConv": QSVConv(CHANNELS, CHANNELS, heads=HEADS),
        "TransformerConv": TransformerConv(CHANNELS, CHANNELS // HEADS, heads=HEADS),
        "GATv2Conv": GATv2Conv(CHANNELS, CHANNELS // HEADS, heads=HEADS),
    }


def layer_rows(batch_size: int, device: torch.device, repeat: int, progress: bool,
               threads: Sequence[Optional[int]] = (None,)) -> list[dict]:
    """Time and memory of one forward + backward per layer on the batched sphere graph.

    The layers are timed in turn, round by round (:func:`time_interleaved`), so that all of
    them meet the same background load, and ``speedup_vs_transformer`` is the median over
    rounds of TransformerConv's time over the layer's (:func:`paired_ratio`). Each entry of
    ``threads`` (``None``: leave torch's setting) gives one set of rows; peak memory is
    measured once per layer, at the first thread count.
    """
    torch.manual_seed(0)
    edge_index, num_nodes = _batched_sphere(batch_size, device)
    x = torch.randn(num_nodes, CHANNELS, device=device)
    layers = {name: layer.to(device) for name, layer in _layers().items()}
    steps = {}
    for name, layer in layers.items():
        xr = x.clone().requires_grad_(True)

        def step(layer=layer, xr=xr) -> None:
            layer.zero_grad(set_to_none=True)
            xr.grad = None
            layer(xr, edge_index).square().mean().backward()

        steps[name] = step
    mem = {name: peak_memory_mb(fn, device=device) for name, fn in steps.items()}
    rows = []
    previous = torch.get_num_threads()
    try:
        for nt in tqdm(threads, desc=f"threads ({batch_size} graphs)", disable=not progress):
            if nt is not None:
                torch.set_num_threads(int(nt))
            timed = time_interleaved(steps, warmup=1, repeat=repeat, device=device)
            for name, layer in layers.items():
                rows.append({
                    "graphs": batch_size, "threads": torch.get_num_threads(), "layer": name,
                    "params": sum(p.numel() for p in layer.parameters()), "nodes": num_nodes,
                    "edges": edge_index.size(1),
                    "fwd_bwd_ms": 1e3 * timed[name]["median_s"],
                    "std_ms": 1e3 * timed[name]["std_s"], "peak_mb": mem[name],
                    "speedup_vs_transformer": paired_ratio(timed, "TransformerConv", name),
                    "memory_vs_transformer": (mem[name] / mem["TransformerConv"]
                                              if mem["TransformerConv"] else math.nan),
                })
    finally:
        torch.set_num_threads(previous)
    return rows


def _as_tuple(value: Union[int, Sequence[int], None], name: str) -> Optional[tuple[int, ...]]:
    if value is None:
        return None
    values = (value,) if isinstance(value, int) else tuple(value)
    if not values or any(int(v) < 1 for v in values):
        raise ValueError(f"run: '{name}' must be positive integers (got {value!r})")
    return tuple(int(v) for v in values)


def run(
    quick: bool = False,
    device: torch.device | str = "cpu",
    out_dir: str | Path = "benchmarks/results",
    progress: bool = True,
    batch_size: Union[int, Sequence[int], None] = None,
    threads: Union[int, Sequence[int], None] = None,
) -> dict[str, Any]:
    """Run the benchmark and write ``qsv_layer_speed.*`` to ``out_dir``.

    Args:
        quick (bool): batch 8 instead of batches of 16 and 64 graphs.
        device (str): ``'cpu'`` or ``'cuda'``.
        out_dir (str): result folder.
        progress (bool): progress bars.
        batch_size (int or sequence of int, optional): the numbers of graphs in the batch,
            one set of rows each. (default: ``8`` with ``quick``, else ``(16, 64)``)
        threads (int or sequence of int, optional): torch intra-op thread counts, one set of
            layer rows each (restored afterwards). (default: torch's setting with ``quick``,
            else one thread and torch's setting). On a machine shared with other jobs,
            one thread gives stable numbers: an oversubscribed OpenMP pool slows every layer
            by 5-10x, erratically.

    Returns:
        dict: ``layers`` rows, ``markdown`` (the table) and a short ``summary``.
    """
    device = torch.device(device)
    out_dir = Path(out_dir)
    sizes = _as_tuple(batch_size, "batch_size") or ((8,) if quick else (16, 64))
    counts = _as_tuple(threads, "threads")
    if counts is None:
        counts = ((torch.get_num_threads(),) if quick
                  else tuple(dict.fromkeys((1, torch.get_num_threads()))))
    return _run(quick, device, out_dir, progress, sizes, counts)


def _run(quick: bool, device: torch.device, out_dir: Path, progress: bool,
         batch_sizes: tuple[int, ...], threads: tuple[int, ...]) -> dict[str, Any]:
    repeat = 5 if quick else 7
    layers = [row for bs in batch_sizes
              for row in layer_rows(bs, device, repeat, progress, threads=threads)]
    meta = {"batch_sizes": list(batch_sizes), "threads": list(threads), "sizes": SIZES,
            "k": K_WITHIN + K_CROSS, "channels": CHANNELS, "heads": HEADS, "dtype": "float32",
            "device": str(device), "seed": 0, "quick": quick, "rounds": repeat,
            "load": load_average()}
    p1 = write_results(
        "qsv_layer_speed", layers, out_dir, meta=meta, title="QSVConv vs PyG attention layers",
        columns=["graphs", "threads", "layer", "nodes", "edges", "fwd_bwd_ms", "std_ms",
                 "peak_mb", "speedup_vs_transformer", "memory_vs_transformer"],
        notes="Forward + backward of one layer on a batch of sphere graphs, the three layers "
              "timed in turn round by round; `speedup_vs_transformer` is the median over "
              "rounds of TransformerConv's time over the layer's. Peak memory is the "
              "resident-set high-water mark added by one step (CPU) or allocator peak (CUDA), "
              "measured once per batch. Parameters: QSVConv "
              f"{layers[0]['params']}, TransformerConv {layers[1]['params']}, GATv2Conv "
              f"{layers[2]['params']}.",
    )
    summary = [
        f"QSVConv forward+backward {q['fwd_bwd_ms']:.0f} ms on {q['graphs']} graphs "
        f"({q['nodes']} nodes) at {q['threads']} thread(s): "
        f"{q['speedup_vs_transformer']:.2f}x TransformerConv's speed, "
        f"{q['memory_vs_transformer']:.2f}x its peak memory"
        for q in layers if q["layer"] == "QSVConv"
    ]
    return {"layers": layers, "markdown": p1["md"].read_text(), "summary": summary}


def main(argv: list[str] | None = None) -> None:
    """Command-line entry of ``benchmarks/qsv_layer_speed.py``."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="batch 8")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, nargs="+", default=None,
                        help="graphs per batch (default: 16 64; 8 with --quick)")
    parser.add_argument("--threads", type=int, nargs="+", default=None,
                        help="torch intra-op thread counts (default: 1 and torch's choice)")
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args(argv)
    result = run(quick=args.quick, device=args.device, out_dir=args.out,
                 batch_size=args.batch_size, threads=args.threads)
    print(result["markdown"])
