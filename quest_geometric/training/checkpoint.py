"""Training checkpoints: atomic writes, a format tag, an integrity digest, and loading that
checks everything *before* touching the model, so a bad file is never half-loaded. A
checkpoint is a ``torch.save`` dictionary readable with ``weights_only=True``:

.. code-block:: python

    {"format": "quest_geometric.training.checkpoint", "version": 1,
     "digest": "<sha256 of the payload>",
     "payload": {"config": {...}, "model": state_dict, "optimizer": ..., "step": int, ...}}

The digest covers every tensor's dtype, shape and bytes and every other value's ``repr``:
``torch.load`` detects a truncated file but not flipped bytes inside a tensor.
"""
from __future__ import annotations

import hashlib
import os
import pickle
import zipfile
from typing import Any, Mapping, Optional

import torch
from torch import Tensor, nn

from quest_geometric._utils.io import atomic_torch_save  # re-exported: the public name stays here

#: The tag every checkpoint written by this module carries.
CHECKPOINT_FORMAT = "quest_geometric.training.checkpoint"
#: The current layout version; older versions are refused with a clear message.
CHECKPOINT_VERSION = 1


class CheckpointError(ValueError):
    """A checkpoint file is unreadable, corrupt, foreign, or does not fit the given model."""


def unwrap_model(model: nn.Module) -> nn.Module:
    """Strip DDP (``.module``) and ``torch.compile`` (``._orig_mod``) wrappers."""
    while True:
        if isinstance(model, torch.nn.parallel.DistributedDataParallel):
            model = model.module
        elif hasattr(model, "_orig_mod") and isinstance(model._orig_mod, nn.Module):
            model = model._orig_mod
        else:
            return model


def _update_digest(h: "hashlib._Hash", obj: Any) -> None:
    if isinstance(obj, Tensor):
        t = obj.detach().cpu().contiguous().reshape(-1)
        h.update(f"T{t.dtype}{tuple(obj.shape)}".encode())
        h.update(t.view(torch.uint8).numpy().tobytes())
    elif isinstance(obj, Mapping):
        h.update(b"{")
        for k in sorted(obj, key=repr):
            h.update(repr(k).encode() + b":")
            _update_digest(h, obj[k])
        h.update(b"}")
    elif isinstance(obj, (list, tuple)):
        h.update(b"[" if isinstance(obj, list) else b"(")
        for v in obj:
            _update_digest(h, v)
        h.update(b"]")
    else:
        h.update(repr(obj).encode() + b";")


def payload_digest(payload: Any) -> str:
    """SHA-256 of a payload: every tensor's dtype, shape and bytes, every other value's repr."""
    h = hashlib.sha256()
    _update_digest(h, payload)
    return h.hexdigest()


_PLAIN = (bool, int, float, str, type(None))


def to_safe(obj: Any, where: str = "payload") -> Any:
    """Convert ``obj`` to what ``torch.load(weights_only=True)`` accepts without allow-listing:
    tensors, ``None``, bools, ints, floats, strings and dicts/lists/tuples of them (subclasses
    such as ``numpy.float64`` become the plain type, NumPy arrays tensors, ``torch.dtype``
    its name).

    Raises:
        TypeError: naming the position of a value of any other type.
    """
    if isinstance(obj, Tensor) or type(obj) in _PLAIN:
        return obj
    for t in (bool, int, float, str):
        if isinstance(obj, t):
            return t(obj)
    if isinstance(obj, torch.dtype):
        return str(obj)
    if type(obj).__module__ == "numpy":
        import numpy as np

        if isinstance(obj, np.ndarray):
            return torch.from_numpy(obj.copy())
        if isinstance(obj, np.generic):
            return obj.item()
    if isinstance(obj, Mapping):
        return {to_safe(k, where): to_safe(v, f"{where}[{k!r}]") for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        out = [to_safe(v, f"{where}[{i}]") for i, v in enumerate(obj)]
        return out if isinstance(obj, list) else tuple(out)
    raise TypeError(f"checkpoint {where} holds a {type(obj).__module__}.{type(obj).__qualname__}, "
                    f"which torch.load(weights_only=True) would refuse; store tensors, numbers, "
                    f"strings, None and lists/tuples/dicts of them")


def save_checkpoint(path: str | os.PathLike, payload: dict[str, Any]) -> None:
    """Write a tagged, digested checkpoint atomically.

    Args:
        path (str or os.PathLike): the destination file.
        payload (dict): the state to store, of the types :func:`to_safe` accepts.
    """
    if not isinstance(payload, dict):
        raise TypeError(f"save_checkpoint: `payload` must be a dict, got {type(payload).__name__}")
    payload = to_safe(payload)
    atomic_torch_save({"format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION,
                       "digest": payload_digest(payload), "payload": payload}, path)


def read_checkpoint(path: str | os.PathLike, map_location: Any = "cpu") -> dict[str, Any]:
    """Read and verify a checkpoint file (``torch.load(weights_only=True)``: no code runs;
    then its format tag, version and digest) without applying it.

    Args:
        path (str or os.PathLike): the checkpoint file.
        map_location: as in :func:`torch.load`. (default: :obj:`'cpu'`)

    Returns:
        dict: the payload.

    Raises:
        CheckpointError: the file is missing, truncated, corrupt or not a checkpoint written
            by :func:`save_checkpoint`.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise CheckpointError(f"checkpoint {path!r} does not exist or is not a file")
    if not zipfile.is_zipfile(path):  # torch.save's format; a cut file loses its zip directory
        raise CheckpointError(f"checkpoint {path!r} cannot be read: it is not a complete "
                              f"PyTorch zip archive (the file is truncated, corrupt, empty or "
                              f"in another format)")
    try:
        obj = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        lines = str(e).splitlines()
        detail = next((ln.strip() for ln in lines if "Unsupported global" in ln),
                      lines[0] if lines else "")
        raise CheckpointError(
            f"checkpoint {path!r} was refused by torch.load(weights_only=True): it holds "
            f"Python objects beyond tensors and plain containers, so it was not written by "
            f"quest_geometric.training (or is corrupt). Details: {detail}"
        ) from e
    except Exception as e:  # noqa: BLE001  (zip/EOF/unpickling errors of a damaged file)
        raise CheckpointError(
            f"checkpoint {path!r} cannot be read: the file is truncated, corrupt or not a "
            f"PyTorch file ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
        ) from e
    if not isinstance(obj, dict) or obj.get("format") != CHECKPOINT_FORMAT:
        what = (f"a dict with keys {sorted(map(str, obj))[:6]}" if isinstance(obj, dict)
                else f"a {type(obj).__name__}")
        raise CheckpointError(
            f"{path!r} is not a quest_geometric training checkpoint (format tag "
            f"{CHECKPOINT_FORMAT!r} missing; it holds {what}). A plain state_dict should be "
            f"loaded with model.load_state_dict(torch.load(path, weights_only=True))."
        )
    version = obj.get("version")
    if version != CHECKPOINT_VERSION:
        raise CheckpointError(f"checkpoint {path!r} has layout version {version!r}; this "
                              f"version of quest_geometric reads version {CHECKPOINT_VERSION}")
    payload = obj.get("payload")
    if not isinstance(payload, dict) or "model" not in payload:
        raise CheckpointError(f"checkpoint {path!r} carries no model state")
    digest = payload_digest(payload)
    if digest != obj.get("digest"):
        raise CheckpointError(f"checkpoint {path!r} is corrupt: its content does not match the "
                              f"digest written with it (bytes changed after saving)")
    return payload


def check_state_dict_compatible(model: nn.Module, state_dict: Mapping[str, Any],
                                source: str = "checkpoint") -> None:
    """Raise :class:`CheckpointError` unless ``state_dict`` has exactly ``model``'s keys and shapes.

    Args:
        model (torch.nn.Module): the target model (wrappers are stripped).
        state_dict (Mapping): the state to check.
        source (str): how to name the state in the message. (default: :obj:`'checkpoint'`)
    """
    if not isinstance(state_dict, Mapping):
        raise CheckpointError(f"{source}: the model state is a {type(state_dict).__name__}, "
                              f"not a state_dict")
    own = unwrap_model(model).state_dict()
    missing = [k for k in own if k not in state_dict]
    unexpected = [k for k in state_dict if k not in own]
    shapes = [f"{k}: checkpoint {tuple(state_dict[k].shape)} vs model {tuple(own[k].shape)}"
              for k in own if k in state_dict and isinstance(state_dict[k], Tensor)
              and tuple(state_dict[k].shape) != tuple(own[k].shape)]
    parts = [f"{len(found)} {what} (e.g. {found[:3]})" for what, found in (
        ("missing keys", missing), ("unexpected keys", unexpected), ("shape mismatches", shapes))
        if found]
    if parts:
        raise CheckpointError(f"{source} was written for a different model architecture than "
                              f"{type(unwrap_model(model)).__name__}: " + "; ".join(parts)
                              + ". Nothing was loaded.")


def _check_optimizer_compatible(optimizer: torch.optim.Optimizer, state: Any, source: str) -> None:
    if not isinstance(state, Mapping) or "param_groups" not in state:
        raise CheckpointError(f"{source}: no optimizer state to resume from")
    mine = [len(g["params"]) for g in optimizer.param_groups]
    theirs = [len(g["params"]) for g in state["param_groups"]]
    if mine != theirs:
        raise CheckpointError(f"{source}: optimizer parameter groups differ (checkpoint "
                              f"{theirs} parameters per group, optimizer {mine}). Nothing was "
                              f"loaded.")


def load_checkpoint(path: str | os.PathLike, model: Optional[nn.Module] = None,
                    optimizer: Optional[torch.optim.Optimizer] = None,
                    scheduler: Optional[Any] = None, scaler: Optional[Any] = None,
                    map_location: Any = "cpu") -> dict[str, Any]:
    """Verify a checkpoint fully (file, format tag, version, digest, model keys and shapes,
    optimiser structure), then load it into the given objects: a refused checkpoint leaves
    them untouched.

    Args:
        path (str or os.PathLike): the checkpoint file.
        model (torch.nn.Module, optional): receives ``payload['model']``. (default: :obj:`None`)
        optimizer (torch.optim.Optimizer, optional): receives the optimiser state.
            (default: :obj:`None`)
        scheduler (optional): an LR scheduler receiving its state. (default: :obj:`None`)
        scaler (torch.amp.GradScaler, optional): receives the scaler state. (default: :obj:`None`)
        map_location: as in :func:`torch.load`. (default: :obj:`'cpu'`)

    Returns:
        dict: the payload (config, epoch, step, history, RNG states, ...).

    Raises:
        CheckpointError: the file is corrupt or foreign, or does not fit the given objects.
    """
    payload = read_checkpoint(path, map_location=map_location)
    return apply_checkpoint(payload, model, optimizer, scheduler, scaler,
                            source=f"checkpoint {os.fspath(path)!r}")


def apply_checkpoint(payload: dict[str, Any], model: Optional[nn.Module] = None,
                     optimizer: Optional[torch.optim.Optimizer] = None,
                     scheduler: Optional[Any] = None, scaler: Optional[Any] = None,
                     source: str = "checkpoint") -> dict[str, Any]:
    """Check a payload from :func:`read_checkpoint` against the given objects, then load it
    (all checks first, as in :func:`load_checkpoint`).

    Args:
        payload (dict): the verified payload.
        model, optimizer, scheduler, scaler: as in :func:`load_checkpoint`.
        source (str): how to name the checkpoint in messages. (default: :obj:`'checkpoint'`)

    Returns:
        dict: ``payload``.
    """
    if model is not None:
        check_state_dict_compatible(model, payload["model"], source)
    if optimizer is not None:
        _check_optimizer_compatible(optimizer, payload.get("optimizer"), source)
    if scheduler is not None and not isinstance(payload.get("scheduler"), Mapping):
        raise CheckpointError(f"{source}: no scheduler state to resume from")
    if model is not None:
        unwrap_model(model).load_state_dict(payload["model"])
    if optimizer is not None:
        optimizer.load_state_dict(payload["optimizer"])
    if scheduler is not None:
        scheduler.load_state_dict(payload["scheduler"])
    if scaler is not None and payload.get("scaler"):
        scaler.load_state_dict(payload["scaler"])
    return payload


__all__ = ["CHECKPOINT_FORMAT", "CHECKPOINT_VERSION", "CheckpointError", "atomic_torch_save",
           "save_checkpoint", "read_checkpoint", "load_checkpoint", "apply_checkpoint",
           "check_state_dict_compatible", "payload_digest", "to_safe", "unwrap_model"]
