"""The canonical speed result of the Focus operating point: one table per thread count with
one row per (configuration, length), the latest timing of each.

A timing run of :mod:`benchmarks.focus.op_speed` measures a few configurations against full
attention, each ratio within that run (its own full-attention reference, its own machine
state). Configurations are re-timed as the kernels change, so the question "how fast is
this row?" has one answer: its latest run. :func:`merge_runs` keeps, for each
(configuration, length), the row of the first run that timed it (runs given newest first),
with the run it came from (``run``: the run's date) and that run's full-attention row at the
same length; every run's conditions (machine, versions, rounds, loads) stay in the JSON
file's ``meta["runs"]``. The verdict (:mod:`benchmarks.focus.verdict`) reads this table.

After a new timing run (``python -m benchmarks.focus.op_speed ... --out /tmp/new``), fold
it into the canonical table::

    python -m benchmarks.focus.op_speed_canonical /tmp/new/focus_op_speed_1t.json
"""
from __future__ import annotations

import argparse
import csv
import io
import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from benchmarks.focus.op_speed import COLUMNS, REFERENCE, TARGET
from quest_geometric._utils.io import atomic_write_text
from quest_geometric.profile import markdown_table

__all__ = ["CANONICAL", "canonical_path", "runs_of", "merge_runs", "write_canonical", "main"]

#: The canonical tables' folder, under the study's results.
CANONICAL = Path("benchmarks/focus/results/focus_op_speed")

#: A timing run: (label, its conditions, its rows).
Run = Tuple[str, Dict[str, Any], List[Dict[str, Any]]]


def canonical_path(threads: int, folder: Path | str = CANONICAL) -> Path:
    """The canonical table's JSON file for ``threads`` torch threads."""
    return Path(folder) / f"focus_op_speed_{threads}t.json"


def runs_of(blob: Dict[str, Any]) -> List[Run]:
    """The runs held by one saved JSON file: the run itself for a file written by
    :mod:`benchmarks.focus.op_speed` (labelled by its date), or the runs a canonical table
    was merged from, in its order."""
    meta, rows = blob["meta"], blob["rows"]
    if "runs" not in meta:
        return [(meta["date"], meta, rows)]
    return [(label, run, [r for r in rows if r["run"] == label])
            for label, run in meta["runs"].items()]


def merge_runs(runs: Sequence[Run]) -> Tuple[List[Dict[str, Any]], Dict[str, Any]]:
    """Rows and per-run conditions of the canonical table, from ``runs`` newest first.

    Each (configuration, length) takes the row of the first run that timed it; each run that
    gives a row keeps its full-attention row at that length (the reference of its ratios).

    Returns:
        ``(rows, runs)``: rows sorted by length, then configuration (full attention first),
        each with ``run``; the conditions of every run that gave a row, by label.
    """
    taken: Dict[Tuple[str, int], Dict[str, Any]] = {}
    used: Dict[str, Dict[str, Any]] = {}
    for label, meta, rows in runs:
        for row in rows:
            key = (row["config"], row["length"])
            if row["config"] == REFERENCE or key in taken:
                continue
            taken[key] = {**row, "run": label}
            used[label] = meta
            ref = next((r for r in rows if r["config"] == REFERENCE
                        and r["length"] == row["length"]), None)
            if ref is not None:
                taken.setdefault((f"{REFERENCE}@{label}", row["length"]), {**ref, "run": label})
    order = sorted(taken.items(), key=lambda kv: (kv[0][1], kv[1]["config"] != REFERENCE,
                                                   kv[1]["config"], kv[1]["run"]))
    return [row for _, row in order], used


def write_canonical(rows: Sequence[Dict[str, Any]], runs: Dict[str, Dict[str, Any]],
                    threads: int, folder: Path | str = CANONICAL) -> Path:
    """Write ``focus_op_speed_<threads>t.{csv,json,md}`` in ``folder``: the rows, and each
    run's conditions in the JSON file (the markdown lists each run's date, machine and
    load rule). Returns the JSON path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = canonical_path(threads, folder)
    columns = [*COLUMNS, "run"]
    meta = {"threads": threads, "target": TARGET, "runs": dict(runs)}
    atomic_write_text(path, json.dumps({"meta": meta, "rows": list(rows)}, indent=1,
                                       default=str) + "\n")
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(path.with_suffix(".csv"), buf.getvalue())
    lines = [f"### Focus operating point: prefill and cached decoding against full attention, "
             f"{threads} thread{'s' if threads > 1 else ''} (latest timing of each row)\n",
             markdown_table(rows, columns),
             "\nEach ratio is taken within its run (`run`: the run's date), against that "
             "run's full-attention row at the same length. Runs:\n"]
    for label, run in runs.items():
        lines.append(f"- {label}: {run.get('cpu_model') or run.get('processor')}, "
                     f"{run.get('cpu_count')} cores, torch {run.get('torch')}, "
                     f"{run.get('rounds_per_length')} rounds, {run.get('new_tokens')} new "
                     f"tokens, under load: {run.get('under_load')}")
    atomic_write_text(path.with_suffix(".md"), "\n".join(lines) + "\n")
    return path


def main(argv: Optional[Sequence[str]] = None) -> Path:
    """``python -m benchmarks.focus.op_speed_canonical NEW.json [...]``: fold timing runs
    (newest first) into the canonical table of their thread count."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="JSON files of op_speed runs, newest first")
    ap.add_argument("--folder", default=str(CANONICAL))
    a = ap.parse_args(argv)
    blobs = [json.loads(Path(f).read_text()) for f in a.runs]
    threads = {b["meta"]["threads"] for b in blobs}
    if len(threads) != 1:
        ap.error(f"runs of one thread count at a time, got {sorted(threads)}")
    (t,) = threads
    runs = [run for blob in blobs for run in runs_of(blob)]
    old = canonical_path(t, a.folder)
    if old.is_file():
        runs += runs_of(json.loads(old.read_text()))
    rows, used = merge_runs(runs)
    return write_canonical(rows, used, t, a.folder)


if __name__ == "__main__":
    main()
