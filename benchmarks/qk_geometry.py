"""Query/key geometry study: PR_Q vs PR_K trajectories, key-spectrum control, pretrained
checkpoints.

    python benchmarks/qk_geometry.py [--quick] [--hf-model PATH ...]

The logic lives in :mod:`quest_geometric.experiments.qk_geometry`.
"""
from quest_geometric.experiments.qk_geometry import main

if __name__ == "__main__":
    main()
