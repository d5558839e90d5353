"""The masked SDPA of Focus's fast decoding step: which query layout is faster, per thread
count?

    python benchmarks/focus_masked_layout.py [--quick] [--threads 1 2]
                                             [--contexts 1024 4096 8192]

The logic lives in :mod:`quest_geometric.experiments.focus_masked_layout`.
"""
from quest_geometric.experiments.focus_masked_layout import main

if __name__ == "__main__":
    main()
