"""Narrow copies of the committed benchmark tables for docs/benchmarks.md.

The result files in ``benchmarks/results/`` hold every column a benchmark measures (up to
21), too wide for a page. At build time ``docs/conf.py`` calls :func:`write_all`, which
copies each included ``<name>.md`` to ``docs/_generated/<name>.md`` with its wide tables cut
to their key columns (those that are all ``n/a`` dropped too) and a link to the CSV that
holds every column; titles, notes and metadata are copied unchanged.
"""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
GENERATED = ROOT / "docs" / "_generated"

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

#: The result files docs/benchmarks.md includes.
INCLUDED = ["qsv_layer_speed", "knn_speed", "qsv_memory", "qsv_ablation_digits",
            "qsv_ablation_120_digits", "qsv_ablation_300_digits",
            "qsv_vs_torch_harmonics", "qsv_vs_torch_harmonics_targets", "qsv_small_graphs",
            "qsv_forward_breakdown",
            "qsv_compile_targets", "qsv_cuda_compiled_targets", "qsv_cuda_memory",
            "qsv_cuda_profile",
            "focus_speed",
            "focus_speed_32k", "focus_speed_32k_2threads", "focus_speed_edges", "focus_lm",
            "focus_lm_seed1",
            "focus_lm_seed2", "qk_geometry", "qk_geometry_long", "qk_geometry_wide",
            "qk_geometry_compare", "focus_pretrained", "focus_pretrained_eval2048",
            "focus_pretrained_st",
            "focus_pretrained_st_budget", "focus_pretrained_st_budget_s400",
            "focus_pretrained_st_budget75", "focus_pretrained_st_budget75_s400",
            "focus_pretrained_reeval", "focus_pretrained_speed_st_budget_1thread",
            "focus_pretrained_speed_st_budget75", "focus_pretrained_speed_st_budget75_bounds",
            "focus_pretrained_speed",
            "focus_pretrained_speed_bounds", "focus_pretrained_speed_1thread",
            "focus_pretrained_speed_1thread_bounds", "focus_pretrained_speed_caches",
            "focus_decode_step", "focus_pretrained_speed_st_budget75_masked",
            "focus_pretrained_speed_st_budget75_masked_bounds",
            "focus_pretrained_speed_st_budget75_masked_1thread",
            "focus_pretrained_speed_st_budget75_masked_1thread_bounds",
            "focus_decode_step_paths", "focus_decode_split",
            "focus_pretrained_st_budget75_s620", "focus_pretrained_additive_s620",
            "focus_pretrained_speed_st_budget75_caches", "focus_masked_layout",
            "focus_bucket_block", "focus_band_block",
            "focus_pretrained_additive_b0125", "focus_pretrained_multiplicative_s620",
            "focus_pretrained_reeval_soft_keep", "focus_pretrained_reeval_b0125",
            "focus_pretrained_speed_st_budget75_s620_caches",
            "focus_pretrained_speed_st_budget75_s620_caches_1thread",
            "focus_pretrained_speed_st_budget75_s620_caches_bounds",
            "qk_pretrained"]


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def narrow_table(lines: list[str], stem: str) -> list[str]:
    """Cut one markdown table (header, rule, rows) to its key columns, plus the CSV link."""
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
    csv = RESULTS / f"{stem}{suffix}.csv"
    if not csv.is_file():
        raise FileNotFoundError(f"{stem}.md: table with '{signature}' has no CSV {csv}")
    out += ["", f"Key columns ({len(keep)} of {len(header)}); every column: "
                f"{{download}}`{csv.name} <../benchmarks/results/{csv.name}>`."]
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


def narrow_markdown(text: str, stem: str) -> str:
    """Every wide table of ``text`` narrowed, headings demoted to level 3 and below, image
    links made relative to this folder's copy (``docs/_generated``), to be included with
    ``:relative-images:``."""
    lines = demote_headings(text.splitlines())
    out: list[str] = []
    i = 0
    while i < len(lines):
        if lines[i].startswith("|") and i + 1 < len(lines) and lines[i + 1].startswith("|---"):
            j = i
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
            out += narrow_table(lines[i:j], stem)
            i = j
            continue
        out.append(re.sub(r"(!\[[^\]]*\]\()(?![a-z]+:|/)([^)]+\))",
                          r"\1../../benchmarks/results/\2", lines[i]))
        i += 1
    return "\n".join(out) + "\n"


def write_all(dest: Path = GENERATED) -> list[Path]:
    """Write the narrow copy of every included result file; returns the paths."""
    dest.mkdir(parents=True, exist_ok=True)
    paths = []
    for stem in INCLUDED:
        text = narrow_markdown((RESULTS / f"{stem}.md").read_text(encoding="utf-8"), stem)
        path = dest / f"{stem}.md"
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")  # unchanged files keep their mtime
        paths.append(path)
    return paths


if __name__ == "__main__":
    for p in write_all():
        print(p)
