"""What the context costs a decoding step, fitted from the full-attention rows of a speed
table, and the best speed-up any sparse attention could reach."""
from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

from benchmarks.focus.pretrained.report import BOUNDS_TITLE


def decode_bounds(rows: Sequence[Mapping[str, Any]], target: float = 1.3
                  ) -> List[Dict[str, Any]]:
    r"""What the context costs a decoding step, from the full-attention rows of
    :func:`run_speed`, and the best speed-up any sparse attention could reach.

    The time per token of full attention is fitted by least squares as
    :math:`t(L) = a + bL` over the measured contexts :math:`L`: :math:`a` is what a step
    costs whatever the context (every weight read once, the MLPs, the vocabulary head,
    Python), :math:`bL` what grows with it (attention over the cache, the cache update). A
    method that keeps a share :math:`s` of the context cost and adds no overhead of its own
    takes :math:`a + sbL`, so

    .. math::
        \text{bound}(L) = \frac{t(L)}{a}, \qquad
        s_{\max}(L) = \frac{t(L)/\text{target} - a}{bL}

    are the speed-up of a method with no context cost at all, and the largest share of the
    context cost a method may keep to reach ``target`` (above 1: any method; below 0: none).
    For scale: hard top-1 of :math:`K` balanced groups reads about :math:`1/K` of the keys
    (plus the window), top-2 about :math:`1 - \binom{K-2}{2}/\binom{K}{2}` (5/6 for
    :math:`K = 4`), and both add their routing.

    Args:
        rows (sequence of dict): ``context``, ``mode`` and ``tok_per_s`` per row, with at
            least two contexts of ``mode == 'full'`` (per ``cache`` when the rows have one:
            then each cache is fitted on its own and the rows start with ``cache``).
        target (float): the speed-up asked for. (default: :obj:`1.3`)

    Returns:
        list of dict: one per context: ``context``, ``full_ms``, ``fixed_ms`` (:math:`a`),
        ``context_ms`` (:math:`bL`), ``residual_ms`` (measured minus fitted: how well a line
        describes the contexts; the split is only as good as the fit), ``bound_vs_full``,
        ``max_share_for_target``, and per Focus mode ``<mode>_ms`` and ``<mode>_vs_full``.
    """
    if any("cache" in r for r in rows):  # several caches in one table: one fit each
        caches = list(dict.fromkeys(r.get("cache") for r in rows))
        return [{"cache": c, **b} for c in caches for b in decode_bounds(
            [{k: v for k, v in r.items() if k != "cache"} for r in rows if r.get("cache") == c],
            target)]
    full = sorted((int(r["context"]), 1e3 / float(r["tok_per_s"]))
                  for r in rows if r["mode"] == "full")
    if len({c for c, _ in full}) < 2:
        raise ValueError("decode_bounds: need full-attention rows at two contexts or more "
                         f"(got {[c for c, _ in full]})")
    if target <= 0:
        raise ValueError(f"decode_bounds: target must be > 0, got {target}")
    b, a = statistics.linear_regression([c for c, _ in full], [t for _, t in full])
    out = []
    for ctx, t in full:
        row: Dict[str, Any] = {"context": ctx, "full_ms": t, "fixed_ms": a,
                               "context_ms": b * ctx, "residual_ms": t - a - b * ctx,
                               "bound_vs_full": t / a,
                               "max_share_for_target": (t / target - a) / (b * ctx)}
        for r in rows:
            if int(r["context"]) == ctx and r["mode"] != "full":
                row[f"{r['mode']}_ms"] = 1e3 / float(r["tok_per_s"])
                row[f"{r['mode']}_vs_full"] = float(r["vs_full"])
        out.append(row)
    return out


def write_decode_bounds(json_path: str | Path, target: float = 1.3,
                        out_dir: Optional[str | Path] = None) -> Dict[str, Any]:
    """:func:`decode_bounds` of a committed speed table (``<name>.json``), written as
    ``<name>_bounds.{csv,json,md}`` beside it (or in ``out_dir``)."""
    from quest_geometric.profile import write_results

    json_path = Path(json_path)
    if not json_path.is_file():
        raise FileNotFoundError(f"write_decode_bounds: no speed table {json_path}; run "
                                f"`python -m benchmarks.focus.pretrained --speed` first")
    blob = json.loads(json_path.read_text())
    rows = decode_bounds(blob["rows"], target)
    src = blob.get("meta", {})
    meta = {"source": json_path.name, "source_date": src.get("date"),
            "source_threads": src.get("torch_threads"), "source_cache": src.get("cache"),
            "source_load": src.get("load"), "target": target}
    notes = (f"Per-token time of full attention fitted as `fixed_ms + context_ms` (least squares "
             f"over the contexts, `decode_bounds`); `bound_vs_full`: the speed-up of a method "
             f"whose step costs no more than `fixed_ms` (no context cost, no overhead); "
             f"`max_share_for_target`: the largest share of `context_ms` such a method may keep "
             f"to be {target:g}x full attention; `residual_ms`: measured minus fitted (a line "
             f"through a few contexts is a rough split: read the bounds only where the "
             f"residuals are small). Measured in `{json_path.name}` "
             f"({src.get('torch_threads')} thread(s), {src.get('cache', 'dynamic')} cache, "
             f"{src.get('date')}).")
    paths = write_results(json_path.stem + "_bounds", rows, out_dir or json_path.parent,
                          meta=meta, notes=notes,
                          title=BOUNDS_TITLE)
    return {"rows": rows, "paths": paths}

