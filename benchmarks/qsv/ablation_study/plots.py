"""The QSV ablation's figures: entropy and rotation-angle histograms."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Sequence

import torch

from quest_geometric._utils import optional_pyplot, save_figure
from benchmarks.qsv.ablation_study.config import DESCRIPTIONS


def plot_histograms(results: Sequence[dict[str, Any]], which: str, path: Path,
                    variants: Sequence[str] = ("qsv", "lattice", "standard_attention")
                    ) -> Optional[Path]:
    """Histogram (pooled over seeds and layers, density) of the per-node attention entropy
    (``which='entropy'``) or the per-edge rotation angle (``'angle'``), one line per
    variant."""
    plt = optional_pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    drawn = False
    for v in variants:
        hs = [r["analysis"]["histograms"] for r in results
              if r["variant"] == v and r.get("analysis")]
        if not hs:
            continue
        edges = hs[0][f"{which}_edges"]
        counts = torch.zeros(len(edges) - 1, dtype=torch.float64)
        for h in hs:
            for layer in h[f"{which}_counts"]:
                counts += torch.tensor(layer, dtype=torch.float64)
        if counts.sum() <= 0:
            continue
        width = edges[1] - edges[0]
        density = counts / (counts.sum() * width)
        ax.stairs(density.numpy(), edges, label=DESCRIPTIONS[v], linewidth=1.5)
        drawn = True
    if not drawn:
        plt.close(fig)
        return None
    if which == "entropy":
        ax.set_xlabel("normalised attention entropy per node (1 = uniform)")
    else:
        ax.set_xlabel("rotation angle of r_ij = conj(q_i) q_j per edge (degrees)")
    ax.set_ylabel("density (all layers, heads, seeds)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, path, dpi=120)
