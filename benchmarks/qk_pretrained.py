"""Query/key geometry of SmolLM2-135M (real pretrained, 4-bit weights, one final checkpoint).

    OMP_NUM_THREADS=1 python benchmarks/qk_pretrained.py [--quick]

The logic lives in :mod:`quest_geometric.experiments.qk_geometry.pretrained_cli` (the
command) and :mod:`quest_geometric.experiments.qk_geometry.pretrained` (the probe).
"""
import sys

from quest_geometric.experiments.qk_geometry.pretrained_cli import main

if __name__ == "__main__":
    sys.exit(main())
