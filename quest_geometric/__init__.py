"""quest_geometric: quaternion sphere attention, query/key geometry and Focus for PyG."""
from quest_geometric import typing  # noqa: F401  (probes optional packages once)

__version__ = "0.1.0"

__all__ = ["__version__"]
