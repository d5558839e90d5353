"""Focus on SmolLM2-135M at one operating point (issue 31): train, evaluate, table.

    python benchmarks/focus_operating_point.py train K8_top2_w64_distill [--max-minutes 90]
    python benchmarks/focus_operating_point.py evaluate K8_top2_w64_distill [--top-k 1]
    python benchmarks/focus_operating_point.py table

See :mod:`quest_geometric.experiments.focus_operating_point`.
"""
from quest_geometric.experiments.focus_operating_point import main

if __name__ == "__main__":
    main()
