"""The figure of the experiment: the routers' training loss per gate."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List

from quest_geometric._utils.plotting import optional_pyplot, save_figure


def plot_curves(curves: Dict[str, List[float]], path: Path) -> None:
    """The training loss per step of each gate, raw and as a running mean, saved to ``path``
    (nothing without matplotlib)."""
    plt = optional_pyplot()
    if plt is None:  # pragma: no cover - matplotlib is optional (the bench extra)
        return
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    for gate, c in curves.items():
        if not c:
            continue
        k = max(1, len(c) // 20)
        sm = [sum(c[max(0, i - k + 1):i + 1]) / len(c[max(0, i - k + 1):i + 1])
              for i in range(len(c))]
        ax.plot(range(1, len(c) + 1), c, alpha=0.25)
        ax.plot(range(1, len(c) + 1), sm, label=f"{gate} gate (running mean of {k})")
    ax.set_xlabel("router training step (one 1,024-token block each)")
    ax.set_ylabel("training loss (nats / token)")
    ax.set_title("SmolLM2-135M + Focus: router training loss (all other weights frozen)")
    ax.legend()
    save_figure(fig, path, dpi=120)

