"""quest_geometric: quaternion sphere attention (QSV), query/key geometry and Focus for PyG.

Subpackages: :mod:`~quest_geometric.quaternion`, :mod:`~quest_geometric.geometry`,
:mod:`~quest_geometric.transforms`, :mod:`~quest_geometric.nn`,
:mod:`~quest_geometric.models`, :mod:`~quest_geometric.datasets`,
:mod:`~quest_geometric.adapters`, :mod:`~quest_geometric.analysis`,
:mod:`~quest_geometric.training`, :mod:`~quest_geometric.profile` (timing and result
files), :mod:`~quest_geometric.pipelines` (what the ``tour`` runs),
:mod:`~quest_geometric.testing`.
"""
from quest_geometric import typing  # noqa: F401  (probes optional packages once)
from quest_geometric import geometry, nn, quaternion, transforms  # noqa: F401

__version__ = "0.1.0"

__all__ = ["__version__", "quaternion", "geometry", "transforms", "nn"]
