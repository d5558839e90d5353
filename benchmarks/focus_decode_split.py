"""Where one cached decoding step's time goes: full attention against Focus hard top-1 and
top-2 on a SmolLM2-135M-shaped stack, split into the KV-cache update, the attention over the
cached keys, Focus's routing and the rest (projections, MLPs, norms, LM head, Python).

    python benchmarks/focus_decode_split.py [--quick] [--threads 1 2] [--contexts 1024 4096 8192]

The logic lives in :mod:`quest_geometric.experiments.focus_decode_split`.
"""
import os

from quest_geometric.experiments.focus_decode_split import main

if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
