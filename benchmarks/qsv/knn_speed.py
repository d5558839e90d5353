"""How fast is each kNN back-end of :func:`~quest_geometric.geometry.knn_graph` (SciPy's
cKDTree, exact all-pairs torch, torch-cluster when installed) building the ``k = 16`` graph
of 10K to 1M uniform random points in the unit cube?

    python -m benchmarks.qsv.knn_speed [--quick] [--device cuda]
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from quest_geometric._utils.plotting import optional_pyplot, save_figure
from quest_geometric.profile import time_function, write_results


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
            rows.append({"backend": backend, "points": n, "k": k, "seconds": t["median_s"],
                         "note": ""})
    return rows


def _plot(rows: list[dict], path: Path) -> Path | None:
    plt = optional_pyplot()
    if plt is None:  # pragma: no cover - matplotlib is in the bench extra
        return None
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for backend in dict.fromkeys(r["backend"] for r in rows):
        pts = [(r["points"], r["seconds"]) for r in rows
               if r["backend"] == backend and r["seconds"] == r["seconds"]]
        if pts:
            ax.loglog(*zip(*pts), marker="o", label=backend)
    ax.set_xlabel("points")
    ax.set_ylabel("seconds (k = 16)")
    ax.set_title("kNN graph back-ends")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    return save_figure(fig, path, dpi=120)


def run(quick: bool = False, device: torch.device | str = "cpu",
        out_dir: str | Path = "benchmarks/qsv/results", progress: bool = True,
        sizes: list[int] | None = None) -> dict[str, Any]:
    """Run the benchmark and write ``knn_speed.*`` (and the plot ``knn_speed.png``) to
    ``out_dir``.

    Args:
        quick (bool): up to 100K points instead of 1M, and the all-pairs torch back-end up
            to 20K points instead of 200K on a CPU.
        device (str): ``'cpu'`` or ``'cuda'`` (the torch back-end's device).
        out_dir (str): result folder.
        progress (bool): progress bars.
        sizes (list of int, optional): point counts.
            (default: 10K and 100K with ``quick``, else 10K, 100K and 1M)

    Returns:
        dict: the ``rows`` and ``markdown`` (the table and the plot).
    """
    device = torch.device(device)
    out_dir = Path(out_dir)
    sizes = sizes or ([10_000, 100_000] if quick else [10_000, 100_000, 1_000_000])
    rows = knn_rows(sizes, device, progress, torch_cpu_limit=20_000 if quick else 200_000)
    p = write_results("knn_speed", rows, out_dir,
                      meta={"device": str(device),
                            "seed": "the point count n (torch.Generator().manual_seed(n))",
                            "quick": quick, "torch_threads": torch.get_num_threads()},
                      title="kNN graph back-ends (k = 16, uniform points in the unit cube)",
                      columns=["backend", "points", "k", "seconds", "note"])
    _plot(rows, out_dir / "knn_speed.png")
    return {"rows": rows, "markdown": p["md"].read_text() + "\n![kNN](knn_speed.png)\n"}


def main(argv: list[str] | None = None) -> None:
    """Command-line entry of ``python -m benchmarks.qsv.knn_speed``."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="up to 100K points")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default="benchmarks/qsv/results")
    args = parser.parse_args(argv)
    result = run(quick=args.quick, device=args.device, out_dir=args.out)
    print(result["markdown"])


if __name__ == "__main__":
    main()
