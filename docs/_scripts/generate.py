"""Write every measured number of the README and the docs' results pages from the result files.

The README and the docs pages of :data:`TARGETS` hold hand-written prose without measured
numbers, and generated blocks between marker comments::

    <!-- generated: NAME -->
    ...written by this script...
    <!-- end generated -->

``NAME`` is a key of :data:`BLOCKS` (a headline table or a sentence built from a template)
or ``table SOURCE`` (the markdown table ``SOURCES[SOURCE]`` cut to its key columns by
:mod:`bench_tables`). Run ``python docs/_scripts/generate.py`` after a benchmark has
written new results; ``--check`` writes nothing and exits 1 naming the files that differ
(``tests/test_generated_docs.py`` runs it).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Callable

# this folder (bench_tables, headlines) and this checkout's package before any installed one
sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[2])]

import bench_tables  # noqa: E402
import headlines  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
#: Every result file the generator reads, by key, relative to the repository root: the one
#: place to repoint when results move.
SOURCES: dict[str, str] = {
    # JSON behind the headline tables and sentences
    "qsv_layer_speed": "benchmarks/qsv/results/qsv_layer_speed.json",
    "qsv_floor": "benchmarks/qsv/results/qsv_vs_torch_harmonics_targets.json",
    "qsv_compile": "benchmarks/qsv/results/qsv_compile_targets.json",
    "qsv_memory": "benchmarks/qsv/results/qsv_memory.json",
    "qsv_ablation": "benchmarks/qsv/results/qsv_ablation_digits.json",
    "qk_share": "benchmarks/qk_geometry/results/qk_geometry_long_share_bootstrap.json",
    "qk_intervention": "benchmarks/qk_geometry/results/qk_geometry_intervention_tests.json",
    "qk_pretrained": "benchmarks/qk_geometry/results/qk_pretrained.json",
    "focus_kernel": "benchmarks/focus/results/focus_speed_32k.json",
    "focus_lm_seed0": "benchmarks/focus/results/focus_lm.json",
    "focus_lm_seed1": "benchmarks/focus/results/focus_lm_seed1.json",
    "focus_lm_seed2": "benchmarks/focus/results/focus_lm_seed2.json",
    "focus_in_domain": "benchmarks/focus/results/focus_pretrained_st_budget75_s620.json",
    "focus_data_splits": "benchmarks/focus/results/focus_data_splits.json",
    "focus_passkey": "benchmarks/focus/results/focus_passkey.json",
    "focus_verdict": "benchmarks/focus/results/focus_verdict.json",
    "qsv_epilogue": "benchmarks/qsv/results/qsv_forward_epilogue.json",
    "qsv_breakdown": "benchmarks/qsv/results/qsv_forward_breakdown.json",
    "qsv_small_graphs": "benchmarks/qsv/results/qsv_small_graphs.json",
    "focus_long_context": "benchmarks/focus/results/focus_long_context/summary.json",
    "focus_time_split": "benchmarks/focus/results/focus_time_split.json",
    # markdown tables shown (narrowed) on docs/benchmarks.md; each has its CSV beside it
    "qsv_layer_speed.md": "benchmarks/qsv/results/qsv_layer_speed.md",
    "qsv_memory.md": "benchmarks/qsv/results/qsv_memory.md",
    "qsv_vs_torch_harmonics_targets.md": "benchmarks/qsv/results/qsv_vs_torch_harmonics_targets.md",
    "qsv_forward_breakdown.md": "benchmarks/qsv/results/qsv_forward_breakdown.md",
    "qsv_forward_epilogue.md": "benchmarks/qsv/results/qsv_forward_epilogue.md",
    "qsv_small_graphs.md": "benchmarks/qsv/results/qsv_small_graphs.md",
    "qsv_compile_targets.md": "benchmarks/qsv/results/qsv_compile_targets.md",
    "qsv_cuda_compiled_targets.md": "benchmarks/qsv/results/qsv_cuda_compiled_targets.md",
    "qsv_cuda_memory.md": "benchmarks/qsv/results/qsv_cuda_memory.md",
    "qsv_ablation_digits.md": "benchmarks/qsv/results/qsv_ablation_digits.md",
    "qsv_ablation_notes.md": "benchmarks/qsv/results/qsv_ablation_notes.md",
    "knn_speed.md": "benchmarks/qsv/results/knn_speed.md",
    "focus_speed.md": "benchmarks/focus/results/focus_speed.md",
    "focus_speed_32k.md": "benchmarks/focus/results/focus_speed_32k.md",
    "focus_lm.md": "benchmarks/focus/results/focus_lm.md",
    "focus_bucket_block.md": "benchmarks/focus/results/focus_bucket_block.md",
    "focus_band_block.md": "benchmarks/focus/results/focus_band_split/focus_band_block.md",
    "focus_masked_layout.md": "benchmarks/focus/results/focus_masked_layout.md",
    "focus_pretrained_st_budget75_s620.md":
        "benchmarks/focus/results/focus_pretrained_st_budget75_s620.md",
    "focus_data_splits.md": "benchmarks/focus/results/focus_data_splits.md",
    "focus_passkey.md": "benchmarks/focus/results/focus_passkey.md",
    "focus_verdict.md": "benchmarks/focus/results/focus_verdict.md",
    "qk_geometry_long.md": "benchmarks/qk_geometry/results/qk_geometry_long.md",
    "qk_geometry.md": "benchmarks/qk_geometry/results/qk_geometry.md",
    "before_after.md": "benchmarks/operators/results/before_after.md",
    "qk_pretrained.md": "benchmarks/qk_geometry/results/qk_pretrained.md",
    "qk_geometry_compare.md": "benchmarks/qk_geometry/results/qk_geometry_compare.md",
}

#: The CI script: its last line is the test command the README and the docs quote.
CI_SCRIPT = ".ci/run"

#: The files the generator fills.
TARGETS = ["README.md", "docs/getting_started.md", "docs/benchmarks.md",
           "docs/focus_evaluation.md", "docs/focus.md", "docs/qk_geometry.md", "docs/qsv.md"]

COMMAND = "python docs/_scripts/generate.py"
_BLOCK = re.compile(r"(<!-- generated: (.+?) -->\n)(.*?)(<!-- end generated -->)", re.S)


class Results:
    """What a block reads: ``results(key)`` is the parsed JSON file ``SOURCES[key]``,
    ``results.link(key)`` a markdown link to ``SOURCES[key]`` from a page whose path to the
    repository root is ``prefix``, ``results.path(key)`` its path from the root as code (for
    the Sphinx pages, where a link to a ``.md`` file outside ``docs/`` breaks the build)."""

    def __init__(self, prefix: str = "") -> None:
        self.prefix = prefix

    def __call__(self, key: str) -> dict:
        return json.loads((ROOT / SOURCES[key]).read_text(encoding="utf-8"))

    def link(self, key: str) -> str:
        path = SOURCES[key]
        return f"[{Path(path).name}]({self.prefix}{path})"

    def path(self, key: str) -> str:
        return f"`{SOURCES[key]}`"



def test_command() -> str:
    """The command CI runs: the last line of :data:`CI_SCRIPT`."""
    return (ROOT / CI_SCRIPT).read_text(encoding="utf-8").strip().splitlines()[-1]


#: Block name -> function of a :class:`Results` returning the block's markdown.
BLOCKS: dict[str, Callable[[Results], str]] = {
    "readme qsv": headlines.qsv_table,
    "readme qk": headlines.qk_table,
    "readme focus": headlines.focus_table,
    "focus verdict sentence": headlines.verdict_sentence,
    "focus 8k sentence": headlines.long_context_sentence,
    "focus step cost": headlines.step_cost_sentence,
    "focus time split": headlines.time_split_table,
    "focus 8k frontier": headlines.frontier_sentence,
    "focus 8k summary": headlines.frontier_summary,
    "focus caveat": headlines.pretrained_caveat,
    "focus verdict quality": headlines.verdict_quality_table,
    "focus verdict passkey speed": headlines.verdict_passkey_speed_table,
    "focus passkey full": headlines.passkey_full_sentence,
    "focus data splits": headlines.data_splits_sentence,
    "focus lm seeds": headlines.focus_lm_seeds_table,
    "qk pretrained": headlines.qk_pretrained_table,
    "qsv targets": headlines.qsv_targets_table,
    "qsv compile": headlines.qsv_compile_table,
    "qsv kernels": headlines.qsv_kernels_table,
    "qsv ablation": headlines.qsv_ablation_table,
}


def block(name: str, link_prefix: str) -> str:
    """The markdown of generated block ``name`` (see the module docstring)."""
    if name.startswith("table "):
        key = name[len("table "):]
        path = ROOT / SOURCES[key]
        text = path.read_text(encoding="utf-8")
        folder = link_prefix + Path(SOURCES[key]).parent.as_posix() + "/"
        return bench_tables.narrow_markdown(text, path.with_suffix(""), folder).rstrip()
    if name == "test command":
        return f"```bash\n{test_command()}\n```"
    if name not in BLOCKS:
        raise KeyError(f"generate.py: unknown generated block {name!r}; known: "
                       f"{sorted(BLOCKS)} or 'table <key of SOURCES>'")
    return BLOCKS[name](Results(link_prefix)).rstrip()


def fill(text: str, link_prefix: str) -> str:
    """``text`` with every generated block rewritten."""
    return _BLOCK.sub(lambda m: f"{m.group(1)}{block(m.group(2), link_prefix)}\n{m.group(4)}",
                      text)


def generate(check: bool = False) -> list[str]:
    """Rewrite (or, with ``check``, only compare) every target; returns those that differ."""
    differ = []
    for rel in TARGETS:
        path = ROOT / rel
        old = path.read_text(encoding="utf-8")
        prefix = "" if "/" not in rel else "../"
        new = fill(old, prefix)
        if new != old:
            differ.append(rel)
            if not check:
                path.write_text(new, encoding="utf-8")
    return differ


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if a file is not as generated")
    args = parser.parse_args(argv)
    differ = generate(check=args.check)
    for rel in differ:
        print(("out of date: " if args.check else "rewrote: ") + rel)
    if args.check and differ:
        print(f"regenerate with: {COMMAND}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
