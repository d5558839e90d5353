"""One cached decoding step of a SmolLM2-sized Llama with Focus composed: full attention
against Focus hard top-1 and top-2, at several context lengths, both KV caches.

    python benchmarks/focus_decode_step.py [--quick] [--threads 1 2] [--contexts 1024 4096 8192]
                                           [--compare-paths]

The logic lives in :mod:`quest_geometric.experiments.focus_decode_step`.
"""
import os

from quest_geometric.experiments.focus_decode_step import main

if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
