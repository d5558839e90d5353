r"""Exact k-nearest-neighbour graphs with interchangeable backends.

Every backend only proposes *candidates*: for each query the :math:`m \ge k` nearest points
under its own (possibly float32) arithmetic.  A shared step recomputes their squared distances
in float64 and keeps the first :math:`k` in the order (distance, index).  A query's answer is
accepted only when the candidates provably contain every point that could be among its
:math:`k` nearest (the last candidate's distance exceeds the :math:`k`-th exact one by more
than the backend's error bound); otherwise it is retried with twice as many candidates.
Hence all backends return *identical* edge indices, even on lattices full of exact ties,
which the smaller index breaks.  :data:`AUTO_BACKEND_NOTE` says what ``'auto'`` picks.
"""
from __future__ import annotations

import math
from typing import Literal, Optional

import torch
from torch import Tensor

from quest_geometric import typing as qg_typing
from quest_geometric._utils.checks import (
    check_batch, check_choice, check_finite, check_int, check_positive_int, check_tensor, fail,
)

Backend = Literal["auto", "torch_cluster", "scipy", "torch"]
_BACKENDS = ("auto", "torch_cluster", "scipy", "torch")

#: What ``backend='auto'`` chooses and why (``python -m benchmarks.qsv.knn_speed`` times it).
AUTO_BACKEND_NOTE = (
    "'auto' uses 'scipy' for CPU tensors and, for GPU tensors, 'torch_cluster' when it is "
    "installed, otherwise 'torch'. On a CPU SciPy's cKDTree is the fastest back-end; the "
    "brute-force 'torch' path is O(N^2) and only pays off on a GPU; torch_cluster's CUDA "
    "kernel is brute force too."
)

#: Number of query rows times candidate columns held at once by the 'torch' backend.
_TORCH_BUDGET = 2**23


def knn_graph(pos: Tensor, k: int, batch: Optional[Tensor] = None, loop: bool = False,
              backend: Backend = "auto", chunk_size: Optional[int] = None) -> Tensor:
    r"""Computes the exact k-nearest-neighbour graph of a point set: every node :math:`i`
    receives an edge :math:`j \to i` from each of its :math:`k` nearest points :math:`j` of
    the same batch element, in the order

    .. math::
        (\lVert p_j - p_i \rVert^2, \; j) \quad \text{ascending (lexicographic)},

    with squared distances in float64, so exact ties are broken by the smaller index,
    identically in every backend.

    Args:
        pos (Tensor): Node positions, shape :math:`(N, D)`, floating, finite.
        k (int): The number of neighbours of each node.
        batch (Tensor, optional): Sorted batch vector, shape :math:`(N,)`, assigning each
            node to a graph; neighbours are searched within the same graph only.
            (default: :obj:`None`)
        loop (bool, optional): If :obj:`True`, a node is its own candidate neighbour (at
            distance 0, so it comes first unless duplicates with smaller index exist).
            (default: :obj:`False`)
        backend (str, optional): ``'torch_cluster'`` (needs ``torch-cluster``),
            ``'scipy'`` (:class:`scipy.spatial.cKDTree`, CPU), ``'torch'`` (chunked
            brute force with :func:`torch.topk`, any device) or ``'auto'``, see
            :data:`AUTO_BACKEND_NOTE`. (default: :obj:`'auto'`)
        chunk_size (int, optional): Number of query rows per chunk of the ``'torch'``
            backend (memory :math:`O(\text{chunk} \cdot N)`); :obj:`None` picks a size
            holding about :math:`2^{23}` distances. ``chunk_size >= N`` computes the whole
            distance matrix at once: the plain reference. (default: :obj:`None`)

    Returns:
        LongTensor: ``edge_index`` of shape :math:`(2, N k)`; ``edge_index[0]`` is the
        neighbour (source) and ``edge_index[1]`` the centre (target).  Edges are sorted by
        target, then by (distance, index); every node has exactly :math:`k` in-edges, so
        ``edge_index[0].view(N, k)`` lists each node's neighbours.

    Raises:
        ValueError: for non-finite positions, an unsorted or mismatched ``batch``, or
            ``k`` larger than the number of candidates in some graph (its size, minus one
            without ``loop``).
    """
    pos = _check_pos(pos, "pos", "knn_graph")
    batch = _check_batch(batch, pos, "batch", "knn_graph")
    return _knn(pos, pos, batch, batch, k, self_graph=True, loop=loop, backend=backend,
                chunk_size=chunk_size)


def knn_bipartite(x: Tensor, y: Tensor, k: int, batch_x: Optional[Tensor] = None,
                  batch_y: Optional[Tensor] = None, backend: Backend = "auto",
                  chunk_size: Optional[int] = None) -> Tensor:
    r"""Finds, for every point of ``y``, its k nearest points of ``x`` (exact), with the
    ordering, tie-breaking and backends of :func:`knn_graph`.  Unlike PyG's ``knn`` (which
    returns ``(y index, x index)`` pairs), ``edge_index[0]`` indexes ``x`` (source) and
    ``edge_index[1]`` indexes ``y`` (target), the message-passing orientation.

    Args:
        x (Tensor): Candidate points, shape :math:`(N_x, D)`.
        y (Tensor): Query points, shape :math:`(N_y, D)`.
        k (int): The number of neighbours of each query.
        batch_x (Tensor, optional): Sorted batch vector of ``x``. (default: :obj:`None`)
        batch_y (Tensor, optional): Sorted batch vector of ``y``. (default: :obj:`None`)
        backend (str, optional): See :func:`knn_graph`. (default: :obj:`'auto'`)
        chunk_size (int, optional): See :func:`knn_graph`. (default: :obj:`None`)

    Returns:
        LongTensor: ``edge_index`` of shape :math:`(2, N_y k)`, sorted by target.
    """
    x = _check_pos(x, "x", "knn_bipartite")
    y = _check_pos(y, "y", "knn_bipartite")
    if x.size(1) != y.size(1) or x.device != y.device:
        raise fail(ValueError, "knn_bipartite", "y", f"of the dimension and device of 'x' "
                   f"({x.size(1)}, {x.device})", got_text=f"{y.size(1)} on {y.device}")
    batch_x = _check_batch(batch_x, x, "batch_x", "knn_bipartite")
    batch_y = _check_batch(batch_y, y, "batch_y", "knn_bipartite")
    return _knn(x, y, batch_x, batch_y, k, self_graph=False, loop=True, backend=backend,
                chunk_size=chunk_size, where="knn_bipartite")


def resolve_backend(backend: Backend, device: torch.device, where: str = "resolve_backend"
                    ) -> str:
    """Returns the concrete backend ``'auto'`` resolves to on ``device`` (see
    :data:`AUTO_BACKEND_NOTE`), or checks that an explicit one is usable.

    Args:
        backend (str): One of ``'auto'``, ``'torch_cluster'``, ``'scipy'``, ``'torch'``.
        device (torch.device): The device of the positions.

    Returns:
        str: The backend that will run.
    """
    check_choice(backend, "backend", _BACKENDS, where=where)
    if backend == "auto":
        if device.type == "cpu":
            return "scipy"
        return "torch_cluster" if qg_typing.WITH_TORCH_CLUSTER else "torch"
    if backend == "torch_cluster":
        qg_typing.require("torch_cluster", "knn_graph(backend='torch_cluster')")
    return backend


# ----------------------------------------------------------------------------- checks
def _check_pos(pos: Tensor, name: str, where: str) -> Tensor:
    check_tensor(pos, name, where=where, floating=True)
    if pos.dim() != 2:
        raise fail(ValueError, where, name, "of shape [N, D]", pos)
    return check_finite(pos, name, where=where)


def _check_batch(batch: Optional[Tensor], pos: Tensor, name: str, where: str) -> Tensor:
    if batch is None:
        return torch.zeros(pos.size(0), dtype=torch.long, device=pos.device)
    check_batch(batch, pos.size(0), name, where=where)
    return batch.to(device=pos.device, dtype=torch.long)


# ----------------------------------------------------------------------------- driver
def _knn(x: Tensor, y: Tensor, bx: Tensor, by: Tensor, k: int, self_graph: bool, loop: bool,
         backend: str, chunk_size: Optional[int], where: str = "knn_graph") -> Tensor:
    k = check_positive_int(k, "'k'", where=where)
    if chunk_size is not None:
        check_int(chunk_size, "chunk_size (or None)", 1, where=where)
    backend = resolve_backend(backend, x.device, where=where)
    device = x.device
    ny = y.size(0)
    if ny == 0:
        return torch.empty(2, 0, dtype=torch.long, device=device)

    num_seg = int(max(int(bx.max()) if bx.numel() else 0, int(by.max()))) + 1
    cnt_x = torch.bincount(bx, minlength=num_seg)
    cnt_y = torch.bincount(by, minlength=num_seg)
    exclude_self = self_graph and not loop
    avail = cnt_x - int(exclude_self)
    bad = (cnt_y > 0) & (avail < k)
    if bool(bad.any()):
        b = int(bad.nonzero()[0])
        what = "points" if not exclude_self else "other points (loop=False)"
        raise fail(ValueError, where, "k", f"at most the number of candidate neighbours "
                   f"in every batch element; element {b} has {int(avail[b])} {what}", k)
    ptr_x = torch.zeros(num_seg + 1, dtype=torch.long, device=device)
    ptr_x[1:] = torch.cumsum(cnt_x, 0)

    # Centre each segment in float64 (distances are translation invariant; this keeps the
    # error bound of float32 backends small for point sets far from the origin).
    x64, y64 = x.double(), y.double()
    center = torch.zeros(num_seg, x.size(1), dtype=torch.float64, device=device)
    center.index_add_(0, bx, x64)
    center /= cnt_x.clamp_min(1).unsqueeze(1).double()
    x64 = x64 - center[bx]
    y64 = y64 - center[by]
    if self_graph:
        y64 = x64

    work = x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32
    if backend == "scipy":
        cand_fn = _ScipyCandidates(x64, y64, bx, by, ptr_x)
        eps = torch.finfo(torch.float64).eps
    elif backend == "torch":
        cand_fn = _TorchCandidates(x64.to(work), y64.to(work), bx, by, ptr_x, exclude_self,
                                   chunk_size)
        eps = torch.finfo(work).eps
    else:
        cand_fn = _ClusterCandidates(x64.to(work), y64.to(work), bx, by, x64, y64)
        eps = torch.finfo(work).eps
    r2 = max(float((x64 * x64).sum(1).max()) if x64.numel() else 0.0,
             float((y64 * y64).sum(1).max()))
    # |approximate - exact| squared distance <= (D + 2) eps (|a|^2 + |b|^2) for both the
    # direct and the expanded formula; a factor 4 of safety on top.
    tol = 8.0 * (x.size(1) + 2) * eps * r2

    nbr = torch.empty(ny, k, dtype=torch.long, device=device)
    pending = torch.arange(ny, device=device)
    m = k + max(2, k // 4) + int(exclude_self)
    block = max(1, 2**22 // m)
    while pending.numel() > 0:
        retry = []
        for start in range(0, pending.numel(), block):
            query = pending[start:start + block]
            cand, boundary = cand_fn(query, m)
            full = cnt_x[by[query]] <= m
            boundary = boundary.masked_fill(full, math.inf)
            out, ok = _canonicalize(x64, y64, query, cand, k, exclude_self, boundary, tol)
            nbr[query[ok]] = out[ok]
            retry.append(query[~ok])
        pending = torch.cat(retry)
        if pending.numel() and m > 2 * int(cnt_x.max()) + 2:  # pragma: no cover
            raise RuntimeError("knn: candidate search did not converge (internal error)")
        m *= 2
    col = torch.arange(ny, device=device).repeat_interleave(k)
    return torch.stack([nbr.reshape(-1), col], dim=0)


def _canonicalize(x64: Tensor, y64: Tensor, query: Tensor, cand: Tensor, k: int,
                  exclude_self: bool, boundary: Tensor, tol: float) -> tuple[Tensor, Tensor]:
    """Sorts candidates by (float64 squared distance, index), keeps k, certifies rows.

    ``cand`` is ``[q, m]`` with ``-1`` padding; ``boundary`` is a lower bound (up to
    ``tol``) of the squared distance of every point *not* among the candidates.
    """
    valid = cand >= 0
    c = cand.clamp_min(0)
    d = (x64[c] - y64[query].unsqueeze(1)).pow(2).sum(-1)
    d = d.masked_fill(~valid, math.inf)
    if exclude_self:
        d = d.masked_fill(c == query.unsqueeze(1), math.inf)
    order = d.argsort(dim=1)
    c, d = c.gather(1, order), d.gather(1, order)
    # Rows with equal distances among the first k + 1 are re-sorted by (distance, index):
    # sort by index, then stably by distance.  Exact ties are rare except on lattices.
    kk = min(k + 1, d.size(1))
    tied = (d[:, 1:kk] == d[:, : kk - 1]).any(1) & torch.isfinite(d[:, 0])
    if bool(tied.any()):
        ct, dt = c[tied], d[tied]
        key = ct.masked_fill(torch.isinf(dt), torch.iinfo(torch.long).max)
        order = key.argsort(dim=1)
        ct, dt = ct.gather(1, order), dt.gather(1, order)
        order = dt.argsort(dim=1, stable=True)
        c[tied], d[tied] = ct.gather(1, order), dt.gather(1, order)
    c, d = c[:, :k], d[:, :k]
    ok = boundary > d[:, -1] + tol
    return c, ok


# ----------------------------------------------------------------------------- backends
class _TorchCandidates:
    """Chunked brute force: ``|a|^2 + |b|^2 - 2 a.b`` then :func:`torch.topk`."""

    def __init__(self, x: Tensor, y: Tensor, bx: Tensor, by: Tensor, ptr_x: Tensor,
                 exclude_self: bool, chunk_size: Optional[int]) -> None:
        self.x, self.y, self.bx, self.by, self.ptr_x = x, y, bx, by, ptr_x
        self.xn, self.yn = (x * x).sum(1), (y * y).sum(1)
        self.exclude_self = exclude_self
        if chunk_size is None:
            max_seg = int((ptr_x[1:] - ptr_x[:-1]).max())
            if ptr_x.numel() == 2:  # one segment: the span is all of x
                chunk_size = _TORCH_BUDGET // max(1, x.size(0))
            else:  # rows * (rows + 2 max_seg) <= 2 budget for aligned segments
                chunk_size = min(_TORCH_BUDGET // max(1, 2 * max_seg), math.isqrt(_TORCH_BUDGET))
        self.chunk = max(1, chunk_size)

    def __call__(self, query: Tensor, m: int) -> tuple[Tensor, Tensor]:
        # Outputs are allocated once and filled in place: per-chunk results kept alive
        # between the large temporary distance blocks fragment the CPU heap.
        cand = torch.full((query.numel(), m), -1, dtype=torch.long, device=query.device)
        bound = torch.empty(query.numel(), dtype=torch.float64, device=query.device)
        for start in range(0, query.numel(), self.chunk):
            q = query[start:start + self.chunk]
            bq = self.by[q]
            lo, hi = int(self.ptr_x[bq[0]]), int(self.ptr_x[bq[-1] + 1])
            d = torch.addmm(self.xn[lo:hi].unsqueeze(0), self.y[q], self.x[lo:hi].t(), alpha=-2.0)
            d.add_(self.yn[q].unsqueeze(1)).clamp_min_(0.0)
            if int(bq[0]) != int(bq[-1]):
                d.masked_fill_(bq.unsqueeze(1) != self.bx[lo:hi].unsqueeze(0), math.inf)
            if self.exclude_self:
                d[torch.arange(q.numel(), device=q.device), q - lo] = math.inf
            mm = min(m, hi - lo)
            val, idx = d.topk(mm, dim=1, largest=False, sorted=True)
            del d
            idx.add_(lo).masked_fill_(torch.isinf(val), -1)
            cand[start:start + q.numel(), :mm] = idx
            bound[start:start + q.numel()] = val[:, -1]
        return cand, bound


class _ScipyCandidates:
    """One :class:`scipy.spatial.cKDTree` per segment (float64), built lazily, reused."""

    def __init__(self, x64: Tensor, y64: Tensor, bx: Tensor, by: Tensor,
                 ptr_x: Tensor) -> None:
        self.x = x64.detach().cpu().numpy()
        self.y = y64.detach().cpu().numpy()
        self.by = by.cpu()
        self.ptr = ptr_x.cpu().tolist()
        self.device = x64.device
        self.trees: dict[int, object] = {}

    def __call__(self, query: Tensor, m: int) -> tuple[Tensor, Tensor]:
        import numpy as np
        from scipy.spatial import cKDTree

        q_cpu = query.cpu()
        segs, counts = torch.unique_consecutive(self.by[q_cpu], return_counts=True)
        cand = np.full((q_cpu.numel(), m), -1, dtype=np.int64)
        bound = np.empty(q_cpu.numel(), dtype=np.float64)
        q_np = q_cpu.numpy()
        start = 0
        for b, c in zip(segs.tolist(), counts.tolist()):
            lo, hi = self.ptr[b], self.ptr[b + 1]
            tree = self.trees.get(b)
            if tree is None:
                tree = self.trees[b] = cKDTree(self.x[lo:hi])
            mm = min(m, hi - lo)
            dist, idx = tree.query(self.y[q_np[start:start + c]], k=mm)
            dist, idx = dist.reshape(c, mm), idx.reshape(c, mm)
            cand[start:start + c, :mm] = idx + lo
            bound[start:start + c] = dist[:, -1] ** 2
            start += c
        return torch.from_numpy(cand).to(self.device), torch.from_numpy(bound).to(self.device)


class _ClusterCandidates:
    """``torch_cluster.knn`` (nanoflann KD-tree on CPU, brute force on CUDA)."""

    def __init__(self, x: Tensor, y: Tensor, bx: Tensor, by: Tensor, x64: Tensor,
                 y64: Tensor) -> None:
        self.x, self.y, self.bx, self.by, self.x64, self.y64 = x, y, bx, by, x64, y64

    def __call__(self, query: Tensor, m: int) -> tuple[Tensor, Tensor]:
        import torch_cluster

        row, col = torch_cluster.knn(self.x, self.y[query], m, self.bx, self.by[query])
        order = torch.sort(row, stable=True)[1]  # group by query
        row, col = row[order], col[order]
        nq = query.numel()
        counts = torch.bincount(row, minlength=nq)
        ptr = torch.cumsum(counts, 0) - counts
        slot = torch.arange(row.numel(), device=row.device) - ptr[row]
        cand = torch.full((nq, m), -1, dtype=torch.long, device=row.device)
        cand[row, slot] = col
        # torch_cluster gives no distances: bound by the largest exact candidate distance
        # (its own float error is covered by the tolerance of the caller).
        d = (self.x64[col] - self.y64[query[row]]).pow(2).sum(-1)
        bound = torch.full((nq,), -math.inf, dtype=torch.float64, device=row.device)
        bound.scatter_reduce_(0, row, d, reduce="amax")
        return cand, bound


__all__ = ["AUTO_BACKEND_NOTE", "knn_graph", "knn_bipartite", "resolve_backend"]
