"""The figures of the study's key-spectrum intervention and of a series of pretrained
checkpoints (the trajectory figures are in :mod:`benchmarks.qk_geometry.trajectories.plots`)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from quest_geometric._utils import optional_pyplot, save_figure


def plot_intervention(results: Sequence[Mapping[str, Any]], path: Path) -> Optional[Path]:
    """Layer-mean attention entropy and PR_K over training for each control mode and seed."""
    plt = optional_pyplot()
    if plt is None:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    colors = {"none": "tab:gray", "hold": "tab:blue", "shrink": "tab:red"}
    seen = set()
    for r in results:
        mode = r["meta"]["mode"]
        steps = sorted({x["step"] for x in r["records"]})
        for ax, key in zip(axes, ("attention_entropy", "pr_k")):
            ys = [np.mean([x[key] for x in r["records"] if x["step"] == s
                           and x.get(key) is not None])
                  for s in steps]
            ax.plot(steps, ys, color=colors[mode], alpha=0.7, lw=1,
                    label=mode if (mode, key) not in seen else None)
            seen.add((mode, key))
    axes[0].set_ylabel("attention entropy (layer mean)")
    axes[1].set_ylabel("PR_K (layer mean)")
    for ax in axes:
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return save_figure(fig, path, dpi=110)


def plot_hf(result: Mapping[str, Any], path: Path) -> Optional[Path]:
    """PR_Q - PR_K per layer against the checkpoint step."""
    plt = optional_pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for prow in result["pivot"]:
        ys = [prow[f"step {s}"] for s in result["steps"]]
        ax.plot(result["steps"], ys, marker="o", label=f"layer {prow['layer']}")
    ax.axhline(0, color="k", lw=0.8)
    ax.set_xlabel("training step")
    ax.set_ylabel("PR_Q - PR_K")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return save_figure(fig, path, dpi=110)
