"""Public test helpers users can run on their own models (e3nn style).

- :func:`assert_torch_compile`: a module compiles and matches its eager output.
- :func:`random_groups`: random hard Focus group sets (:mod:`quest_geometric.testing.focus`).
"""
from quest_geometric.testing.compile import assert_torch_compile
from quest_geometric.testing.focus import random_groups

__all__ = ["assert_torch_compile", "random_groups"]
