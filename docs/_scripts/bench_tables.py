"""Cut the wide tables of a benchmark's markdown result to their key columns.

The result files in ``benchmarks/results/`` hold every column a benchmark measures (up to
21), too wide for a page. :func:`narrow_markdown` cuts each wide table to its key columns
(those that are all ``n/a`` dropped too) with a link to the CSV that holds every column;
titles, notes and metadata are copied unchanged. ``generate.py`` embeds the result in
``docs/benchmarks.md``.
"""
from __future__ import annotations

import re
from pathlib import Path


#: A table whose header holds ``signature`` is cut to ``columns``; its CSV is
#: ``<stem><suffix>.csv`` beside the markdown file.
KEY_COLUMNS: list[tuple[str, list[str], str]] = [
    ("speedup_blocks", ["tokens", "rounds", "full_ms", "blocks_ms", "speedup_blocks",
                        "speedup_attn", "edges_core_vs_tconv", "full_mb", "blocks_mb",
                        "edges_mb", "pair_fraction"], ""),
    ("speedup_vs_transformer", ["graphs", "threads", "layer", "params", "edges", "fwd_bwd_ms",
                                "peak_mb",
                                "speedup_vs_transformer", "memory_vs_transformer"], ""),
    ("fb_floor_target_met", ["points", "threads", "mode", "fwd_vs_th", "fb_vs_th",
                             "fb_vs_tconv", "fwd_vs_spmm", "floor_target_met", "fb_vs_spmm",
                             "fb_floor_target_met", "fb_vs_eager"], ""),
    ("eager_forward_native_vs_bmm", ["subject", "size", "threads", "fwd_vs_eager",
                                     "fb_vs_eager", "graph_breaks", "target_met",
                                     "dense_fwd_vs_eager", "dense_fb_vs_eager",
                                     "eager_forward_native_vs_bmm",
                                     "compiled_forward+backward_elementwise_vs_bmm"], ""),
    ("paper_delta", ["variant", "params", "seeds", "epochs", "acc_mean", "acc_std", "delta",
                     "paper", "paper_delta"], ""),
    ("vs full (%)", ["model", "gate", "mode", "top_k", "val_bpc", "vs full (%)", "balance",
                     "pair_fraction"], ""),
    ("share_throughout", ["depth", "init", "trajectories", "share_end", "pr_q_end",
                          "pr_k_end", "share_q_expands_late", "share_k_shrinks_late",
                          "entropy_end", "val_loss"], "_trajectories"),
    ("trained_val_ppl", ["routers", "gate_bias", "eval", "val_ppl", "delta_pct", "delta_sem",
                         "blocks_worse", "pairs_kept", "soft_keep", "steps",
                         "trained_val_ppl"], ""),
    ("pairs_kept", ["model", "gate", "eval", "val_ppl", "delta_pct", "delta_sem",
                    "blocks_worse", "pairs_kept", "soft_keep", "steps", "revisit_mean",
                    "train_far_share"], ""),
    ("attention_ms", ["context", "threads", "mode", "step_ms", "cache_ms", "attention_ms",
                      "routing_ms", "rest_ms", "speed_vs_full", "keys_read"], ""),
    ("keys_read", ["cache", "context", "threads", "mode", "ms_per_step", "speed_vs_full",
                   "cpu_speed_vs_full", "keys_read", "load1"], ""),
    ("bound_vs_full", ["cache", "context", "full_ms", "fixed_ms", "context_ms",
                       "residual_ms", "bound_vs_full", "max_share_for_target", "top-1_ms",
                       "top-1_vs_full", "top-2_vs_full"], ""),
    ("delta_mb", ["points", "k", "edges", "layer", "params", "fwd_gflop", "peak_mb", "delta_mb",
                  "fits_8gb", "status"], ""),
    ("overhead_wall_pct", ["depth", "steps", "probe_every", "overhead_pct", "ms_per_step",
                           "ms_per_probe", "probe_share_pct"], "_overhead"),
]

def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def narrow_table(lines: list[str], base: Path, folder: str) -> list[str]:
    """Cut one markdown table (header, rule, rows) to its key columns, plus a link to its
    CSV ``<base><suffix>.csv``, written as ``folder`` + the CSV's name."""
    header = _cells(lines[0])
    rows = [_cells(line) for line in lines[2:]]
    for signature, columns, suffix in KEY_COLUMNS:
        if signature in header:
            break
    else:
        return lines
    keep = [header.index(c) for c in columns if c in header
            and any(r[header.index(c)] not in ("n/a", "") for r in rows)]
    out = ["| " + " | ".join(header[i] for i in keep) + " |", "|" + "---|" * len(keep)]
    out += ["| " + " | ".join(r[i] for i in keep) + " |" for r in rows]
    csv = base.with_name(f"{base.name}{suffix}.csv")
    if not csv.is_file():
        raise FileNotFoundError(f"{base.name}.md: table with '{signature}' has no CSV {csv}")
    out += ["", f"Key columns ({len(keep)} of {len(header)}); every column: "
                f"{{download}}`{csv.name} <{folder}{csv.name}>`."]
    return out


def demote_headings(lines: list[str], top: int = 3) -> list[str]:
    """Shift the headings so the highest is level ``top``: the files are included under a
    ``##`` section of docs/benchmarks.md, and a higher heading would leave it in the sidebar."""
    fence = False
    levels = []
    for line in lines:
        fence ^= line.startswith("```")
        m = re.match(r"^(#+) ", line)
        if m and not fence:
            levels.append(len(m.group(1)))
    shift = max(0, top - min(levels, default=top))
    fence = False
    out = []
    for line in lines:
        fence ^= line.startswith("```")
        if not fence and re.match(r"^#+ ", line):
            line = "#" * shift + line
        out.append(line)
    return out


def narrow_markdown(text: str, base: Path, folder: str) -> str:
    """Every wide table of ``text`` (the result file ``<base>.md``) narrowed, headings
    demoted to level 3 and below, relative image links and CSV links made relative to the
    page that shows it: ``folder`` is the results folder as the page links it."""
    lines = demote_headings(text.splitlines())
    out: list[str] = []
    i = 0
    while i < len(lines):
        if lines[i].startswith("|") and i + 1 < len(lines) and lines[i + 1].startswith("|---"):
            j = i
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
            out += narrow_table(lines[i:j], base, folder)
            i = j
            continue
        out.append(re.sub(r"(!\[[^\]]*\]\()(?![a-z]+:|/)([^)]+\))",
                          lambda m: m.group(1) + folder + m.group(2), lines[i]))
        i += 1
    return "\n".join(out) + "\n"
