"""The QSV ablation study's data beyond digits graphs: CIFAR, the images of ResNet-20 and
the training and test limits."""
from __future__ import annotations

import os
from typing import Any, Callable, Optional, Union

from torch_geometric.data import Data

from benchmarks.qsv.ablation_study.config import _check_dataset
from benchmarks.qsv.pipelines import qsv_ablation
from benchmarks.qsv.pipelines.qsv_ablation import AblationConfig


def graph_transform(variant: str, cfg: AblationConfig) -> Optional[Callable[[Data], Any]]:
    """The package's :func:`~quest_geometric.pipelines.qsv_ablation.graph_transform`, and
    none for ``'resnet20'`` (it trains on the images)."""
    return None if variant == "resnet20" else qsv_ablation.graph_transform(variant, cfg)


def graph_loader(dataset: Any, batch_size: int, shuffle: bool, seed: int = 0) -> Any:
    """The package's vectorised
    :func:`~quest_geometric.pipelines.qsv_ablation.graph_loader`, or the dataset itself
    when it has no vectorised :meth:`graph_batch` (the ResNet's images)."""
    transform = getattr(dataset, "graph_transform", None)
    if not hasattr(dataset, "graph_batch") or not hasattr(transform, "batch_call"):
        return dataset
    return qsv_ablation.graph_loader(dataset, batch_size, shuffle, seed)


def load_split(dataset: str, train: bool, graph: Optional[Callable[[Data], Any]],
               cfg: AblationConfig, root: Optional[Union[str, os.PathLike]] = None,
               download: bool = False) -> Any:
    """One split of ``dataset`` as graphs (or images with ``graph=None``), limited by
    ``cfg.train_limit`` / ``cfg.test_limit``. CIFAR needs ``root``."""
    _check_dataset(dataset)
    if dataset == "digits":
        ds: Any = qsv_ablation.load_digits(train, graph, cfg)
    else:
        if root is None:
            raise ValueError(f"qsv_ablation: dataset {dataset!r} needs root= (--root), the "
                             "folder holding (or receiving, with download) the CIFAR data")
        from quest_geometric.datasets.images import CIFAR10Graphs, CIFAR100Graphs

        cls = CIFAR10Graphs if dataset == "cifar10" else CIFAR100Graphs
        ds = cls(os.fspath(root), train=train, graph=graph, augment=bool(cfg.augment and train),
                 download=download, log=False)
    limit = cfg.train_limit if train else cfg.test_limit
    if limit is not None and limit < len(ds):
        ds = ds.index_select(list(range(limit)))
    return ds

