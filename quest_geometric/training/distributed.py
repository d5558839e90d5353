"""Distributed data parallel (DDP) plumbing: process-group setup from ``torchrun``'s
environment, rank queries and the reductions the trainer needs. In a single process every
helper acts as the identity, so the same code runs with ``python`` and with ``torchrun``."""
from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Iterator, Optional

import torch
import torch.distributed as dist
from torch.utils.data import Sampler


@dataclass(frozen=True)
class DistInfo:
    """Where this process sits in the job: ``rank``, ``world_size`` and ``local_rank``."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        """Whether this is rank 0, the only rank that writes logs, checkpoints and bars."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        """Whether more than one process takes part."""
        return self.world_size > 1


def _env_int(name: str, default: int) -> int:
    v = os.environ.get(name)
    if not v:
        return default
    try:
        return int(v)
    except ValueError as e:
        raise ValueError(f"environment variable {name} must be an int, got {v!r}") from e


def init_distributed(backend: Optional[str] = None, timeout_s: float = 300.0) -> DistInfo:
    """Join the process group ``torchrun`` describes (``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``,
    ``env://``); nothing is initialised for one process, an existing group is kept.

    Args:
        backend (str, optional): ``'nccl'`` or ``'gloo'``; :obj:`None` picks ``'nccl'`` when CUDA
            is available and ``'gloo'`` otherwise. (default: :obj:`None`)
        timeout_s (float): collective timeout in seconds. (default: :obj:`300.0`)

    Returns:
        DistInfo: this process's rank, the world size and the local rank.
    """
    if dist.is_available() and dist.is_initialized():
        return get_dist_info()
    world_size = _env_int("WORLD_SIZE", 1)
    rank = _env_int("RANK", 0)
    local_rank = _env_int("LOCAL_RANK", rank)
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"invalid RANK={rank} / WORLD_SIZE={world_size} in the environment")
    if world_size == 1:
        return DistInfo(0, 1, 0)
    if not dist.is_available():
        raise RuntimeError("WORLD_SIZE > 1 but torch.distributed is not available in this build")
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
    dist.init_process_group(backend=backend, init_method="env://", rank=rank,
                            world_size=world_size, timeout=timedelta(seconds=timeout_s))
    return DistInfo(rank, world_size, local_rank)


def get_dist_info() -> DistInfo:
    """The current placement (rank 0 of 1 when no process group is initialised)."""
    if dist.is_available() and dist.is_initialized():
        return DistInfo(dist.get_rank(), dist.get_world_size(),
                        _env_int("LOCAL_RANK", dist.get_rank()))
    return DistInfo(0, 1, 0)


def barrier() -> None:
    """Wait for every rank (no-op in a single process)."""
    if get_dist_info().distributed:
        dist.barrier()


def reduce_sums(sums: dict[str, float], device: torch.device | str = "cpu") -> dict[str, float]:
    r"""Sum a dictionary of per-rank totals (``loss_sum``, ``count``...) over ranks (every rank
    passing the same keys): sums and counts, never means of means, so that
    :math:`\bar\ell = \sum_r L_r / \sum_r n_r` is exact with unequal shards.

    Args:
        sums (dict): name -> float total on this rank.
        device (torch.device or str): where the reduction buffer lives (``'cuda'`` under NCCL).
            (default: :obj:`'cpu'`)

    Returns:
        dict: name -> total over all ranks (as Python floats).
    """
    if not get_dist_info().distributed or not sums:
        return {k: float(v) for k, v in sums.items()}
    keys = sorted(sums)
    buf = torch.tensor([float(sums[k]) for k in keys], dtype=torch.float64, device=device)
    dist.all_reduce(buf, op=dist.ReduceOp.SUM)
    return {k: float(v) for k, v in zip(keys, buf.tolist())}


def all_gather_object(obj: Any) -> list[Any]:
    """Gather a picklable object from every rank (``[obj]`` in a single process)."""
    info = get_dist_info()
    if not info.distributed:
        return [obj]
    out: list[Any] = [None] * info.world_size
    dist.all_gather_object(out, obj)
    return out


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """Return rank ``src``'s ``obj`` on every rank (``obj`` in a single process)."""
    if not get_dist_info().distributed:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def cleanup_distributed() -> None:
    """Destroy the process group if one is initialised."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


class ShardSampler(Sampler[int]):
    r"""Unpadded sharding of ``range(n)`` for evaluation: rank :math:`r` of :math:`W` takes
    :math:`r, r + W, r + 2W, \dots`. Unlike :class:`torch.utils.data.DistributedSampler` it
    repeats no sample, so summed metrics count every sample once.

    Args:
        num_samples (int): dataset length.
        rank (int): this rank. (default: :obj:`0`)
        world_size (int): number of ranks. (default: :obj:`1`)
    """

    def __init__(self, num_samples: int, rank: int = 0, world_size: int = 1) -> None:
        if num_samples < 0 or world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"ShardSampler: invalid num_samples={num_samples}, rank={rank}, "
                             f"world_size={world_size}")
        self.num_samples, self.rank, self.world_size = num_samples, rank, world_size

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.rank, self.num_samples, self.world_size))

    def __len__(self) -> int:
        return len(range(self.rank, self.num_samples, self.world_size))

    def __repr__(self) -> str:
        return f"ShardSampler({self.num_samples}, rank={self.rank}, world_size={self.world_size})"


__all__ = ["DistInfo", "init_distributed", "get_dist_info", "barrier",
           "reduce_sums", "all_gather_object", "broadcast_object",
           "cleanup_distributed", "ShardSampler"]
