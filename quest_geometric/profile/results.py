"""Result files: a table as CSV, JSON and markdown, with the conditions it was measured
under."""
from __future__ import annotations

import csv
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


# how the markdown table shows a data column: its heading and stored value -> cell text
_Display = Mapping[str, tuple[str, Callable[[Any], str]]]


def markdown_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None,
                   display: _Display | None = None) -> str:
    """Render ``rows`` (dicts) as a GitHub markdown table with the given column order.

    Args:
        rows (list of dict): one dict per table row.
        columns (list of str, optional): column order. (default: keys of the first row)
        display (dict, optional): ``column -> (heading, format)`` for columns shown otherwise
            than stored, e.g. ``{"rel": ("vs full (%)", lambda v: f"{100 * v:+.2f}")}`` for a
            fraction shown as a signed percentage; an empty or missing value stays empty.
            (default: :obj:`None`, every column under its own name)
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
    for row in rows:
        lines.append("| " + " | ".join(cell(row, c) for c in columns) + " |")
    return "\n".join(lines) + "\n"


def write_results(
    name: str,
    rows: Sequence[Mapping[str, Any]],
    out_dir: str | os.PathLike,
    meta: Mapping[str, Any] | None = None,
    columns: Sequence[str] | None = None,
    title: str | None = None,
    notes: str | None = None,
    display: _Display | None = None,
) -> dict[str, Path]:
    """Write ``rows`` as ``<name>.csv``, ``<name>.json`` and ``<name>.md`` under ``out_dir``.

    The JSON file holds ``{"meta": ..., "rows": ...}``; the markdown file holds a title, the
    table, optional notes, and the metadata (machine, versions, seeds, date) as a list, so a
    quoted table always travels with the conditions it was measured under.  Each file is
    written to a temporary file and renamed, so a killed run never leaves a half-written one.

    Args:
        name (str): file stem.
        rows (list of dict): one dict per table row.
        out_dir (str or os.PathLike): output folder (each study passes its own
            ``benchmarks/<study>/results/``).
        meta (dict, optional): run conditions; :func:`environment_info` is added (where
            ``meta`` carries an earlier run's environment, a rewrite of its table, without
            this machine's :data:`MACHINE_KEYS`).
            (default: :obj:`None`)
        columns (list of str, optional): column order. (default: keys of the first row)
        title (str, optional): markdown heading. (default: :obj:`name`)
        notes (str, optional): markdown paragraph under the table. (default: :obj:`None`)
        display (dict, optional): columns the markdown table shows otherwise than stored
            (see :func:`markdown_table`); the CSV and JSON files keep the stored values and
            names. (default: :obj:`None`)

    Returns:
        dict: the written paths under keys ``csv``, ``json``, ``md``.
    """
    out = Path(out_dir)
    meta = dict(meta or {})
    env = environment_info()
    if "platform" in meta:  # an earlier run's conditions, carried over by a rewrite: the
        # machine it ran on is not this one, so this machine's identity is not added
        env = {k: v for k, v in env.items() if k not in MACHINE_KEYS}
    full_meta = {**env, **meta}
    columns = list(columns or (rows[0].keys() if rows else []))
    paths = {k: out / f"{name}.{k}" for k in ("csv", "json", "md")}

    import io

    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({c: row.get(c, "") for c in columns})
    atomic_write_text(paths["csv"], buf.getvalue())
    atomic_write_text(
        paths["json"], json.dumps({"meta": full_meta, "rows": list(rows)}, indent=2, default=str)
    )
    md = [f"### {title or name}\n", markdown_table(rows, columns, display)]
    if notes:
        md.append("\n" + notes.strip() + "\n")
    md.append("\n" + "\n".join(f"- {k}: {v}" for k, v in full_meta.items()) + "\n")
    atomic_write_text(paths["md"], "\n".join(md))
    return paths
