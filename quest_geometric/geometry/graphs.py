"""Template graphs: concentric Fibonacci spheres and the flat pixel lattice."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

import torch
from torch_geometric.data import Data

from quest_geometric._utils.checks import (
    check_int, check_positive_int, check_shell_radii, check_shell_sizes, fail,
)
from quest_geometric.geometry.fibonacci import concentric_spheres
from quest_geometric.geometry.knn import Backend, knn_bipartite, knn_graph


def sphere_graph(sizes: Sequence[int], k: int, k_cross: Optional[int] = None,
                 radii: Optional[Sequence[float]] = None, backend: Backend = "auto") -> Data:
    r"""Builds the kNN graph on concentric spherical Fibonacci lattices (the nodes of
    :func:`~quest_geometric.geometry.fibonacci.concentric_spheres`): node :math:`i` on shell
    :math:`s` receives edges from

    * its :math:`k` nearest nodes on its own shell (chord distance), and
    * its :math:`k_\times` nearest nodes (Euclidean distance in :math:`\mathbb{R}^3`) in
      the union of the adjacent shells :math:`s - 1` and :math:`s + 1`,

    so **every node has the same in-degree** :math:`k + k_\times`.  Edges are sorted by
    target, each node's :math:`k` within-shell neighbours first, each group ordered by
    (distance, index) as in :func:`~quest_geometric.geometry.knn.knn_graph`: hence
    ``edge_index[0].view(N, k + k_cross)`` is a dense neighbour table.

    Args:
        sizes (Sequence[int]): Nodes per shell, innermost first; each must exceed ``k``.
        k (int): Within-shell neighbours per node.
        k_cross (int, optional): Cross-shell neighbours per node, at most the size of the
            smallest union of adjacent shells; must be 0 for a single shell.
            (default: :obj:`4` for several shells, :obj:`0` for one)
        radii (Sequence[float], optional): Shell radii, strictly increasing.
            (default: :obj:`(1, 2, ..., S)`, see
            :func:`~quest_geometric.geometry.fibonacci.concentric_spheres`)
        backend (str, optional): The kNN backend, see
            :func:`~quest_geometric.geometry.knn.knn_graph`. (default: :obj:`'auto'`)

    Returns:
        Data: ``pos`` :math:`(N, 3)`, ``shell`` :math:`(N,)` (long), ``edge_index``
        :math:`(2, N (k + k_\times))` and ``num_nodes``.
    """
    sizes = check_shell_sizes(sizes, where="sphere_graph")
    radii = check_shell_radii(radii, len(sizes), where="sphere_graph")
    k = check_positive_int(k, "'k'", where="sphere_graph")
    num_shells = len(sizes)
    if k_cross is None:
        k_cross = 4 if num_shells > 1 else 0
    check_int(k_cross, "'k_cross'", 0, where="sphere_graph")
    for s, n in enumerate(sizes):
        if n <= k:
            raise fail(ValueError, "sphere_graph", "k", "smaller than every shell size", k,
                       hint=f"; shell {s} has {n} nodes")
    if num_shells == 1 and k_cross > 0:
        raise fail(ValueError, "sphere_graph", "k_cross", "0 for a single shell", k_cross)
    for s in range(num_shells):
        adjacent = (sizes[s - 1] if s > 0 else 0) + (sizes[s + 1] if s + 1 < num_shells else 0)
        if num_shells > 1 and k_cross > adjacent:
            raise fail(ValueError, "sphere_graph", "k_cross", f"at most the {adjacent} nodes "
                       f"of the shells adjacent to shell {s}", k_cross)

    pos, shell = concentric_spheres(sizes, radii, dtype=torch.get_default_dtype())
    num_nodes = pos.size(0)
    within = knn_graph(pos, k, batch=shell, backend=backend)[0].view(num_nodes, k)
    columns = [within]
    if k_cross > 0:
        ptr = [0]
        for n in sizes:
            ptr.append(ptr[-1] + n)
        cross = torch.empty(num_nodes, k_cross, dtype=torch.long)
        for s in range(num_shells):
            lo = ptr[s - 1] if s > 0 else ptr[s]
            hi = ptr[s + 2] if s + 1 < num_shells else ptr[s + 1]
            cand = torch.cat([torch.arange(lo, ptr[s]), torch.arange(ptr[s + 1], hi)])
            src = knn_bipartite(pos[cand], pos[ptr[s]:ptr[s + 1]], k_cross, backend=backend)
            cross[ptr[s]:ptr[s + 1]] = cand[src[0]].view(-1, k_cross)
        columns.append(cross)
    degree = k + k_cross
    row = torch.cat(columns, dim=1).reshape(-1)
    col = torch.arange(num_nodes).repeat_interleave(degree)
    return Data(pos=pos, shell=shell, edge_index=torch.stack([row, col]), num_nodes=num_nodes)


def lattice_graph(height: int, width: int, k: int = 8, backend: Backend = "auto") -> Data:
    r"""Builds the kNN graph of the flat :math:`H \times W` pixel lattice (the control).

    Node :math:`i W + j` is pixel (row :math:`i`, column :math:`j`) at ``pos = (j, i, 0)``
    (3-D, as :func:`sphere_graph`; ``x = image.flatten(1).t()`` lists the pixels in node
    order).  Every node receives edges from its :math:`k` nearest pixels, ties broken by the
    smaller index: ``k = 4`` is the 4-neighbourhood, ``k = 8`` the 8-neighbourhood, and
    nodes near the border reach further to keep the in-degree exactly :math:`k`.

    Args:
        height (int): The number of rows :math:`H`.
        width (int): The number of columns :math:`W`.
        k (int, optional): Neighbours per node, smaller than :math:`H W`.
            (default: :obj:`8`)
        backend (str, optional): The kNN backend, see
            :func:`~quest_geometric.geometry.knn.knn_graph`. (default: :obj:`'auto'`)

    Returns:
        Data: ``pos`` :math:`(HW, 3)`, ``shell`` :math:`(HW,)` (zeros), ``edge_index``
        :math:`(2, HW k)` sorted by target, and ``num_nodes``.
    """
    for name, v in (("height", height), ("width", width)):
        check_int(v, f"'{name}'", 1, where="lattice_graph")
    k = check_positive_int(k, "'k'", where="lattice_graph")
    if k >= height * width:
        raise fail(ValueError, "lattice_graph", "k", f"smaller than height * width "
                   f"({height * width})", k)

    ii, jj = torch.meshgrid(torch.arange(height), torch.arange(width), indexing="ij")
    pos = torch.stack([jj.reshape(-1), ii.reshape(-1), torch.zeros_like(ii.reshape(-1))], 1)
    pos = pos.to(torch.get_default_dtype())
    edge_index = knn_graph(pos, k, backend=backend)
    return Data(pos=pos, shell=torch.zeros(height * width, dtype=torch.long),
                edge_index=edge_index, num_nodes=height * width)


__all__ = ["sphere_graph", "lattice_graph"]
