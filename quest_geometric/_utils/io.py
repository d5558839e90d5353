"""Atomic file writes: a crash leaves either the old file or the new one, never a torn one."""
from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from typing import Any, Callable, IO

import torch

#: The temporary beside ``path`` is ``.{basename}.{8 random characters}.tmp`` (as
#: :func:`tempfile.mkstemp` names it); :func:`remove_stale_temporaries` matches exactly these.
_TMP_SUFFIX = ".tmp"
_TMP_RANDOM = r"[a-z0-9_]{8}"


def temporary_name_pattern(path: str | os.PathLike) -> re.Pattern[str]:
    """The names (not paths) of the temporaries that an atomic write of ``path`` creates."""
    base = os.path.basename(os.fspath(path))
    return re.compile(re.escape(f".{base}.") + _TMP_RANDOM + re.escape(_TMP_SUFFIX))


def remove_stale_temporaries(path: str | os.PathLike) -> list[str]:
    """Remove (and return the paths of) the temporaries that atomic writes of ``path`` left
    when killed mid-way: only regular files beside it named as :func:`temporary_name_pattern`
    says. Call it only while no other process can be writing ``path`` (e.g. under a lock)."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    pattern = temporary_name_pattern(path)
    removed = []
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return removed
    for entry in entries:
        if pattern.fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
            try:
                os.unlink(entry.path)
            except FileNotFoundError:
                continue
            removed.append(entry.path)
    return removed


def _atomic_write(path: str | os.PathLike, write: Callable[[IO[bytes]], None]) -> None:
    """Write through ``write(f)`` into a temporary file beside ``path`` (flushed and
    fsynced), then :func:`os.replace` it onto ``path`` and fsync the directory."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=_TMP_SUFFIX,
                               dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    # make the rename itself durable (POSIX; not possible on every platform, e.g. Windows)
    with contextlib.suppress(OSError):
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


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
    """:func:`torch.save` ``obj`` to ``path`` atomically (also importable as
    :func:`quest_geometric.training.checkpoint.atomic_torch_save`)."""
    _atomic_write(path, lambda f: torch.save(obj, f))
