"""quest_geometric: quaternion sphere attention (QSV), query/key geometry and Focus for PyG.

Subpackages: :mod:`~quest_geometric.quaternion`, :mod:`~quest_geometric.geometry`,
:mod:`~quest_geometric.transforms`, :mod:`~quest_geometric.nn`, :mod:`~quest_geometric.models`,
:mod:`~quest_geometric.datasets`, :mod:`~quest_geometric.adapters`,
:mod:`~quest_geometric.analysis`, :mod:`~quest_geometric.training`,
:mod:`~quest_geometric.profile` (timing and result files), :mod:`~quest_geometric.pipelines`
(what the ``tour`` runs), :mod:`~quest_geometric.testing`.

The subpackages are imported on first use (``quest_geometric.nn`` works after a bare
``import quest_geometric``): importing the package imports neither torch nor PyG, so the
command line answers ``--help`` and argument errors at once.
"""
import importlib
import warnings

#: PyG >= 2.8 warns on import that torch-cluster "is no longer necessary": this project's kNN
#: back-end uses it (:mod:`quest_geometric.typing`), so the notice is filtered.
warnings.filterwarnings("ignore", message="'torch-cluster' is no longer necessary",
                        category=DeprecationWarning)

__version__ = "0.1.0"

__all__ = ["__version__", "quaternion", "geometry", "transforms", "nn"]

_SUBMODULES = frozenset({"quaternion", "geometry", "transforms", "nn", "typing", "models",
                         "datasets", "analysis", "training", "profile", "pipelines", "testing",
                         "adapters"})


def __getattr__(name: str):
    """Import a subpackage on first access (PEP 562)."""
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
