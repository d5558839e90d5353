"""The torch-harmonics side of the QSV comparisons (speed and memory): whether it is
installed, and its equiangular grid with the kNN graph QSVConv runs on over the same points."""
from __future__ import annotations

__all__ = ["MISSING_HARMONICS", "harmonics_version", "equiangular_graph"]

#: The message of a comparison skipped for want of torch-harmonics.
MISSING_HARMONICS = (
    "torch-harmonics is not installed: the comparison with its NeighborhoodAttentionS2 is "
    "skipped. Install it with `pip install --no-deps torch-harmonics==0.9.3` (0.9.3 "
    "declares torch 2.14 but its CPU kernels load beside torch 2.13; --no-deps keeps pip "
    "from replacing torch)."
)


def harmonics_version() -> str | None:
    """The installed torch-harmonics version, or :obj:`None` when it is absent."""
    try:
        import torch_harmonics
    except ImportError:
        return None
    return str(getattr(torch_harmonics, "__version__", "unknown"))


def equiangular_graph(nlat: int, nlon: int, k: int):
    """The torch-harmonics equiangular grid points (row-major ``(lat, lon)``, as its
    ``[B, C, nlat, nlon]`` tensors flatten) and their exact kNN graph with ``k`` in-edges
    per node (self included), sorted by target: the dense layout of QSVConv."""
    from torch_harmonics.quadrature import precompute_latitudes

    from benchmarks.qsv.cuda import grid_graph

    colat, _ = precompute_latitudes(nlat, grid="equiangular")
    return grid_graph(nlat, nlon, k, colatitudes=colat)
