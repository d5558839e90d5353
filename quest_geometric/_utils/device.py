"""One parser for device arguments (``'cpu'``, ``'cuda'``, ``'cuda:1'``, ``'auto'``) and one
way to move a batch to a device."""
from __future__ import annotations

from typing import Any, Mapping, Type, Union

import torch
from torch import Tensor, nn


def resolve_device(device: Union[str, torch.device], name: str = "device",
                   error: Type[Exception] = ValueError, allow_auto: bool = True) -> torch.device:
    """Parse a device argument into a :class:`torch.device`, refusing CUDA where there is none.

    Args:
        device (str or torch.device): the request; ``'auto'`` picks CUDA when available.
        name (str): the argument's name in errors (``'--device'``). (default: ``'device'``)
        error (type): the exception class raised on a bad request. (default: ``ValueError``)
        allow_auto (bool): accept ``'auto'``. (default: :obj:`True`)
    """
    if isinstance(device, str) and device == "auto":
        if not allow_auto:
            raise error(f"{name} must be a torch device such as 'cpu' or 'cuda', got 'auto'")
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise error(f"{name}={device!r} is not a valid torch device ({e})") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise error(f"{name}={device!r} was requested but no CUDA GPU is available")
    return dev


def move_to_device(batch: Any, device: torch.device) -> Any:
    """Move a batch (tensor, PyG ``Data``/``Batch``, or nested tuple/list/dict) to ``device``."""
    if isinstance(batch, Tensor) or (hasattr(batch, "to") and not isinstance(batch, nn.Module)):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, (list, tuple)):
        return type(batch)(move_to_device(b, device) for b in batch)
    if isinstance(batch, Mapping):
        return {k: move_to_device(v, device) for k, v in batch.items()}
    return batch
