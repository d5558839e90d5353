"""Reading back the probe records a finished study wrote
(:func:`~benchmarks.qk_geometry.trajectories.records.write_records`), for the commands
that train nothing: ``--run-bootstrap`` and ``--compare``."""
from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any, Union


def read_records(path: Union[str, os.PathLike]) -> list[dict[str, Any]]:
    """The records of ``path`` (gzip-compressed or plain JSON lines; blank lines skipped)."""
    path = Path(path)
    raw = path.read_bytes()
    text = (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode("utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]
