r"""The Focus attention module: a router, projections and the choice of back-end."""
from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from quest_geometric._utils.checks import (check_batch, check_choice, check_features, check_int,
                                           check_num_sinks, check_real, check_window)
from quest_geometric.nn.focus.backends import (AUTO, choose_focus_backend, focus_backend,
                                               focus_backend_names)
from quest_geometric.nn.focus.dense import SOFT_GATES, focus_soft_attention, full_attention
from quest_geometric.nn.focus.router import FocusRouter, Router, RouterOutput

__all__ = ["FocusAttention"]


class _BackendNames(Sequence):
    r"""The names :attr:`FocusAttention.backend` accepts, read live: ``'auto'`` and every
    registered back-end."""

    def _names(self) -> Tuple[str, ...]:
        return (AUTO,) + focus_backend_names()

    def __getitem__(self, i):
        return self._names()[i]

    def __len__(self) -> int:
        return len(self._names())

    def __repr__(self) -> str:
        return repr(self._names())


#: The hard back-ends of :class:`FocusAttention`: ``'auto'`` and the registered ones.
BACKENDS: Sequence[str] = _BackendNames()
#: The soft gates of :class:`FocusAttention` (:obj:`None`: no Focus, full attention).
GATES = SOFT_GATES + (None,)


_WHERE = "FocusAttention"


def _unchanged(check: Callable[..., Any], *args: Any) -> Callable[[Any], Any]:
    """``check(value, *args, where="FocusAttention")``, which raises on a bad value, returning
    the value itself."""
    def run(value: Any) -> Any:
        check(value, *args, where=_WHERE)
        return value

    return run


def _option(name: str, check: Callable[[Any], Any], doc: str) -> property:
    """A layer option kept in ``_<name>``: assigning stores ``check(value)``."""
    attr = "_" + name

    def fset(self: nn.Module, value: Any) -> None:
        setattr(self, attr, check(value))

    return property(lambda self: getattr(self, attr), fset, doc=doc)


class FocusAttention(nn.Module):
    r"""Focus multi-head self-attention with learned grouping, from
    `"Why Attend to Everything? Focus is the Key" <https://arxiv.org/abs/2604.03260>`_
    (Yao et al.).

    A router shared by all heads (a learned
    :class:`~quest_geometric.nn.focus.router.FocusRouter`, or any
    :class:`~quest_geometric.nn.focus.router.Router` passed as :obj:`router`) gives every
    token a soft membership :math:`\mathbf{g}_i` and a hard group set :math:`G_i`. In
    inference (``eval()`` or ``hard=True``) token :math:`i` attends to

    .. math::
        \mathcal{N}(i) = \{\, j \text{ of the same sequence} : (j \le i \text{ if causal})
        \wedge (|i - j| \le w \vee G_i \cap G_j \ne \emptyset
        \vee \min(p_i, p_j) < s) \,\},

    (:math:`p_i` the position in the sequence, :math:`s` the attention sinks), computed by a
    registered back-end (:mod:`~quest_geometric.nn.focus.backends`; :attr:`last_backend` names
    the one the last hard call ran). In training mode all pairs are computed densely with a
    soft gate (:func:`focus_soft_attention`) or the router's own ``soft_attention``; a router
    with ``top_k = 0`` keeps the window and the sinks in both modes. With ``gate=None`` or
    ``enabled = False`` the layer is full attention with the same projections. The options
    may be assigned after construction (validated, used from the next call); half precision
    runs its routing, log-sum-exps and merges in float32.

    Args:
        embed_dim (int): model width :math:`C`.
        num_heads (int): heads :math:`H`, dividing :math:`C`.
        num_groups (int): groups :math:`K` (default: :obj:`8`).
        group_dim (int): routing dimension :math:`d_g` (default: :obj:`16`).
        top_k (int): hard groups per token, :math:`1..K` (default: :obj:`1`).
        window (int): local window :math:`w \ge 0` (default: :obj:`128`).
        num_sinks (int): attention sinks :math:`s \ge 0` (default: :obj:`0`).
        backend (str): ``'auto'``, ``'blocks'``, ``'flex'``, ``'edges'``, ``'dense'`` or a
            registered back-end's name (default: :obj:`'auto'`).
        gate (str, optional): ``'additive'``, ``'multiplicative'``, ``'straight_through'`` or
            :obj:`None` (full attention) (default: :obj:`'additive'`).
        causal (bool): causal attention and prefix-causal routing (default: :obj:`True`).
        tau (float): Sinkhorn temperature, finite and positive (default: :obj:`0.1`).
        sinkhorn_iters (int): Sinkhorn iterations (default: :obj:`10`).
        gate_scale (float): :math:`\lambda` of the soft gate, finite (default: :obj:`10.0`).
        gate_bias (float): :math:`b` of the additive gate, finite (default: :obj:`0.5`,
            relaxing top-1; :math:`1/(2k^2)` relaxes top-:math:`k`).
        bias (bool): biases in the own projections (default: :obj:`True`).
        router (Router, optional): the router instead of a new
            :class:`~quest_geometric.nn.focus.router.FocusRouter` (the routing arguments are
            then unused; its :obj:`causal` must equal :obj:`causal`) (default: :obj:`None`).

    Shapes:
        - **input:** :obj:`x` :math:`(B, T, C)`, or :math:`(N, C)` with optional sorted
          :obj:`batch` :math:`(N)`
        - **output:** same shape as :obj:`x`; with ``return_router=True`` a tuple
          ``(out, RouterOutput)``
    """

    def __init__(self, embed_dim: int, num_heads: int, num_groups: int = 8,
                 group_dim: int = 16, top_k: int = 1, window: int = 128,
                 backend: str = AUTO, gate: Optional[str] = "additive",
                 causal: bool = True, tau: float = 0.1, sinkhorn_iters: int = 10,
                 gate_scale: float = 10.0, gate_bias: float = 0.5, bias: bool = True,
                 router: Optional[Router] = None, num_sinks: int = 0) -> None:
        super().__init__()
        check_int(embed_dim, "'embed_dim'", 1, where="FocusAttention")
        check_int(num_heads, "num_heads", 1, where="FocusAttention")
        if embed_dim % num_heads:
            raise ValueError(f"FocusAttention: 'embed_dim' ({embed_dim}) must be divisible by "
                             f"'num_heads' ({num_heads!r})")
        check_int(num_groups, "'num_groups'", 1, where="FocusAttention")
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        if router is None:
            router = FocusRouter(embed_dim, num_groups, group_dim, tau, sinkhorn_iters, top_k,
                                 causal)
        elif not isinstance(router, nn.Module) or not isinstance(router, Router):
            raise TypeError(f"FocusAttention: 'router' must be a torch.nn.Module following "
                            f"the Router protocol (num_groups, top_k, causal, step, config, "
                            f"from_config), got "
                            f"{type(router).__name__}")
        elif bool(router.causal) != bool(causal):
            raise ValueError(f"FocusAttention: the router's causal={router.causal!r} "
                             f"contradicts causal={causal!r}")
        self.router = router
        self.window = window
        self.num_sinks = num_sinks
        self.backend = backend
        #: The back-end the last hard call ran (``'auto'`` resolved), :obj:`None` before any.
        self.last_backend: Optional[str] = None
        self.gate = gate
        self.causal = causal
        self.gate_scale = gate_scale
        self.gate_bias = gate_bias
        self.enabled = True
        self.q_proj: Optional[nn.Module] = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj: Optional[nn.Module] = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.v_proj: Optional[nn.Module] = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.out_proj: nn.Module = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.qkv: Optional[Callable[[Tensor], Tuple[Tensor, Tensor, Tensor]]] = None

    @property
    def num_groups(self) -> int:
        r"""The number of groups :math:`K`, fixed at construction (the router's)."""
        return self.router.num_groups

    @num_groups.setter
    def num_groups(self, value: int) -> None:
        raise AttributeError(f"'num_groups' of {self.__class__.__name__} is fixed at "
                             f"construction (the router has {self.router.num_groups} "
                             f"groups); build a new layer for another number of groups")

    @property
    def top_k(self) -> int:
        r"""Hard groups per token, :math:`1..K`: the router's :obj:`top_k`; assigning validates it.
        """
        return self.router.top_k

    @top_k.setter
    def top_k(self, value: int) -> None:
        self.router.top_k = value

    window = _option("window", _unchanged(check_window),
                     r"""The local window :math:`w \ge 0` (validated when assigned).""")
    num_sinks = _option("num_sinks", _unchanged(check_num_sinks),
                        r"""The attention sinks :math:`s \ge 0` (validated when assigned).""")
    backend = _option("backend", _unchanged(check_choice, "'backend'", BACKENDS),
                      """The hard back-end, ``'auto'`` or a registered name (validated).""")
    gate = _option("gate", _unchanged(check_choice, "'gate'", GATES),
                   """The training gate, see :class:`FocusAttention` (validated).""")
    gate_scale = _option("gate_scale", lambda v: check_real(v, "gate_scale", where=_WHERE),
                         r"""The gate scale :math:`\lambda`, finite (validated).""")
    gate_bias = _option("gate_bias", lambda v: check_real(v, "gate_bias", where=_WHERE),
                        r"""The additive gate's bias :math:`b`, finite (validated).""")

    def reset_parameters(self) -> None:
        r"""Reset the router (when it has parameters) and the own projections."""
        if hasattr(self.router, "reset_parameters"):
            self.router.reset_parameters()
        for m in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):
            if hasattr(m, "reset_parameters"):
                m.reset_parameters()

    @classmethod
    def from_projections(cls, q_proj: Optional[Callable[[Tensor], Tensor]] = None,
                         k_proj: Optional[Callable[[Tensor], Tensor]] = None,
                         v_proj: Optional[Callable[[Tensor], Tensor]] = None,
                         out_proj: Optional[Callable[[Tensor], Tensor]] = None, *,
                         num_heads: int, embed_dim: Optional[int] = None,
                         qkv: Optional[Callable[[Tensor], Tuple[Tensor, Tensor, Tensor]]]
                         = None, **kwargs) -> "FocusAttention":
        r"""Build Focus attention around *existing* projections (e.g. of a frozen model), used as
        they are, not copied.

        Args:
            q_proj, k_proj, v_proj (callable, optional): ``x -> [.., C]`` each; or pass
                :obj:`qkv` instead (default: :obj:`None`).
            out_proj (callable, optional): output projection (default: :obj:`None`, identity).
            num_heads (int): number of heads.
            embed_dim (int, optional): :math:`C` (default: inferred from a projection's
                ``in_features``).
            qkv (callable, optional): fused ``x -> (q, k, v)`` (default: :obj:`None`).
            **kwargs: the other :class:`FocusAttention` arguments.
        """
        if qkv is None and (q_proj is None or k_proj is None or v_proj is None):
            raise ValueError("from_projections: give q_proj, k_proj and v_proj, or qkv")
        if embed_dim is None:
            for m in (q_proj, out_proj):
                if isinstance(m, nn.Linear):
                    embed_dim = m.in_features
                    break
        if embed_dim is None:
            raise ValueError("from_projections: cannot infer 'embed_dim'; pass it")
        self = cls(embed_dim, num_heads, **kwargs)
        if qkv is not None:
            self.q_proj = self.k_proj = self.v_proj = None
            self.qkv = qkv
        else:
            self.q_proj, self.k_proj, self.v_proj = q_proj, k_proj, v_proj
        self.out_proj = out_proj if out_proj is not None else nn.Identity()
        return self

    def _check_dtype(self, x: Tensor) -> None:
        # the projections' parameters set the dtype (the router computes in float32 or
        # float64 whatever the input's dtype); a mismatch would fail inside matmul
        mods = (self.q_proj, self.k_proj, self.v_proj, self.qkv, self.out_proj)
        ref = next((p for m in mods if isinstance(m, nn.Module) for p in m.parameters()
                    if p.is_floating_point()), None)
        if ref is not None and x.dtype != ref.dtype \
                and not torch.is_autocast_enabled(x.device.type):
            raise TypeError(f"FocusAttention: 'x' must be of the dtype of the layer's "
                            f"parameters ({ref.dtype}), got {x.dtype}; convert the input "
                            f"with x.to({ref.dtype}) or the layer with layer.to({x.dtype})")

    def _project(self, x: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        if self.qkv is not None:
            q, k, v = self.qkv(x)
        else:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        n = x.size(0)
        for name, t in (("q", q), ("k", k), ("v", v)):
            if t.shape != (n, self.embed_dim):
                raise ValueError(f"FocusAttention: projected {name} must have shape "
                                 f"[{n}, {self.embed_dim}], got {list(t.shape)}")
        h, d = self.num_heads, self.head_dim
        return q.view(n, h, d), k.view(n, h, d), v.view(n, h, d)

    def forward(self, x: Tensor, batch: Optional[Tensor] = None, return_router: bool = False,
                hard: Optional[bool] = None
                ) -> Union[Tensor, Tuple[Tensor, Optional[RouterOutput]]]:
        r"""Apply Focus attention.

        Args:
            x (torch.Tensor): ``[B, T, C]`` or ``[N, C]``.
            batch (torch.Tensor, optional): sorted sequence/graph id per token, with ``[N, C]``
                input only (default: :obj:`None`).
            return_router (bool): also return the :class:`RouterOutput` (:obj:`None` when Focus
                is disabled) (default: :obj:`False`).
            hard (bool, optional): hard top-k sets or soft gates (default: :obj:`None`, hard in
                ``eval()`` mode).

        Raises:
            TypeError: if :obj:`x` is not a floating-point tensor, or (outside
                :func:`torch.autocast`) has another dtype than the projections' parameters.
            ValueError: for a wrong shape, no token, or a bad :obj:`batch`.
        """
        check_features(x, "x", where="FocusAttention")
        self._check_dtype(x)
        if x.size(-1) != self.embed_dim:
            raise ValueError(f"FocusAttention: 'x' must be of {self.embed_dim} channels, got "
                             f"{x.size(-1)}")
        shape = x.shape
        if x.dim() == 3:
            if batch is not None:
                raise ValueError("FocusAttention: 'batch' must be None with [B, T, C] input")
            bsz, t = shape[:2]
            flat = x.reshape(bsz * t, -1)
            if bsz > 1:
                batch = torch.arange(bsz, device=x.device).repeat_interleave(t)
        else:
            flat = x
            check_batch(batch, x.size(0), where="FocusAttention")
        q, k, v = self._project(flat)
        router_out: Optional[RouterOutput] = None
        if self.gate is None or not self.enabled:
            if x.dim() == 3:
                bsz, t = shape[:2]
                qd, kd, vd = (a.view(bsz, t, self.num_heads, self.head_dim).transpose(1, 2)
                              for a in (q, k, v))
                o = F.scaled_dot_product_attention(qd, kd, vd, is_causal=self.causal)
                o = o.transpose(1, 2).reshape(bsz * t, self.num_heads, self.head_dim)
            else:
                o = full_attention(q, k, v, batch, self.causal)
        else:
            o, router_out = self.attend(flat, q, k, v, batch, hard)
        out = self.out_proj(o.reshape(flat.size(0), self.embed_dim)).reshape(*shape[:-1], -1)
        if return_router:
            if router_out is not None:
                router_out = RouterOutput(*(a.reshape(*shape[:-1], -1) for a in router_out))
            return out, router_out
        return out

    def attend(self, x: Tensor, q: Tensor, k: Tensor, v: Tensor,
               batch: Optional[Tensor] = None, hard: Optional[bool] = None,
               col_totals: Optional[List[Tensor]] = None) -> Tuple[Tensor, RouterOutput]:
        r"""The Focus part of :meth:`forward` on given per-head queries, keys and values (used by
        :func:`~quest_geometric.nn.focus.compose.compose_focus`).

        Args:
            x (torch.Tensor): hidden states the router sees, ``[N, C]``.
            q, k, v (torch.Tensor): ``[N, H, D]`` (keys and values expanded to the query heads;
                softmax scale :math:`1/\sqrt{D}`).
            batch (torch.Tensor, optional): sorted sequence id per token (default: :obj:`None`).
            hard (bool, optional): as in :meth:`forward` (default: :obj:`None`).
            col_totals (list, optional): collects the router's Sinkhorn column statistics
                (default: :obj:`None`).

        Returns:
            ``(o, router_out)``: ``[N, H, D]`` and the :class:`RouterOutput` of :obj:`x`.
        """
        router_out = self.router(x, batch, col_totals=col_totals)
        hard = (not self.training) if hard is None else hard
        soft_rows = getattr(self.router, "soft_attention", None)
        if not hard and soft_rows is not None:  # a router with its own soft rows
            o = soft_rows(q, k, v, self.window, batch, self.causal, self.num_sinks)
        elif hard or router_out.groups.size(-1) == 0:  # no group: window and sinks only
            o = self._hard(q, k, v, router_out.groups, batch)
        else:
            o = focus_soft_attention(q, k, v, router_out.soft, self.window, batch,
                                     self.causal, self.gate, self.gate_scale, self.gate_bias,
                                     groups=router_out.groups, num_sinks=self.num_sinks)
        return o, router_out

    def resolve_backend(self, q: Tensor) -> str:
        r"""The back-end a hard call on queries :obj:`q` runs (``'auto'`` resolved)."""
        if self.backend == AUTO:
            return choose_focus_backend(q, self.num_groups)
        return self.backend

    def _hard(self, q: Tensor, k: Tensor, v: Tensor, groups: Tensor,
              batch: Optional[Tensor]) -> Tensor:
        name = self.resolve_backend(q)
        self.last_backend = name
        return focus_backend(name)(q, k, v, groups, self.window, batch, self.causal,
                                   self.num_groups, self.num_sinks)

    def __repr__(self) -> str:
        ran = (f", last_backend={self.last_backend!r}"
               if self.last_backend not in (None, self.backend) else "")
        return (f"{self.__class__.__name__}({self.embed_dim}, num_heads={self.num_heads}, "
                f"num_groups={self.num_groups}, top_k={self.top_k}, window={self.window}, "
                f"{f'num_sinks={self.num_sinks}, ' if self.num_sinks else ''}"
                f"backend={self.backend!r}, gate={self.gate!r}, gate_bias={self.gate_bias}"
                f"{ran})")
