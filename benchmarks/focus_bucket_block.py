"""Focus's 'blocks' back-end, top-k > 1: how large a query block should one bucket's masked
attention run in?

    python benchmarks/focus_bucket_block.py [--quick] [--threads 1 2]
                                            [--sizes 512 1024 2048 4096]

The logic lives in :mod:`quest_geometric.experiments.focus_bucket_block`.
"""
from quest_geometric.experiments.focus_bucket_block import main

if __name__ == "__main__":
    main()
