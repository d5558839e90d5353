"""QSVConv on a CUDA device against TransformerConv (and torch-harmonics'
NeighborhoodAttentionS2 where it imports) and against the aggregation floors: the same
points, channels and kNN graph as benchmarks/qsv_vs_torch_harmonics.py, eager and compiled,
plus the peak device memory at 1M points.

    python benchmarks/qsv_cuda.py [--quick] [--machine idle]

Needs a GPU; run it through benchmarks/cuda_check.sh on a lent GPU machine. The logic lives
in :mod:`quest_geometric.experiments.qsv_cuda`.
"""
from quest_geometric.experiments.qsv_cuda import main

if __name__ == "__main__":
    main()
