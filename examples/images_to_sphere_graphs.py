"""Turn an image dataset into sphere graphs.

ImageToSphere maps an image onto concentric spherical Fibonacci lattices (one kNN graph per
shell plus edges between adjacent shells) and samples it bilinearly at every node. The
template graph depends only on the configuration: it is built once and shared by every image.
This script converts scikit-learn's handwritten digits (offline) with both projections,
prints the statistics of the graphs, checks that the vectorised batch path equals the
per-image transform, and optionally draws one digit on its shells.

    python examples/images_to_sphere_graphs.py
    python examples/images_to_sphere_graphs.py --figure sphere_digit.png
    python examples/images_to_sphere_graphs.py --quick        # a small sphere, seconds (CI)

For CIFAR use ``quest_geometric.datasets.CIFAR10Graphs(root, graph=...)`` the same way (it
downloads through torchvision).
"""
from __future__ import annotations

import argparse
import time

import torch
from torch_geometric.data import Batch
from torch_geometric.utils import degree

from quest_geometric.datasets import DigitsGraphs, load_digits_split
from quest_geometric.transforms import ImageToLattice, ImageToSphere


def describe(name: str, data, images: torch.Tensor) -> None:
    deg = degree(data.edge_index[1], data.num_nodes)
    line = (f"{name:>13}: {data.num_nodes:5d} nodes, {data.num_edges:6d} edges, "
            f"in-degree {int(deg.min())}..{int(deg.max())}")
    if hasattr(data, "shell"):
        counts = torch.bincount(data.shell).tolist()
        line += f", nodes per shell {counts}"
    print(line)
    x = data.x
    print(f"{'':>13}  features {tuple(x.shape)}: mean {x.mean():.3f}, std {x.std():.3f}, "
          f"exact zeros {(x == 0).float().mean():.1%}; source image "
          f"{tuple(images.shape[1:])}")


def draw(path: str, data, image: torch.Tensor, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shells = int(data.shell.max()) + 1
    fig = plt.figure(figsize=(3.2 * (shells + 1), 3.4))
    ax = fig.add_subplot(1, shells + 1, 1)
    ax.imshow(image[0], cmap="gray_r")
    ax.set_title("image")
    ax.set_axis_off()
    for s in range(shells):
        sel = data.shell == s
        pos = data.pos[sel]
        pos = pos / pos.norm(dim=-1, keepdim=True)
        ax = fig.add_subplot(1, shells + 1, s + 2, projection="3d")
        ax.scatter(pos[:, 0], pos[:, 1], pos[:, 2], c=data.x[sel, 0], cmap="gray_r", s=10,
                   edgecolors="0.6", linewidths=0.3)
        ax.view_init(elev=60, azim=-90)
        ax.set_box_aspect((1, 1, 1))
        ax.set_axis_off()
        ax.set_title(f"shell {s}: {int(sel.sum())} nodes")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="a small sphere, seconds (CI); overrides --sizes")
    p.add_argument("--sizes", type=int, nargs="+", default=[64, 256, 1024],
                   help="nodes per shell, innermost first")
    p.add_argument("--k", type=int, default=12, help="within-shell neighbours")
    p.add_argument("--k-cross", type=int, default=4, help="neighbours in adjacent shells")
    p.add_argument("--figure", default=None, help="write a PNG of one digit on its shells")
    args = p.parse_args(argv)
    sizes = (16, 64) if args.quick else tuple(args.sizes)
    k = 8 if args.quick else args.k

    images, labels = load_digits_split("train")
    print(f"digits: {len(images)} training images {tuple(images.shape[1:])}, "
          f"{int(labels.max()) + 1} classes")
    t0 = time.perf_counter()
    sphere = ImageToSphere(sizes=sizes, k=k, k_cross=args.k_cross)
    print(f"{sphere} template built in {time.perf_counter() - t0:.2f} s (cached afterwards)")
    area = ImageToSphere(sizes=sizes, k=k, k_cross=args.k_cross, projection="equal_area")
    lattice = ImageToLattice()
    one = images[0]
    for name, t in (("stereographic", sphere), ("equal_area", area), ("lattice", lattice)):
        describe(name, t(one), images)

    n = 64 if args.quick else len(images)
    t0 = time.perf_counter()
    batch = sphere.batch_call(images[:n], labels[:n], as_batch=True)  # one vectorised call
    dt = time.perf_counter() - t0
    ref = Batch.from_data_list([sphere(img) for img in images[:8]])
    same = torch.equal(batch.x[:ref.num_nodes], ref.x) and torch.equal(
        batch.edge_index[:, :ref.num_edges], ref.edge_index)
    print(f"batch of {n} graphs: x {tuple(batch.x.shape)}, edge_index "
          f"{tuple(batch.edge_index.shape)} in {dt:.3f} s; equals the per-image transform: {same}")

    ds = DigitsGraphs(split="train", graph=sphere)  # normalised with the training mean/std
    g = ds[0]
    print(f"DigitsGraphs: {len(ds)} graphs, {ds.num_features} feature(s), {ds.num_classes} "
          f"classes; sample {g}")
    if args.figure:
        draw(args.figure, sphere(one), one, f"digit {int(labels[0])}, stereographic projection")
        print(f"figure written to {args.figure}")


if __name__ == "__main__":
    main()
