"""Public test helpers users can run on their own models (e3nn style)."""
from quest_geometric.testing.compile import assert_torch_compile

__all__ = ["assert_torch_compile"]
