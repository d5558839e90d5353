"""Reading files a user may have received from someone else: data only, never code.

Every loader of such a file raises :func:`refused` for any exception while reading (a
``BaseException`` such as :class:`SystemExit` triggered by crafted content included), so the
message names the file, and a crafted file can never end a program as if it had succeeded.
"""
from __future__ import annotations

import os
from typing import Any

import torch


def refused(where: str, path: str | os.PathLike, reason: str,
            cause: BaseException | None = None) -> ValueError:
    """The error for a file that is not read: ``"{where}: refused to load {path!r}: {reason}"``,
    followed by the cause's type and first line when given."""
    message = f"{where}: refused to load {os.fspath(path)!r}: {reason}"
    if cause is not None:
        first = str(cause).strip().splitlines()
        message += f" ({type(cause).__name__}{': ' + first[0] if first else ''})"
    return ValueError(message)


def load_tensors(path: str | os.PathLike, where: str, map_location: Any = "cpu") -> Any:
    """``torch.load(path, weights_only=True)`` (tensors and plain containers only); any
    failure is :func:`refused`.

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: the file holds anything but tensors and plain containers, or is not a
            readable PyTorch file.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{where}: no file {path!r}")
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except BaseException as e:  # nothing read from the file may escape as success
        raise refused(where, path, "it is not a PyTorch file of tensors and plain containers "
                      "(a file that could run code is never unpickled)", e) from e
