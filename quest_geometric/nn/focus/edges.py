r"""Focus attention as PyG message passing over an explicit ``edge_index`` (the general-graph
back-end)."""
from __future__ import annotations

import math
from typing import Optional

import torch
from torch import Tensor
from torch_geometric import EdgeIndex
from torch_geometric.nn import MessagePassing
from torch_geometric.utils import softmax as pyg_softmax

from quest_geometric._utils.checks import check_qkv
from quest_geometric.nn.focus._layout import HALF_DTYPES

__all__ = ["FocusEdgeAttention"]


class FocusEdgeAttention(MessagePassing):
    r"""Multi-head scaled dot-product attention over an arbitrary :obj:`edge_index` (target
    :math:`i`, source :math:`j`):

    .. math::
        \alpha_{ij}^{h} = \operatorname{softmax}_{j \in \mathcal{N}(i)}
        \frac{\mathbf{q}_i^{h\top} \mathbf{k}_j^{h}}{\sqrt{D}}, \qquad
        \mathbf{o}_i^{h} = \sum_{j \in \mathcal{N}(i)} \alpha_{ij}^{h} \mathbf{v}_j^{h}.

    Shapes:
        - **input:** :obj:`q, k, v` :math:`(|V|, H, D)`, :obj:`edge_index` :math:`(2, |E|)`
        - **output:** :math:`(|V|, H, D)`
    """

    def __init__(self) -> None:
        super().__init__(aggr="add", node_dim=0)

    def forward(self, q: Tensor, k: Tensor, v: Tensor, edge_index: Tensor) -> Tensor:
        r"""Attend along :obj:`edge_index` (row = source, col = target). An edge set sorted by
        target is passed to PyG as a ``sort_order='col'`` :class:`~torch_geometric.EdgeIndex`,
        so softmax and sum run over contiguous segments; half precision runs in float32.

        Raises:
            TypeError: for non-floating :obj:`q`, :obj:`k`, :obj:`v` or a non-integer
                :obj:`edge_index`.
            ValueError: for bad shapes or node ids outside :math:`[0, |V|)`.
        """
        check_qkv(q, k, v, where="FocusEdgeAttention")
        n = q.size(0)
        if isinstance(edge_index, Tensor):
            if edge_index.is_floating_point() or edge_index.is_complex() \
                    or edge_index.dtype == torch.bool:
                raise TypeError(f"FocusEdgeAttention: 'edge_index' must be an integer (long) "
                                f"tensor, got {edge_index.dtype}")
            if edge_index.dim() != 2 or edge_index.size(0) != 2:
                raise ValueError(f"FocusEdgeAttention: 'edge_index' must be of shape [2, E], got "
                                 f"{list(edge_index.shape)}")
            if edge_index.numel() > 0 and (int(edge_index.min()) < 0
                                           or int(edge_index.max()) >= n):
                raise ValueError(f"FocusEdgeAttention: 'edge_index' must be node ids in "
                                 f"[0, {n}), got "
                                 f"[{int(edge_index.min())}, {int(edge_index.max())}]")
        if q.dtype in HALF_DTYPES:
            return self.forward(q.float(), k.float(), v.float(), edge_index).to(q.dtype)
        if (type(edge_index) is Tensor and edge_index.dim() == 2 and edge_index.size(1) > 1
                and bool((edge_index[1, 1:] >= edge_index[1, :-1]).all())):
            edge_index = EdgeIndex(edge_index, sparse_size=(n, n), sort_order="col")
        return self.propagate(edge_index, q=q, k=k, v=v, size=(n, n))

    def message(self, q_i: Tensor, k_j: Tensor, v_j: Tensor, index: Tensor,
                ptr: Optional[Tensor], size_i: Optional[int]) -> Tensor:
        alpha = (q_i * k_j).sum(-1) / math.sqrt(q_i.size(-1))
        alpha = pyg_softmax(alpha, index, ptr, size_i)
        return alpha.unsqueeze(-1) * v_j
