"""The QSV ablation study's data: image-to-graph transforms with positions, the vectorised
batch loader, and the splits of digits and CIFAR (as graphs, or as images for ResNet-20)."""
from __future__ import annotations

import math
import os
from typing import Any, Callable, Optional, Union

import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.transforms import BaseTransform

from benchmarks.qsv.ablation_study.config import AblationConfig, _check_dataset
from quest_geometric.transforms.append_position import AppendPosition


class WithPosition(BaseTransform):
    r"""A graph transform followed by :class:`AppendPosition`, with a vectorised
    ``batch_call``: every graph of a template has the same positions, so their features
    are computed once and tiled. Equals ``Compose([base, AppendPosition()])`` per sample.

    Args:
        base (BaseTransform): an image-to-graph transform with ``batch_call``
            (:class:`~quest_geometric.transforms.image_to_sphere.ImageToSphere`,
            :class:`~quest_geometric.transforms.image_to_lattice.ImageToLattice`).
    """

    def __init__(self, base: Any) -> None:
        if not hasattr(base, "batch_call"):
            raise TypeError(f"WithPosition needs a transform with batch_call (got {base!r})")
        self.base = base
        self.append = AppendPosition()

    def forward(self, data: Any) -> Data:
        return self.append(self.base(data))

    def batch_call(self, images: Tensor, y: Optional[Tensor] = None,
                   as_batch: bool = False) -> Any:
        out = self.base.batch_call(images, y=y, as_batch=as_batch)
        if not as_batch:
            return [self.append(d) for d in out]
        n = out.num_nodes // max(out.num_graphs, 1)
        feat = AppendPosition.position_features(out.pos[:n]).to(out.x.dtype)
        out.x = torch.cat([out.x, feat.repeat(out.num_graphs, 1)], dim=-1)
        return out

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.base!r})"


def graph_transform(variant: str, cfg: AblationConfig) -> Optional[Callable[[Data], Any]]:
    """The transform from an image to the graph ``variant`` trains on: none for
    ``'resnet20'`` (it trains on the images), the flat pixel lattice for ``'lattice'``, the
    sphere graph for the other variants (with the positions appended as features when
    ``cfg.positions == 'features'``)."""
    if variant == "resnet20":
        return None
    if variant == "lattice":
        from quest_geometric.transforms.image_to_lattice import ImageToLattice

        base: Callable[[Data], Any] = ImageToLattice(k=cfg.lattice_k)
    else:
        from quest_geometric.transforms.image_to_sphere import ImageToSphere

        base = ImageToSphere(sizes=cfg.sphere_sizes, k=cfg.k, k_cross=cfg.k_cross)
    return WithPosition(base) if cfg.positions == "features" else base


class _EpochBatches(torch.utils.data.Sampler):
    """Index batches of one epoch: a permutation that is a pure function of
    ``(seed, epoch)`` (so a resumed run sees the batches an uninterrupted one would),
    sharded by rank."""

    def __init__(self, n: int, batch_size: int, shuffle: bool, seed: int, rank: int = 0,
                 world_size: int = 1) -> None:
        self.n, self.batch_size, self.shuffle, self.seed = n, batch_size, shuffle, seed
        self.rank, self.world_size, self.epoch = rank, world_size, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __iter__(self):
        if self.shuffle:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
            order = torch.randperm(self.n, generator=g)
        else:
            order = torch.arange(self.n)
        mine = order[self.rank::self.world_size]
        return iter([b.tolist() for b in mine.split(self.batch_size)])

    def __len__(self) -> int:
        per_rank = len(range(self.rank, self.n, self.world_size))
        return math.ceil(per_rank / self.batch_size)


class _GraphBatches(torch.utils.data.Dataset):
    """``dataset[list of indices]`` -> ``dataset.graph_batch(indices)`` (vectorised)."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __getitem__(self, index: list[int]) -> Any:
        return self.dataset.graph_batch(index)

    def __len__(self) -> int:
        return len(self.dataset)


def graph_loader(dataset: Any, batch_size: int, shuffle: bool, seed: int = 0) -> Any:
    """A :class:`~torch.utils.data.DataLoader` of whole batches built by the dataset's
    vectorised :meth:`graph_batch`, or the dataset itself when it has none (the ResNet's
    images). The order of epoch :math:`e` is a pure function of ``(seed, e)``; under DDP each
    rank takes its shard."""
    from quest_geometric.training.distributed import get_dist_info

    transform = getattr(dataset, "graph_transform", None)
    if not hasattr(dataset, "graph_batch") or not hasattr(transform, "batch_call"):
        return dataset
    info = get_dist_info()
    local = batch_size // max(info.world_size, 1)
    sampler = _EpochBatches(len(dataset), local, shuffle, seed, info.rank, info.world_size)
    return torch.utils.data.DataLoader(_GraphBatches(dataset), sampler=sampler, batch_size=None)


def sample_shapes(sample: Data) -> tuple[int, Optional[int]]:
    """``(input channels, nodes)`` of one dataset sample: a graph's feature size and node
    count, or an image sample's (``image`` ``[1, C, H, W]``) channels and :obj:`None`."""
    image = getattr(sample, "image", None)
    if isinstance(image, Tensor):
        return int(image.size(1)), None
    return int(sample.x.size(1)), int(sample.num_nodes)


def load_split(dataset: str, train: bool, graph: Optional[Callable[[Data], Any]],
               cfg: AblationConfig, root: Optional[Union[str, os.PathLike]] = None,
               download: bool = False) -> Any:
    """One split of ``dataset`` as graphs (or images with ``graph=None``), augmented when
    ``cfg.augment`` and ``train``, limited by ``cfg.train_limit`` / ``cfg.test_limit``.
    scikit-learn's digits ship with it; CIFAR needs ``root``."""
    _check_dataset(dataset)
    augment = bool(cfg.augment and train)
    if dataset == "digits":
        from quest_geometric.datasets.images import DigitsGraphs

        ds: Any = DigitsGraphs(split="train" if train else "test", graph=graph, augment=augment)
    else:
        if root is None:
            raise ValueError(f"qsv_ablation: dataset {dataset!r} needs root= (--root), the "
                             "folder holding (or receiving, with download) the CIFAR data")
        from quest_geometric.datasets.images import CIFAR10Graphs, CIFAR100Graphs

        cls = CIFAR10Graphs if dataset == "cifar10" else CIFAR100Graphs
        ds = cls(os.fspath(root), train=train, graph=graph, augment=augment,
                 download=download, log=False)
    limit = cfg.train_limit if train else cfg.test_limit
    if limit is not None and limit < len(ds):
        ds = ds.index_select(list(range(limit)))
    return ds


def load_splits(variant: str, cfg: AblationConfig, dataset: str = "digits",
                root: Optional[Union[str, os.PathLike]] = None,
                download: bool = False) -> tuple[Any, Any, Any]:
    """The training, test and clean (never augmented) training splits of ``dataset`` as the
    graphs of ``variant`` (:func:`graph_transform`; the images for ``'resnet20'``)."""
    graph = graph_transform(variant, cfg)
    train = load_split(dataset, True, graph, cfg, root, download)
    clean = (train if not cfg.augment
             else load_split(dataset, True, graph, cfg.replace(augment=False), root, download))
    return train, load_split(dataset, False, graph, cfg, root, download), clean
