"""Metrics as JSON lines, and a matplotlib helper that draws training curves from them.

Each line of ``metrics.jsonl`` is a flat JSON record with a ``kind``: ``"epoch"`` (end of an
epoch: ``epoch``, ``step``, ``lr``, ``train_*``, ``val_*``, ``time_s``, ``samples_per_s``),
``"eval"`` (an evaluation of a step-based run, the same keys, train metrics since the previous
one) or ``"step"`` (every ``log_every`` optimiser steps: ``step``, ``lr``, ``loss``...).
"""
from __future__ import annotations

import json
import math
import os
from typing import Any, Iterable, Optional, Sequence, Union

from quest_geometric._utils.io import atomic_write_text
from quest_geometric._utils.plotting import optional_pyplot, save_figure

PathLike = Union[str, os.PathLike]


def _clean(v: Any) -> Any:
    if hasattr(v, "item") and callable(v.item):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None if math.isnan(v) else (1e308 if v > 0 else -1e308)
    return v


class MetricsLogger:
    """Append records to a JSON-lines file, one flushed line per record.

    Args:
        path (str or os.PathLike): the ``.jsonl`` file (its directory is created).
        enabled (bool): write nothing when false (non-zero DDP ranks). (default: :obj:`True`)
    """

    def __init__(self, path: PathLike, enabled: bool = True) -> None:
        self.path = os.fspath(path)
        self.enabled = enabled
        if enabled:
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)

    def log(self, record: dict[str, Any]) -> None:
        """Append one record (tensors/NumPy scalars become numbers, NaN becomes ``null``)."""
        if not self.enabled:
            return
        line = json.dumps({k: _clean(v) for k, v in record.items()}, sort_keys=False)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()

    def __repr__(self) -> str:
        return f"MetricsLogger({self.path!r})"


def read_metrics(path: PathLike, kind: Optional[str] = None) -> list[dict[str, Any]]:
    """Read the records of a JSON-lines file in file order (skipping a torn last line of a
    killed run).

    Args:
        path (str or os.PathLike): the ``.jsonl`` file.
        kind (str, optional): keep only records of this ``kind``. (default: :obj:`None`)
    """
    out = []
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            if i == len(lines) - 1:  # a line cut by a kill
                continue
            raise ValueError(f"read_metrics: line {i + 1} of {os.fspath(path)!r} is not JSON")
        if kind is None or rec.get("kind") == kind:
            out.append(rec)
    return out


def truncate_metrics(path: PathLike, step: int) -> None:
    """Drop records with ``step > step`` (written after the checkpoint a run resumes from),
    rewriting the file atomically; a missing file is left missing."""
    path = os.fspath(path)
    if not os.path.exists(path):
        return
    keep = [r for r in read_metrics(path) if int(r.get("step", 0)) <= step]
    atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in keep))


def plot_curves(jsonl_paths: Union[PathLike, Sequence[PathLike]], out_png: PathLike,
                keys: Iterable[str] = ("train_loss", "val_loss"), x: str = "auto",
                labels: Optional[Sequence[str]] = None, kind: Optional[str] = None,
                title: Optional[str] = None, logy: bool = False) -> str:
    """Draw metric curves from one or several ``metrics.jsonl`` files into a PNG: one subplot
    per key, one line per file (a run, a seed, a variant).

    Args:
        jsonl_paths (str or list): one path or several.
        out_png (str or os.PathLike): the image to write.
        keys (iterable of str): the metrics to draw. (default: :obj:`("train_loss", "val_loss")`)
        x (str): the x axis, ``'epoch'``, ``'step'`` or ``'auto'`` (``'epoch'`` when every
            drawn record is an epoch record). (default: :obj:`'auto'`)
        labels (list of str, optional): legend entries, one per file; :obj:`None` uses the
            parent directory names. (default: :obj:`None`)
        kind (str, optional): record kind to draw; :obj:`None` takes ``'epoch'`` and ``'eval'``
            records (``'step'`` records for keys only they carry). (default: :obj:`None`)
        title (str, optional): the figure title. (default: :obj:`None`)
        logy (bool): logarithmic y axes. (default: :obj:`False`)

    Returns:
        str: the path written.
    """
    plt = optional_pyplot()
    if plt is None:  # pragma: no cover
        raise ImportError("plot_curves requires 'matplotlib' (pip install matplotlib, or the "
                          "'bench' extra)")
    paths = [jsonl_paths] if isinstance(jsonl_paths, (str, os.PathLike)) else list(jsonl_paths)
    keys = list(keys)
    if not paths or not keys:
        raise ValueError("plot_curves: need at least one path and one key")
    if labels is not None and len(labels) != len(paths):
        raise ValueError(f"plot_curves: {len(labels)} labels for {len(paths)} files")
    if x not in ("auto", "epoch", "step"):
        raise ValueError(f"plot_curves: `x` must be 'auto', 'epoch' or 'step', got {x!r}")
    fig, axes = plt.subplots(1, len(keys), figsize=(4.5 * len(keys), 3.5), squeeze=False)
    drawn = 0
    for i, p in enumerate(paths):
        records = read_metrics(p)
        label = labels[i] if labels is not None else os.path.basename(
            os.path.dirname(os.path.abspath(p))) or os.fspath(p)
        for ax, key in zip(axes[0], keys):
            if kind is not None:
                recs = [r for r in records if r.get("kind") == kind]
            else:
                recs = [r for r in records if r.get("kind") in ("epoch", "eval")]
                if not any(key in r for r in recs):
                    recs = [r for r in records if r.get("kind") == "step"]
            recs = [r for r in recs if r.get(key) is not None]
            if not recs:
                continue
            xk = x if x != "auto" else (
                "epoch" if all(r.get("kind") == "epoch" for r in recs) else "step")
            ax.plot([r.get(xk, j) for j, r in enumerate(recs)], [r[key] for r in recs],
                    marker="o" if len(recs) < 30 else None, label=label)
            ax.set_xlabel(xk)
            ax.set_ylabel(key)
            drawn += 1
    if drawn == 0:
        plt.close(fig)
        raise ValueError(f"plot_curves: none of the keys {keys} occurs in {paths}")
    for ax in axes[0]:
        if logy:
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    return save_figure(fig, os.fspath(out_png), dpi=120)


__all__ = ["MetricsLogger", "read_metrics", "truncate_metrics", "plot_curves"]
