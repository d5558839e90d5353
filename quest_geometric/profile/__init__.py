"""Measurement helpers shared by the pipelines and the benchmarks: the conditions of a run
(:mod:`~quest_geometric.profile.environment`), timing in interleaved rounds with paired
ratios (:mod:`~quest_geometric.profile.timing`), peak memory
(:mod:`~quest_geometric.profile.memory`) and result files that carry their conditions
(:mod:`~quest_geometric.profile.results`)."""
from quest_geometric.profile.environment import (
    MACHINE_KEYS, boot_id, cpu_model, environment_info, load_average,
)
from quest_geometric.profile.memory import libc, peak_memory_mb, reuse_freed_memory
from quest_geometric.profile.results import markdown_table, write_results
from quest_geometric.profile.timing import (
    paired_ratio, ratio_summary, round_ratios, time_function, time_interleaved,
)

__all__ = ["MACHINE_KEYS", "cpu_model", "boot_id", "environment_info", "load_average",
           "time_function", "time_interleaved", "round_ratios", "ratio_summary",
           "paired_ratio", "libc", "reuse_freed_memory", "peak_memory_mb", "markdown_table",
           "write_results"]
