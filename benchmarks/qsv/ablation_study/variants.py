r"""The graph models of the QSV ablation table by name (:func:`qsv_variant`); the standard-attention
control is sized by :func:`~quest_geometric.models.qsv_net.match_parameter_count`."""
from __future__ import annotations

from typing import Any

from benchmarks.qsv.ablation_study.config import GRAPH_VARIANTS
from quest_geometric._utils.checks import check_choice
from quest_geometric.models.qsv_net import QSVNet, match_parameter_count

__all__ = ["qsv_variant"]


def qsv_variant(name: str, in_channels: int, num_classes: int, **kwargs: Any) -> QSVNet:
    r"""Builds one model of the QSV ablation table by name.

    * ``'qsv'``: full QSV, :class:`~quest_geometric.models.qsv_net.QSVNet` with the given
      arguments; ``'no_transport'``: the same with ``transport=False`` in every QSVConv;
      ``'uniform'``: the same with ``attention='uniform'``.
    * ``'standard_attention'``: PyG's :class:`~torch_geometric.nn.conv.TransformerConv` on
      the same graph, width and MLP chosen by
      :func:`~quest_geometric.models.qsv_net.match_parameter_count` to be within 5% of the
      full QSV model's parameter count.
    * ``'lattice'``: the same network as ``'qsv'``; the flat lattice is a *data* choice
      (:class:`~quest_geometric.transforms.image_to_lattice.ImageToLattice` graphs; with
      ``pos_embedding`` or ``quaternion='node'`` pass the lattice's ``num_nodes``).

    Args:
        name (str): One of
            :data:`~benchmarks.qsv.ablation_study.config.GRAPH_VARIANTS`.
        in_channels (int): Node feature size.
        num_classes (int): Number of classes.
        **kwargs (optional): :class:`~quest_geometric.models.qsv_net.QSVNet` arguments
            shared by every variant; ``transformer_kwargs`` goes to the standard-attention
            control only, and ``channels``/``mlp_hidden`` size the QSV models.

    Returns:
        QSVNet: The model (``model.parameter_count()`` gives its size).
    """
    check_choice(name, "'name'", GRAPH_VARIANTS)
    if kwargs.get("conv", "qsv") != "qsv":
        raise ValueError("qsv_variant chooses 'conv' itself; do not pass it")
    kwargs.pop("conv", None)
    qsv_kwargs = dict(kwargs.pop("qsv_kwargs", None) or {})
    transformer_kwargs = kwargs.pop("transformer_kwargs", None)
    flags = {"no_transport": {"transport": False}, "uniform": {"attention": "uniform"}}
    if name != "standard_attention":
        return QSVNet(in_channels, num_classes, qsv_kwargs={**qsv_kwargs, **flags.get(name, {})},
                      **kwargs)
    reference = QSVNet(in_channels, num_classes, qsv_kwargs=qsv_kwargs, **kwargs)
    if not kwargs.get("pos_embedding", False):
        kwargs.pop("num_nodes", None)  # only the node quaternions used it
    control_kwargs = {k: v for k, v in kwargs.items() if k not in ("channels", "mlp_hidden")}
    control_kwargs["transformer_kwargs"] = transformer_kwargs
    match = match_parameter_count(reference.parameter_count(), in_channels, num_classes,
                                  **control_kwargs)
    return QSVNet(in_channels, num_classes, channels=match["channels"],
                  mlp_hidden=match["mlp_hidden"], conv="transformer", **control_kwargs)
