"""Where QSVConv's eager forward spends its time, operator by operator, measured in sparse
products over the same pattern (the unit of the layer's floor target): 16,200 and 64,800
points, one and two threads.

    python benchmarks/qsv_forward_breakdown.py [--quick] [--threads 1 2] [--machine idle]

The logic lives in :mod:`quest_geometric.experiments.qsv_forward_breakdown`.
"""
from quest_geometric.experiments.qsv_forward_breakdown import main

if __name__ == "__main__":
    main()
