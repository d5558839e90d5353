"""Focus attention ('blocks', 'edges') vs full causal SDPA: forward time and memory vs length.

    python -m benchmarks.focus.speed [--quick] [--device cuda]

The logic lives in :mod:`quest_geometric.pipelines.focus_speed`.
"""
from quest_geometric.pipelines.focus_speed import main

if __name__ == "__main__":
    main()
