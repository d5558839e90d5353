"""QSVConv vs TransformerConv / GATv2Conv (forward + backward, peak memory) on batched
sphere graphs.

    python -m benchmarks.qsv.layer_speed [--quick] [--threads 1] [--device cuda]

The logic lives in :mod:`quest_geometric.pipelines.qsv_layer_speed` (shared with the tour).
"""
from quest_geometric.pipelines.qsv_layer_speed import main

if __name__ == "__main__":
    main()
