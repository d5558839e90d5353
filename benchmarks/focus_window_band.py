"""Focus's 'blocks' back-end on the window plus sinks at 8K: against full causal SDPA and
the plain loop of masked SDPA calls over window-sized chunks.

    python benchmarks/focus_window_band.py [--quick] [--threads 1 2] [--length 8192]
                                           [--windows 708 1281] [--rounds 5]

The logic lives in :mod:`quest_geometric.experiments.focus_window_band`.
"""
from quest_geometric.experiments.focus_window_band import main

if __name__ == "__main__":
    main()
