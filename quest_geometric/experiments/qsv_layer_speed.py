"""How fast is :class:`~quest_geometric.nn.QSVConv` against PyG's attention layers?

Forward + backward time and peak memory of ``QSVConv``, ``TransformerConv`` and ``GATv2Conv``
at the same width and heads on the same batched sphere graph (3 concentric Fibonacci shells,
64 + 256 + 1024 = 1,344 nodes per image, in-degree 16 = 12 within-shell + 4 cross-shell
neighbours), and the time of each kNN back-end on 10K to 1M random points.

Run ``python benchmarks/qsv_layer_speed.py`` (``--quick`` for a smaller batch and point set).
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from quest_geometric.experiments.common import peak_memory_mb, time_function, write_results

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
        "QSVConv": QSVConv(CHANNELS, heads=HEADS),
        "TransformerConv": TransformerConv(CHANNELS, CHANNELS // HEADS, heads=HEADS),
        "GATv2Conv": GATv2Conv(CHANNELS, CHANNELS // HEADS, heads=HEADS),
    }


def layer_rows(batch_size: int, device: torch.device, repeat: int, progress: bool) -> list[dict]:
    """Time and memory of one forward + backward per layer on the batched sphere graph."""
    torch.manual_seed(0)
    edge_index, num_nodes = _batched_sphere(batch_size, device)
    x = torch.randn(num_nodes, CHANNELS, device=device)
    rows = []
    for name, layer in tqdm(_layers().items(), desc="layers", disable=not progress):
        layer = layer.to(device)
        params = sum(p.numel() for p in layer.parameters())
        xr = x.clone().requires_grad_(True)

        def step() -> None:
            layer.zero_grad(set_to_none=True)
            xr.grad = None
            layer(xr, edge_index).square().mean().backward()

        t = time_function(step, warmup=1, repeat=repeat, device=device)
        mem = peak_memory_mb(step, device=device)
        rows.append({
            "layer": name, "params": params, "nodes": num_nodes,
            "edges": edge_index.size(1), "fwd_bwd_ms": 1e3 * t["median_s"],
            "std_ms": 1e3 * t["std_s"], "peak_mb": mem,
        })
    ref = next(r for r in rows if r["layer"] == "TransformerConv")
    for r in rows:
        r["speedup_vs_transformer"] = ref["fwd_bwd_ms"] / r["fwd_bwd_ms"]
        r["memory_vs_transformer"] = r["peak_mb"] / ref["peak_mb"] if ref["peak_mb"] else math.nan
    return rows


def knn_rows(sizes: list[int], device: torch.device, progress: bool, k: int = 16,
             torch_cpu_limit: int = 200_000) -> list[dict]:
    """Time of each available kNN back-end on uniform random points in the unit cube."""
    from quest_geometric.geometry.knn import knn_graph
    from quest_geometric.typing import WITH_TORCH_CLUSTER

    backends = ["scipy", "torch"] + (["torch_cluster"] if WITH_TORCH_CLUSTER else [])
    rows = []
    for n in tqdm(sizes, desc="kNN sizes", disable=not progress):
        pos = torch.rand(n, 3, generator=torch.Generator().manual_seed(n))
        for backend in backends:
            # Exact all-pairs distances are O(N^2): on a CPU they take minutes past 100K
            # points, so that back-end is measured only up to `torch_cpu_limit`.
            if backend == "torch" and device.type == "cpu" and n > torch_cpu_limit:
                rows.append({"backend": backend, "points": n, "k": k, "seconds": math.nan,
                             "note": "skipped: O(N^2) on CPU"})
                continue
            p = pos.to(device) if backend == "torch" else pos
            t = time_function(lambda: knn_graph(p, k, backend=backend), warmup=0, repeat=1,
                              device=device if backend == "torch" else None)
            rows.append({"backend": backend, "points": n, "k": k, "seconds": t["median_s"], "note": ""})
    return rows


def _plot(rows: list[dict], path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover - matplotlib is in the bench extra
        return None
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for backend in dict.fromkeys(r["backend"] for r in rows):
        pts = [(r["points"], r["seconds"]) for r in rows if r["backend"] == backend and r["seconds"] == r["seconds"]]
        if pts:
            ax.loglog(*zip(*pts), marker="o", label=backend)
    ax.set_xlabel("points")
    ax.set_ylabel("seconds (k = 16)")
    ax.set_title("kNN graph back-ends")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def run(
    quick: bool = False,
    device: torch.device | str = "cpu",
    out_dir: str | Path = "benchmarks/results",
    progress: bool = True,
    batch_size: int | None = None,
    threads: int | None = None,
    knn_sizes: list[int] | None = None,
) -> dict[str, Any]:
    """Run the benchmark and write ``qsv_layer_speed.*`` and ``knn_speed.*`` to ``out_dir``.

    Args:
        quick (bool): batch 8 and up to 100K points instead of batch 64 and up to 1M.
        device (str): ``'cpu'`` or ``'cuda'``.
        out_dir (str): result folder.
        progress (bool): progress bars.
        batch_size (int, optional): override the number of images in the batch.
        threads (int, optional): torch intra-op threads for the run (restored afterwards).
            On a machine shared with other jobs, one thread gives stable numbers: an
            oversubscribed OpenMP pool slows every layer by 5-10x, erratically.
        knn_sizes (list of int, optional): point counts for the kNN table.
            (default: 10K and 100K with ``quick``, else 10K, 100K and 1M)

    Returns:
        dict: ``layers`` and ``knn`` rows, ``markdown`` (both tables) and a short ``summary``.
    """
    device = torch.device(device)
    out_dir = Path(out_dir)
    previous_threads = torch.get_num_threads()
    if threads is not None:
        if threads < 1:
            raise ValueError(f"run: 'threads' must be >= 1 (got {threads})")
        torch.set_num_threads(threads)
    try:
        return _run(quick, device, out_dir, progress, batch_size, knn_sizes)
    finally:
        torch.set_num_threads(previous_threads)


def _run(quick: bool, device: torch.device, out_dir: Path, progress: bool,
         batch_size: int | None, knn_sizes: list[int] | None) -> dict[str, Any]:
    bs = batch_size or (8 if quick else 64)
    repeat = 5 if quick else 7
    layers = layer_rows(bs, device, repeat, progress)
    meta = {"batch_size": bs, "sizes": SIZES, "k": K_WITHIN + K_CROSS, "channels": CHANNELS,
            "heads": HEADS, "dtype": "float32", "device": str(device), "seed": 0, "quick": quick}
    p1 = write_results(
        "qsv_layer_speed", layers, out_dir, meta=meta, title="QSVConv vs PyG attention layers",
        columns=["layer", "params", "nodes", "edges", "fwd_bwd_ms", "std_ms", "peak_mb",
                 "speedup_vs_transformer", "memory_vs_transformer"],
        notes="Forward + backward of one layer on a batch of sphere graphs; peak memory is the "
              "resident-set high-water mark added by one step (CPU) or allocator peak (CUDA).",
    )
    sizes = knn_sizes or ([10_000, 100_000] if quick else [10_000, 100_000, 1_000_000])
    knn = knn_rows(sizes, device, progress, torch_cpu_limit=20_000 if quick else 200_000)
    p2 = write_results("knn_speed", knn, out_dir, meta={"device": str(device), "seed": "n", "quick": quick},
                       title="kNN graph back-ends (k = 16, uniform points in the unit cube)",
                       columns=["backend", "points", "k", "seconds", "note"])
    _plot(knn, out_dir / "knn_speed.png")
    q = next(r for r in layers if r["layer"] == "QSVConv")
    summary = [
        f"QSVConv forward+backward {q['fwd_bwd_ms']:.0f} ms on {q['nodes']} nodes: "
        f"{q['speedup_vs_transformer']:.2f}x TransformerConv's speed, "
        f"{q['memory_vs_transformer']:.2f}x its peak memory",
    ]
    markdown = p1["md"].read_text() + "\n" + p2["md"].read_text() + "\n![kNN](knn_speed.png)\n"
    return {"layers": layers, "knn": knn, "markdown": markdown, "summary": summary}


def main(argv: list[str] | None = None) -> None:
    """Command-line entry of ``benchmarks/qsv_layer_speed.py``."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="batch 8, up to 100K points")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--threads", type=int, default=None,
                        help="torch intra-op threads (default: torch's choice)")
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args(argv)
    result = run(quick=args.quick, device=args.device, out_dir=args.out, batch_size=args.batch_size,
                 threads=args.threads)
    print(result["markdown"])
