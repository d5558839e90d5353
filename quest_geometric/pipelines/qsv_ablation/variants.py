r"""The models of the QSV ablation table by name (:func:`qsv_variant`), and the
parameter-matched standard-attention control (:func:`match_parameter_count`)."""
from __future__ import annotations

import math
from typing import Any, Optional

from quest_geometric._utils.checks import check_choice, check_int
from quest_geometric.pipelines.qsv_ablation.config import VARIANTS
from quest_geometric.models.qsv_net import QSVNet

__all__ = ["match_parameter_count", "qsv_variant"]


def match_parameter_count(target: int, in_channels: int, num_classes: int,
                          tolerance: float = 0.05, **kwargs: Any) -> dict[str, Any]:
    r"""Finds the width of the standard-attention control (``conv='transformer'``) whose
    parameter count is closest to :obj:`target`.

    The search brackets :obj:`target` among the widths allowed for the heads and mixing
    (multiples of :math:`\mathrm{lcm}(4, H)`, MLP at :obj:`mlp_ratio` times the width), then
    sets the MLP hidden width of each bracketing width to the best match (the count is
    affine in it); the closer wins, ties to the MLP width nearer :obj:`mlp_ratio`. Counts
    come from building the models, never from a formula.

    Args:
        target (int): The parameter count to match (the QSV model's).
        in_channels (int): Node feature size.
        num_classes (int): Number of classes.
        tolerance (float, optional): Largest accepted relative gap
            :math:`|n - n^\ast| / n^\ast`. (default: :obj:`0.05`)
        **kwargs (optional): Other :class:`~quest_geometric.models.qsv_net.QSVNet`
            arguments (``heads``, ``num_layers``, ``stem``, ``mixing``, ...); ``channels``,
            ``mlp_hidden`` and ``conv`` are chosen here.

    Returns:
        dict: ``channels``, ``mlp_hidden``, ``parameters``, ``target`` and
        ``relative_gap``.
    """
    check_int(target, "'target'", 1)
    for name in ("channels", "mlp_hidden", "conv"):
        if name in kwargs:
            raise ValueError(f"'{name}' is chosen by match_parameter_count; do not pass it")
    if "qsv_kwargs" in kwargs:
        raise ValueError("'qsv_kwargs' configures QSVConv and is not used by the "
                         "standard-attention control")
    heads = kwargs.get("heads", 4)
    mixing = kwargs.get("mixing", "quaternion")
    ratio = float(kwargs.pop("mlp_ratio", 2.0))
    step = math.lcm(4, heads) if mixing == "quaternion" else heads

    def count(width: int, hidden: int) -> int:
        return QSVNet(in_channels, num_classes, channels=width, mlp_hidden=hidden,
                      conv="transformer", **kwargs).parameter_count()

    def default_hidden(width: int) -> int:
        return max(1, round(ratio * width))

    width, previous = step, None
    while count(width, default_hidden(width)) < target:
        if width > 64 * step + 16 * int(math.isqrt(target)):  # pragma: no cover - guard
            break
        previous, width = width, width + step
    best: Optional[dict[str, Any]] = None
    for w in ([previous] if previous is not None else []) + [width]:
        n0 = count(w, 1)
        hidden = max(1, round(1 + (target - n0) / (count(w, 2) - n0)))
        n = count(w, hidden)
        key = (abs(n - target), abs(hidden - default_hidden(w)) / w)
        if best is None or key < best[0]:
            best = (key, dict(channels=w, mlp_hidden=hidden, parameters=n, target=target,
                              relative_gap=abs(n - target) / target))
    assert best is not None
    match = best[1]
    if match["relative_gap"] > tolerance:
        raise ValueError(
            f"no standard-attention width matches {target} parameters within "
            f"{tolerance:.0%} (best: channels={match['channels']}, mlp_hidden="
            f"{match['mlp_hidden']}, {match['parameters']} parameters)")
    return match


def qsv_variant(name: str, in_channels: int, num_classes: int, **kwargs: Any) -> QSVNet:
    r"""Builds one model of the QSV ablation table by name.

    * ``'qsv'``: full QSV, :class:`~quest_geometric.models.qsv_net.QSVNet` with the given
      arguments; ``'no_transport'``: the same with ``transport=False`` in every QSVConv;
      ``'uniform'``: the same with ``attention='uniform'``.
    * ``'standard_attention'``: PyG's :class:`~torch_geometric.nn.conv.TransformerConv` on
      the same graph, width and MLP chosen by :func:`match_parameter_count` to be within 5%
      of the full QSV model's parameter count.
    * ``'lattice'``: the same network as ``'qsv'``; the flat lattice is a *data* choice
      (:class:`~quest_geometric.transforms.image_to_lattice.ImageToLattice` graphs; with
      ``pos_embedding`` or ``quaternion='node'`` pass the lattice's ``num_nodes``).

    Args:
        name (str): One of
            :data:`~quest_geometric.pipelines.qsv_ablation.config.VARIANTS`.
        in_channels (int): Node feature size.
        num_classes (int): Number of classes.
        **kwargs (optional): :class:`~quest_geometric.models.qsv_net.QSVNet` arguments
            shared by every variant; ``transformer_kwargs`` goes to the standard-attention
            control only, and ``channels``/``mlp_hidden`` size the QSV models.

    Returns:
        QSVNet: The model (``model.parameter_count()`` gives its size).
    """
    check_choice(name, "'name'", VARIANTS)
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
