r"""The QSV coupled quaternion attention layer (:class:`QSVConv`)."""
from __future__ import annotations

from typing import Any, Literal, NamedTuple, NoReturn, Optional, Tuple, Union, overload

import torch
import torch.nn.functional as F
import torch_geometric.typing  # noqa: F401  (names the types of _path_scatter's two calls)
from torch import Tensor
from torch.nn import Parameter
from torch_geometric.nn.conv import MessagePassing
from torch_geometric.nn.dense.linear import Linear
from torch_geometric.typing import PairTensor, SparseTensor
from torch_geometric.utils import is_torch_sparse_tensor, softmax
from torch_geometric.utils.sparse import set_sparse_value

from quest_geometric._utils.checks import (
    all_finite, check_choice, check_int, check_real, check_return_attention_weights,
    check_tensor, fail,
)
from quest_geometric.nn import _qsv_ops as ops
from quest_geometric.nn._qsv_graph import (
    GraphInfo, NonFiniteOutput, dense_degree, graph_layout, read_graph,
)
from quest_geometric.nn._qsv_path import Layout, Path, PathFacts, Plan, choose_path
from quest_geometric.quaternion import multiply, normalize, random_unit

__all__ = ["QSVConv"]

_QUATERNION_SOURCES = ("feature", "node", "both")
_ATTENTIONS = ("learned", "uniform")
_FUSED_DTYPES = (torch.float32, torch.float64)
#: The paths whose native kernels and operators check every index they read themselves.
_NATIVE_PATHS = (Path.DENSE_NATIVE, Path.DENSE_EPILOGUE, Path.GRAPH, Path.GRAPH_ROTATE)
#: The paths whose kernel tests the finished output for NaN and infinities in its own pass
#: (eager mode), in place of the layer's check of the output.
_OUTPUT_CHECKED = (Path.DENSE_EPILOGUE, Path.GRAPH_ROTATE)
#: The per-instance hook tables of :class:`~torch_geometric.nn.conv.MessagePassing`; a hook in
#: any of them expects to see the messages, so the dense path steps aside for it.
_HOOK_TABLES = tuple(f"_{kind}_forward{pre}_hooks" for kind in (
    "propagate", "message", "aggregate", "message_and_aggregate", "edge_update")
    for pre in ("_pre", ""))


def _needs_grad(*tensors: Tensor) -> bool:
    """Whether autograd records a computation on these tensors (grad mode on and one of them
    requiring a gradient): where it does not, the forward-only native operators may run."""
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def _edge_order(alpha: Tensor) -> Tensor:
    """``[N_dst, H, k]`` weights as ``[N_dst * k, H]`` in edge order, contiguous (for one head
    a plain view: the strides of the scatter path's weights, which :func:`torch.cond`
    requires of its two branches)."""
    Nd, H, k = alpha.shape
    if H == 1:
        return alpha.reshape(Nd * k, 1)
    return alpha.transpose(1, 2).reshape(Nd * k, H)


def _check_arguments(in_channels: Any, out_channels: Any, heads: Any, quaternion: Any,
                     num_nodes: Any, transport: Any, attention: Any, temperature: Any,
                     dropout: Any, fused: Any, dense: Any) -> Any:
    """Refuse bad constructor arguments of :class:`QSVConv`; returns the temperature (a
    float where a number was given)."""
    check_int(heads, "'heads'", 1, where="QSVConv")
    check_int(out_channels, "out_channels", 1, where="QSVConv")
    if out_channels % (4 * heads) != 0:
        raise fail(ValueError, "QSVConv", "out_channels", f"a positive multiple of 4 * heads "
                   f"= {4 * heads} (each head's channels are read as quaternions)",
                   out_channels, hint="; the signature is QSVConv(in_channels, "
                   "out_channels, heads=...) as in PyG, so pass heads by keyword, and any "
                   "in_channels (or -1, lazy) is projected to out_channels")
    widths = in_channels if isinstance(in_channels, tuple) else (in_channels,)
    what = "a positive int, -1 (lazy) or a pair (src, dst) of them"
    if len(widths) not in (1, 2) or any(
            not isinstance(w, int) or isinstance(w, bool) for w in widths):
        raise fail(TypeError, "QSVConv", "in_channels", what, in_channels)
    if any(w < 1 and w != -1 for w in widths):
        raise fail(ValueError, "QSVConv", "in_channels", what, in_channels)
    if isinstance(in_channels, tuple) and quaternion in ("node", "both"):
        raise fail(ValueError, "QSVConv", "in_channels", f"one width with quaternion="
                   f"{quaternion!r} (one quaternion per node of one fixed graph; no "
                   "bipartite input)", in_channels)
    check_choice(quaternion, "'quaternion'", _QUATERNION_SOURCES, where="QSVConv")
    if quaternion in ("node", "both"):
        check_int(num_nodes, f"'num_nodes' (for quaternion={quaternion!r})", 1, where="QSVConv")
    elif num_nodes is not None:
        raise fail(ValueError, "QSVConv", "num_nodes", "None unless quaternion='node' or "
                   "'both'", got_text=f"{num_nodes!r} with quaternion={quaternion!r}")
    check_choice(attention, "'attention'", _ATTENTIONS, where="QSVConv")
    if temperature is not None and temperature != "learned":
        temperature = check_real(temperature, "temperature (None, 'learned' or a number)",
                                 True, where="QSVConv")
    for name, value in (("transport", transport), ("fused", fused)):
        if not isinstance(value, bool):
            raise fail(TypeError, "QSVConv", name, "a bool", value)
    if check_real(dropout, "dropout", where="QSVConv") < 0.0 or dropout > 1.0:
        raise fail(ValueError, "QSVConv", "dropout", "a float in [0, 1]", dropout)
    if dense is not None and not isinstance(dense, bool):
        raise fail(TypeError, "QSVConv", "dense", "True, False or None", dense)
    return temperature


class _Call(NamedTuple):
    """What every attention path takes: the graph, the rotated source features
    ``[N_src, H, C]``, the quaternions, the targets' rotation (:obj:`None` without
    transport), the dense path's explain mask, whether the weights are returned, and whether
    the path checks the targets' layout (compiled ``dense=True``)."""

    info: GraphInfo
    coo: Tensor
    xs: Tensor
    q_src: Tensor
    q_dst: Tensor
    rot_dst: Optional[Tensor]
    mask: Optional[Tensor]
    want_alpha: bool
    check_targets: bool


class QSVConv(MessagePassing):
    r"""The coupled quaternion attention operator from the `"QSV: Quat-Sphere-Vision for
    Coupled Quaternion Attention on Spherical Lattices" <https://arxiv.org/abs/2609.30592>`_
    paper, which replaces the query, key and value maps of attention by one learned unit
    quaternion :math:`q_i^{(h)}` per node :math:`i` and head :math:`h`.

    The channels of each head are read as :math:`m` quaternions
    :math:`\mathbf{x}_{j}^{(h, g)} = (x_0, \mathbf{x}_v)` (``out_channels = heads * 4 * m``,
    real part first).  For an edge :math:`j \to i` the relative quaternion
    :math:`r_{ij} = q_i^{*} q_j` gives the attention logit

    .. math::
        e_{ij}^{(h)} = \tau_h\,\mathrm{Re}\bigl(q_i^{(h)*} q_j^{(h)}\bigr)
        = \tau_h\,\bigl\langle q_i^{(h)}, q_j^{(h)} \bigr\rangle,

    normalised over the in-neighbours of :math:`i`,

    .. math::
        \alpha_{ij}^{(h)} = \frac{\exp e_{ij}^{(h)}}
        {\sum_{k \in \mathcal{N}(i)} \exp e_{ik}^{(h)}},

    and transports the neighbour's features by the sandwich product

    .. math::
        T_{ij}^{(h)}(\mathbf{x}) = r_{ij}^{(h)}\,\mathbf{x}\,r_{ij}^{(h)*}
        = \bigl(x_0,\; R(q_i^{(h)})^{\top} R(q_j^{(h)})\,\mathbf{x}_v\bigr),

    which keeps the real part and rotates the vector part.  The update is

    .. math::
        \mathbf{x}_i^{\prime\,(h, g)} = \sum_{j \in \mathcal{N}(i)} \alpha_{ij}^{(h)}\,
        T_{ij}^{(h)}\bigl(\mathbf{x}_j^{(h, g)}\bigr) + \mathbf{b}
        = q_i^{*} \Bigl[\sum_{j \in \mathcal{N}(i)} \alpha_{ij}\,
        q_j \mathbf{x}_j q_j^{*}\Bigr] q_i + \mathbf{b},

    and the right-hand factorisation is how it is computed: every node's features are
    rotated by :math:`R(q_j)` once before aggregation and by :math:`R(q_i)^{\top}` once after,
    so the per-edge work is a 4-dimensional dot product per head plus the weighted sum.
    There is no value map: the operator keeps its input's width, :obj:`out_channels`.  Inputs
    of another width (:obj:`in_channels`) are first projected linearly to it,
    :math:`\mathbf{x}_j \leftarrow \mathbf{\Theta}\mathbf{x}_j`, and every formula above
    reads the projected features.

    The quaternions come from the features (:obj:`quaternion='feature'`,
    :math:`q_i = \mathrm{normalize}(\mathbf{W}\mathbf{x}_i + \mathbf{c})`), from a free
    per-node parameter of a fixed graph (:obj:`'node'`), or from the normalised product
    :math:`q_i = \mathrm{normalize}(p_i\,(\mathbf{W}\mathbf{x}_i + \mathbf{c}))` of both
    (:obj:`'both'`).  The output is invariant under :math:`q_i \mapsto g\,q_i` for any fixed
    unit :math:`g`, and :math:`q` and :math:`-q` give the same transport but opposite logits.
    A quaternion that is exactly zero (measure zero; :func:`~quest_geometric.quaternion.normalize`
    keeps it zero) gives logit :math:`0` and zeroes the transported vector part, never ``NaN``.

    Two families of execution paths compute the same function: the general scatter path of
    :class:`~torch_geometric.nn.conv.MessagePassing`, and dense paths for graphs in which
    every target node has exactly :math:`k` in-edges sorted by target
    (``edge_index[1] == arange(N).repeat_interleave(k)``, the layout of
    :func:`quest_geometric.geometry.knn_graph` and of sphere graphs), where the softmax runs
    densely over the :math:`k` neighbours and (``fused``) the weighted sum is a sparse-dense
    product over the attention weights,

    .. math::
        \mathbf{Y}^{(h)} = \mathbf{A}^{(h)} \tilde{\mathbf{X}}^{(h)}, \qquad
        \mathbf{A}^{(h)}_{ij} = \alpha^{(h)}_{ij},

    so no ``[E, C]`` message tensor is materialised.  On the CPU in ``float32`` and
    ``float64`` native kernels compute the dense path (compiled from C at first use; see
    :func:`~quest_geometric.nn.qsv_native_status`); the layer traces under
    :func:`torch.compile` with no graph breaks.  Which path a call takes, and why, is
    described in ``docs/qsv.md`` (*Execution paths*).

    **PyG tools.**  Explain masks (``explain=True`` with an ``edge_mask``, as set by
    :class:`~torch_geometric.explain.Explainer`) multiply each message after the softmax, on
    every path: with ``dense=None`` the layer takes the scatter path whenever explaining is
    on or any message-passing hook (``register_message_forward_hook`` and friends, used by
    :class:`~torch_geometric.explain.algorithm.AttentionExplainer`) is registered, so PyG
    sees every message; with ``dense=True`` the dense path applies the mask itself (hooks
    then raise, since there are no messages to hook).  A zero mask entry removes that
    message on both paths alike (it is not renormalised away, as in PyG).

    **Bipartite input.**  ``x = (x_src, x_dst)`` takes source quaternions from the source
    features and target quaternions from the target features (``'feature'`` quaternions),
    so :func:`~torch_geometric.nn.to_hetero` can run the layer on a relation between two node
    types; ``x_src is x_dst`` is the plain call.

    Args:
        in_channels (int or tuple): Size of each input sample, or :obj:`-1` to derive it
            from the first input (lazy, as in PyG's
            :class:`~torch_geometric.nn.dense.Linear`).  A tuple ``(src, dst)`` gives the
            source and target widths of a bipartite graph.  Any width other than
            :obj:`out_channels` (or :obj:`-1`) adds a linear input projection
            :math:`\mathbf{x}_i \mapsto \mathbf{\Theta}\mathbf{x}_i` (Glorot, no bias; one per
            side for a tuple) before the operator; equal widths add none.
        out_channels (int): Size of each output sample: the operator's width, a multiple of
            :obj:`4 * heads` (the channels of each head are read as quaternions).
        heads (int, optional): Number of heads, each with its own quaternion.
            (default: :obj:`1`)
        quaternion (str, optional): Where :math:`q_i` comes from: :obj:`'feature'`,
            :obj:`'node'` or :obj:`'both'`. (default: :obj:`'feature'`)
        num_nodes (int, optional): Number of nodes of the fixed graph, required for
            :obj:`'node'` and :obj:`'both'` and not allowed otherwise.  An input with
            :math:`N = b \cdot` :obj:`num_nodes` nodes is read as :math:`b` copies of the
            template graph batched the PyG way (node blocks concatenated in order), and the
            node quaternions are tiled :math:`b` times. (default: :obj:`None`)
        transport (bool, optional): If :obj:`False`, skip the sandwich transport (the paper's
            "no transport" ablation): plain attention-weighted averaging. (default: :obj:`True`)
        attention (str, optional): :obj:`'learned'` for the quaternion softmax weights,
            :obj:`'uniform'` for :math:`\alpha_{ij} = 1/|\mathcal{N}(i)|` (the paper's
            uniform-averaging ablation). (default: :obj:`'learned'`)
        temperature (float or str, optional): The scale :math:`\tau` multiplying the logit:
            :obj:`None` for the paper's unscaled logit (:math:`\tau = 1`), a positive float,
            or :obj:`'learned'` for a learnable per-head scale initialised to 1.
            (default: :obj:`None`)
        dropout (float, optional): Dropout probability of the normalised attention
            coefficients during training; the weights returned with
            :obj:`return_attention_weights=True` are the ones used, *after* dropout (in
            training mode some are zero and the rest scaled by :math:`1/(1-p)`, so they no
            longer sum to 1; in eval mode they are the softmax). (default: :obj:`0.0`)
        bias (bool, optional): If set to :obj:`False`, the layer will not learn an additive
            bias. (default: :obj:`True`)
        fused (bool, optional): On the dense path, compute the weighted sum in one pass over
            the neighbours' features (no ``[E, C]`` gather) for ``float32``/``float64``
            input; :obj:`False` uses the plain gather reference. (default: :obj:`True`)
        dense (bool, optional): The layer's default for :meth:`forward`'s ``dense`` (used
            where a call passes :obj:`None`): :obj:`True` when every graph it will see has
            the dense layout (``k`` in-edges per node, sorted by target, as the library's
            kNN sphere graphs), :obj:`False` for the scatter path, :obj:`None` to detect the
            layout per graph (under :func:`torch.compile` at run time, inside the compiled
            graph).  A forced dense layout is checked at every call, eager and compiled.
            (default: :obj:`None`)
        **kwargs (optional): Additional arguments of
            :class:`torch_geometric.nn.conv.MessagePassing`.

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}|, F_{in})` or a pair
          :math:`((|\mathcal{V}_s|, F_{s}), (|\mathcal{V}_t|, F_{t}))`, edge indices
          :math:`(2, |\mathcal{E}|)` (row = source :math:`j`, column = target :math:`i`) or a
          :class:`torch.sparse.Tensor` adjacency in PyG's transposed form
          (``adj_t[i, j] != 0`` for an edge :math:`j \to i`, shape
          :math:`(|\mathcal{V}_t|, |\mathcal{V}_s|)`)
        - **output:** node features :math:`(|\mathcal{V}_t|, F_{out})`.  With
          :obj:`return_attention_weights=True` also ``(edge_index, alpha)``: for an
          ``edge_index`` tensor, that tensor and ``alpha`` :math:`(|\mathcal{E}|, H)` in its
          edge order; for a sparse ``adj_t``, ``(adj_alpha, alpha)`` with ``adj_alpha`` the
          same sparsity pattern and layout holding ``alpha`` as values
          (:math:`(|\mathcal{V}_t|, |\mathcal{V}_s|, H)`, PyG's
          :class:`~torch_geometric.nn.conv.GATConv` convention) and ``alpha`` in the order of
          its values.

    Example:
        >>> conv = QSVConv(64, 64, heads=4)  # no projection
        >>> x = torch.randn(10, 64)
        >>> edge_index = torch.stack([torch.randint(0, 10, (30,)),
        ...                           torch.arange(10).repeat_interleave(3)])
        >>> conv(x, edge_index).shape
        torch.Size([10, 64])
        >>> QSVConv(-1, 32, heads=4)(x, edge_index).shape  # lazy input projection
        torch.Size([10, 32])
    """

    def __init__(self, in_channels: Union[int, Tuple[int, int]], out_channels: int,
                 heads: int = 1, quaternion: str = "feature", num_nodes: Optional[int] = None,
                 transport: bool = True, attention: str = "learned",
                 temperature: Optional[Union[float, str]] = None, dropout: float = 0.0,
                 bias: bool = True, fused: bool = True, dense: Optional[bool] = None,
                 **kwargs: Any) -> None:
        kwargs.setdefault("aggr", "add")
        super().__init__(node_dim=0, **kwargs)
        temperature = _check_arguments(in_channels, out_channels, heads, quaternion, num_nodes,
                                       transport, attention, temperature, dropout, fused,
                                       dense)
        self.in_channels, self.out_channels, self.heads = in_channels, out_channels, heads
        self.quaternion, self.num_nodes, self.transport = quaternion, num_nodes, transport
        self.attention, self.temperature, self.dropout = attention, temperature, float(dropout)
        self.fused, self.dense = fused, dense
        #: Number of quaternions per head.
        self.groups = out_channels // (4 * heads)

        def projection(width: int) -> Optional[Linear]:
            if width == out_channels:
                return None
            return Linear(width, out_channels, bias=False, weight_initializer="glorot")

        pair = isinstance(in_channels, tuple)
        self.register_module("lin", None if pair else projection(in_channels))
        self.register_module("lin_src", projection(in_channels[0]) if pair else None)
        self.register_module("lin_dst", projection(in_channels[1]) if pair else None)
        self.register_module("lin_q", Linear(out_channels, 4 * heads, bias=True,
                                             weight_initializer="glorot")
                             if quaternion in ("feature", "both") else None)
        self.register_parameter("node_q", Parameter(torch.empty(num_nodes, heads, 4))
                                if quaternion in ("node", "both") else None)
        self.register_parameter("scale", Parameter(torch.empty(heads))
                                if temperature == "learned" else None)
        self.register_parameter("bias", Parameter(torch.empty(out_channels)) if bias else None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        r"""Resets all learnable parameters: Glorot for the input projections
        (:obj:`lin`, or :obj:`lin_src` and :obj:`lin_dst`; a lazy one stays uninitialised
        until the first input) and :obj:`lin_q`, uniform random unit quaternions (from the
        global generator) for :obj:`node_q`, 1 for the learned temperature and 0 for the
        bias."""
        super().reset_parameters()
        for lin in (self.lin, self.lin_src, self.lin_dst, self.lin_q):
            if lin is not None:
                lin.reset_parameters()
        with torch.no_grad():
            if self.node_q is not None:
                self.node_q.copy_(random_unit(self.node_q.shape[:-1], dtype=self.node_q.dtype,
                                              device=self.node_q.device))
            if self.scale is not None:
                self.scale.fill_(1.0)
            if self.bias is not None:
                self.bias.zero_()

    def quaternions(self, x: Tensor) -> Tensor:
        r"""Unit quaternion of every node and head, shape ``[N, heads, 4]``.

        Args:
            x (torch.Tensor): Node features ``[N, out_channels]`` (after any input
                projection).
        """
        N, H = x.size(0), self.heads
        q: Optional[Tensor] = None
        if self.lin_q is not None:
            q = self.lin_q(x).view(N, H, 4)
        if self.node_q is not None:
            assert self.num_nodes is not None
            p = self.node_q
            if N != self.num_nodes:
                if N % self.num_nodes != 0:
                    raise fail(ValueError, "QSVConv", "x", f"of num_nodes={self.num_nodes} "
                               f"rows or a multiple of it with quaternion={self.quaternion!r} "
                               "(a batch of copies of the fixed graph)", got_text=f"{N} rows")
                p = p.repeat(N // self.num_nodes, 1, 1)
            q = p if q is None else multiply(p, q)
        assert q is not None
        return normalize(q)

    # ------------------------------------------------------------------ input handling
    def _split_x(self, x: Any) -> tuple[Tensor, Tensor, bool, list[tuple[str, Tensor]]]:
        """``(x_src, x_dst, bipartite, unchecked)`` from ``x`` or ``(x_src, x_dst)``,
        validated and projected to :obj:`out_channels`; ``unchecked``: the inputs (name,
        tensor) whose finiteness is still to be checked (:meth:`_check_finite_inputs`, or
        through the quaternions of the fused prologue)."""
        if isinstance(x, (tuple, list)):
            if len(x) != 2:
                raise fail(ValueError, "QSVConv", "x", "a tensor or a pair (x_src, x_dst)",
                           got_text=f"{len(x)} entries")
            x_src, x_dst = x
            names = ("x[0] (x_src)", "x[1] (x_dst)")
        else:
            x_src = x_dst = x
            names = ("x", "x")
        # A lazy (-1) width is the projection's own once its first input has set it.
        lins = ((self.lin_src, self.lin_dst) if isinstance(self.in_channels, tuple)
                else (self.lin, self.lin))
        widths = tuple(lin.in_channels if lin is not None else self.out_channels for lin in lins)
        unchecked: list[tuple[str, Tensor]] = []
        for side, (name, t, width) in enumerate(zip(names, (x_src, x_dst), widths)):
            if side == 1 and t is x_src and width == widths[0]:
                break  # one tensor for both sides: checked once
            if t is None:
                raise fail(TypeError, "QSVConv", f"'{name}'", "a tensor (QSVConv needs target "
                           "features for the target quaternions; pass (x_src, x_dst) with "
                           "both tensors)", t)
            check_tensor(t, f"'{name}'", where="QSVConv", floating=True)
            if t.dim() != 2:
                raise fail(ValueError, "QSVConv", f"'{name}'", "a 2-D tensor [num_nodes, "
                           "channels]", t)
            if width != -1 and t.size(1) != width:
                raise fail(ValueError, "QSVConv", f"'{name}'", f"of {width} channels "
                           "(in_channels)", t)
            param = self.lin_q.weight if self.lin_q is not None else self.node_q
            if t.dtype != param.dtype and not torch.is_autocast_enabled(t.device.type):
                raise TypeError(
                    f"QSVConv: '{name}' must be of the dtype of the layer's parameters "
                    f"({param.dtype}), got {t.dtype}; convert the input with "
                    f"x.to({param.dtype}) or the layer with layer.to({t.dtype})")
            if not ops.is_compiling():
                unchecked.append((name, t))
        if isinstance(self.in_channels, tuple):
            x_src = x_src if self.lin_src is None else self.lin_src(x_src)
            x_dst = x_dst if self.lin_dst is None else self.lin_dst(x_dst)
        elif self.lin is not None:
            x_dst = self.lin(x_dst) if x_dst is not x_src else None
            x_src = self.lin(x_src)
            x_dst = x_src if x_dst is None else x_dst
        bipartite = x_src is not x_dst
        if bipartite and self.node_q is not None:
            raise fail(ValueError, "QSVConv", "x", f"one tensor with quaternion="
                       f"{self.quaternion!r} (one quaternion per node of one fixed graph); use "
                       "quaternion='feature' for relations between node types",
                       got_text="a bipartite pair (x_src, x_dst)")
        return x_src, x_dst, bipartite, unchecked

    @staticmethod
    def _check_finite_inputs(unchecked: list[tuple[str, Tensor]]) -> None:
        """Refuse non-finite features (eager mode only: one host synchronisation per tensor;
        :func:`torch.compile` skips it, where it would break the graph)."""
        for name, t in unchecked:
            if not all_finite(t):
                raise ValueError(
                    f"QSVConv: '{name}' must be finite, got NaN or infinite entries "
                    f"({int((~torch.isfinite(t)).sum())} of {t.numel()})")

    def _refuse_overflow(self, x_src: Tensor, x_dst: Tensor,
                         unchecked: list[tuple[str, Tensor]]) -> NoReturn:
        """Raised for a non-finite output: the input's non-finite entries by name where it
        has some, else the finite input so large that the layer overflows its dtype."""
        self._check_finite_inputs(unchecked)
        names = [name for name, _ in unchecked] or ["x"]
        top = max(float(t.detach().abs().max()) for t in (x_src, x_dst) if t.numel())
        raise ValueError(
            f"QSVConv: '{names[0]}' must be small enough that the output stays finite in "
            f"{x_src.dtype}, got finite entries so large that the output overflows (largest "
            f"{top:.3g} after any input projection); scale the input down")

    @staticmethod
    def is_dense_layout(edge_index: Tensor, num_nodes: int) -> bool:
        r"""Whether every node has the same number :math:`k \geq 1` of in-edges, sorted by
        target: ``edge_index[1] == arange(num_nodes).repeat_interleave(k)``.

        This reads the data (a host synchronisation, and a graph break under
        :func:`torch.compile`)."""
        return dense_degree(edge_index[1], num_nodes) > 0

    def _hooked(self) -> bool:
        """Whether a message-passing hook is registered."""
        return any(getattr(self, name) for name in _HOOK_TABLES)

    def _dense_mask(self, num_edges: int) -> Optional[Tensor]:
        """The explain mask as :meth:`~torch_geometric.nn.conv.MessagePassing.
        explain_message` would apply it, for the dense path (``None`` when not explaining)."""
        if not self.explain:
            return None
        if ("explain_message" in self.__dict__
                or type(self).explain_message is not MessagePassing.explain_message):
            raise ValueError(
                "dense=True cannot apply a custom 'explain_message'; pass dense=None or "
                "False to explain through the scatter path")
        mask = self._edge_mask
        if mask is None:
            raise ValueError("Could not find a pre-defined 'edge_mask' to explain. Did you "
                             "forget to initialize it?")
        if mask.numel() != num_edges:
            raise ValueError(f"the explain 'edge_mask' has {mask.numel()} entries for "
                             f"{num_edges} edges")
        return mask.sigmoid() if self._apply_sigmoid else mask

    # ------------------------------------------------------------------ forward
    @overload
    def forward(self, x: Union[Tensor, PairTensor], edge_index: Tensor,
                return_attention_weights: Optional[Literal[False]] = None,
                dense: Optional[bool] = None) -> Tensor:
        ...

    @overload
    def forward(self, x: Union[Tensor, PairTensor], edge_index: Tensor,
                return_attention_weights: Literal[True],
                dense: Optional[bool] = None) -> Tuple[Tensor, Tuple[Tensor, Tensor]]:
        ...

    def forward(self, x: Union[Tensor, PairTensor], edge_index: Union[Tensor, Any],
                return_attention_weights: Optional[bool] = None, dense: Optional[bool] = None
                ) -> Union[Tensor, Tuple[Tensor, Tuple[Tensor, Tensor]]]:
        r"""Runs the forward pass of the module.

        Args:
            x (torch.Tensor or (torch.Tensor, torch.Tensor)): Node features
                ``[N, in_channels]``, or ``(x_src, x_dst)`` for a bipartite graph (source
                quaternions from ``x_src``, target quaternions and the output rows from
                ``x_dst``).
            edge_index (torch.Tensor): Edge indices ``[2, E]`` (source, target), or a
                :class:`torch.sparse.Tensor` adjacency ``adj_t`` (``[N_dst, N_src]``, any
                layout).
            return_attention_weights (bool, optional): :obj:`True` additionally returns
                ``(edge_index, alpha)`` with ``alpha`` of shape ``[E, heads]`` (after
                dropout, before any explain mask); for a sparse ``adj_t`` the first entry
                is ``adj_t``'s pattern and layout holding ``alpha``.  :obj:`None` or
                :obj:`False` return the features only. (default: :obj:`None`)
            dense (bool, optional): :obj:`True` forces the dense ``[N, k]`` path (the graph
                must have that layout: checked on the host in eager mode, by an assertion
                inside the graph under :func:`torch.compile`), :obj:`False` forces the scatter
                path, :obj:`None` detects the layout from the data and takes the scatter path
                while explaining or when message-passing hooks are registered.  The layout
                and the indices are read at every call: where the native kernels apply, by
                the custom operator ``qsv_attend_graph``, which checks both in the kernel's
                own pass (eager and compiled); elsewhere on the host in eager mode, and in
                the compiled graph by :func:`torch.cond` and an operator that refuses an
                index outside the nodes with the same :class:`ValueError` (the scatter path
                alone while compiled with attention dropout in training);
                :obj:`None` takes the layer's own default first (its constructor's ``dense``).
                (default: :obj:`None`)

        Raises:
            TypeError: if :obj:`x` has another floating dtype than the layer's parameters
                (outside :func:`torch.autocast`).
            ValueError: for bad shapes or :obj:`edge_index` entries (an index outside the
                nodes also under :func:`torch.compile`), non-finite :obj:`x`, or finite
                :obj:`x` so large that the output overflows (both checked in eager mode:
                one host synchronisation each per call, the second over the output), or a
                graph without the dense layout for :obj:`dense=True`.
            RuntimeError: under :func:`torch.compile`, from the compiled graph, for a graph
                without the dense layout for :obj:`dense=True` (on CUDA a device-side
                assertion, reported asynchronously, after which the process's CUDA context
                cannot be used).
        """
        want_alpha = check_return_attention_weights(return_attention_weights, where="QSVConv")
        x_src, x_dst, bipartite, unchecked = self._split_x(x)
        Ns, Nd = x_src.size(0), x_dst.size(0)
        info, coo = read_graph(edge_index, Ns, Nd)
        plan = self._decide(info, coo, x_src, x_dst, bipartite,
                            self.dense if dense is None else dense)
        q_src, q_dst, xs, rot_dst = self._prepare(plan, x_src, x_dst, bipartite, unchecked)
        if plan.path not in _NATIVE_PATHS:
            coo = ops.checked(coo, Ns, Nd)  # the native kernels check every index they read
        mask = self._dense_mask(coo.size(1)) if plan.path is not Path.SCATTER else None
        call = _Call(info, coo, xs.reshape(Ns, self.heads, -1), q_src, q_dst, rot_dst, mask,
                     want_alpha, plan.check_targets)
        try:
            if plan.path is Path.COND:
                dense_path = choose_path(self._facts(x_src, x_dst, bipartite, Layout.DENSE))
                out, alpha = self._path_cond(call, dense_path.path)
            else:
                out, alpha = getattr(self, "_path_" + plan.path.value)(call)
        except NonFiniteOutput:  # the kernel's check of the output (eager only)
            self._refuse_overflow(x_src, x_dst, unchecked)
        out = self._finish(plan, out, rot_dst)
        if (not ops.is_compiling() and plan.path not in _OUTPUT_CHECKED
                and not all_finite(out)):
            self._refuse_overflow(x_src, x_dst, unchecked)
        if not want_alpha:
            return out
        if isinstance(edge_index, SparseTensor):
            return out, edge_index.set_value(alpha, layout="coo")  # type: ignore[return-value]
        if isinstance(edge_index, Tensor) and is_torch_sparse_tensor(edge_index):
            adj = info.adj if info.adj is not None else edge_index
            return out, (set_sparse_value(adj, alpha), alpha)
        return out, (coo, alpha)

    # ------------------------------------------------------------------ the decision
    def _decide(self, info: GraphInfo, coo: Tensor, x_src: Tensor, x_dst: Tensor,
                bipartite: bool, dense: Optional[bool]) -> Plan:
        """The call's :class:`Plan`.  A layout the sizes leave open (``dense=None``) is found
        by the native kernel in its own pass, as under :func:`torch.compile` (no pass of the
        layer's over the targets, and the kernel checks the indices it reads); where the
        chosen path has no kernel, eager mode reads the layout on the host and chooses
        again (compiled, :func:`torch.cond` finds it in the graph)."""
        hooked = self._hooked()
        layout = graph_layout(info, coo, x_dst.size(0), dense,
                              observed=bool(self.explain) or hooked, hooked=hooked,
                              dropout=self.training and self.dropout > 0.0)
        plan = choose_path(self._facts(x_src, x_dst, bipartite, layout))
        if plan.path is Path.COND and not ops.is_compiling():
            layout = info.host_layout(coo)
            plan = choose_path(self._facts(x_src, x_dst, bipartite, layout))
        return plan

    def _facts(self, x_src: Tensor, x_dst: Tensor, bipartite: bool, layout: Layout
               ) -> PathFacts:
        """The :class:`PathFacts` of a call on the (projected) features."""
        lin_q = self.lin_q
        params = [t for t in (None if lin_q is None else lin_q.weight,
                              None if lin_q is None else lin_q.bias,
                              self.node_q, self.scale, self.bias) if t is not None]
        autocast = torch.is_autocast_enabled(x_src.device.type)
        # The dtype quaternions() returns: the parameters', or under autocast the lower
        # precision of the quaternion map (promoted by the node quaternions' product).
        q_dtype = (lin_q.weight if lin_q is not None else self.node_q).dtype
        if autocast and lin_q is not None:
            q_dtype = torch.get_autocast_dtype(x_src.device.type)
            if self.node_q is not None:
                q_dtype = torch.promote_types(q_dtype, self.node_q.dtype)
        return PathFacts(
            layout=layout,
            native=not autocast and ops.supports(x_src, x_dst, *params),
            fused=self.fused and x_src.dtype == q_dtype and x_src.dtype in _FUSED_DTYPES,
            needs_grad=_needs_grad(x_src, x_dst, *params),
            autocast=autocast,
            learned=self.attention == "learned",
            dropout=self.training and self.dropout > 0.0,
            masked=bool(self.explain),
            feature_quaternions=(not bipartite and self.node_q is None
                                 and lin_q is not None and lin_q.bias is not None),
            transport=self.transport)

    # ------------------------------------------------------------------ prologue, epilogue
    def _prepare(self, plan: Plan, x_src: Tensor, x_dst: Tensor, bipartite: bool,
                 unchecked: list[tuple[str, Tensor]]
                 ) -> tuple[Tensor, Tensor, Tensor, Optional[Tensor]]:
        """``(q_src, q_dst, xs, rot_dst)``: the quaternions, the sources' features rotated by
        their quaternions ``[N_src, H, m, 4]`` and the targets' rotation matrices (both
        unrotated / :obj:`None` without transport); in one native pass for the prologue."""
        Ns, H, m = x_src.size(0), self.heads, self.groups
        if plan.prologue:
            assert self.lin_q is not None and self.lin_q.bias is not None
            q, rot, xs = ops.prepare(x_src, self.lin_q.weight, self.lin_q.bias, H)
            # The features are not checked here: every feature of a row enters each of its
            # quaternions' dot products, and a NaN or an infinity in any term makes a sum
            # non-finite (inf * 0 is NaN), which the normalisation, the rotation back and so
            # the row's output keep; forward's check of the output names the features then.
            return q, q, xs.view(Ns, H, m, 4), rot
        q_src = self.quaternions(x_src)
        q_dst = self.quaternions(x_dst) if bipartite else q_src
        if self.lin_q is None:  # node quaternions: the features must be checked themselves
            self._check_finite_inputs(unchecked)
        elif unchecked and not (all_finite(q_src) and (not bipartite or all_finite(q_dst))):
            # as in the prologue, a non-finite feature always gives a non-finite quaternion
            # (4 H numbers a row checked instead of C): the inputs are checked by name only
            # then, or the projection overflowed
            self._refuse_overflow(x_src, x_dst, unchecked)
        xs = x_src.view(Ns, H, m, 4)
        if not self.transport:
            return q_src, q_dst, xs, None
        rot_src = ops.rotation_matrix(q_src)  # [Ns, H, 3, 3]
        rot_dst = ops.rotation_matrix(q_dst) if bipartite else rot_src
        return q_src, q_dst, ops.rotate(rot_src, xs), rot_dst

    def _finish(self, plan: Plan, out: Tensor, rot_dst: Optional[Tensor]) -> Tensor:
        """The output ``[N_dst, out_channels]``: the aggregated rows rotated back by the
        targets' quaternions and the bias added, unless the attention's path did both."""
        Nd, H, m = out.size(0), self.heads, self.groups
        if plan.path in _OUTPUT_CHECKED:
            return out.reshape(Nd, self.out_channels)
        bias = None if self.bias is None else self.bias.view(H, m, 4)
        out = out.view(Nd, H, m, 4)
        if rot_dst is not None:
            out, bias = ops.rotate(rot_dst, out, True, bias), None
        out = out.reshape(Nd, self.out_channels)
        return out if bias is None else out + bias.reshape(-1)

    # ------------------------------------------------------------------ the paths
    def _path_scatter(self, c: _Call) -> Tuple[Tensor, Tensor]:
        """PyG's message passing: the general path, for any graph."""
        size = (c.q_src.size(0), c.q_dst.size(0))
        # The type comments name their types in full: PyG builds edge_updater and propagate
        # from them once per class, in a module that star-imports this one (which exports
        # QSVConv alone); an unknown name makes it reread this file at every construction.
        # edge_updater_type: (q: torch_geometric.typing.PairTensor)
        alpha = self.edge_updater(c.coo, q=(c.q_src, c.q_dst), size=size)
        # propagate_type: (x: torch_geometric.typing.OptPairTensor, alpha: Tensor)
        out = self.propagate(c.coo, x=(c.xs, None), alpha=alpha, size=size)
        return out, alpha

    def _dense_alpha(self, c: _Call, heads_first: bool) -> tuple[int, int, Tensor, Tensor]:
        """``(N_dst, k, src, alpha)`` of the PyTorch dense paths: the weights after dropout,
        ``[N_dst, H, k]`` (``heads_first``) or ``[N_dst, k, H]``.  The logits need only the
        4-D quaternions: a gather of ``[E, H, 4]`` is cheaper than a sampled product."""
        N, H = c.q_dst.size(0), self.heads
        k = c.coo.size(1) // N
        src = c.coo[0]
        if c.check_targets:
            ops.assert_dense_targets(c.coo, N)
        if self.attention == "uniform":
            alpha = c.xs.new_full((N, H, k) if heads_first else (N, k, H), 1.0 / k)
        else:
            q_j = c.q_src.index_select(0, src).view(N, k, H, 4)
            logit = self._logits(c.q_dst.unsqueeze(1), q_j)  # [N, k, H]
            alpha = logit.transpose(1, 2).softmax(-1) if heads_first else logit.softmax(1)
        return N, k, src, F.dropout(alpha, p=self.dropout, training=self.training)

    def _path_dense_gather(self, c: _Call) -> Tuple[Tensor, Tensor]:
        """The plain gather reference of the dense path (``fused=False``)."""
        N, k, src, alpha = self._dense_alpha(c, heads_first=False)
        H, C = self.heads, c.xs.size(-1)
        weights = alpha if c.mask is None else alpha * c.mask.to(alpha.dtype).view(N, k, 1)
        x_j = c.xs.index_select(0, src).view(N, k, H * C)
        # One batched GEMM [H, k] @ [k, H * C] per node, keeping the head-diagonal blocks:
        # H times the needed flops, but faster on CPU than a broadcast multiply and a
        # reduction over [N, k, H, C] (forward and backward), and exact.
        full = torch.bmm(weights.transpose(1, 2), x_j)  # [N, H, H * C]
        if H == 1:
            out = full
        else:
            out = full.view(N, H, H, C).diagonal(dim1=1, dim2=2).transpose(1, 2)
        return out, alpha.reshape(N * k, H)

    def _path_dense_fused(self, c: _Call) -> Tuple[Tensor, Tensor]:
        """The dense path as sparse-dense products over the ``[N_dst, heads, k]`` weights:
        eagerly on the graph's cached CSR pattern, under :func:`torch.compile` on a pattern
        built in the traced graph."""
        Nd, k, src, alpha = self._dense_alpha(c, heads_first=True)
        H = self.heads
        weights = alpha if c.mask is None else alpha * c.mask.to(alpha.dtype).view(Nd, 1, k)
        values, feats = weights.reshape(-1), c.xs.reshape(-1, c.xs.size(-1))
        # The sparse products take one dtype, at least float32: under autocast the features
        # may be bfloat16 beside float32 weights (and CUDA's sampled product refuses mixed
        # dtypes in the backward); the result comes back in the inputs' promoted dtype.
        common = torch.promote_types(values.dtype, feats.dtype)
        work = torch.float32 if common in (torch.float16, torch.bfloat16) else common
        pattern = None if ops.is_compiling() else c.info.pattern(c.coo, H)
        with torch.autocast(device_type=feats.device.type, enabled=False):
            out = ops.neighbour_sum(values.to(work), feats.to(work), src, Nd, k, H, pattern)
        return out.to(common).view(Nd, H, -1), _edge_order(alpha)

    def _epilogue(self, c: _Call) -> dict[str, Any]:
        """The kernels' epilogue arguments: the output rotation, the bias and (eager) the
        check of the finished output."""
        bias = None if self.bias is None else self.bias.view(self.heads, -1)
        return dict(rot=c.rot_dst, bias=bias, check_finite=not ops.is_compiling())

    def _path_dense_native(self, c: _Call, epilogue: bool = False) -> Tuple[Tensor, Tensor]:
        """The dense path as one native kernel (logits, softmax and weighted sum in one pass
        over the neighbours); with ``epilogue`` (inference only: no backward) also the
        output rotation and the bias, applied to each row as it is finished."""
        H = self.heads
        extra = self._epilogue(c) if epilogue else {}
        out, alpha = ops.attend(c.q_src.reshape(-1, H, 4), c.q_dst.reshape(-1, H, 4),
                                self._scale_vector(c.xs), c.xs, c.coo[0],
                                c.coo.size(1) // c.q_dst.size(0), None,
                                c.coo[1] if c.check_targets else None, **extra)
        return out, _edge_order(alpha)

    def _path_dense_epilogue(self, c: _Call) -> Tuple[Tensor, Tensor]:
        return self._path_dense_native(c, epilogue=True)

    def _path_graph(self, c: _Call, epilogue: bool = False) -> Tuple[Tensor, Tensor]:
        """Compiled with an unknown layout: one custom operator finds it at run time (the
        native kernel on the dense layout, a scatter form on any other), with no
        :func:`torch.cond`, whose backward would run the branch's forward again; with
        ``epilogue`` as :meth:`_path_dense_native`."""
        H = self.heads
        extra = self._epilogue(c) if epilogue else {}
        return ops.attend_graph(c.q_src.reshape(-1, H, 4), c.q_dst.reshape(-1, H, 4),
                                self._scale_vector(c.xs), c.xs, c.coo[0], c.coo[1],
                                c.q_dst.size(0), c.want_alpha, **extra)

    def _path_graph_rotate(self, c: _Call) -> Tuple[Tensor, Tensor]:
        return self._path_graph(c, epilogue=True)

    def _path_cond(self, c: _Call, dense: Path) -> Tuple[Tensor, Tensor]:
        """Compiled with an unknown layout and no native kernel: :func:`torch.cond` between
        the ``dense`` path and the scatter path, on the targets' layout."""
        dense_path = getattr(self, "_path_" + dense.value)

        def branch(path: Any) -> Any:
            def run(coo: Tensor, xs: Tensor, q_src: Tensor, q_dst: Tensor
                    ) -> Tuple[Tensor, Tensor]:
                return path(_Call(c.info, coo, xs, q_src, q_dst, None, None, True, False))
            return run

        return torch.cond(ops.dense_targets(c.coo, c.q_dst.size(0)), branch(dense_path),
                          branch(self._path_scatter), (c.coo, c.xs, c.q_src, c.q_dst))

    # ------------------------------------------------------------------ message passing
    def _logits(self, q_i: Tensor, q_j: Tensor) -> Tensor:
        r"""The scaled logits :math:`\tau_h \langle q_i, q_j \rangle`, heads last."""
        logit = (q_i * q_j).sum(dim=-1)
        if self.scale is not None:
            return logit * self.scale
        return logit * self.temperature if isinstance(self.temperature, float) else logit

    def edge_update(self, q_i: Tensor, q_j: Tensor, index: Tensor, ptr: Optional[Tensor],
                    dim_size: Optional[int]) -> Tensor:
        if self.attention == "uniform":
            logit = q_i.new_zeros(q_i.shape[:-1])
        else:
            logit = self._logits(q_i, q_j)
        alpha = softmax(logit, index, ptr, dim_size)
        return F.dropout(alpha, p=self.dropout, training=self.training)

    def message(self, x_j: Tensor, alpha: Tensor) -> Tensor:
        return x_j * alpha.unsqueeze(-1)

    def _scale_vector(self, xs: Tensor) -> Tensor:
        """The logit scale per head ``[H]``: the learned one, else the fixed temperature."""
        if self.scale is not None:
            return self.scale.reshape(self.heads)
        tau = self.temperature if isinstance(self.temperature, float) else 1.0
        return xs.new_full((self.heads,), tau)

    def __repr__(self) -> str:
        extra = "".join(text for show, text in (
            (self.quaternion != "feature",
             f", quaternion={self.quaternion!r}, num_nodes={self.num_nodes}"),
            (not self.transport, ", transport=False"),
            (self.attention != "learned", f", attention={self.attention!r}"),
            (self.temperature is not None, f", temperature={self.temperature!r}"),
            (self.dense is not None, f", dense={self.dense!r}")) if show)
        return (f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, "
                f"heads={self.heads}{extra})")
