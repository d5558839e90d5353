r"""Independent references for testing :class:`~quest_geometric.nn.QSVConv`: quaternion
algebra written out from the formulas (not from :mod:`quest_geometric.quaternion`), a
per-target loop reference of the layer, graph builders in its dense layout, layer builders."""
from __future__ import annotations

from typing import Any, Optional, Union

import torch
from torch import Tensor

__all__ = ["hamilton", "conjugate", "qsv_quaternions", "qsv_conv_reference", "knn_edges",
           "assert_bf16_autocast_follows_float32", "random_dense_edges", "make_qsv_conv",
           "random_image_batch"]


def hamilton(p: Tensor, q: Tensor) -> Tensor:
    r"""The Hamilton product :math:`p\,q` of quaternions ``(..., 4)`` (real part first),
    term by term; ``p`` and ``q`` broadcast."""
    a1, b1, c1, d1 = p.unbind(-1)
    a2, b2, c2, d2 = q.unbind(-1)
    return torch.stack((
        a1 * a2 - b1 * b2 - c1 * c2 - d1 * d2,
        a1 * b2 + b1 * a2 + c1 * d2 - d1 * c2,
        a1 * c2 - b1 * d2 + c1 * a2 + d1 * b2,
        a1 * d2 + b1 * c2 - c1 * b2 + d1 * a2,
    ), -1)


def conjugate(q: Tensor) -> Tensor:
    r"""The conjugate :math:`q^{*} = (q_0, -\mathbf{q}_v)` of quaternions ``(..., 4)``, real
    part first."""
    return q * torch.tensor([1.0, -1.0, -1.0, -1.0], dtype=q.dtype)


def qsv_quaternions(conv: Any, x: Tensor) -> Tensor:
    r"""The unit quaternions :math:`q_i` of a :class:`~quest_geometric.nn.QSVConv` recomputed
    from its parameters: :math:`\mathbf{W}\mathbf{x}_i + \mathbf{c}` (``'feature'``), the node
    parameter :math:`p_i` tiled over a batch of copies (``'node'``), or their product
    :math:`p_i\,(\mathbf{W}\mathbf{x}_i + \mathbf{c})` (``'both'``), normalised: ``[N, heads, 4]``
    from node features ``x`` ``[N, out_channels]`` (after any input projection)."""
    n, h = x.size(0), conv.heads
    q = None
    if conv.lin_q is not None:
        q = (x @ conv.lin_q.weight.T + conv.lin_q.bias).view(n, h, 4)
    if conv.node_q is not None:
        p = conv.node_q.repeat(n // conv.num_nodes, 1, 1)
        q = p if q is None else hamilton(p, q)
    return q / q.norm(dim=-1, keepdim=True)


def qsv_conv_reference(conv: Any, x: Union[Tensor, tuple[Tensor, Tensor]],
                       edge_index: Tensor, edge_weight: Optional[Tensor] = None) -> Tensor:
    r"""A :class:`~quest_geometric.nn.QSVConv`'s output by a loop over the target nodes: the
    softmax over the in-neighbours of :math:`\tau\,\mathrm{Re}(q_i^{*} q_j)` (or uniform
    weights), and the explicit sandwich :math:`r\,\mathbf{x}\,r^{*}` with
    :math:`r = q_i^{*} q_j` per edge (skipped without transport), plus the bias.

    Args:
        conv (QSVConv): The layer (its flags are read).
        x (torch.Tensor or (torch.Tensor, torch.Tensor)): Node features ``[N, in_channels]``,
            or ``(x_src, x_dst)`` for a bipartite graph.
        edge_index (torch.Tensor): ``[2, E]`` (source, target).
        edge_weight (torch.Tensor, optional): ``[E]`` factors on each message after the
            softmax (PyG's explain mask). (default: :obj:`None`)

    Returns:
        torch.Tensor: ``[N_dst, out_channels]``.
    """
    x_src, x_dst = x if isinstance(x, (tuple, list)) else (x, x)
    same = x_src is x_dst
    lin_src, lin_dst = ((conv.lin_src, conv.lin_dst) if isinstance(conv.in_channels, tuple)
                        else (conv.lin, conv.lin))
    if lin_src is not None:
        x_src = x_src @ lin_src.weight.T
    if lin_dst is not None:
        x_dst = x_dst @ lin_dst.weight.T
    if same and lin_src is lin_dst:
        x_dst = x_src
    h, m = conv.heads, conv.groups
    q_src = qsv_quaternions(conv, x_src)
    q_dst = q_src if x_dst is x_src else qsv_quaternions(conv, x_dst)
    xq = x_src.view(-1, h, m, 4)
    if conv.temperature == "learned":
        tau = conv.scale
    elif conv.temperature is None:
        tau = torch.ones(h, dtype=x_src.dtype)
    else:
        tau = torch.full((h,), conv.temperature, dtype=x_src.dtype)
    rows = []
    for i in range(x_dst.size(0)):
        sel = edge_index[1] == i
        src = edge_index[0, sel]
        if src.numel() == 0:
            rows.append(torch.zeros(h, m, 4, dtype=x_src.dtype))
            continue
        r = hamilton(conjugate(q_dst[i]).expand(len(src), h, 4), q_src[src])  # [deg, H, 4]
        if conv.attention == "uniform":
            w = torch.full((len(src), h), 1.0 / len(src), dtype=x_src.dtype)
        else:
            w = torch.softmax(r[..., 0] * tau, dim=0)  # [deg, H]
        if edge_weight is not None:
            w = w * edge_weight[sel][:, None]
        msg = xq[src]  # [deg, H, m, 4]
        if conv.transport:
            rr = r[:, :, None, :].expand_as(msg)
            msg = hamilton(hamilton(rr, msg), conjugate(rr))
        rows.append((w[:, :, None, None] * msg).sum(0))
    out = torch.stack(rows).reshape(x_dst.size(0), -1)
    if conv.bias is not None:
        out = out + conv.bias
    return out


def knn_edges(n: int, k: int, seed: int = 0, loop: bool = True) -> Tensor:
    r"""The brute-force kNN graph of ``n`` random 3-D points in the dense layout of
    :class:`~quest_geometric.nn.QSVConv` (``k`` in-edges per node, sorted by target).

    Args:
        n (int): Points.
        k (int): In-edges per node.
        seed (int, optional): Seed of the points. (default: :obj:`0`)
        loop (bool, optional): A point may be its own neighbour. (default: :obj:`True`)
    """
    pos = torch.randn(n, 3, generator=torch.Generator().manual_seed(seed))
    d = torch.cdist(pos, pos)
    if not loop:
        d.fill_diagonal_(float("inf"))
    nbr = d.topk(k, largest=False).indices  # [n, k]
    return torch.stack([nbr.reshape(-1), torch.arange(n).repeat_interleave(k)])


def random_dense_edges(n_dst: int, k: int, n_src: Optional[int] = None,
                       seed: int = 0) -> Tensor:
    r"""``k`` distinct random sources for each of ``n_dst`` targets, sorted by target (the
    dense layout; bipartite when ``n_src`` is given).

    Args:
        n_dst (int): Targets.
        k (int): In-edges per target (at most ``n_src``).
        n_src (int, optional): Sources. (default: ``n_dst``)
        seed (int, optional): Seed of the draw. (default: :obj:`0`)
    """
    g = torch.Generator().manual_seed(seed)
    n_src = n_dst if n_src is None else n_src
    src = torch.stack([torch.randperm(n_src, generator=g)[:k] for _ in range(n_dst)])
    return torch.stack([src.reshape(-1), torch.arange(n_dst).repeat_interleave(k)])


def make_qsv_conv(channels: int = 16, heads: int = 2, num_nodes: Optional[int] = None,
                  seed: int = 0, in_channels: Any = None, **kwargs: Any) -> Any:
    r"""A float64 :class:`~quest_geometric.nn.QSVConv` built after
    ``torch.manual_seed(seed)``, with a random normal bias and learned temperatures drawn from
    :math:`U(0.5, 3)` (so that neither is trivially 0 or 1 in a comparison).

    Args:
        channels (int, optional): ``out_channels``. (default: :obj:`16`)
        heads (int, optional): Heads. (default: :obj:`2`)
        num_nodes (int, optional): For ``quaternion='node'`` or ``'both'``. (default: :obj:`None`)
        seed (int, optional): Global seed set before building. (default: :obj:`0`)
        in_channels (int or tuple, optional): Input width. (default: :obj:`channels`)
        **kwargs (optional): Other :class:`~quest_geometric.nn.QSVConv` arguments.
    """
    from quest_geometric.nn.qsv_conv import QSVConv

    torch.manual_seed(seed)
    conv = QSVConv(channels if in_channels is None else in_channels, channels, heads=heads,
                   num_nodes=num_nodes, **kwargs).to(torch.float64)
    with torch.no_grad():
        if conv.bias is not None:
            conv.bias.normal_()
        if conv.scale is not None:
            conv.scale.uniform_(0.5, 3.0)
    return conv


def random_image_batch(transform: Any, num_images: int = 3, channels: int = 3, size: int = 8,
                       seed: int = 0) -> Any:
    r"""A :class:`~torch_geometric.data.Batch` of ``num_images`` uniform random
    ``[channels, size, size]`` images through ``transform.batch_call``, with targets
    ``y = arange(num_images)``.

    Args:
        transform (ImageToSphere or ImageToLattice): The transform.
        num_images (int, optional): Images. (default: :obj:`3`)
        channels (int, optional): Image channels. (default: :obj:`3`)
        size (int, optional): Image height and width. (default: :obj:`8`)
        seed (int, optional): Seed of the images. (default: :obj:`0`)
    """
    gen = torch.Generator().manual_seed(seed)
    images = torch.rand(num_images, channels, size, size, generator=gen)
    return transform.batch_call(images, y=torch.arange(num_images), as_batch=True)


def assert_bf16_autocast_follows_float32(n: int = 60, device: Any = "cpu",
                                         dense: bool = True, seed: int = 0) -> None:
    r"""A :class:`~quest_geometric.nn.QSVConv` fed by a linear layer under bfloat16
    :func:`torch.autocast` against the same layers in float32: outputs within bfloat16's
    rounding (5e-2), the quaternion map's gradient within 6% in norm (it sums
    bfloat16-rounded terms; a wrong or missing term would be of order 1).

    Args:
        n (int, optional): Nodes of the random kNN graph (``k = 6``). (default: ``60``)
        device (str or torch.device, optional): Where to run. (default: ``'cpu'``)
        dense (bool, optional): The layer's ``dense`` argument. (default: :obj:`True`)
        seed (int, optional): Global seed set before building. (default: ``0``)
    """
    from quest_geometric.nn.qsv_conv import QSVConv

    device = torch.device(device)
    torch.manual_seed(seed)
    conv = QSVConv(16, 16, heads=2).to(device)
    lin = torch.nn.Linear(16, 16).to(device)
    edge_index = knn_edges(n, 6, seed=seed + 2).to(device)
    x = torch.randn(n, 16, device=device)
    res = []
    for amp in (False, True):
        conv.zero_grad()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            out = conv(lin(x), edge_index, dense=dense)
        out.float().square().sum().backward()
        res.append((out.detach().float(), conv.lin_q.weight.grad.clone()))
    (ref, gref), (got, ggot) = res
    torch.testing.assert_close(got, ref, atol=5e-2, rtol=5e-2)
    rel = ((ggot - gref).norm() / gref.norm()).item()
    assert rel < 0.06, f"the bf16-autocast gradient is {100 * rel:.1f}% off the float32 one"

