"""Experiment and benchmark logic shared by ``benchmarks/*.py`` and the ``tour`` command.

Each module here is one question (for example :mod:`quest_geometric.experiments.qsv_layer_speed`)
with a ``run(...)`` function returning result rows and a ``main(argv)`` command-line entry;
``benchmarks/<name>.py`` is a thin wrapper around ``main``.  Keeping the logic in the package
lets the installed ``quest-geometric tour`` command run the same code as the benchmarks.
"""
from quest_geometric.experiments.common import (
    environment_info,
    load_average,
    paired_ratio,
    peak_memory_mb,
    ratio_summary,
    reuse_freed_memory,
    round_ratios,
    time_function,
    time_interleaved,
    write_results,
)

__all__ = ["environment_info", "load_average", "paired_ratio", "round_ratios", "ratio_summary",
           "peak_memory_mb", "reuse_freed_memory",
           "time_function", "time_interleaved", "write_results"]
