"""Use QSVConv in your own PyTorch Geometric model.

A small graph classifier (a linear lift, pre-norm residual blocks of QSVConv and an MLP,
mean pooling, a linear head) trained on scikit-learn's handwritten digits mapped
onto concentric Fibonacci spheres (DigitsGraphs: offline, no download). QSVConv is an
ordinary PyG MessagePassing layer: ``conv(x, edge_index)`` on any batch of graphs.

    python examples/qsv_conv_in_your_model.py            # 3 epochs, a few minutes on CPU
    python examples/qsv_conv_in_your_model.py --quick    # a few steps, seconds (CI)
"""
from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import global_mean_pool

from quest_geometric.datasets import DigitsGraphs
from quest_geometric.nn import QSVConv
from quest_geometric.transforms import ImageToSphere


class SphereClassifier(nn.Module):
    """lift -> L pre-norm residual blocks [QSVConv, MLP] -> mean pool -> linear.

    ``quaternion='node'`` learns one free unit quaternion per node of the fixed sphere
    template (every image shares it; a batch of b graphs is b copies of the template, which
    QSVConv tiles); ``'feature'`` predicts the quaternions from the node features, and the
    node positions are appended to the input so that the model knows where each node is.
    """

    def __init__(self, in_channels: int, channels: int, heads: int, layers: int,
                 num_classes: int, quaternion: str = "node", num_nodes: int | None = None,
                 temperature: float | str | None = "learned") -> None:
        super().__init__()
        self.use_pos = quaternion == "feature"
        self.lift = nn.Linear(in_channels + (3 if self.use_pos else 0), channels)
        extra = {} if quaternion == "feature" else {"num_nodes": num_nodes}
        self.convs = nn.ModuleList(
            QSVConv(channels, channels, heads=heads, quaternion=quaternion,
                    temperature=temperature, **extra) for _ in range(layers))
        self.norms1 = nn.ModuleList(nn.LayerNorm(channels) for _ in range(layers))
        self.norms2 = nn.ModuleList(nn.LayerNorm(channels) for _ in range(layers))
        self.mlps = nn.ModuleList(
            nn.Sequential(nn.Linear(channels, 2 * channels), nn.GELU(),
                          nn.Linear(2 * channels, channels)) for _ in range(layers))
        self.head = nn.Linear(channels, num_classes)

    def forward(self, data) -> torch.Tensor:
        x = torch.cat([data.x, data.pos], -1) if self.use_pos else data.x
        x = self.lift(x)
        for conv, n1, n2, mlp in zip(self.convs, self.norms1, self.norms2, self.mlps):
            x = x + conv(n1(x), data.edge_index)
            x = x + mlp(n2(x))
        return self.head(global_mean_pool(x, data.batch, size=data.num_graphs))


@torch.no_grad()
def accuracy(model: nn.Module, dataset: DigitsGraphs, limit: int | None = None) -> float:
    model.eval()
    n = len(dataset) if limit is None else min(limit, len(dataset))
    correct = 0
    for start in range(0, n, 128):
        batch = dataset.graph_batch(range(start, min(n, start + 128)))  # vectorised
        correct += int((model(batch).argmax(-1) == batch.y).sum())
    return correct / n


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a few steps on a small sphere (CI)")
    p.add_argument("--epochs", type=int, default=3, help="training epochs over the digits")
    p.add_argument("--channels", type=int, default=32,
                   help="QSVConv channels, a multiple of 4 * heads")
    p.add_argument("--heads", type=int, default=2, help="QSVConv attention heads")
    p.add_argument("--layers", type=int, default=2, help="QSVConv layers")
    p.add_argument("--batch-size", type=int, default=32, help="graphs per step")
    p.add_argument("--lr", type=float, default=1e-2, help="AdamW learning rate")
    p.add_argument("--quaternion", choices=("node", "feature", "both"), default="node",
                   help="where QSVConv's quaternions come from")
    p.add_argument("--seed", type=int, default=0, help="random seed")
    args = p.parse_args(argv)
    torch.manual_seed(args.seed)

    sizes, k, k_cross = ((16, 64), 8, 4) if args.quick else ((32, 128, 256), 12, 4)
    sphere = ImageToSphere(sizes=sizes, k=k, k_cross=k_cross)
    train = DigitsGraphs(split="train", graph=sphere)
    test = DigitsGraphs(split="test", graph=sphere)
    g = train[0]
    print(f"sphere graph: {g.num_nodes} nodes, {g.num_edges} edges, shells {sizes}, "
          f"in-degree {k + k_cross}; {len(train)} training / {len(test)} test digits")

    model = SphereClassifier(train.num_features, args.channels, args.heads, args.layers,
                             train.num_classes, quaternion=args.quaternion,
                             num_nodes=g.num_nodes)
    print(model.convs[0], f"| parameters: {sum(p.numel() for p in model.parameters()):,}")
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    gen = torch.Generator().manual_seed(args.seed)
    max_steps = 15 if args.quick else None
    epochs = 1 if args.quick else args.epochs
    step, t0 = 0, time.perf_counter()
    for epoch in range(epochs):
        model.train()
        order = torch.randperm(len(train), generator=gen)
        for start in range(0, len(train), args.batch_size):
            # graph_batch converts a whole batch of images in one vectorised call; a
            # torch_geometric.loader.DataLoader(train, ...) gives the same batches, slower
            batch = train.graph_batch(order[start:start + args.batch_size])
            loss = F.cross_entropy(model(batch), batch.y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if step % 5 == 0:
                print(f"epoch {epoch} step {step}: loss {loss.item():.3f}")
            if max_steps is not None and step >= max_steps:
                break
    limit = 128 if args.quick else None
    acc = accuracy(model, test, limit)
    print(f"trained {step} steps in {time.perf_counter() - t0:.1f} s; "
          f"test accuracy {acc:.3f} on {limit or len(test)} digits (chance 0.1)")


if __name__ == "__main__":
    main()
