"""QSVConv vs TransformerConv / GATv2Conv (forward + backward, peak memory) and kNN back-ends.

    python benchmarks/qsv_layer_speed.py [--quick] [--device cuda]

The logic lives in :mod:`quest_geometric.experiments.qsv_layer_speed` (shared with the tour).
"""
from quest_geometric.experiments.qsv_layer_speed import main

if __name__ == "__main__":
    main()
