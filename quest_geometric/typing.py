"""Optional-package probes, done once at import time (the PyG way).

``WITH_TORCH_CLUSTER`` and ``WITH_TORCH_SCATTER`` are ``True`` only when the package imports
*and* its compiled operators load.  A source build made against a different PyTorch fails at
import with ``undefined symbol``; that is treated like absence.  Nothing is raised here: a
clear :class:`ImportError` is raised only when a path that needs the package is requested,
through :func:`require`.
"""
from __future__ import annotations

import warnings

WITH_TORCH_CLUSTER: bool = False
WITH_TORCH_SCATTER: bool = False

#: Why each optional package is unavailable (empty when it is available).
UNAVAILABLE_REASON: dict[str, str] = {}

try:  # pragma: no cover - depends on the environment
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import torch_cluster  # noqa: F401

        torch_cluster.knn  # noqa: B018  (attribute access forces the operator library)
    WITH_TORCH_CLUSTER = True
except (ImportError, OSError, AttributeError, RuntimeError) as e:  # pragma: no cover
    UNAVAILABLE_REASON["torch_cluster"] = f"{type(e).__name__}: {e}"

try:  # pragma: no cover - depends on the environment
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import torch_scatter  # noqa: F401

        torch_scatter.scatter  # noqa: B018
    WITH_TORCH_SCATTER = True
except (ImportError, OSError, AttributeError, RuntimeError) as e:  # pragma: no cover
    UNAVAILABLE_REASON["torch_scatter"] = f"{type(e).__name__}: {e}"

#: PyG >= 2.8 warns on its first import, wherever torch-cluster is installed, that it "is no
#: longer necessary and is being ignored": PyG itself no longer uses it, but this project's
#: 'torch_cluster' kNN back-end does (:func:`~quest_geometric.geometry.knn.knn_graph`).
#: PyG is first imported here, with exactly that warning filtered (pyproject's pytest
#: filterwarnings holds the same entry for tests that import PyG first).
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
        raise ImportError(
            f"{feature} requires '{pkg}', which is unavailable ({reason}); "
            + _INSTALL_HINT.format(pkg=pkg)
        )


__all__ = ["WITH_TORCH_CLUSTER", "WITH_TORCH_SCATTER", "UNAVAILABLE_REASON", "require"]
