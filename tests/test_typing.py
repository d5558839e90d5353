import importlib
import sys

import pytest

import quest_geometric.typing as qt


def test_flags_are_bool_and_reasons_consistent():
    for name, flag in (("torch_cluster", qt.WITH_TORCH_CLUSTER), ("torch_scatter",
                                                                  qt.WITH_TORCH_SCATTER)):
        assert isinstance(flag, bool)
        assert (name in qt.UNAVAILABLE_REASON) == (not flag)


def test_require_unknown_package():
    with pytest.raises(ValueError, match="unknown optional package"):
        qt.require("numpy", "x")


def test_broken_binary_is_treated_as_absent(monkeypatch):
    """A source build against another torch fails with 'undefined symbol' (an OSError or
    ImportError at import): the probe must record it and `require` must name the package."""

    class _Broken:
        def find_spec(self, name, path=None, target=None):
            if name in ("torch_cluster", "torch_scatter"):
                raise ImportError(f"/x/{name}/_C.so: undefined symbol: _ZN3c10xyz")
            return None

    for mod in ("torch_cluster", "torch_scatter"):
        monkeypatch.delitem(sys.modules, mod, raising=False)
    monkeypatch.setattr(sys, "meta_path", [_Broken(), *sys.meta_path])
    fresh = importlib.reload(qt)
    try:
        assert fresh.WITH_TORCH_CLUSTER is False and fresh.WITH_TORCH_SCATTER is False
        assert "undefined symbol" in fresh.UNAVAILABLE_REASON["torch_cluster"]
        with pytest.raises(ImportError, match="torch-cluster.*undefined symbol"):
            fresh.require("torch_cluster", "knn_graph(backend='torch_cluster')")
    finally:
        monkeypatch.undo()
        importlib.reload(qt)


@pytest.mark.skipif(qt.WITH_TORCH_CLUSTER and qt.WITH_TORCH_SCATTER, reason="both present")
def test_require_names_missing_package():
    missing = "torch_cluster" if not qt.WITH_TORCH_CLUSTER else "torch_scatter"
    with pytest.raises(ImportError, match=missing.replace("_", "-")):
        qt.require(missing, "feature")
