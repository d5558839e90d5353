r"""Where the pairwise computation of a trained QSV model lives.

The QSV paper (Foley et al., 2026) reports that "nearly all of the learned pairwise
computation resides in the transport channel". :func:`qsv_analysis` quantifies it on a trained
:class:`~quest_geometric.models.qsv_net.QSVNet` with three measurements:
:func:`attention_entropy_per_node` (1 = uniform averaging), :func:`rotation_angles` (0 = the
transport is the identity) and :func:`ablation_accuracy` (transport or learned attention
switched off at test time).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple, Optional

import torch
from torch import Tensor, nn
from torch_geometric.utils import scatter

from quest_geometric._utils.checks import all_finite
from quest_geometric.quaternion import angle, relative

__all__ = [
    "NodeEntropy", "node_attention_entropy", "attention_entropy_per_node", "rotation_angles",
    "ablation_accuracy", "qsv_analysis",
]


class NodeEntropy(NamedTuple):
    r"""Per-node normalised attention entropies of every layer.

    Attributes:
        entropy (torch.Tensor): float64 ``[L, N, H]`` (layers, nodes over the whole loader,
            heads); :math:`0` where ``valid`` is :obj:`False`.
        valid (torch.Tensor): bool ``[N]``, :obj:`True` for nodes with at least two
            in-neighbours (the normalised entropy of a node with one neighbour is
            :math:`0/0`; it is excluded rather than reported as NaN).
    """

    entropy: Tensor
    valid: Tensor

    def mean(self) -> Tensor:
        r"""Mean over valid nodes, per layer and head: float64 ``[L, H]``."""
        if not bool(self.valid.any()):
            raise ValueError("NodeEntropy.mean: no node has two or more in-neighbours")
        return self.entropy[:, self.valid].mean(dim=1)


def _check_loader(loader: Any) -> Iterable[Any]:
    if hasattr(loader, "edge_index") and hasattr(loader, "x"):  # a single Data / Batch
        return [loader]
    if not isinstance(loader, Iterable):
        raise TypeError(
            f"'loader' must be an iterable of PyG batches (e.g. a DataLoader) or one Batch "
            f"(got {type(loader).__name__})")
    return loader


def _device_of(model: nn.Module, device: Optional[Any]) -> torch.device:
    if device is not None:
        return torch.device(device)
    p = next(iter(model.parameters()), None)
    return p.device if p is not None else torch.device("cpu")


def _check_model(model: Any, fn: str, need_qsv: bool = False) -> nn.Module:
    model = getattr(model, "module", model)  # DistributedDataParallel
    if not isinstance(model, nn.Module):
        raise TypeError(f"{fn}: 'model' must be a torch.nn.Module (got {type(model).__name__})")
    if need_qsv and not (hasattr(model, "qsv_layers") and model.qsv_layers()):
        raise ValueError(f"{fn}: 'model' must be a QSVNet with QSVConv layers (conv='qsv'); got "
                         f"{type(model).__name__}"
                         + (f" with conv={model.conv!r}" if hasattr(model, "conv") else ""))
    return model


def _per_layer(model: nn.Module, loader: Any, device: Optional[Any], fn: str,
               step: Callable[[Any], list[Tensor]]) -> list[Tensor]:
    """``step(batch)`` (one tensor per layer) over the batches of ``loader``, the model in eval
    mode meanwhile, concatenated per layer along dim 0."""
    dev = _device_of(model, device)
    was_training = model.training
    model.eval()
    per_layer: list[list[Tensor]] = []
    try:
        for batch in _check_loader(loader):
            outs = step(batch.to(dev))
            per_layer = per_layer or [[] for _ in outs]
            for acc, t in zip(per_layer, outs):
                acc.append(t)
    finally:
        model.train(was_training)
    if not per_layer:
        raise ValueError(f"{fn}: 'loader' yielded no batch")
    return [torch.cat(v) for v in per_layer]


def node_attention_entropy(alpha: Tensor, index: Tensor, num_nodes: int) -> NodeEntropy:
    r"""Normalised entropy of each target node's attention distribution.

    For the edges :math:`j \to i` of a node :math:`i` with in-degree :math:`d_i`,

    .. math::
        \tilde H_i = \frac{-\sum_{j \in \mathcal{N}(i)} \alpha_{ij} \log \alpha_{ij}}
        {\log d_i} \in [0, 1],

    with :math:`0 \log 0 = 0`, per head (the semantics of
    :func:`quest_geometric.analysis.metrics.attention_entropy` on a sparse support). Nodes
    with :math:`d_i < 2` get ``valid == False`` and entropy 0.

    Args:
        alpha (torch.Tensor): Attention weights ``[E]`` or ``[E, H]`` that sum to one over
            the in-edges of each node.
        index (torch.Tensor): Target node of every edge ``[E]`` (``edge_index[1]``).
        num_nodes (int): Number of nodes :math:`N`.

    Returns:
        NodeEntropy: ``entropy`` float64 ``[1, N, H]`` (``H = 1`` for 1-D ``alpha``) and
        ``valid`` ``[N]``.
    """
    if not isinstance(alpha, Tensor) or alpha.dim() not in (1, 2):
        raise ValueError("node_attention_entropy: 'alpha' must be a tensor [E] or [E, H] "
                         f"(got {getattr(alpha, 'shape', type(alpha).__name__)})")
    if not isinstance(index, Tensor) or index.dim() != 1 or index.numel() != alpha.size(0):
        raise ValueError("node_attention_entropy: 'index' must be a 1-D tensor with one target "
                         f"per edge ({alpha.size(0)})")
    if isinstance(num_nodes, bool) or not isinstance(num_nodes, int) or num_nodes < 0:
        raise ValueError(f"node_attention_entropy: 'num_nodes' must be an int >= 0 "
                         f"(got {num_nodes!r})")
    a = alpha.detach().to(torch.float64)
    if a.dim() == 1:
        a = a.unsqueeze(-1)
    if not all_finite(a) or bool((a < 0).any()):
        raise ValueError("node_attention_entropy: 'alpha' must be finite and non-negative")
    index = index.to(a.device)
    h = scatter(-torch.special.xlogy(a, a), index, dim=0, dim_size=num_nodes, reduce="sum")
    deg = scatter(torch.ones_like(index, dtype=torch.float64), index, dim=0,
                  dim_size=num_nodes, reduce="sum")
    valid = deg >= 2
    denom = torch.log(deg.clamp_min(2.0)).unsqueeze(-1)
    h = torch.where(valid.unsqueeze(-1), h / denom, torch.zeros_like(h))
    return NodeEntropy(h.unsqueeze(0), valid)


@torch.no_grad()
def attention_entropy_per_node(model: nn.Module, loader: Any,
                               device: Optional[Any] = None) -> NodeEntropy:
    r"""Normalised attention entropy (:func:`node_attention_entropy`) of every node, layer
    and head of a trained model on the graphs of :obj:`loader`, from the weights of
    :meth:`~quest_geometric.models.qsv_net.QSVNet.forward` with
    ``return_attention_weights=True`` in eval mode (QSV layers and the ``TransformerConv``
    control alike).

    Args:
        model (torch.nn.Module): A :class:`~quest_geometric.models.qsv_net.QSVNet` (or its
            DDP wrapper).
        loader (iterable): Batches of graphs (a PyG ``DataLoader``) or a single
            :class:`~torch_geometric.data.Batch`.
        device (torch.device, optional): Where to run; :obj:`None` uses the model's.
            (default: :obj:`None`)

    Returns:
        NodeEntropy: ``entropy`` float64 ``[L, N, H]`` with :math:`N` the nodes of every
        batch concatenated in loader order, and ``valid`` ``[N]``.
    """
    fn = "attention_entropy_per_node"
    model = _check_model(model, fn)

    def step(batch: Any) -> list[Tensor]:
        out = model(batch, return_attention_weights=True)
        if not (isinstance(out, tuple) and len(out) == 2):
            raise ValueError(f"{fn}: the model must return (logits, attention) with "
                             "return_attention_weights=True (a QSVNet does)")
        ents = [node_attention_entropy(alpha, edge_index[1], batch.num_nodes)
                for edge_index, alpha in out[1]]
        return [e.entropy[0].cpu() for e in ents] + [ents[0].valid.cpu()]

    *entropy, valid = _per_layer(model, loader, device, fn, step)
    return NodeEntropy(torch.stack(entropy), valid)


@torch.no_grad()
def rotation_angles(model: nn.Module, loader: Any, device: Optional[Any] = None) -> Tensor:
    r"""Rotation angle of the relative quaternion of every edge, layer and head.

    For an edge :math:`j \to i` (``edge_index[:, e] = (j, i)``) of layer :math:`\ell`,

    .. math::
        r_{ij} = q_i^{*}\,q_j, \qquad
        \theta_{ij} = 2\,\operatorname{atan2}\bigl(\lVert \mathbf{u}(r_{ij}) \rVert,
        |\mathrm{Re}\, r_{ij}|\bigr) \in [0, \pi],

    the angle by which the sandwich transport :math:`\mathbf{x} \mapsto r_{ij}\,\mathbf{x}\,
    r_{ij}^{*}` rotates the vector part of the neighbour's features, with the model's own
    quaternions (:meth:`~quest_geometric.models.qsv_net.QSVNet.quaternions`), whether or not
    the transport is switched on.

    Args:
        model (torch.nn.Module): A :class:`~quest_geometric.models.qsv_net.QSVNet` with
            ``conv='qsv'``.
        loader (iterable): Batches of graphs or a single batch.
        device (torch.device, optional): Where to run. (default: :obj:`None`)

    Returns:
        torch.Tensor: Angles in radians, float32 ``[L, E, H]`` with :math:`E` the edges of
        every batch concatenated in loader order.
    """
    fn = "rotation_angles"
    model = _check_model(model, fn, need_qsv=True)

    def step(batch: Any) -> list[Tensor]:
        src, dst = batch.edge_index[0], batch.edge_index[1]
        # relative(q[dst], q[src]) = conj(q_i) q_j, [E, H, 4]
        return [angle(relative(q[dst], q[src])).float().cpu() for q in model.quaternions(batch)]

    return torch.stack(_per_layer(model, loader, device, fn, step))


@torch.no_grad()
def _accuracy(model: nn.Module, loader: Any, dev: torch.device) -> tuple[int, int]:
    correct = total = 0
    for batch in _check_loader(loader):
        batch = batch.to(dev)
        pred = model(batch).argmax(dim=-1)
        y = batch.y.view(-1)
        correct += int((pred == y).sum())
        total += int(y.numel())
    return correct, total


#: The test-time ablations of :func:`ablation_accuracy`: name -> ``set_ablation`` arguments.
ABLATIONS: dict[str, dict[str, Any]] = {
    "no_transport": {"transport": False},
    "uniform": {"attention": "uniform"},
    "no_transport_uniform": {"transport": False, "attention": "uniform"},
}


@torch.no_grad()
def ablation_accuracy(model: nn.Module, loader: Any, device: Optional[Any] = None
                      ) -> dict[str, float]:
    r"""Accuracy of a trained model on :obj:`loader` as it is and under each ablation
    switched on at test time, without retraining.

    The ablations (:data:`ABLATIONS`, through
    :meth:`~quest_geometric.models.qsv_net.QSVNet.ablation`): ``'no_transport'`` drops the
    sandwich transport, ``'uniform'`` replaces the learned weights by
    :math:`1/|\mathcal{N}(i)|`, ``'no_transport_uniform'`` does both.

    .. math::
        \Delta_a = \mathrm{acc}(\text{model with ablation } a) - \mathrm{acc}(\text{model})

    Args:
        model (torch.nn.Module): A :class:`~quest_geometric.models.qsv_net.QSVNet` with
            ``conv='qsv'``.
        loader (iterable): Batches of labelled graphs (``y``) or a single batch.
        device (torch.device, optional): Where to run. (default: :obj:`None`)

    Returns:
        dict[str, float]: ``trained`` (the accuracy as trained, in :math:`[0, 1]`), the
        accuracy under every ablation by name and ``delta_<name>`` for each.
    """
    fn = "ablation_accuracy"
    model = _check_model(model, fn, need_qsv=True)
    dev = _device_of(model, device)
    was_training = model.training
    model.eval()
    out: dict[str, float] = {}
    try:
        correct, total = _accuracy(model, loader, dev)
        if total == 0:
            raise ValueError(f"{fn}: 'loader' yielded no labelled sample")
        out["trained"] = correct / total
        for name, kwargs in ABLATIONS.items():
            with model.ablation(**kwargs):
                c, t = _accuracy(model, loader, dev)
            out[name] = c / t
        for name in ABLATIONS:
            out[f"delta_{name}"] = out[name] - out["trained"]
    finally:
        model.train(was_training)
    return out


def qsv_analysis(model: nn.Module, loader: Any, device: Optional[Any] = None) -> dict[str, Any]:
    r"""All three measurements of a trained QSV model and their scalar summaries.

    Args:
        model (torch.nn.Module): A :class:`~quest_geometric.models.qsv_net.QSVNet` with
            ``conv='qsv'``.
        loader (iterable): Batches of labelled graphs (iterated several times: pass a
            loader, not a one-shot generator).
        device (torch.device, optional): Where to run. (default: :obj:`None`)

    Returns:
        dict: ``entropy`` (:class:`NodeEntropy`), ``angles`` (``[L, E, H]`` radians),
        ``accuracy`` (:func:`ablation_accuracy`) and ``summary``, a flat dict of floats:
        ``entropy_mean`` (over valid nodes, layers and heads),
        ``entropy_frac_above_0.95`` (share of node-head values above 0.95),
        ``entropy_min``, ``angle_mean_deg``, ``angle_median_deg``,
        ``angle_frac_below_10deg``, per-layer ``entropy_mean_l<k>`` and
        ``angle_median_deg_l<k>``, and the accuracies.
    """
    if isinstance(loader, Iterable) and iter(loader) is loader:
        raise TypeError("qsv_analysis: 'loader' is iterated three times; pass a DataLoader "
                        "or a list of batches, not a one-shot iterator")
    ent = attention_entropy_per_node(model, loader, device)
    ang = rotation_angles(model, loader, device)
    acc = ablation_accuracy(model, loader, device)
    values = ent.entropy[:, ent.valid]  # [L, n_valid, H]
    deg = ang.double() * (180.0 / math.pi)
    summary: dict[str, float] = {
        "entropy_mean": float(values.mean()),
        "entropy_frac_above_0.95": float((values > 0.95).double().mean()),
        "entropy_min": float(values.min()),
        "angle_mean_deg": float(deg.mean()),
        "angle_median_deg": float(deg.flatten().median()),
        "angle_frac_below_10deg": float((deg < 10.0).double().mean()),
    }
    for layer in range(values.size(0)):
        summary[f"entropy_mean_l{layer}"] = float(values[layer].mean())
        summary[f"angle_median_deg_l{layer}"] = float(deg[layer].flatten().median())
    summary.update({f"acc_{k}" if not k.startswith("delta") else k: v for k, v in acc.items()})
    return {"entropy": ent, "angles": ang, "accuracy": acc, "summary": summary}
