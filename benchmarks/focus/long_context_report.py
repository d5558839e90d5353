r"""The tables of the 8K study (:mod:`long_context`): per set and configuration the trailing
loss over windows, its paired change against full attention and against the window plus
sinks at the same 8K share, and the loss by position; a summary JSON, a markdown table and a
plot, all generated from the cells file.

**Paired statistics.** For configurations :math:`a` and :math:`b` on the :math:`n` windows
both ran, :math:`d_w = \ell^a_w - \ell^b_w` (trailing losses); the table gives
:math:`\bar d`, the perplexity change :math:`e^{\bar d} - 1`, the exact two-sided sign-flip
permutation test of :math:`\bar d`
(:func:`~quest_geometric.analysis.stats.paired_permutation_test`: valid at any :math:`n`, but
with :math:`n` windows its smallest possible :math:`p` is :math:`2^{1-n}`, 0.031 at 6), and
the number of windows on which :math:`a` is worse (an exact sign test beside it,
:func:`~quest_geometric.analysis.stats.paired_sign_test`). The paired :math:`t` interval is
stored in the JSON, with the caveat that it assumes normal differences.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from benchmarks.focus import long_context as lc


def load_cells(path: Path) -> List[Dict[str, Any]]:
    """The cells of a JSON-lines results file."""
    return [json.loads(x) for x in Path(path).read_text().splitlines() if x.strip()]


def _by(cells: Sequence[Dict[str, Any]], s: str, config: str) -> Dict[int, Dict[str, Any]]:
    return {c["window"]: c for c in cells if c["set"] == s and c["config"] == config}


def paired(cells: Sequence[Dict[str, Any]], s: str, a: str, b: str) -> Optional[Dict[str, Any]]:
    """Trailing loss of ``a`` against ``b`` on set ``s``, paired by window (module
    docstring); ``None`` when no window has both (the :math:`t` interval ``None`` below 2)."""
    from quest_geometric.analysis.stats import (paired_permutation_test, paired_sign_test,
                                                paired_t_test)

    ca, cb = _by(cells, s, a), _by(cells, s, b)
    common = sorted(set(ca) & set(cb))
    if not common:
        return None
    x = [ca[w]["trailing_loss"] for w in common]
    y = [cb[w]["trailing_loss"] for w in common]
    perm, sign = paired_permutation_test(x, y), paired_sign_test(x, y)
    t = paired_t_test(x, y) if len(common) > 1 else {"ci_low": None, "ci_high": None, "p": None}
    return {"against": b, "windows": common, "n": len(common), "mean_diff": perm["mean"],
            "ppl_change_pct": 100.0 * math.expm1(perm["mean"]), "p_perm": perm["p"],
            "worse": sign["wins"], "better": sign["losses"], "p_sign": sign["p"],
            "t_ci": [t["ci_low"], t["ci_high"]], "p_t": t["p"]}


def window_of(config: str, rows: Sequence[str] = lc.ROWS) -> Optional[str]:
    """The window-plus-sinks baseline a configuration is compared with: ``sinks@ROW`` for
    row ``ROW`` and for its random balanced groups; ``None`` otherwise."""
    from benchmarks.focus.operating_point import resolve_config

    if config in lc.LONG_TRAINED:
        return window_of(lc.LONG_TRAINED[config], rows)
    for row in rows:
        cfg = resolve_config(row)
        if config in (row, f"K{cfg['K']}_top{cfg['top_k']}_w{cfg['window']}_random"):
            return f"sinks@{row}"
    return None


def random_of(config: str, rows: Sequence[str] = lc.ROWS) -> Optional[str]:
    """The random balanced groups of a row's shape (``K.._top.._w.._random``), the other
    content-free baseline; ``None`` for anything but a row or a long-trained row."""
    from benchmarks.focus.operating_point import resolve_config

    if config not in rows and config not in lc.LONG_TRAINED:
        return None
    cfg = resolve_config(config)
    return f"K{cfg['K']}_top{cfg['top_k']}_w{cfg['window']}_random"


def mean_bins(cells: Sequence[Dict[str, Any]]) -> List[Optional[float]]:
    """Mean loss of each position bin over the given cells (``None`` where any lacks it)."""
    bins = [c["bin_loss"] for c in cells]
    return [None if any(b[i] is None for b in bins) else sum(b[i] for b in bins) / len(bins)
            for i in range(len(bins[0]))]


def bin_diff(cells: Sequence[Dict[str, Any]], s: str, a: str, b: str = "full"
             ) -> Optional[List[Optional[float]]]:
    """Mean over the windows both ran of ``a``'s position-bin loss minus ``b``'s (paired by
    window; ``None`` where no window has both, per bin ``None`` where ``a`` lacks it)."""
    ca, cb = _by(cells, s, a), _by(cells, s, b)
    common = sorted(set(ca) & set(cb))
    if not common:
        return None
    pa, pb = mean_bins([ca[w] for w in common]), mean_bins([cb[w] for w in common])
    return [None if x is None or y is None else x - y for x, y in zip(pa, pb)]


def summarize(cells: Sequence[Dict[str, Any]], baselines: Optional[Dict[str, str]] = None
              ) -> Dict[str, Dict[str, Any]]:
    """Per set and configuration: windows, mean trailing loss and perplexity, measured
    pairs kept, mean position bins, and the paired comparisons with ``full``, with the
    window baseline (``baselines[config]``, else :func:`window_of`), with the random groups
    of its shape (:func:`random_of`) and, for a long-trained row, with its 1K-trained
    start."""
    out: Dict[str, Dict[str, Any]] = {}
    for s in dict.fromkeys(c["set"] for c in cells):
        out[s] = {}
        for name in dict.fromkeys(c["config"] for c in cells if c["set"] == s):
            mine = list(_by(cells, s, name).values())
            loss = sum(c["trailing_loss"] for c in mine) / len(mine)
            base = (baselines or {}).get(name) if baselines is not None else window_of(name)
            rand = random_of(name)
            out[s][name] = {
                "windows": len(mine), "trailing_loss": loss, "trailing_ppl": math.exp(loss),
                "pairs_kept": sum(c["pairs_kept"] for c in mine) / len(mine),
                "window_cfg": mine[0].get("window_cfg"), "bin_loss": mean_bins(mine),
                "bin_diff_vs_full": bin_diff(cells, s, name),
                "vs_full": paired(cells, s, name, "full") if name != "full" else None,
                "vs_window": paired(cells, s, name, base) if base else None,
                "vs_random": paired(cells, s, name, rand) if rand else None,
                "vs_parent": (paired(cells, s, name, lc.LONG_TRAINED[name])
                              if name in lc.LONG_TRAINED else None)}
    return out


def _cmp(d: Optional[Dict[str, Any]]) -> str:
    if d is None:
        return "| | |"
    return (f"| {d['ppl_change_pct']:+.1f}% (n={d['n']}) | p={d['p_perm']:.3g}, worse on "
            f"{d['worse']}/{d['n']} |")


def markdown(summary: Dict[str, Dict[str, Any]], meta: Dict[str, Any]) -> str:
    """The results as markdown: conditions, the trailing-loss table per set, the bins."""
    c = meta.get("conditions", {})
    lines = ["# Focus at 8K: trailing loss and loss by position (SmolLM2-135M)", "",
             "Generated by `python -m benchmarks.focus.long_context_cli table`. Machine: "
             f"{c.get('cpu')}"
             f" ({c.get('cores')} cores, shared with other work), {c.get('threads')} thread(s); "
             f"torch {c.get('torch')}, transformers {c.get('transformers')}; runs from "
             f"{meta.get('first_date')} to {meta.get('last_date')}. Windows of "
             f"{lc.LENGTH} tokens, trailing {lc.TRAIL}, bins of {lc.BIN}; how each window was "
             "made: `windows.json`.", ""]
    for s, rows in summary.items():
        lines += [f"## {s}", "", "| configuration | windows | window (tokens) | pairs kept at 8K "
                  "| trailing loss | trailing ppl | vs full | p (perm.), worse | vs window+sinks "
                  "| p (perm.), worse |", "|---|---|---|---|---|---|---|---|---|---|"]
        for name, r in rows.items():
            w = r["window_cfg"] if r["window_cfg"] is not None else ""
            lines.append(f"| {name} | {r['windows']} | {w} | {r['pairs_kept']:.3f} | "
                         f"{r['trailing_loss']:.4f} | {r['trailing_ppl']:.2f} "
                         + _cmp(r["vs_full"]) + _cmp(r["vs_window"])[1:])
        lines += ["", f"Loss by position ({s}; bins of {lc.BIN} tokens, mean over the "
                  "configuration's windows; '-' where a cut context does not reach):", "",
                  "| configuration | " + " | ".join(str(b * lc.BIN)
                                                    for b in range(lc.LENGTH // lc.BIN)) + " |",
                  "|---|" + "---|" * (lc.LENGTH // lc.BIN)]
        for name, r in rows.items():
            lines.append(f"| {name} | " + " | ".join("-" if v is None else f"{v:.3f}"
                                                     for v in r["bin_loss"]) + " |")
        lines.append("")
    lines += long_trained_lines(summary)
    return "\n".join(lines + window_lines(meta.get("windows"))) + "\n"


def training_info(name: str, folder: Path) -> Dict[str, Any]:
    """How a long-trained row was trained: its configuration's objective, block length and
    steps, and from ``folder/training_<name>.json`` (the record
    :func:`~benchmarks.focus.operating_point.train_config` saves beside the routers, copied
    here because the routers themselves are not kept) the loss curve's ends and the revisit
    measure (mean loss change on blocks seen before, with its standard error: negative while
    the routers still learn what they saw) with :func:`~benchmarks.focus.verdict.plateau`'s
    reading of it."""
    from benchmarks.focus.operating_point import resolve_config
    from benchmarks.focus.verdict import plateau

    cfg = resolve_config(name)
    info = {"objective": cfg["objective"], "block": cfg.get("block"), "steps": cfg["steps"]}
    record = folder / f"training_{name}.json"
    if record.is_file():
        rec = json.loads(record.read_text())
        info.update({k: rec.get(k) for k in ("loss_first", "loss_last", "revisit_n")})
        if rec.get("revisit_n"):  # a run that saw no block twice has no revisit measure
            info.update(revisit_mean=rec["revisit_mean"], revisit_sem=rec["revisit_sem"])
            info["plateau"] = plateau({**info, "steps": cfg["steps"]})
    return info


def long_trained_lines(summary: Dict[str, Dict[str, Any]]) -> List[str]:
    """The rows trained on long blocks against the routers they started from, paired by
    window, per set, with how each was trained (nothing where no such row ran)."""
    rows = [(s, name, r) for s, by in summary.items() for name, r in by.items()
            if r.get("vs_parent")]
    if not rows:
        return []
    lines = ["## Routers trained on long blocks against their start", "",
             "| set | row | objective, block, steps | revisit (mean +- s.e.) | trained from "
             "| trailing ppl change | p (perm.), worse |", "|---|---|---|---|---|---|---|"]
    for s, name, r in rows:
        t = r.get("training") or {}
        how = (f"{t['objective']}, {t['block']:,}, {t['steps']}" if t.get("block") else "")
        rev = (f"{t['revisit_mean']:+.4f} +- {t['revisit_sem']:.4f}"
               if t.get("revisit_mean") is not None else "")
        lines.append(f"| {s} | {name} | {how} | {rev} | {r['vs_parent']['against']} "
                     + _cmp(r["vs_parent"]))
    return lines + [""]


def window_lines(windows: Optional[Dict[str, List[Dict[str, Any]]]]) -> List[str]:
    """The windows as a markdown table: source, token range, SHA-256 of the file (out of
    domain) or the topics touched (test), and the share of positions inside a 32-token
    window of the routers' training text."""
    if not windows:
        return []
    out = ["## Windows", "", "| set | window | source | tokens | of | file SHA-256 / topics | "
           "in training text (all / trailing) |", "|---|---|---|---|---|---|---|"]
    for s, ws in windows.items():
        for j, w in enumerate(ws):
            f = w.get("file")
            src = f"`{f['path']}` ({f['bytes']:,} bytes)" if f else "joined test topics"
            what = f["sha256"][:16] + "..." if f else ", ".join(w.get("topics", []))
            cov = (f"{w['train_covered']:.3f} / {w['train_covered_trailing']:.3f}"
                   if "train_covered" in w else "")
            out.append(f"| {s} | {j} | {src} | [{w['start']}, {w['end']}) | "
                       f"{w['doc_tokens']:,} | {what} | {cov} |")
    return out + [""]


def plot(summary: Dict[str, Dict[str, Any]], path: Path) -> bool:
    """Loss by position, one panel per set, one line per configuration measured on every
    window full attention has (a mean over fewer windows is over other documents and would
    not be comparable; the table gives those rows); needs matplotlib; returns whether the
    plot was written."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, axes = plt.subplots(2, len(summary), figsize=(6.5 * len(summary), 9), squeeze=False)
    for col, (s, rows) in enumerate(summary.items()):
        for ax, key, what in ((axes[0][col], "bin_loss", "mean next-token loss"),
                              (axes[1][col], "bin_diff_vs_full", "minus full attention's "
                               "(paired by window)")):
            for name, r in rows.items():
                if r["windows"] < rows.get("full", r)["windows"]:
                    continue
                pts = [(i * lc.BIN + lc.BIN / 2, v) for i, v in enumerate(r[key] or [])
                       if v is not None]
                if pts:
                    ax.plot(*zip(*pts), marker=".", label=f"{name} ({r['windows']})",
                            ls="--" if name.startswith(("cut", "sinks@")) or "random" in name
                            else "-")
            ax.set(title=f"{s}: loss by position", xlabel="position (tokens)", ylabel=what)
            ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return True


def step_cost_lines(runs: Sequence[Dict[str, Any]]) -> List[str]:
    """The router-training step costs (``python -m benchmarks.focus.router_step_cost``) as
    markdown."""
    out = ["## Router training: cost of one step", "",
           "`python -m benchmarks.focus.router_step_cost --length L` under `ulimit -v`; the "
           "machine shared with the evaluation above and other work, so wall seconds are "
           "inflated; CPU seconds are the process's own. Memory options: `layers` = the "
           "decoder layers checkpointed (`--checkpointing`), `chunk C` = the loss over chunks "
           "of C positions (`--loss-chunk C`), `-` = neither.", "",
           "| row | objective | tokens | memory options | wall s/step | CPU s/step | "
           "peak RSS (GiB) | address-space limit (GiB) | result | date |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        lim = r.get("address_space_limit_gib")
        ok = "failed" not in r
        opts = (["layers"] if r.get("gradient_checkpointing") else []) + (
            [f"chunk {r['loss_chunk']}"] if r.get("loss_chunk") else [])
        out.append(f"| {r['row']} | {r['objective']} | {r['length']} | "
                   f"{', '.join(opts) or '-'} | "
                   + (f"{r['seconds_per_step']:.0f} | {r['cpu_seconds_per_step']:.0f}" if ok
                      else "- | -")
                   + f" | {r['peak_rss_gib']:.1f} | {'' if lim is None else f'{lim:.1f}'} | "
                   + ("ok" if ok else "allocation refused") + f" | {r['date']} |")
    return out + [""]


def latest_step_costs(runs: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The latest run of each router step measured (row, objective, tokens, memory options),
    by length: one answer per question, the earlier runs staying in the JSON-lines file."""
    latest: Dict[tuple, Dict[str, Any]] = {}
    for r in sorted(runs, key=lambda r: r["date"]):
        key = (r["row"], r["objective"], r["length"], bool(r.get("gradient_checkpointing")),
               r.get("loss_chunk"))
        latest[key] = r
    return sorted(latest.values(), key=lambda r: (r["length"], bool(r.get("loss_chunk"))))


def write_report(folder: Path, cells_file: str = "cells.jsonl",
                 baselines: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    """Summarize ``folder/cells_file`` into ``summary.json``, ``focus_long_context.md`` and
    ``loss_by_position.png`` in ``folder`` (the windows' record read from
    ``windows.json`` when present). Returns the summary JSON's content."""
    folder = Path(folder)
    cells = load_cells(folder / cells_file)
    if not cells:
        raise ValueError(f"write_report: no cells in {folder / cells_file}")
    summary = summarize(cells, baselines)
    trained = {name: training_info(name, folder) for by in summary.values()
               for name, r in by.items() if r.get("vs_parent")}
    for by in summary.values():
        for name, r in by.items():
            if name in trained:
                r["training"] = trained[name]
    keep = ("cpu", "cores", "threads", "torch", "transformers", "python")
    dates = sorted([c["date"] for c in cells] + [c["finished"] for c in cells
                                                 if "finished" in c])
    meta = {"conditions": {k: cells[-1].get(k) for k in keep}, "first_date": dates[0],
            "last_date": dates[-1], "cells": len(cells),
            "length": lc.LENGTH, "trail": lc.TRAIL, "bin": lc.BIN}
    win = folder / "windows.json"
    if win.is_file():
        meta["windows"] = json.loads(win.read_text())
    steps = folder / "router_step_cost.jsonl"
    runs = load_cells(steps) if steps.is_file() else []
    if runs:
        meta["step_costs"] = latest_step_costs(runs)
    doc = {"meta": meta, "sets": summary}
    (folder / "summary.json").write_text(json.dumps(doc, indent=1) + "\n")
    extra = step_cost_lines(runs) if runs else []
    (folder / "focus_long_context.md").write_text(markdown(summary, meta)
                                                  + "\n".join(extra))
    plot(summary, folder / "loss_by_position.png")
    return doc


def tiny_llama(seed: int = 0, vocab: int = 97) -> Any:
    """A random-weight two-layer Llama (Hugging Face ``LlamaForCausalLM``) for smoke runs."""
    import torch
    import transformers

    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=256,
                                   tie_word_embeddings=True)
    return transformers.LlamaForCausalLM(cfg).eval()


#: The smoke configuration: 64-token windows, 16 trailing tokens, bins of 8, cuts of 16 and
#: 32, a window of 8 with 2 sinks and random balanced groups (K = 4, top 2, window 8).
QUICK = {"length": 64, "trail": 16, "width": 8,
         "cfgs": {"win8": {"kind": "sinks", "window": 8, "num_sinks": 2},
                  "K4_top2_w8_random": {"kind": "random", "K": 4, "top_k": 2, "window": 8}}}


def quick(folder: Optional[Path] = None, windows: int = 3) -> Dict[str, Any]:
    """The whole pipeline in seconds on :func:`tiny_llama`: random-token windows in two
    sets, every cell run into ``folder/cells.jsonl`` (a temporary folder by default), the
    summary returned. Nothing is measured about SmolLM2 here."""
    import tempfile

    import torch

    model = tiny_llama()
    g = torch.Generator().manual_seed(1)
    sets = {}
    for s in ("a", "b"):
        sets[s] = []
        for _ in range(windows):
            ids = torch.randint(0, 97, (QUICK["length"],), generator=g).tolist()
            sets[s].append({"set": s, "ids": ids, "sha": lc.token_sha(ids)})
    configs = ["full", "cut16", "cut32", "K4_top2_w8_random", "win8"]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(folder or tmp)
        lc.run_grid(model, sets, configs, out / "cells.jsonl", first=3, cfgs=QUICK["cfgs"],
                    length=QUICK["length"], trail=QUICK["trail"], width=QUICK["width"],
                    log=lambda m: None)
        cells = load_cells(out / "cells.jsonl")
    return {"cells": cells, "summary": summarize(cells, {"K4_top2_w8_random": "win8"})}
