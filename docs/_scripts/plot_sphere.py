"""Draws the figures of the QSV page: the sphere graph and the two image projections.

Run from the repository root:

    python docs/_scripts/plot_sphere.py

Writes ``docs/_static/sphere_graph.png`` and ``docs/_static/projections.png``.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from mpl_toolkits.mplot3d.art3d import Line3DCollection  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402

from quest_geometric.geometry.graphs import sphere_graph  # noqa: E402
from quest_geometric.transforms.image_to_sphere import ImageToSphere  # noqa: E402

STATIC = Path(__file__).resolve().parents[1] / "_static"
SHELL_COLORS = ["#1b9e77", "#d95f02", "#7570b3"]


def _style(ax, lim: float, title: str, elev: float = 20, azim: float = -60) -> None:
    ax.set_xlim(-lim, lim)
    ax.set_ylim(-lim, lim)
    ax.set_zlim(-lim, lim)
    ax.set_box_aspect((1, 1, 1))
    ax.view_init(elev=elev, azim=azim)
    ax.set_axis_off()
    ax.set_title(title, fontsize=10)


def plot_sphere_graph(path: Path) -> None:
    sizes, k, k_cross = (64, 256, 1024), 12, 4
    data = sphere_graph(sizes, k, k_cross=k_cross)
    pos, shell = data.pos.numpy(), data.shell.numpy()
    row, col = data.edge_index.numpy()
    is_cross = shell[row] != shell[col]
    fig = plt.figure(figsize=(16, 4.4))
    for s, n in enumerate(sizes):
        ax = fig.add_subplot(1, 4, s + 1, projection="3d")
        sel = (~is_cross) & (shell[col] == s)
        segs = np.stack([pos[row[sel]], pos[col[sel]]], 1)
        ax.add_collection3d(Line3DCollection(segs, colors="0.35", linewidths=0.35,
                                             alpha=0.6))
        p = pos[shell == s]
        ax.scatter(p[:, 0], p[:, 1], p[:, 2], s=6 if n > 300 else 12,
                   color=SHELL_COLORS[s], depthshade=True)
        _style(ax, 0.75 * (s + 1), f"shell {s}: {n} nodes, r = {s + 1}, k = {k}")
    # Slice: nodes near the great circle y = 0 of every shell, with their cross edges.
    ax = fig.add_subplot(1, 4, 4, projection="3d")
    radius = np.linalg.norm(pos, axis=1)
    slab = np.abs(pos[:, 1]) / radius < 0.1
    sel = is_cross & slab[row] & slab[col]
    segs = np.stack([pos[row[sel]], pos[col[sel]]], 1)
    ax.add_collection3d(Line3DCollection(segs, colors="0.2", linewidths=0.6, alpha=0.8))
    for s in range(len(sizes)):
        p = pos[(shell == s) & slab]
        ax.scatter(p[:, 0], p[:, 1], p[:, 2], s=10, color=SHELL_COLORS[s],
                   depthshade=False, label=f"shell {s}")
    _style(ax, 2.2, f"slice |y| < 0.1 r: cross-shell edges (k_cross = {k_cross})",
           elev=0, azim=-90)
    ax.legend(loc="lower right", fontsize=8, frameon=False)
    fig.suptitle(f"sphere_graph(sizes={sizes}, k={k}, k_cross={k_cross}): "
                 f"every node has in-degree {k + k_cross}", fontsize=12)
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_projections(path: Path) -> None:
    digits = load_digits()
    index = int(np.flatnonzero(digits.target == 7)[0])  # asymmetric: shows orientation
    image = torch.tensor(digits.images[index], dtype=torch.float32)[None] / 16.0
    fig = plt.figure(figsize=(18, 8.4))
    ax = fig.add_subplot(2, 5, 1)
    ax.imshow(image[0], cmap="magma", vmin=0, vmax=1)
    ax.set_title(f"load_digits() image {index} (label 7), 8x8", fontsize=10)
    ax.set_xticks([])
    ax.set_yticks([])
    fig.add_subplot(2, 5, 6).set_axis_off()
    for r, projection in enumerate(("stereographic", "equal_area")):
        t = ImageToSphere(sizes=(3000,), k=6, projection=projection)
        data = t(image)
        pos, x = data.pos.numpy(), data.x[:, 0].numpy()
        views = [(90, -90, "seen from +z (image centre)"),
                 (25, -60, "oblique"),
                 (-90, -90, "seen from -z")]
        for c, (elev, azim, what) in enumerate(views):
            ax = fig.add_subplot(2, 5, 5 * r + c + 2, projection="3d")
            # Draw only the visible hemisphere, so the far side does not shine through.
            view = np.array([np.cos(np.radians(elev)) * np.cos(np.radians(azim)),
                             np.cos(np.radians(elev)) * np.sin(np.radians(azim)),
                             np.sin(np.radians(elev))])
            vis = pos @ view > 0
            ax.scatter(pos[vis, 0], pos[vis, 1], pos[vis, 2], c=x[vis], cmap="magma",
                       vmin=0, vmax=1, s=9, depthshade=False)
            _style(ax, 0.75, f"{projection}, cap = {t.cap:g} deg\n{what}", elev, azim)
        # Where the nodes sample the image plane (every 3rd node, for legibility).
        ax = fig.add_subplot(2, 5, 5 * r + 5)
        g = t.template().grid.numpy()
        ax.imshow(image[0], cmap="magma", vmin=0, vmax=1, extent=(-1, 1, 1, -1))
        ax.scatter(g[::3, 0], g[::3, 1], s=1.5, color="#4dd0e1")
        ax.add_patch(plt.Circle((0, 0), 1.0, fill=False, color="w", lw=1, ls="--"))
        ax.set_xlim(-1.6, 1.6)
        ax.set_ylim(1.6, -1.6)
        ax.set_aspect("equal")
        ax.set_xticks([-1, 0, 1])
        ax.set_yticks([-1, 0, 1])
        ax.tick_params(labelsize=8)
        ax.set_title(f"{projection}: node sample points\n(dashed: the cap's boundary)",
                     fontsize=10)
    fig.suptitle("ImageToSphere: each node samples the image bilinearly at its projected "
                 "direction (zeros outside the image square)", fontsize=12)
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    STATIC.mkdir(parents=True, exist_ok=True)
    plot_sphere_graph(STATIC / "sphere_graph.png")
    plot_projections(STATIC / "projections.png")


if __name__ == "__main__":
    main()
