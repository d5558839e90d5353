r"""QSVNet, the graph classifier of the QSV experiments: every graph row of the QSV table is a
:class:`QSVNet` with different :class:`~quest_geometric.nn.qsv_conv.QSVConv` flags (or data);
the standard-attention control is ``conv='transformer'``, sized by
:func:`match_parameter_count`."""
from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any, Literal, Optional, Union, overload

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn.conv import EdgeConv, TransformerConv
from torch_geometric.utils import scatter

from quest_geometric._utils.checks import (
    check_choice, check_int, check_positive_float, check_real, check_return_attention_weights, fail,
)
from quest_geometric.nn.qsv_conv import QSVConv
from quest_geometric.nn.quaternion_linear import QuaternionLinear

__all__ = [
    "QSVBlock", "QSVNet", "match_parameter_count",
]

_STEMS = ("linear", "conv")
_READOUTS = ("mean", "outer")
_CONVS = ("qsv", "transformer")
_MIXINGS = ("quaternion", "linear", "none")
_NORMS = ("layer", "batch")
_ATTENTIONS = ("learned", "uniform")


def _positive_ints(where: str, **values: Any) -> None:
    for name, value in values.items():
        check_int(value, name, 1, where=where)


def _choices(where: str, **values: tuple[Any, tuple]) -> None:
    for name, (value, options) in values.items():
        check_choice(value, name, options, where=where)


def _dropout(value: Any, where: str) -> float:
    if not 0.0 <= check_real(value, "dropout", where=where) < 1.0:
        raise fail(ValueError, where, "dropout", "a float in [0, 1)", value)
    return float(value)


class _UnusedSkip(nn.Module):
    """Stands in for :class:`TransformerConv`'s ``lin_skip``, which PyG builds even with
    ``root_weight=False`` (never called then): no parameters, so none are counted."""

    def reset_parameters(self) -> None:
        pass

    def forward(self, x: Tensor) -> Tensor:  # pragma: no cover - never called
        raise RuntimeError("lin_skip is unused with root_weight=False")


def _norm(kind: str, channels: int) -> nn.Module:
    return nn.LayerNorm(channels) if kind == "layer" else nn.BatchNorm1d(channels)


class QSVBlock(nn.Module):
    r"""One pre-norm residual block of :class:`QSVNet`:

    .. math::
        \mathbf{h} &\leftarrow \mathbf{h} + \mathrm{Drop}\bigl(M\bigl(
        \mathrm{Conv}(\mathrm{Norm}_1(\mathbf{h}), \mathcal{E})\bigr)\bigr), \\
        \mathbf{h} &\leftarrow \mathbf{h} + \mathrm{Drop}\bigl(\mathrm{MLP}(
        \mathrm{Norm}_2(\mathbf{h}))\bigr),

    with :math:`\mathrm{Conv}` a :class:`~quest_geometric.nn.qsv_conv.QSVConv` or PyG's
    :class:`~torch_geometric.nn.conv.TransformerConv` (heads concatenated, no root weight:
    the residual is the skip connection; PyG's unused ``lin_skip`` is dropped so that only
    parameters in use are counted), :math:`M` the channel mixing and
    :math:`\mathrm{MLP}(\mathbf{h}) = W_2\,\mathrm{Drop}(\mathrm{GELU}(W_1 \mathbf{h}))`.

    Args:
        channels (int): Width of the block.
        heads (int): Attention heads of the convolution.
        conv (str, optional): ``'qsv'`` or ``'transformer'``. (default: :obj:`'qsv'`)
        mixing (str, optional): ``'quaternion'`` (a
            :class:`~quest_geometric.nn.quaternion_linear.QuaternionLinear`), ``'linear'`` or
            ``'none'``. (default: :obj:`'quaternion'`)
        norm (str, optional): ``'layer'`` or ``'batch'``. (default: :obj:`'layer'`)
        mlp_hidden (int, optional): Hidden width of the MLP. (default: :obj:`2 * channels`)
        dropout (float, optional): Dropout on the residual branches and the MLP hidden
            layer. (default: :obj:`0.0`)
        conv_kwargs (dict, optional): Extra arguments of the convolution. (default: :obj:`None`)

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}|, F)`, edge indices
          :math:`(2, |\mathcal{E}|)`
        - **output:** node features :math:`(|\mathcal{V}|, F)`
    """

    def __init__(self, channels: int, heads: int, conv: str = "qsv", mixing: str = "quaternion",
                 norm: str = "layer", mlp_hidden: Optional[int] = None, dropout: float = 0.0,
                 conv_kwargs: Optional[dict[str, Any]] = None) -> None:
        super().__init__()
        _positive_ints("QSVBlock", channels=channels, heads=heads)
        _choices("QSVBlock", conv=(conv, _CONVS), mixing=(mixing, _MIXINGS), norm=(norm, _NORMS))
        mlp_hidden = 2 * channels if mlp_hidden is None else mlp_hidden
        _positive_ints("QSVBlock", mlp_hidden=mlp_hidden)
        _dropout(dropout, "QSVBlock")
        if conv_kwargs is not None and not isinstance(conv_kwargs, dict):
            raise fail(TypeError, "QSVBlock", "conv_kwargs", "a dict or None", conv_kwargs)
        conv_kwargs = dict(conv_kwargs or {})
        self.channels, self.heads, self.dropout = channels, heads, float(dropout)
        self.norm1 = _norm(norm, channels)
        if conv == "qsv":
            self.conv: nn.Module = QSVConv(channels, channels, heads=heads, **conv_kwargs)
        else:
            conv_kwargs.setdefault("root_weight", False)
            self.conv = TransformerConv(channels, channels // heads, heads=heads, concat=True,
                                        **conv_kwargs)
            if not self.conv.root_weight:
                self.conv.lin_skip = _UnusedSkip()
        if mixing == "quaternion":
            self.mix: nn.Module = QuaternionLinear(channels, channels)
        elif mixing == "linear":
            self.mix = nn.Linear(channels, channels)
        else:
            self.mix = nn.Identity()
        self.norm2 = _norm(norm, channels)
        self.mlp = nn.Sequential(nn.Linear(channels, mlp_hidden), nn.GELU(),
                                 nn.Dropout(dropout), nn.Linear(mlp_hidden, channels))

    @overload
    def forward(self, x: Tensor, edge_index: Tensor,
                return_attention_weights: Optional[Literal[False]] = None) -> Tensor:
        ...

    @overload
    def forward(self, x: Tensor, edge_index: Tensor,
                return_attention_weights: Literal[True]) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        ...

    def forward(self, x: Tensor, edge_index: Tensor,
                return_attention_weights: Optional[bool] = None
                ) -> Union[Tensor, tuple[Tensor, tuple[Tensor, Tensor]]]:
        r"""Runs the block.

        Args:
            x (torch.Tensor): Node features ``[N, channels]``.
            edge_index (torch.Tensor): Edge indices ``[2, E]``.
            return_attention_weights (bool, optional): :obj:`True` also returns the
                convolution's ``(edge_index, alpha [E, heads])``, as in
                :class:`~quest_geometric.nn.qsv_conv.QSVConv`. (default: :obj:`None`)
        """
        want = check_return_attention_weights(return_attention_weights, where="QSVBlock")
        h = self.norm1(x)
        att = None
        if want:
            h, att = self.conv(h, edge_index, return_attention_weights=True)
        else:
            h = self.conv(h, edge_index)
        x = x + F.dropout(self.mix(h), self.dropout, self.training)
        x = x + F.dropout(self.mlp(self.norm2(x)), self.dropout, self.training)
        if att is not None:
            return x, att
        return x


class QSVNet(nn.Module):
    r"""The graph classifier of the QSV experiments (`"QSV: Quat-Sphere-Vision for Coupled
    Quaternion Attention on Spherical Lattices" <https://arxiv.org/abs/2609.30592>`_): a stem,
    :math:`L` pre-norm residual :class:`QSVBlock` s, a readout and a linear classifier,

    .. math::
        \mathbf{h}^{(0)} = \mathrm{Stem}(\mathbf{x}), \quad
        \mathbf{h}^{(\ell)} = \mathrm{Block}_\ell(\mathbf{h}^{(\ell - 1)}, \mathcal{E}), \quad
        \mathbf{z}_g = W_c\,\frac{1}{|\mathcal{R}_g|} \sum_{i \in \mathcal{R}_g}
        \mathrm{Norm}(\mathbf{h}_i^{(L)}) + \mathbf{b}_c,

    where :math:`\mathcal{R}_g` is every node of graph :math:`g` (``readout='mean'``) or the
    nodes of its outermost shell (``readout='outer'``: ``data.shell`` equal to the largest
    shell id of that graph).  Nothing depends on the geometry beyond ``edge_index`` (and
    ``shell`` for the outer readout), so the same model runs on sphere graphs
    (:class:`~quest_geometric.transforms.image_to_sphere.ImageToSphere`) and on flat lattice
    graphs (:class:`~quest_geometric.transforms.image_to_lattice.ImageToLattice`, whose nodes
    are all shell 0, so the outer readout is the plain mean there).

    **Stem.**  ``'linear'`` lifts every node's features, :math:`\mathbf{h}_i = W\mathbf{x}_i
    + \mathbf{b}`.  ``'conv'`` is one EdgeConv step (`Wang et al., 2019
    <https://arxiv.org/abs/1801.07829>`_) over the node's graph neighbourhood,

    .. math::
        \mathbf{h}_i = \max_{j \in \mathcal{N}(i)} \mathrm{MLP}\bigl([\mathbf{x}_i,\;
        \mathbf{x}_j - \mathbf{x}_i]\bigr),

    a learned local filter, the graph analogue of a :math:`3 \times 3` convolution stem.  A
    CNN stem applied to the image before the sphere sampling is not offered: the datasets
    sample raw pixels inside their transform, before the model sees the data.  The EdgeConv
    stem is permutation-invariant over the neighbours (it sees no orientation).

    **Blocks.**  ``conv='qsv'`` uses :class:`~quest_geometric.nn.qsv_conv.QSVConv` (one
    quaternion per node and head replaces :math:`W_Q, W_K, W_V`); ``conv='transformer'``
    uses PyG's :class:`~torch_geometric.nn.conv.TransformerConv` (:math:`W_Q, W_K, W_V`,
    heads concatenated, ``root_weight=False``), the standard-attention control.  After the
    convolution, ``mixing='quaternion'`` mixes channels with a Hamilton-product
    :class:`~quest_geometric.nn.quaternion_linear.QuaternionLinear` that keeps the
    4-channel grouping of QSVConv (``'linear'``: a dense linear layer, ``'none'``: no mixing).

    **Ablations at test time.**  :meth:`set_ablation` and the context manager
    :meth:`ablation` switch the transport and the attention of every QSVConv of a trained
    model (for example ``with model.ablation(transport=False): evaluate(model)``).

    Args:
        in_channels (int): Node feature size (image channels).
        num_classes (int): Number of classes.
        channels (int, optional): Hidden width; a multiple of :obj:`4 * heads` for
            ``conv='qsv'``, of :obj:`heads` and (with quaternion mixing) of 4 for
            ``conv='transformer'``. (default: :obj:`64`)
        heads (int, optional): Attention heads per layer. (default: :obj:`4`)
        num_layers (int, optional): Number of blocks :math:`L`. (default: :obj:`4`)
        stem (str, optional): ``'linear'`` or ``'conv'`` (see above).
            (default: :obj:`'linear'`)
        readout (str, optional): ``'mean'`` over all nodes or ``'outer'`` (mean over the
            outermost shell of each graph). (default: :obj:`'mean'`)
        conv (str, optional): ``'qsv'`` or ``'transformer'``. (default: :obj:`'qsv'`)
        mixing (str, optional): ``'quaternion'``, ``'linear'`` or ``'none'``.
            (default: :obj:`'quaternion'`)
        norm (str, optional): ``'layer'`` (LayerNorm) or ``'batch'`` (BatchNorm over nodes).
            (default: :obj:`'layer'`)
        mlp_ratio (float, optional): MLP hidden width as a multiple of :obj:`channels`.
            (default: :obj:`2.0`)
        mlp_hidden (int, optional): MLP hidden width; overrides :obj:`mlp_ratio`.
            (default: :obj:`None`)
        dropout (float, optional): Dropout on residual branches, MLP hidden layers and
            before the classifier. (default: :obj:`0.0`)
        qsv_kwargs (dict, optional): Extra arguments of every
            :class:`~quest_geometric.nn.qsv_conv.QSVConv` (``quaternion``, ``transport``,
            ``attention``, ``temperature``, ``dropout``). (default: :obj:`None`)
        transformer_kwargs (dict, optional): Extra arguments of every
            :class:`~torch_geometric.nn.conv.TransformerConv` (``dropout``, ``beta``).
            (default: :obj:`None`)
        pos_embedding (bool, optional): If :obj:`True`, add a learned embedding
            :math:`\mathbf{p}_i \in \mathbb{R}^F` of the template node :math:`i` to the
            stem output (ViT-style absolute position; needs :obj:`num_nodes`).  Without it
            (and without node quaternions) the network sees positions only through the
            graph. (default: :obj:`False`)
        num_nodes (int, optional): Nodes of the fixed template graph, for
            :obj:`pos_embedding` and for ``qsv_kwargs={'quaternion': 'node'}`` or
            ``'both'`` (free per-node quaternions, passed to QSVConv).  A batch must hold
            whole copies of the template (:math:`N = B \cdot` :obj:`num_nodes`).
            (default: :obj:`None`)

    Shapes:
        - **input:** a :class:`~torch_geometric.data.Batch` (or :class:`~torch_geometric.
          data.Data`) with ``x`` :math:`(|\mathcal{V}|, F_{in})`, ``edge_index``
          :math:`(2, |\mathcal{E}|)`, ``batch`` :math:`(|\mathcal{V}|)` and, for
          ``readout='outer'``, ``shell`` :math:`(|\mathcal{V}|)`
        - **output:** logits :math:`(B, \text{num\_classes})`

    Example:
        >>> from quest_geometric.transforms.image_to_sphere import ImageToSphere
        >>> t = ImageToSphere(sizes=(16, 32), k=6, k_cross=2)
        >>> batch = t.batch_call(torch.rand(2, 3, 8, 8), as_batch=True)
        >>> QSVNet(3, 10, channels=16, heads=2)(batch).shape
        torch.Size([2, 10])
    """

    def __init__(self, in_channels: int, num_classes: int, channels: int = 64, heads: int = 4,
                 num_layers: int = 4, stem: str = "linear", readout: str = "mean",
                 conv: str = "qsv", mixing: str = "quaternion", norm: str = "layer",
                 mlp_ratio: float = 2.0, mlp_hidden: Optional[int] = None, dropout: float = 0.0,
                 qsv_kwargs: Optional[dict[str, Any]] = None,
                 transformer_kwargs: Optional[dict[str, Any]] = None, pos_embedding: bool = False,
                 num_nodes: Optional[int] = None) -> None:
        super().__init__()
        _positive_ints("QSVNet", in_channels=in_channels, num_classes=num_classes,
                       channels=channels, heads=heads, num_layers=num_layers)
        _choices("QSVNet", stem=(stem, _STEMS), readout=(readout, _READOUTS),
                 conv=(conv, _CONVS), mixing=(mixing, _MIXINGS), norm=(norm, _NORMS))
        mlp_ratio = check_positive_float(mlp_ratio, "mlp_ratio", where="QSVNet")
        if mlp_hidden is None:
            mlp_hidden = max(1, round(mlp_ratio * channels))
        _positive_ints("QSVNet", mlp_hidden=mlp_hidden)
        _dropout(dropout, "QSVNet")
        for name, value in (("qsv_kwargs", qsv_kwargs),
                            ("transformer_kwargs", transformer_kwargs)):
            if value is not None and not isinstance(value, dict):
                raise fail(TypeError, "QSVNet", name, "a dict or None", value)
        if conv == "qsv":
            if channels % (4 * heads) != 0:
                raise fail(ValueError, "QSVNet", "channels", f"a multiple of 4 * heads = "
                           f"{4 * heads} for conv='qsv'", channels)
            if transformer_kwargs:
                raise fail(ValueError, "QSVNet", "transformer_kwargs", "None or empty with "
                           "conv='qsv' (it is only used with conv='transformer')",
                           transformer_kwargs)
            conv_kwargs = dict(qsv_kwargs or {})
            if "num_nodes" in conv_kwargs:
                raise fail(ValueError, "QSVNet", "qsv_kwargs", "free of 'num_nodes' (pass "
                           "num_nodes to QSVNet itself)", qsv_kwargs)
            if conv_kwargs.get("quaternion", "feature") in ("node", "both"):
                conv_kwargs["num_nodes"] = num_nodes  # QSVConv checks it
        else:
            step = math.lcm(4, heads) if mixing == "quaternion" else heads
            if channels % step != 0:
                raise fail(ValueError, "QSVNet", "channels", f"a multiple of {step} for "
                           f"conv='transformer' with heads={heads} and mixing={mixing!r}",
                           channels)
            if qsv_kwargs:
                raise fail(ValueError, "QSVNet", "qsv_kwargs", "None or empty with "
                           "conv='transformer' (it is only used with conv='qsv')", qsv_kwargs)
            conv_kwargs = dict(transformer_kwargs or {})
        if not isinstance(pos_embedding, bool):
            raise fail(TypeError, "QSVNet", "pos_embedding", "a bool", pos_embedding)
        node_quaternions = "num_nodes" in conv_kwargs if conv == "qsv" else False
        if pos_embedding:
            _positive_ints("QSVNet", num_nodes=num_nodes)
        elif num_nodes is not None and not node_quaternions:
            raise fail(ValueError, "QSVNet", "num_nodes", "None unless pos_embedding=True or "
                       "qsv_kwargs={'quaternion': 'node' | 'both'} (it is only used there)",
                       num_nodes)
        # (Both branches above already make channels a multiple of 4 for quaternion mixing.)
        self.in_channels, self.num_classes, self.channels = in_channels, num_classes, channels
        self.heads, self.num_layers, self.stem_type = heads, num_layers, stem
        self.readout, self.conv, self.mixing, self.norm = readout, conv, mixing, norm
        self.mlp_hidden, self.dropout = mlp_hidden, float(dropout)
        self.num_nodes, self.pos_embedding = num_nodes, pos_embedding
        #: The constructor arguments (plain types), so checkpoints can carry the config.
        self.config: dict[str, Any] = dict(
            in_channels=in_channels, num_classes=num_classes, channels=channels,
            heads=heads, num_layers=num_layers, stem=stem, readout=readout, conv=conv,
            mixing=mixing, norm=norm, mlp_ratio=float(mlp_ratio), mlp_hidden=mlp_hidden,
            dropout=float(dropout), qsv_kwargs=dict(qsv_kwargs or {}),
            transformer_kwargs=dict(transformer_kwargs or {}), pos_embedding=pos_embedding,
            num_nodes=num_nodes)
        if stem == "linear":
            self.stem: nn.Module = nn.Linear(in_channels, channels)
        else:
            self.stem = EdgeConv(nn.Sequential(nn.Linear(2 * in_channels, channels), nn.GELU(),
                                               nn.Linear(channels, channels)), aggr="max")
        if pos_embedding:
            assert num_nodes is not None
            self.pos = nn.Parameter(torch.empty(num_nodes, channels))
        else:
            self.register_parameter("pos", None)
        self.blocks = nn.ModuleList([
            QSVBlock(channels, heads, conv=conv, mixing=mixing, norm=norm,
                     mlp_hidden=mlp_hidden, dropout=dropout, conv_kwargs=conv_kwargs)
            for _ in range(num_layers)
        ])
        self.final_norm = _norm(norm, channels)
        self.classifier = nn.Linear(channels, num_classes)
        self._reset_pos()

    def _reset_pos(self) -> None:
        if self.pos is not None:
            with torch.no_grad():
                nn.init.trunc_normal_(self.pos, std=0.02)

    def reset_parameters(self) -> None:
        r"""Resets every learnable parameter (and normalisation statistics); the position
        embedding is drawn from a truncated normal with standard deviation 0.02."""
        for module in self.modules():
            if module is not self and hasattr(module, "reset_parameters"):
                module.reset_parameters()
        self._reset_pos()

    def qsv_layers(self) -> list[QSVConv]:
        r"""The :class:`~quest_geometric.nn.qsv_conv.QSVConv` of every block, in order
        (empty for ``conv='transformer'``)."""
        return [m for m in self.modules() if isinstance(m, QSVConv)]

    def parameter_count(self) -> int:
        r"""The number of learnable parameters."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def set_ablation(self, transport: Optional[bool] = None,
                     attention: Optional[str] = None) -> list[dict[str, Any]]:
        r"""Switches the transport and/or the attention of every QSVConv in place (test-time
        ablations); :obj:`None` leaves a setting unchanged.

        Args:
            transport (bool, optional): :obj:`False` drops the transport. (default: :obj:`None`)
            attention (str, optional): ``'learned'`` or ``'uniform'``. (default: :obj:`None`)

        Returns:
            list[dict]: The previous ``{'transport', 'attention'}`` of every layer, which
            :meth:`restore_ablation` puts back.
        """
        if transport is not None and not isinstance(transport, bool):
            raise fail(TypeError, "QSVNet.set_ablation", "transport", "a bool or None",
                       transport)
        if attention is not None:
            check_choice(attention, "attention", _ATTENTIONS, where="QSVNet.set_ablation")
        layers = self.qsv_layers()
        if not layers:
            raise ValueError(f"set_ablation needs QSVConv layers; this model has "
                             f"conv={self.conv!r}")
        previous = [{"transport": layer.transport, "attention": layer.attention}
                    for layer in layers]
        for layer in layers:
            if transport is not None:
                layer.transport = transport
            if attention is not None:
                layer.attention = attention
        return previous

    def restore_ablation(self, state: list[dict[str, Any]]) -> None:
        r"""Puts back the per-layer settings returned by :meth:`set_ablation`.

        Args:
            state (list[dict]): One ``{'transport', 'attention'}`` per QSVConv.
        """
        layers = self.qsv_layers()
        what = f"a list of {len(layers)} settings (one per QSVConv), as set_ablation returns"
        if not isinstance(state, list):
            raise fail(TypeError, "QSVNet.restore_ablation", "state", what, state)
        if len(state) != len(layers):
            raise fail(ValueError, "QSVNet.restore_ablation", "state", what,
                       got_text=f"a list of {len(state)}")
        for layer, s in zip(layers, state):
            layer.transport = bool(s["transport"])
            layer.attention = check_choice(s["attention"], "attention", _ATTENTIONS,
                                           where="QSVNet.restore_ablation")

    @contextlib.contextmanager
    def ablation(self, transport: Optional[bool] = None,
                 attention: Optional[str] = None) -> Iterator["QSVNet"]:
        r"""Context manager form of :meth:`set_ablation`: the settings are restored on
        exit, also after an exception.

        Example:
            >>> model = QSVNet(1, 10, channels=16, heads=2)
            >>> with model.ablation(transport=False):
            ...     [layer.transport for layer in model.qsv_layers()]
            [False, False, False, False]
        """
        state = self.set_ablation(transport=transport, attention=attention)
        try:
            yield self
        finally:
            self.restore_ablation(state)

    def _inputs(self, data: Any, where: str = "QSVNet") -> tuple[Tensor, Tensor, Tensor, int]:
        x = getattr(data, "x", None)
        edge_index = getattr(data, "edge_index", None)
        shape = f"[num_nodes, {self.in_channels}]"
        if not isinstance(x, Tensor):
            raise fail(TypeError, where, "data.x", f"a floating-point {shape} tensor", x)
        if x.dim() != 2 or x.size(1) != self.in_channels:
            raise fail(ValueError, where, "data.x", f"of shape {shape}", x)
        if not x.is_floating_point():
            raise fail(TypeError, where, "data.x", f"a floating-point {shape} tensor", x)
        if not isinstance(edge_index, Tensor):
            raise fail(TypeError, where, "data.edge_index", "a [2, num_edges] tensor",
                       edge_index)
        batch = getattr(data, "batch", None)
        if batch is None:
            batch = torch.zeros(x.size(0), dtype=torch.long, device=x.device)
            num_graphs = 1
        else:
            num_graphs = getattr(data, "num_graphs", None)
            if num_graphs is None:
                num_graphs = int(batch.max()) + 1 if batch.numel() > 0 else 0
        return x, edge_index, batch, int(num_graphs)

    def _trunk(self, x: Tensor, edge_index: Tensor, collect: Optional[str] = None
               ) -> tuple[Tensor, list[Any]]:
        h = self.stem(x) if self.stem_type == "linear" else self.stem(x, edge_index)
        if self.pos is not None:
            n = self.pos.size(0)
            if h.size(0) % n != 0:
                raise fail(ValueError, "QSVNet", "data.x", f"whole copies of the {n}-node "
                           "template graph (pos_embedding=True)", got_text=f"{h.size(0)} nodes")
            h = h + self.pos.repeat(h.size(0) // n, 1)
        collected: list[Any] = []
        for block in self.blocks:
            if collect == "attention":
                h, att = block(h, edge_index, return_attention_weights=True)
                collected.append(att)
            else:
                if collect == "conv_inputs":
                    collected.append(block.norm1(h))
                h = block(h, edge_index)
        return self.final_norm(h), collected

    def pool(self, h: Tensor, batch: Tensor, num_graphs: int, shell: Optional[Tensor] = None
             ) -> Tensor:
        r"""The readout ``[B, F]``: the mean of node features per graph over all nodes, or (for
        ``readout='outer'``) over the nodes of the graph's largest ``shell`` id.

        Args:
            h (torch.Tensor): Node features ``[N, F]``.
            batch (torch.Tensor): Graph of every node ``[N]``.
            num_graphs (int): Number of graphs :math:`B`.
            shell (torch.Tensor, optional): Shell id of every node ``[N]``, required for
                ``readout='outer'``. (default: :obj:`None`)
        """
        if self.readout == "mean":
            return scatter(h, batch, dim=0, dim_size=num_graphs, reduce="mean")
        if not isinstance(shell, Tensor) or shell.shape != batch.shape:
            raise fail(ValueError if shell is None or isinstance(shell, Tensor) else TypeError,
                       "QSVNet", "shell", "one shell id per node [N] for readout='outer' "
                       "(data.shell; the sphere and lattice transforms provide it)", shell)
        top = scatter(shell, batch, dim=0, dim_size=num_graphs, reduce="max")
        mask = shell == top[batch]
        return scatter(h[mask], batch[mask], dim=0, dim_size=num_graphs, reduce="mean")

    @overload
    def forward(self, data: Any, return_attention_weights: Optional[Literal[False]] = None
                ) -> Tensor:
        ...

    @overload
    def forward(self, data: Any, return_attention_weights: Literal[True]
                ) -> tuple[Tensor, list[tuple[Tensor, Tensor]]]:
        ...

    def forward(self, data: Any, return_attention_weights: Optional[bool] = None
                ) -> Union[Tensor, tuple[Tensor, list[tuple[Tensor, Tensor]]]]:
        r"""Classifies a batch of graphs.

        Args:
            data (Batch or Data): Graphs with ``x``, ``edge_index``, ``batch`` (absent: one
                graph) and ``shell`` (for the outer readout).
            return_attention_weights (bool, optional): :obj:`True` also returns the
                ``(edge_index, alpha [E, heads])`` of every layer (after attention dropout:
                use eval mode for the softmax weights). (default: :obj:`None`)

        Returns:
            torch.Tensor: Logits ``[B, num_classes]`` (and the list of attention weights).
        """
        want = check_return_attention_weights(return_attention_weights, where="QSVNet")
        x, edge_index, batch, num_graphs = self._inputs(data)
        h, att = self._trunk(x, edge_index, "attention" if want else None)
        g = self.pool(h, batch, num_graphs, getattr(data, "shell", None))
        logits = self.classifier(F.dropout(g, self.dropout, self.training))
        if want:
            return logits, att
        return logits

    @torch.no_grad()
    def quaternions(self, data: Any) -> list[Tensor]:
        r"""The unit quaternions :math:`q_i` ``[N, heads, 4]`` of every QSVConv layer on
        :obj:`data` (a batch as in :meth:`forward`), one tensor per layer."""
        if self.conv != "qsv":
            raise ValueError(f"quaternions() needs conv='qsv' (this model has {self.conv!r})")
        x, edge_index, _, _ = self._inputs(data, "QSVNet.quaternions")
        _, inputs = self._trunk(x, edge_index, "conv_inputs")

        return [block.conv.quaternions(h) for block, h in zip(self.blocks, inputs)]

    def __repr__(self) -> str:
        extra = ""
        for name, default in (("stem", "linear"), ("readout", "mean"), ("conv", "qsv"),
                              ("mixing", "quaternion"), ("norm", "layer")):
            value = getattr(self, "stem_type" if name == "stem" else name)
            if value != default:
                extra += f", {name}={value!r}"
        if self.pos_embedding:
            extra += f", pos_embedding=True, num_nodes={self.num_nodes}"
        return (f"{self.__class__.__name__}({self.in_channels}, {self.num_classes}, "
                f"channels={self.channels}, heads={self.heads}, "
                f"num_layers={self.num_layers}{extra})")


def match_parameter_count(target: int, in_channels: int, num_classes: int,
                          tolerance: float = 0.05, **kwargs: Any) -> dict[str, Any]:
    r"""The width of the standard-attention :class:`QSVNet` (``conv='transformer'``) whose
    parameter count is closest to :obj:`target`: a control that differs from a QSV model in
    its attention, not in its size.

    The search brackets :obj:`target` among the widths allowed for the heads and mixing
    (multiples of :math:`\mathrm{lcm}(4, H)` with quaternion mixing, MLP at :obj:`mlp_ratio`
    times the width), then sets the MLP hidden width of each bracketing width to the best
    match (the count is affine in it); the closer wins, ties to the MLP width nearer
    :obj:`mlp_ratio`. Counts come from building the models, never from a formula.

    Args:
        target (int): The parameter count to match (for example a QSV model's
            :meth:`QSVNet.parameter_count`).
        in_channels (int): Node feature size.
        num_classes (int): Number of classes.
        tolerance (float, optional): Largest accepted relative gap
            :math:`|n - n^\ast| / n^\ast`. (default: :obj:`0.05`)
        **kwargs (optional): Other :class:`QSVNet` arguments (``heads``, ``num_layers``,
            ``stem``, ``mixing``, ``mlp_ratio``, ...); ``channels``, ``mlp_hidden`` and
            ``conv`` are chosen here, and ``qsv_kwargs`` does not apply.

    Returns:
        dict: ``channels``, ``mlp_hidden``, ``parameters``, ``target`` and
        ``relative_gap``.

    Example:
        >>> qsv = QSVNet(4, 10, channels=32, heads=2, num_layers=3)
        >>> m = match_parameter_count(qsv.parameter_count(), 4, 10, heads=2, num_layers=3)
        >>> control = QSVNet(4, 10, channels=m["channels"], mlp_hidden=m["mlp_hidden"],
        ...                  conv="transformer", heads=2, num_layers=3)
        >>> control.parameter_count() == m["parameters"]
        True
    """
    where = "match_parameter_count"
    check_int(target, "target", 1, where=where)
    check_positive_float(tolerance, "tolerance", where=where)
    for name in ("channels", "mlp_hidden", "conv", "qsv_kwargs"):
        if name in kwargs:
            raise fail(ValueError, where, name, "left out (chosen here)" if name != "qsv_kwargs"
                       else "left out (the standard-attention control has no QSVConv)",
                       kwargs[name])
    heads = kwargs.get("heads", 4)
    ratio = float(kwargs.pop("mlp_ratio", 2.0))
    step = math.lcm(4, heads) if kwargs.get("mixing", "quaternion") == "quaternion" else heads

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
    best: Optional[tuple[tuple[float, float], dict[str, Any]]] = None
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
            f"{where}: no standard-attention width matches {target} parameters within "
            f"{tolerance:.0%} (best: channels={match['channels']}, mlp_hidden="
            f"{match['mlp_hidden']}, {match['parameters']} parameters)")
    return match
