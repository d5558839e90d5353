"""Focus's 'blocks' back-end: how large a query block should the fused window band run in, as
the window grows, and from which window should the window-plus-sinks band run split?

    python benchmarks/focus_band_block.py [--quick] [--threads 1 2] [--length 8192]
                                          [--windows 64 256 1024 2048] [--blocks 16 32 64]

The logic lives in :mod:`quest_geometric.experiments.focus_band_block`.
"""
from quest_geometric.experiments.focus_band_block import main

if __name__ == "__main__":
    main()
