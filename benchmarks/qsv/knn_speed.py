"""The time of each kNN back-end (SciPy, exact torch, torch-cluster) on 10K to 1M points.

    python -m benchmarks.qsv.knn_speed [--quick] [--device cuda]

The logic lives in :mod:`quest_geometric.pipelines.knn_speed` (shared with the tour).
"""
from quest_geometric.pipelines.knn_speed import main

if __name__ == "__main__":
    main()
