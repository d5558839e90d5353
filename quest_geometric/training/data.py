"""The two kinds of training data the :class:`~quest_geometric.training.trainer.Trainer` takes:
**epoch-based**, a map-style dataset (batched by :func:`make_loader`) or a ready
:class:`~torch.utils.data.DataLoader`, and **step-based**, a function
``get_batch(split, batch_size, generator)`` that draws one batch of ``split`` (``'train'``
or ``'val'``) using *only* ``generator`` for its randomness (e.g. :func:`random_blocks`).
The trainer seeds the generators from ``(seed, split, rank)`` and saves the training one in
every checkpoint, so resumed runs and repeated evaluations draw the same batches."""
from __future__ import annotations

import sys
from typing import Any, Callable, Optional, Protocol, Union, runtime_checkable

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from quest_geometric._utils.checks import check_int
from quest_geometric.training.distributed import ShardSampler


@runtime_checkable
class BatchFunction(Protocol):
    """A step-based data source: ``get_batch(split, batch_size, generator) -> batch``."""

    def __call__(self, split: str, batch_size: int, generator: torch.Generator) -> Any:
        ...


TrainData = Union[Dataset, DataLoader, BatchFunction, Callable[[str, int, torch.Generator], Any]]


def is_step_data(data: Any) -> bool:
    """Whether ``data`` is a step-based ``get_batch`` function rather than a dataset/loader."""
    if isinstance(data, (DataLoader, Dataset)):
        return False
    return callable(data) and not hasattr(data, "__getitem__")


def _is_pyg(dataset: Any) -> bool:
    if "torch_geometric" not in sys.modules:  # PyG objects cannot exist without the import
        return False
    try:
        from torch_geometric.data import Dataset as PyGDataset
        from torch_geometric.data.data import BaseData
    except ImportError:  # pragma: no cover
        return False
    if isinstance(dataset, PyGDataset):
        return True
    try:
        return len(dataset) > 0 and isinstance(dataset[0], BaseData)
    except Exception:  # noqa: BLE001  (a dataset whose first item cannot be read is not PyG)
        return False


def make_loader(dataset: Any, batch_size: int, *, shuffle: bool, seed: int = 0, rank: int = 0,
                world_size: int = 1, num_workers: int = 0, drop_last: bool = False,
                **kwargs: Any) -> DataLoader:
    """Build a seeded, shardable loader over a map-style dataset (PyG's loader for graphs).

    Training loaders use :class:`~torch.utils.data.DistributedSampler`: after
    ``loader.sampler.set_epoch(e)`` epoch :math:`e` is ordered by ``randperm(n, seed + e)``, so
    a resumed run sees the batches an uninterrupted one would, and ``W`` ranks with batch
    :math:`b/W` see the samples of one rank with batch :math:`b`. Evaluation loaders use the
    unpadded :class:`~quest_geometric.training.distributed.ShardSampler`.

    Args:
        dataset: a map-style dataset, PyG dataset or list of PyG ``Data``.
        batch_size (int): the *per-rank* batch size.
        shuffle (bool): training order (seeded permutation per epoch) or in-order evaluation.
        seed (int): the permutation seed. (default: :obj:`0`)
        rank (int): this rank. (default: :obj:`0`)
        world_size (int): number of ranks. (default: :obj:`1`)
        num_workers (int): loader worker processes. (default: :obj:`0`)
        drop_last (bool): drop a last incomplete batch. (default: :obj:`False`)
        **kwargs: passed to the loader (``pin_memory``, ``collate_fn``...).

    Returns:
        torch.utils.data.DataLoader: the loader.
    """
    check_int(batch_size, "`batch_size`", 1, where="make_loader")
    if not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
        raise TypeError("make_loader: `dataset` must be a map-style dataset "
                        f"(with __len__ and __getitem__), got {type(dataset).__name__}")
    if len(dataset) == 0:
        raise ValueError("make_loader: `dataset` is empty")
    if shuffle:
        sampler: Any = DistributedSampler(dataset, num_replicas=world_size, rank=rank,
                                          shuffle=True, seed=seed, drop_last=False)
    else:
        sampler = ShardSampler(len(dataset), rank, world_size)
    loader_cls: Any = DataLoader
    if _is_pyg(dataset):
        from torch_geometric.loader import DataLoader as loader_cls
    return loader_cls(dataset, batch_size=batch_size, sampler=sampler,
                      num_workers=num_workers, drop_last=drop_last, **kwargs)


def random_blocks(data: torch.Tensor, batch_size: int, block_size: int,
                  generator: Optional[torch.Generator] = None) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Draw ``batch_size`` random contiguous blocks of a 1-D token tensor (nanoGPT style): for a
    start :math:`s` uniform in :math:`\{0, \dots, N - T - 1\}` the input is ``data[s : s + T]``
    and the target ``data[s + 1 : s + T + 1]``.

    Args:
        data (torch.Tensor): token ids, shape :math:`(N,)`.
        batch_size (int): number of blocks :math:`B`.
        block_size (int): block length :math:`T`.
        generator (torch.Generator, optional): the only source of randomness. (default: :obj:`None`)

    Returns:
        (torch.Tensor, torch.Tensor): inputs and targets, each :math:`(B, T)`, ``int64``.
    """
    if data.dim() != 1:
        raise ValueError(f"random_blocks: `data` must be 1-D, got shape {tuple(data.shape)}")
    if block_size < 1 or batch_size < 1:
        raise ValueError(f"random_blocks: batch_size ({batch_size}) and block_size "
                         f"({block_size}) must be positive")
    if data.numel() <= block_size:
        raise ValueError(f"random_blocks: `data` has {data.numel()} tokens, needs more than "
                         f"block_size={block_size}")
    starts = torch.randint(data.numel() - block_size, (batch_size,), generator=generator)
    idx = starts[:, None] + torch.arange(block_size)[None, :]
    return data[idx].long(), data[idx + 1].long()


__all__ = ["BatchFunction", "TrainData", "is_step_data", "make_loader", "random_blocks"]
