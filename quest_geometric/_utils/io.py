"""Atomic file writes: a crash leaves either the old file or the new one, never a torn one."""
from __future__ import annotations

import json
import os
import tempfile
from typing import Any, Callable, IO

import torch


def _atomic_write(path: str | os.PathLike, write: Callable[[IO[bytes]], None]) -> None:
    """Write through ``write(f)`` into a temporary file beside ``path`` (flushed and
    fsynced), then :func:`os.replace` it onto ``path`` and fsync the directory."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    try:  # make the rename itself durable (POSIX); not possible on every platform
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:  # pragma: no cover - e.g. Windows
        pass


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    _atomic_write(path, lambda f: f.write(data))


def atomic_write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> None:
    """Write ``text`` to ``path`` atomically."""
    atomic_write_bytes(path, text.encode(encoding))


def atomic_write_json(path: str | os.PathLike, obj: Any, **dumps_kwargs: Any) -> None:
    """``json.dumps(obj, **dumps_kwargs)`` written to ``path`` atomically."""
    atomic_write_text(path, json.dumps(obj, **dumps_kwargs))


def atomic_torch_save(obj: Any, path: str | os.PathLike) -> None:
    """:func:`torch.save` ``obj`` to ``path`` atomically: a temporary file in the same
    directory, flushed and fsynced, then :func:`os.replace`; a crash leaves either the old
    file or the new one.

    Also importable as :func:`quest_geometric.training.checkpoint.atomic_torch_save`.

    Args:
        obj: anything :func:`torch.save` accepts.
        path (str or os.PathLike): the destination.
    """
    _atomic_write(path, lambda f: torch.save(obj, f))
