"""Peak memory of one forward + backward of QSVConv, torch-harmonics' NeighborhoodAttentionS2
and PyG's TransformerConv on equiangular grids of 64,800 to 1,036,800 points (64 channels,
one head), each layer in its own capped child process.

    pip install --no-deps torch-harmonics==0.9.3   # never without --no-deps
    python benchmarks/qsv_memory.py [--quick] [--cap-gb 12]

The logic lives in :mod:`quest_geometric.experiments.qsv_memory`.
"""
from quest_geometric.experiments.qsv_memory import main

if __name__ == "__main__":
    main()
