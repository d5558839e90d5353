"""Tiny models and data shared by the training-harness tests and their subprocess scripts.

Deliberately free of torch_geometric (whose import takes seconds) so that subprocesses start fast.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import TensorDataset

from quest_geometric.training.data import random_blocks


def classification_data(n: int = 64, d: int = 6, seed: int = 0) -> TensorDataset:
    """Two linearly separable-ish classes: y = [x0 + x1 > 0]."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    y = (x[:, 0] + x[:, 1] > 0).long()
    return TensorDataset(x, y)


class MLP(nn.Module):
    """A 2-layer MLP (optionally with dropout, which makes the RNG state matter)."""

    def __init__(self, d: int = 6, hidden: int = 16, classes: int = 2, dropout: float = 0.0):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d, hidden), nn.ReLU(), nn.Dropout(dropout),
                                 nn.Linear(hidden, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class TinyLM(nn.Module):
    """Embedding -> dropout -> linear next-token model; nanoGPT-style forward(x, y)."""

    def __init__(self, vocab: int = 11, dim: int = 8, dropout: float = 0.0):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.drop = nn.Dropout(dropout)
        self.head = nn.Linear(dim, vocab)

    def forward(self, x: torch.Tensor, y: torch.Tensor | None = None):
        logits = self.head(self.drop(self.emb(x)))
        loss = None
        if y is not None:
            loss = nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))
        return logits, loss


def corpus(n: int = 3000, vocab: int = 11, seed: int = 0) -> torch.Tensor:
    """A learnable token stream: mostly t -> t + 1 (mod vocab), with 20% random tokens."""
    g = torch.Generator().manual_seed(seed)
    out = torch.empty(n, dtype=torch.long)
    out[0] = 0
    noise = torch.rand(n, generator=g) < 0.2
    rnd = torch.randint(vocab, (n,), generator=g)
    for i in range(1, n):
        out[i] = rnd[i] if noise[i] else (out[i - 1] + 1) % vocab
    return out


class GetBatch:
    """``get_batch(split, batch_size, generator)`` over a train/val split of a token stream."""

    def __init__(self, data: torch.Tensor, block: int = 8):
        cut = int(0.9 * data.numel())
        self.splits = {"train": data[:cut], "val": data[cut:]}
        self.block = block

    def __call__(self, split: str, batch_size: int, generator: torch.Generator):
        return random_blocks(self.splits[split], batch_size, self.block, generator)
