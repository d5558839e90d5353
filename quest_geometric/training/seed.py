"""Seeding and the capture/restore of every random stream a training run touches."""
from __future__ import annotations

import hashlib
import os
import random
from typing import Any, Optional

import numpy as np
import torch

from quest_geometric._utils.checks import check_int


def derive_seed(seed: int, *keys: Any) -> int:
    r"""Derive an independent 63-bit seed from ``seed`` and keys, for per-rank and per-purpose
    streams (``derive_seed(seed, 'train', rank)``) that never overlap the way ``seed + rank``
    streams of neighbouring seeds do.

    Args:
        seed (int): the run's seed.
        *keys: hashable labels (their ``repr`` is hashed).

    Returns:
        int: a seed in :math:`[0, 2^{63})`.
    """
    h = hashlib.sha256(repr((int(seed),) + tuple(keys)).encode()).digest()
    return int.from_bytes(h[:8], "little") >> 1


def seed_everything(seed: int, deterministic: bool = False) -> None:
    """Seed Python's :mod:`random`, NumPy's global generator and PyTorch (CPU and CUDA).

    Args:
        seed (int): the seed (a non-negative int).
        deterministic (bool): also call :func:`enable_determinism`. (default: :obj:`False`)
    """
    check_int(seed, "`seed`", 0, where="seed_everything")
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # also seeds every CUDA device
    if deterministic:
        enable_determinism()


def enable_determinism() -> None:
    """Ask PyTorch for deterministic kernels where it has them:
    ``torch.use_deterministic_algorithms(True, warn_only=True)`` (a kernel without one warns
    instead of failing), no cuDNN autotuning, and ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` unless
    set (deterministic cuBLAS needs it)."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True


def get_rng_state(generator: Optional[torch.Generator] = None) -> dict[str, Any]:
    """Capture every global random stream (and an optional data generator) as tensors,
    numbers and tuples, which load with ``torch.load(weights_only=True)``.

    Args:
        generator (torch.Generator, optional): a data generator to capture as well.
            (default: :obj:`None`)

    Returns:
        dict: keys ``python``, ``numpy``, ``torch``, ``cuda`` (empty without CUDA) and
        ``generator`` (``None`` when not given).
    """
    np_state = np.random.get_state()
    numpy = (str(np_state[0]), torch.from_numpy(np.asarray(np_state[1], dtype=np.int64).copy()),
             int(np_state[2]), int(np_state[3]), float(np_state[4]))
    return {"python": random.getstate(), "numpy": numpy, "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            "generator": generator.get_state() if generator is not None else None}


def set_rng_state(state: dict[str, Any], generator: Optional[torch.Generator] = None) -> None:
    """Restore the streams captured by :func:`get_rng_state`.

    Args:
        state (dict): the output of :func:`get_rng_state`.
        generator (torch.Generator, optional): the data generator to restore into (needs
            ``state['generator']``). (default: :obj:`None`)
    """
    if not isinstance(state, dict) or not {"python", "numpy", "torch"} <= set(state):
        raise ValueError("set_rng_state: `state` must come from get_rng_state()")
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    name, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    torch.set_rng_state(state["torch"])
    cuda = state.get("cuda") or []
    if cuda and torch.cuda.is_available():
        if len(cuda) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(cuda)
        else:  # a different number of visible devices: restore what matches
            for i, s in enumerate(cuda[: torch.cuda.device_count()]):
                torch.cuda.set_rng_state(s, i)
    if generator is not None:
        if state.get("generator") is None:
            raise ValueError("set_rng_state: a generator was given but the state holds none")
        generator.set_state(state["generator"])


__all__ = ["derive_seed", "seed_everything", "enable_determinism", "get_rng_state", "set_rng_state"]
