r"""Independent references for testing :mod:`quest_geometric.geometry`: an exact float64
kNN by brute force (NumPy and SciPy, not the package's back-ends) and a pixel grid."""
from __future__ import annotations

from typing import Any, Optional

import numpy as np
import torch
from scipy.spatial.distance import cdist
from torch import Tensor

__all__ = ["brute_force_knn", "grid_points"]


def brute_force_knn(x: Any, y: Any, k: int, batch_x: Optional[Any] = None,
                    batch_y: Optional[Any] = None, exclude_self: bool = False) -> Tensor:
    r"""The exact kNN edges from the points ``x`` to the queries ``y``: for each query, the
    first ``k`` candidates of its batch element by (float64 squared distance, index).

    Args:
        x (array-like): Candidate points ``[N, D]``.
        y (array-like): Query points ``[M, D]``.
        k (int): Neighbours per query.
        batch_x (array-like, optional): Batch element of each candidate. (default: all 0)
        batch_y (array-like, optional): Batch element of each query. (default: all 0)
        exclude_self (bool, optional): Leave out candidate ``i`` for query ``i``.
            (default: :obj:`False`)

    Returns:
        torch.Tensor: ``[2, M * k]`` (candidate, query), sorted by query.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    bx = np.zeros(len(x), int) if batch_x is None else np.asarray(batch_x)
    by = np.zeros(len(y), int) if batch_y is None else np.asarray(batch_y)
    d = cdist(y, x, "sqeuclidean")
    out = []
    for i in range(len(y)):
        j = np.arange(len(x))
        ok = bx == by[i]
        if exclude_self:
            ok &= j != i
        j = j[ok]
        out.append(j[np.lexsort((j, d[i, j]))][:k])
    nbr = torch.from_numpy(np.stack(out)).long()
    return torch.stack([nbr.reshape(-1), torch.arange(len(y)).repeat_interleave(k)])


def grid_points(height: int, width: int, offset: float = 0.0) -> np.ndarray:
    r"""The pixel centres of a ``height x width`` grid as 3-D points ``(column, row, 0)`` in
    row-major order, ``offset`` added to every coordinate: ``[height * width, 3]``."""
    ii, jj = np.meshgrid(np.arange(height), np.arange(width), indexing="ij")
    return np.stack([jj.ravel(), ii.ravel(), np.zeros(height * width)], 1) + offset
