"""torch.compile of QSVConv and QSVNet against eager, and the rotation's form (issue 27).

    python benchmarks/qsv_compile.py [--quick] [--threads 1 2] [--machine idle]

The logic lives in :mod:`quest_geometric.experiments.qsv_compile`.
"""
from quest_geometric.experiments.qsv_compile import main

if __name__ == "__main__":
    main()
