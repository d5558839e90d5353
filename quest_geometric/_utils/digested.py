r"""A pair of files that vouch for each other: named tensors as safetensors (no pickle, so
reading runs no code) and a JSON record whose SHA-256 digest

.. math::
    \mathrm{SHA256}\big(\mathrm{canonical}(\text{record without "sha256"})
    \,\|\, \texttt{\\0} \,\|\, \text{tensors file}\big)

covers both (canonical JSON: sorted keys, no spaces, ASCII only, whatever the indentation
of the file), so an edit of either file, or a mix of two saves, is refused on reading. Each
file is written atomically; a crash between the two renames leaves a pair whose digest does
not match, which the reader refuses.
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Dict, Mapping

from torch import Tensor

from quest_geometric._utils.checks import all_finite
from quest_geometric._utils.io import atomic_write_bytes, atomic_write_json
from quest_geometric._utils.untrusted import refused

__all__ = ["pair_digest", "write_pair", "read_record", "read_tensors", "check_tensors",
           "MAX_RECORD_BYTES"]

#: The largest record file read (a record holds options and short lists, never data).
MAX_RECORD_BYTES = 4 << 20


def _no_constant(name: str) -> Any:
    raise ValueError(f"the JSON constant {name} is not a number a record may hold")


def pair_digest(record: Mapping[str, Any], data: bytes) -> str:
    """The hex SHA-256 of the canonical JSON of :obj:`record` (its ``"sha256"`` entry left
    out), a zero byte, and :obj:`data` (the tensors file's bytes)."""
    body = {k: v for k, v in record.items() if k != "sha256"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False)
    h = hashlib.sha256(text.encode("ascii"))
    h.update(b"\0")
    h.update(data)
    return h.hexdigest()


def write_pair(tensors_file: str | os.PathLike, record_file: str | os.PathLike,
               tensors: Mapping[str, Tensor], record: Mapping[str, Any]) -> str:
    """Write :obj:`tensors` (detached, on the CPU, contiguous) to :obj:`tensors_file`, then
    :obj:`record` plus its ``"sha256"`` digest to :obj:`record_file`; return the digest.

    Raises:
        ValueError: if :obj:`record` holds NaN or an infinity (not JSON).
    """
    from safetensors.torch import save as st_save

    data = st_save({k: t.detach().cpu().contiguous() for k, t in tensors.items()})
    digest = pair_digest(record, data)
    atomic_write_bytes(tensors_file, data)
    atomic_write_json(record_file, {**record, "sha256": digest}, indent=1, sort_keys=True,
                      allow_nan=False)
    return digest


def read_record(where: str, record_file: str | os.PathLike) -> Dict[str, Any]:
    """The JSON object in :obj:`record_file` (at most :data:`MAX_RECORD_BYTES`; NaN and
    infinities refused), or a one-line :func:`~quest_geometric._utils.untrusted.refused`
    error."""
    try:
        with open(record_file, "rb") as fh:
            raw = fh.read(MAX_RECORD_BYTES + 1)
        if len(raw) > MAX_RECORD_BYTES:
            raise ValueError(f"it is larger than {MAX_RECORD_BYTES} bytes")
        record = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except BaseException as e:  # nothing read from the file may escape as success
        raise refused(where, record_file, "it is not a JSON record", e) from None
    if not isinstance(record, dict):
        raise refused(where, record_file, "it is not a JSON object")
    return record


def read_tensors(where: str, tensors_file: str | os.PathLike, record: Mapping[str, Any],
                 record_file: str | os.PathLike, allow_empty: bool = False
                 ) -> Dict[str, Tensor]:
    """The tensors of :obj:`tensors_file`, checked against the digest in :obj:`record`
    (:func:`pair_digest`) and by :func:`check_tensors`.

    Raises:
        ValueError: a one-line refusal naming the file and what is wrong.
    """
    from safetensors.torch import load as st_load

    name = os.path.basename(os.fspath(record_file))
    digest = record.get("sha256")
    if not isinstance(digest, str):
        raise refused(where, record_file, "it records no 'sha256' digest")
    try:
        with open(tensors_file, "rb") as fh:
            data = fh.read()
    except OSError as e:
        raise refused(where, tensors_file, "it cannot be read", e) from None
    try:
        expected = pair_digest(record, data)
    except ValueError as e:  # a record that is not canonical JSON
        raise refused(where, record_file, "its record cannot be digested", e) from None
    if expected != digest:
        raise refused(where, tensors_file, f"its SHA-256 digest (of it and {name!r}) does not "
                      f"match the one recorded in {name!r} (a file is damaged or was "
                      f"changed)")
    try:
        tensors = st_load(data)
    except BaseException as e:  # nothing read from the file may escape as success
        raise refused(where, tensors_file, "it is not a safetensors file", e) from None
    return check_tensors(where, tensors_file, tensors, allow_empty)


def check_tensors(where: str, file: str | os.PathLike, tensors: Any,
                  allow_empty: bool = False) -> Dict[str, Tensor]:
    """:obj:`tensors` if it is a non-empty (or, with :obj:`allow_empty`, empty) dict of
    named floating, finite tensors; else a refusal naming :obj:`file`."""
    if not isinstance(tensors, dict) or (not tensors and not allow_empty):
        raise refused(where, file, "it holds no tensors")
    for key, t in tensors.items():
        if not isinstance(key, str) or not isinstance(t, Tensor):
            raise refused(where, file, f"entry {key!r} is not a named tensor")
        if not t.is_floating_point():
            raise refused(where, file, f"tensor {key!r} has dtype {t.dtype}, a floating "
                          f"dtype was expected")
        if not all_finite(t):
            raise refused(where, file, f"tensor {key!r} holds NaN or infinite values")
    return tensors
