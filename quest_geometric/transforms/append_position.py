r"""Appends each node's centred, rescaled position to its features."""
from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.data.datapipes import functional_transform
from torch_geometric.transforms import BaseTransform

from quest_geometric._utils.checks import check_all_finite


@functional_transform("append_position")
class AppendPosition(BaseTransform):
    r"""Appends each node's centred, rescaled position to its features
    (functional name: :obj:`append_position`).

    .. math::
        \mathbf{x}_i \leftarrow \bigl[\mathbf{x}_i,\; (\mathbf{p}_i - \bar{\mathbf{p}}) / s\bigr],
        \qquad \bar{\mathbf{p}} = \frac{1}{N} \sum_i \mathbf{p}_i, \qquad
        s = \max_{i,d} |p_{i,d} - \bar p_d|,

    so every appended coordinate lies in :math:`[-1, 1]` (a sphere's shells keep their
    relative radii).  The centring and scaling are those of PyG's
    :class:`~torch_geometric.transforms.NormalizeScale`, but the result is *appended to*
    ``x`` with ``pos`` unchanged, and the division is by :math:`s` exactly (no
    :math:`0.999999` shrink; :math:`s` is clamped to :math:`10^{-12}`, so a single node gives
    zeros, not NaN).

    Shapes:
        - **input:** ``Data(x [N, C], pos [N, D])``
        - **output:** ``Data(x [N, C + D], pos [N, D], ...)``

    Raises:
        ValueError: ``data.pos`` is missing or not ``[num_nodes, D]``, or ``data.x`` or
            ``data.pos`` holds a NaN or an infinity (one non-finite position would make
            every node's appended features NaN through the mean and the scale).
    """

    @staticmethod
    def position_features(pos: Tensor) -> Tensor:
        r"""The appended features :math:`(\mathbf{p}_i - \bar{\mathbf{p}}) / s` of positions
        ``pos`` ``[N, D]`` (same dtype as ``pos``)."""
        centred = pos - pos.mean(dim=0, keepdim=True)
        return centred / centred.abs().max().clamp_min(1e-12)

    def forward(self, data: Data) -> Data:
        pos = getattr(data, "pos", None)
        if not isinstance(pos, Tensor) or pos.dim() != 2 or pos.size(0) != data.x.size(0):
            raise ValueError("AppendPosition needs 'data.pos' [num_nodes, D] (the sphere and "
                             "lattice transforms provide it)")
        check_all_finite((("data.x", data.x), ("data.pos", pos)), where="AppendPosition")
        data.x = torch.cat([data.x, self.position_features(pos).to(data.x.dtype)], dim=-1)
        return data

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}()"
