"""Focus language-model quality: full attention, Focus from scratch, routers on a frozen model.

    python -m benchmarks.focus.lm [--quick] [--data PATH] [--gates additive multiplicative]

The logic lives in :mod:`quest_geometric.pipelines.focus_lm`.
"""
from quest_geometric.pipelines.focus_lm import main

if __name__ == "__main__":
    main()
