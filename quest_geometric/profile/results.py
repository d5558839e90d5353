"""Result files: a table as CSV, JSON and markdown, with the conditions it was measured under."""
from __future__ import annotations

import csv
import io
import json
import math
import os
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from quest_geometric._utils.io import atomic_write_text
from quest_geometric.profile.environment import MACHINE_KEYS, environment_info


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "n/a"
        if value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-3):
            return f"{value:.3g}"
        return f"{value:.4g}"
    return str(value)


# column -> (heading, stored value -> cell text)
_Display = Mapping[str, tuple[str, Callable[[Any], str]]]


def markdown_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None,
                   display: _Display | None = None) -> str:
    """Render ``rows`` as a GitHub markdown table.

    Args:
        rows (list of dict): one dict per table row.
        columns (list of str, optional): column order. (default: keys of the first row)
        display (dict, optional): ``column -> (heading, format)`` for columns shown otherwise
            than stored, e.g. ``{"rel": ("vs full (%)", lambda v: f"{100 * v:+.2f}")}``; an
            empty or missing value stays empty. (default: :obj:`None`)
    """
    if not rows:
        return "_(no rows)_\n"
    columns = list(columns or rows[0].keys())
    display = dict(display or {})

    def cell(row: Mapping[str, Any], c: str) -> str:
        value = row.get(c, "")
        if c in display and value not in ("", None):
            return display[c][1](value)
        return _fmt(value)

    heads = [display[c][0] if c in display else c for c in columns]
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(row, c) for c in columns) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def write_results(name: str, rows: Sequence[Mapping[str, Any]], out_dir: str | os.PathLike,
                  meta: Mapping[str, Any] | None = None, columns: Sequence[str] | None = None,
                  title: str | None = None, notes: str | None = None,
                  display: _Display | None = None) -> dict[str, Path]:
    """Write ``rows`` atomically as ``<name>.csv``, ``<name>.json`` (``{"meta": ..., "rows":
    ...}``) and ``<name>.md`` (title, table, notes, then the metadata as a list: a quoted table
    travels with its conditions) under ``out_dir``.

    Args:
        name (str): file stem.
        rows (list of dict): one dict per table row.
        out_dir (str or os.PathLike): output folder.
        meta (dict, optional): run conditions; :func:`environment_info` is added (without
            this machine's :data:`MACHINE_KEYS` where ``meta`` carries an earlier run's
            environment: a rewrite of its table). (default: :obj:`None`)
        columns (list of str, optional): column order. (default: keys of the first row)
        title (str, optional): markdown heading. (default: :obj:`name`)
        notes (str, optional): markdown paragraph under the table. (default: :obj:`None`)
        display (dict, optional): as in :func:`markdown_table`, for the markdown file only.
            (default: :obj:`None`)

    Returns:
        dict: the written paths under keys ``csv``, ``json``, ``md``.
    """
    out = Path(out_dir)
    meta = dict(meta or {})
    env = environment_info()
    if "platform" in meta:  # an earlier run's conditions: not this machine's identity
        env = {k: v for k, v in env.items() if k not in MACHINE_KEYS}
    full_meta = {**env, **meta}
    columns = list(columns or (rows[0].keys() if rows else []))
    paths = {k: out / f"{name}.{k}" for k in ("csv", "json", "md")}
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({c: row.get(c, "") for c in columns})
    atomic_write_text(paths["csv"], buf.getvalue())
    atomic_write_text(paths["json"], json.dumps({"meta": full_meta, "rows": list(rows)},
                                                indent=2, default=str))
    md = [f"### {title or name}\n", markdown_table(rows, columns, display)]
    if notes:
        md.append("\n" + notes.strip() + "\n")
    md.append("\n" + "\n".join(f"- {k}: {v}" for k, v in full_meta.items()) + "\n")
    atomic_write_text(paths["md"], "\n".join(md))
    return paths
