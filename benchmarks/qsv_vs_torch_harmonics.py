"""QSVConv against NVIDIA torch-harmonics' NeighborhoodAttentionS2 (its optimized CPU
kernel) and PyG's TransformerConv on the same points, channels and mean neighbourhood:
eager and compiled, forward and forward + backward, one and two threads, 16,200 and 64,800
points; plus a batch of 32 small digit graphs against TransformerConv.

    pip install --no-deps torch-harmonics==0.9.3   # never without --no-deps
    python benchmarks/qsv_vs_torch_harmonics.py [--quick] [--threads 1 2] [--compiled]

Without torch-harmonics the comparison is skipped with a message (the small-graph table
still runs). The logic lives in :mod:`quest_geometric.experiments.qsv_vs_torch_harmonics`.
"""
from quest_geometric.experiments.qsv_vs_torch_harmonics import main

if __name__ == "__main__":
    main()
