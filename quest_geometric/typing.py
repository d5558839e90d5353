"""Optional-package probes, done once at import time (the PyG way).

``WITH_TORCH_CLUSTER`` and ``WITH_TORCH_SCATTER`` are ``True`` only when the package imports
*and* its compiled operators load: a source build made against another PyTorch fails at
import with ``undefined symbol``, which counts as absence.  Nothing is raised here;
:func:`require` raises a clear :class:`ImportError` when a path that needs the package is
requested.
"""
from __future__ import annotations

import importlib
import warnings

#: Why each optional package is unavailable (empty when it is available).
UNAVAILABLE_REASON: dict[str, str] = {}


def _probe(package: str, attribute: str) -> bool:
    """Whether ``package`` imports and ``package.attribute`` (which forces its operator
    library to load) is there; records why not."""
    try:  # pragma: no cover - depends on the environment
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            getattr(importlib.import_module(package), attribute)
        return True
    except (ImportError, OSError, AttributeError, RuntimeError) as e:  # pragma: no cover
        UNAVAILABLE_REASON[package] = f"{type(e).__name__}: {e}"
        return False


WITH_TORCH_CLUSTER: bool = _probe("torch_cluster", "knn")
WITH_TORCH_SCATTER: bool = _probe("torch_scatter", "scatter")

#: PyG >= 2.8 warns on its first import, wherever torch-cluster is installed, that it "is no
#: longer necessary and is being ignored"; this project's 'torch_cluster' kNN back-end still
#: uses it (:func:`~quest_geometric.geometry.knn.knn_graph`).  PyG is first imported here,
#: with exactly that warning filtered (pyproject's pytest filterwarnings holds the same).
_TORCH_CLUSTER_NOTICE = "'torch-cluster' is no longer necessary"

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=_TORCH_CLUSTER_NOTICE, category=DeprecationWarning)
    import torch_geometric.typing  # noqa: F401,E402

_INSTALL_HINT = (
    "install it after torch with `pip install --no-build-isolation {pkg}` "
    "(a source build, tens of minutes on two cores) or the project extra "
    "`pip install --no-build-isolation -e \".[ext]\"` in the repository's root"
)


def require(package: str, feature: str) -> None:
    """Raise a clear :class:`ImportError` if ``package`` is not usable.

    Args:
        package (str): ``'torch_cluster'`` or ``'torch_scatter'``.
        feature (str): what the caller asked for, used in the message.

    Raises:
        ImportError: naming the package, why it is unavailable and how to install it.
    """
    available = {"torch_cluster": WITH_TORCH_CLUSTER, "torch_scatter": WITH_TORCH_SCATTER}
    if package not in available:
        raise ValueError(f"require: unknown optional package {package!r}")
    if not available[package]:
        reason = UNAVAILABLE_REASON.get(package, "not installed")
        pkg = package.replace("_", "-")
        raise ImportError(f"{feature} requires '{pkg}', which is unavailable ({reason}); "
                          + _INSTALL_HINT.format(pkg=pkg))


__all__ = ["WITH_TORCH_CLUSTER", "WITH_TORCH_SCATTER", "UNAVAILABLE_REASON", "require"]
