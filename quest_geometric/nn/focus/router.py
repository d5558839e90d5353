r"""Routers: the protocol every routing rule follows (:class:`Router`, returning a
:class:`RouterOutput`), the registry of rules a router file may name
(:func:`register_router`), and the learned Focus router (:class:`FocusRouter`).

A new routing rule is one file: a :class:`torch.nn.Module` with the attributes and methods of
:class:`Router`, registered with :func:`register_router`; the layer, every back-end, cached
decoding, :func:`~quest_geometric.nn.focus.compose.compose_focus` and the router files then
accept it.

Reference: Yao et al., "Why Attend to Everything? Focus is the Key" /
"Composing Sparse Attention via Learned Grouping" (arXiv 2604.03260).
"""
from __future__ import annotations

import math
from typing import (Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Protocol, Sequence,
                    Tuple, TypeVar, runtime_checkable)

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from quest_geometric._utils.checks import (all_finite, check_batch, check_features, check_int,
                                           check_real, fail)
from quest_geometric.nn.focus.sinkhorn import sinkhorn_log, sinkhorn_step, sinkhorn_step_host
from quest_geometric.nn.focus.topk import float32_host, topk_groups, topk_groups_host


class RouterOutput(NamedTuple):
    r"""The result of a router (:class:`Router`, e.g. :class:`FocusRouter`).

    Attributes:
        soft (torch.Tensor): soft group memberships :math:`\mathbf{g}_i`, rows sum to one,
            shape :obj:`[..., K]`, in the input's dtype.
        groups (torch.Tensor): hard top-:math:`k` group ids, shape :obj:`[..., top_k]`,
            :obj:`torch.long`, ordered by decreasing membership (ties within a relative
            :data:`TIE_RTOL` go to the lowest group id, see :func:`topk_groups`).
        log_soft (torch.Tensor): :math:`\log \mathbf{g}_i` in :obj:`float32` (or
            :obj:`float64` for double input), shape :obj:`[..., K]`.
    """

    soft: Tensor
    groups: Tensor
    log_soft: Tensor


@runtime_checkable
class Router(Protocol):
    r"""The routing protocol, what the layer, its back-ends, cached decoding,
    :func:`~quest_geometric.nn.focus.compose.compose_focus` and the router files need: a
    :class:`torch.nn.Module` with

    Attributes:
        num_groups (int): the number of groups :math:`K`, fixed at construction.
        top_k (int): hard groups per token, :math:`1..K` (assignable).
        causal (bool): whether token :math:`i`'s groups depend only on tokens
            :math:`j \le i` of its sequence (required for cached decoding).

    Methods:
        ``__call__(h, batch=None, col_totals=None) -> RouterOutput``: route ``h`` ``[B, T, d]``
        (or ``[N, d]`` with ``batch``), appending to a ``col_totals`` list the statistics
        incremental steps continue from.

        ``step(x, state, valid=None, return_groups=True) -> Optional[Tensor]``: route new
        tokens ``x`` ``[B, T, d]`` after the prefix of ``state`` (a
        :class:`~quest_geometric.nn.focus.decode.FocusDecodeState`) exactly as ``__call__``
        would, append their groups to ``state`` and return them (``-1`` for padding).

        ``config() -> dict`` of JSON scalars and the classmethod ``from_config(config)``,
        which rebuilds the router refusing, before allocating, unknown keys and values beyond
        :data:`CONFIG_LIMITS` (:func:`config_kwargs`).

    Optional: ``soft_attention(...)`` (:class:`SoftRowsRouter`) and ``reset_parameters()``.
    """

    num_groups: int
    top_k: int
    causal: bool

    def __call__(self, h: Tensor, batch: Optional[Tensor] = None,
                 col_totals: Optional[List[Tensor]] = None) -> RouterOutput:
        ...

    def step(self, x: Tensor, state: Any, valid: Optional[Tensor] = None,
             return_groups: bool = True) -> Optional[Tensor]:
        ...

    def config(self) -> Dict[str, Any]:
        ...

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Router:
        ...


@runtime_checkable
class SoftRowsRouter(Router, Protocol):
    r"""A :class:`Router` that computes a layer's soft (training) rows itself, instead of the
    layer's soft gate: ``q, k, v`` ``[N, H, D]``, ``window``, ``batch``, ``causal`` and
    ``num_sinks`` in, the attention output ``[N, H, D]`` out."""

    def soft_attention(self, q: Tensor, k: Tensor, v: Tensor, window: int,
                       batch: Optional[Tensor] = None, causal: bool = True,
                       num_sinks: int = 0) -> Tensor:
        ...


#: Upper bounds on a router configuration, checked by :func:`config_kwargs` before anything
#: is built: far above any useful value (the paper uses :math:`K \le 64`, ten Sinkhorn
#: iterations and windows of a few hundred tokens), low enough that a crafted router file
#: cannot allocate terabytes or loop for hours.
CONFIG_LIMITS: Dict[str, int] = {
    "num_groups": 4096, "top_k": 4096, "group_dim": 4096, "in_channels": 1 << 16,
    "num_heads": 4096, "sinkhorn_iters": 1000, "window": 1 << 20, "num_sinks": 1 << 20,
    "seed": (1 << 32) - 1,
}

_JSON_SCALARS = (bool, int, float, str, type(None))
_ROUTERS: Dict[str, type] = {}
_NAMES: Dict[type, str] = {}
R = TypeVar("R", bound=type)


def check_limit(where: str, name: str, value: Any) -> None:
    r"""Refuse an integer option :obj:`name` above ``CONFIG_LIMITS[name]`` (other names and
    types pass: the router's own checks judge those)."""
    limit = CONFIG_LIMITS.get(name)
    if limit is not None and isinstance(value, int) and value > limit:
        raise fail(ValueError, where, name, f"at most {limit} (the bound of "
                   f"quest_geometric.nn.focus.router.CONFIG_LIMITS)", value)


def config_kwargs(where: str, config: Mapping[str, Any], required: Sequence[str],
                  optional: Sequence[str] = ()) -> Dict[str, Any]:
    r"""The keyword arguments of a router's ``from_config``: :obj:`config` must hold every name
    of :obj:`required`, may hold those of :obj:`optional`, nothing else, each value a JSON
    scalar; ``causal`` a bool and the integers of :data:`CONFIG_LIMITS` within their bound.

    Raises:
        TypeError: for a non-mapping, a non-scalar value or a non-bool ``causal``.
        ValueError: for a missing or unknown key, or a value beyond its limit.
    """
    if not isinstance(config, Mapping):
        raise fail(TypeError, where, "config", "a dict of keyword arguments", config)
    keys = set(config)
    missing = sorted(set(required) - keys)
    unknown = sorted(keys - set(required) - set(optional), key=str)
    if missing or unknown:
        raise fail(ValueError, where, "config", f"the keys {sorted(required)} (and optionally "
                   f"{sorted(optional)})", got_text=f"missing {missing}, unknown {unknown}")
    for name, value in config.items():
        if not isinstance(value, _JSON_SCALARS):
            raise fail(TypeError, where, name, "a JSON scalar (bool, int, float, str, None)",
                       value)
        check_limit(where, name, value)
    if "causal" in config and not isinstance(config["causal"], bool):
        raise fail(TypeError, where, "causal", "a bool", config["causal"])
    return dict(config)


def register_router(name: str) -> Callable[[R], R]:
    r"""Class decorator registering a routing rule (a class with ``config`` and
    ``from_config``) under :obj:`name`, by which router files record and rebuild it; only the
    exact class, not a subclass::

        @register_router("my_rule")
        class MyRouter(nn.Module): ...

    Raises:
        ValueError: if :obj:`name` is empty or already names another class.
        TypeError: if the decorated object is not a class with ``config`` and
            ``from_config``.
    """
    if not isinstance(name, str) or not name:
        raise fail(ValueError, "register_router", "name", "a non-empty str", name)

    def register(cls: R) -> R:
        if not isinstance(cls, type) or not all(
                callable(getattr(cls, m, None)) for m in ("config", "from_config")):
            raise fail(TypeError, "register_router", "cls", "a router class with config() "
                       "and from_config()", cls)
        known = _ROUTERS.get(name)
        if known is not None and (known.__module__, known.__qualname__) != (
                cls.__module__, cls.__qualname__):
            raise fail(ValueError, "register_router", "name", "a name not taken by another "
                       "router", got_text=f"{name!r}, taken by "
                       f"{known.__module__}.{known.__qualname__}")
        if known is not None:  # the same class defined again (a reloaded module)
            _NAMES.pop(known, None)
        _ROUTERS[name] = cls
        _NAMES[cls] = name
        return cls

    return register


def router_name(router: Any) -> Optional[str]:
    r"""The registered name of :obj:`router`'s exact class, or :obj:`None`."""
    return _NAMES.get(type(router))


def router_class(name: str) -> Optional[type]:
    r"""The router class registered under :obj:`name`, or :obj:`None`."""
    return _ROUTERS.get(name)


def registered_routers() -> Tuple[str, ...]:
    r"""The names of every registered router class, sorted."""
    return tuple(sorted(_ROUTERS))


def group_balance(groups: Tensor, num_groups: int, batch: Optional[Tensor] = None) -> Tensor:
    r"""Largest group share: the fraction of all (token, group) memberships held by the most
    popular group (:math:`1/K` is perfect balance, :math:`1` is collapse).

    .. math::
        \mathrm{balance} = \max_k \frac{|\{(i, c) : G_{ic} = k\}|}{N \cdot \mathrm{top\_k}}

    Args:
        groups (torch.Tensor): hard group ids, shape :obj:`[..., top_k]`, long.
        num_groups (int): number of groups :math:`K`.
        batch (torch.Tensor, optional): sorted sequence id per token for PyG input
            :obj:`[N, top_k]`; then one share per sequence is returned (default: :obj:`None`).

    Returns:
        torch.Tensor: a scalar (float32), or shape :obj:`[B]` when :obj:`batch` is given.
    """
    if groups.dtype != torch.long:
        raise TypeError(f"group_balance: 'groups' must be a long tensor, got {groups.dtype}")
    g = groups.reshape(-1, groups.size(-1))
    if g.numel() > 0 and (int(g.min()) < 0 or int(g.max()) >= num_groups):
        raise ValueError(f"group_balance: 'groups' must be group ids in [0, {num_groups - 1}]")
    if batch is None:
        counts = torch.bincount(g.reshape(-1), minlength=num_groups).float()
        return counts.max() / counts.sum().clamp_min(1.0)
    check_batch(batch, g.size(0), where="group_balance")
    nseg = int(batch.max()) + 1 if batch.numel() > 0 else 0
    key = batch.repeat_interleave(g.size(1)) * num_groups + g.reshape(-1)
    counts = torch.bincount(key, minlength=nseg * num_groups).float().view(nseg, num_groups)
    return counts.max(dim=1).values / counts.sum(dim=1).clamp_min(1.0)


#: The error of :meth:`FocusRouter.scores` for NaN or infinite scores.
NONFINITE_SCORES = ("FocusRouter: routing scores contain NaN or inf (check the input hidden "
                    "states and the router weights)")


@register_router("focus")
class FocusRouter(nn.Module):
    r"""The Focus router: tokens are softly assigned to :math:`K` learned centroids with
    Sinkhorn balancing, from `"Why Attend to Everything? Focus is the Key"
    <https://arxiv.org/abs/2604.03260>`_ (Yao et al.).

    .. math::
        \mathbf{z}_i = \mathbf{W}_g \mathbf{h}_i, \qquad
        S_{ik} = \frac{\mathbf{z}_i^{\top} \mathbf{c}_k}{\tau}, \qquad
        \mathbf{g}_i = \mathrm{Sinkhorn}(S)_i, \qquad
        G_i = \operatorname{top-k}(\mathbf{g}_i).

    The projection, the scores and Sinkhorn (in log space, :func:`sinkhorn_log`) run in
    :obj:`float32` even for half precision input (:obj:`float64` for double input; the soft
    memberships are cast back to the input's dtype), so routing is stable at small
    :math:`\tau` and a half precision input gets the groups of its float32 upcast up to
    rounding. Normalisation over tokens never crosses sequences/graphs of a batch. The
    hard top-:math:`k` breaks ties deterministically (:func:`topk_groups`: memberships
    within a relative :data:`TIE_RTOL` are tied, the lowest group id wins), so a token's
    groups never depend on rounding noise from the other sequences of a batch.

    **Causality.** The paper's column step sums over the whole sequence, so a token's group
    depends on later tokens. With ``causal=True`` the column sum for token :math:`t` runs over
    the prefix :math:`j \le t` of its sequence only (prefix log-cumsum-exp). By induction over
    iterations, every iterate :math:`Q^{(n)}_t` is a function of
    :math:`\mathbf{h}_1, \dots, \mathbf{h}_t` alone, hence so are :math:`\mathbf{g}_t` and
    :math:`G_t`: future tokens never change past memberships. This is an online Sinkhorn: token
    :math:`t` is balanced against the groups' mass so far, which approaches the full-sequence
    balancing as the prefix grows. The first token of a sequence holds all of every group's
    prefix mass, so its membership is uniform: its top-:math:`k` is a tie, which the tie rule
    resolves to groups :math:`0, \dots, k - 1`; this matters little because the local
    window always covers the first tokens' neighbours.

    Args:
        in_channels (int): size :math:`d` of the hidden states :math:`\mathbf{h}_i`.
        num_groups (int): number of groups :math:`K` (default: :obj:`8`).
        group_dim (int): routing dimension :math:`d_g` (default: :obj:`16`).
        tau (float): temperature :math:`\tau > 0`, finite (default: :obj:`0.1`).
        sinkhorn_iters (int): Sinkhorn iterations (default: :obj:`10`).
        top_k (int): hard groups per token, in :math:`1..K` (default: :obj:`1`).
        causal (bool): prefix-causal balancing (default: :obj:`True`).

    Shapes:
        - **input:** :obj:`h` :math:`(B, T, d)`, or :math:`(N, d)` with optional
          :obj:`batch` :math:`(N)`
        - **output:** :class:`RouterOutput` with :obj:`soft` :math:`(\dots, K)`,
          :obj:`groups` :math:`(\dots, \mathrm{top\_k})`, :obj:`log_soft` :math:`(\dots, K)`
    """

    def __init__(self, in_channels: int, num_groups: int = 8, group_dim: int = 16,
                 tau: float = 0.1, sinkhorn_iters: int = 10, top_k: int = 1,
                 causal: bool = True) -> None:
        super().__init__()
        for name, val in (("in_channels", in_channels), ("num_groups", num_groups),
                          ("group_dim", group_dim)):
            check_int(val, f"'{name}'", 1, where="FocusRouter")
        check_int(sinkhorn_iters, "'sinkhorn_iters'", 0, where="FocusRouter")
        self.in_channels = in_channels
        self._num_groups = num_groups
        self.group_dim = group_dim
        self.tau = tau
        self.sinkhorn_iters = sinkhorn_iters
        self.top_k = top_k
        self.causal = causal
        self.lin = nn.Linear(in_channels, group_dim, bias=False)
        self.centroids = nn.Parameter(torch.empty(num_groups, group_dim))
        self.reset_parameters()

    @property
    def num_groups(self) -> int:
        r"""The number of groups :math:`K`, fixed at construction (the centroids' rows)."""
        return self._num_groups

    @num_groups.setter
    def num_groups(self, value: int) -> None:
        raise AttributeError(f"'num_groups' of {self.__class__.__name__} is fixed at "
                             f"construction (the centroids have {self._num_groups} rows); "
                             f"build a new router for another number of groups")

    @property
    def top_k(self) -> int:
        r"""Hard groups per token, :math:`1..K`; assigning validates the value."""
        return self._top_k

    @top_k.setter
    def top_k(self, value: int) -> None:
        check_int(value, "'top_k'", 1, where=f"FocusRouter(num_groups={self._num_groups})",
                  maximum=self._num_groups)
        self._top_k = value

    @property
    def tau(self) -> float:
        r"""The temperature :math:`\tau > 0`; assigning validates the value."""
        return self._tau

    @tau.setter
    def tau(self, value: float) -> None:
        self._tau = check_real(value, "tau", positive=True, where="FocusRouter")

    def reset_parameters(self) -> None:
        r"""Reset :math:`\mathbf{W}_g` (Kaiming-uniform) and the centroids (unit-norm rows)."""
        self.lin.reset_parameters()
        with torch.no_grad():
            c = torch.randn(self.num_groups, self.group_dim)
            self.centroids.copy_(c / c.norm(dim=-1, keepdim=True))

    def scores(self, h: Tensor, check: bool = True) -> Tensor:
        r"""Scores :math:`S/\tau = \mathbf{z}\mathbf{C}^{\top}/\tau` in float32 (float64 for
        double input), shape :obj:`[..., K]`; the projection :math:`\mathbf{z}` is computed
        in that dtype too, so half precision input is routed like its float32 upcast.

        Args:
            h (Tensor): hidden states ``[..., d]``.
            check (bool): refuse NaN or infinite scores (default: :obj:`True`; the cached
                decoding step passes :obj:`False` and checks the few numbers it copies to
                the host instead, sparing a device synchronisation).

        Raises:
            ValueError: if any score is NaN or infinite (with :obj:`check`).
        """
        dtype = torch.float64 if h.dtype == torch.float64 else torch.float32
        z = F.linear(h.to(dtype), self.lin.weight.to(dtype))
        s = (z @ self.centroids.to(dtype).t()) / self.tau
        if check and not all_finite(s):
            raise ValueError(NONFINITE_SCORES)
        return s

    def forward(self, h: Tensor, batch: Optional[Tensor] = None,
                col_totals: Optional[List[Tensor]] = None) -> RouterOutput:
        r"""Route tokens to groups.

        Args:
            h (torch.Tensor): hidden states :obj:`[B, T, d]` or :obj:`[N, d]`.
            batch (torch.Tensor, optional): sorted sequence/graph id per token, with
                :obj:`[N, d]` input only (default: :obj:`None`).
            col_totals (list, optional): collects the Sinkhorn column statistics, for cached
                decoding (default: :obj:`None`).

        Returns:
            RouterOutput: soft memberships, hard top-k groups, log memberships.

        Raises:
            TypeError: if :obj:`h` is not a floating-point tensor.
            ValueError: for a wrong shape, no token, or a bad :obj:`batch`.
        """
        check_features(h, "h", where="FocusRouter")
        if h.size(-1) != self.in_channels:
            raise ValueError(f"FocusRouter: 'h' must be of {self.in_channels} channels, got "
                             f"{h.size(-1)}")
        if h.dim() == 3:
            if batch is not None:
                raise ValueError("FocusRouter: 'batch' must be None with [B, T, C] input")
            log_soft = sinkhorn_log(self.scores(h), None, 1, self.sinkhorn_iters, self.causal,
                                    col_totals)
        else:
            check_batch(batch, h.size(0), where="FocusRouter")
            nseg = (int(batch.max()) + 1 if batch.numel() > 0 else 0) if batch is not None \
                else 1
            log_soft = sinkhorn_log(self.scores(h), batch, nseg, self.sinkhorn_iters,
                                    self.causal, col_totals)
        groups = topk_groups(log_soft, self.top_k)
        soft = log_soft.exp().to(h.dtype)
        shape = h.shape[:-1]
        return RouterOutput(soft.view(*shape, -1), groups.view(*shape, -1),
                            log_soft.view(*shape, -1))

    def step(self, x: Tensor, state: Any, valid: Optional[Tensor] = None,
             return_groups: bool = True) -> Optional[Tensor]:
        r"""Route new tokens ``x [B, T, d]`` after :obj:`state`'s prefix, as :meth:`forward` would
        (one real token of one sequence on Python floats), updating :obj:`state`.

        Args:
            x (Tensor): hidden states of the new tokens, ``[B, T, d]``.
            state (FocusDecodeState): the layer's decoding state, updated in place.
            valid (Tensor, optional): bool ``[B, T]``, :obj:`False` for padding (default:
                :obj:`None`).
            return_groups (bool): return the groups (default: :obj:`True`).

        Returns:
            Tensor, optional: the groups ``[B, T, top_k]`` (``-1`` for padding).
        """
        b, t, _ = x.shape
        if b == 1 and t == 1 and (valid is None or bool(valid.all())):
            g = self._step_one(x, state)
            if not return_groups:
                return None
            return torch.tensor(g, dtype=torch.long, device=x.device).view(1, 1, len(g))
        s = self.scores(x.reshape(b * t, -1)).view(b, t, -1)
        out = []
        for i in range(t):
            log_soft, state.col_lse = sinkhorn_step(s[:, i], state.col_lse,
                                                    None if valid is None else valid[:, i])
            # the full path casts the log memberships back to the scores' dtype before top-k
            out.append(topk_groups(log_soft.to(s.dtype), self.top_k))
        groups = torch.stack(out, 1)
        state.append(groups, valid)
        if not return_groups:
            return None
        return groups if valid is None else groups.masked_fill(~valid.unsqueeze(-1), -1)

    def _step_one(self, x: Tensor, state: Any) -> List[int]:
        r""":meth:`step` for one real token of one sequence, on Python floats."""
        s = self.scores(x.reshape(1, -1), check=False)
        vals = s[0].tolist()
        if not all(map(math.isfinite, vals)):  # the check scores() skipped, on the host copy
            raise ValueError(NONFINITE_SCORES)
        log_soft = sinkhorn_step_host(vals, state.host_statistics())
        single = s.dtype == torch.float32
        if single:  # the full path casts the log memberships to the scores' dtype
            log_soft = [float32_host(v) for v in log_soft]
        g = topk_groups_host(log_soft, self.top_k, single)
        state.append_one(g)
        return g

    def config(self) -> Dict[str, Any]:
        r"""The keyword arguments that rebuild this router (:meth:`from_config`)."""
        return {"in_channels": self.in_channels, "num_groups": self.num_groups,
                "group_dim": self.group_dim, "tau": self.tau,
                "sinkhorn_iters": self.sinkhorn_iters, "top_k": self.top_k,
                "causal": bool(self.causal)}

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> FocusRouter:
        r"""A router of :meth:`config`'s arguments, checked by :func:`config_kwargs`."""
        return cls(**config_kwargs("FocusRouter.from_config", config, (
            "in_channels", "num_groups", "group_dim", "tau", "sinkhorn_iters", "top_k",
            "causal")))

    @staticmethod
    def balance(out: RouterOutput, num_groups: Optional[int] = None) -> Tensor:
        r"""Largest group share of a :class:`RouterOutput` (see :func:`group_balance`)."""
        k = num_groups if num_groups is not None else out.soft.size(-1)
        return group_balance(out.groups.reshape(-1, out.groups.size(-1)), k)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.in_channels}, num_groups={self.num_groups}, "
                f"group_dim={self.group_dim}, top_k={self.top_k}, causal={self.causal})")


__all__ = ["Router", "SoftRowsRouter", "FocusRouter", "RouterOutput", "group_balance",
           "NONFINITE_SCORES", "CONFIG_LIMITS", "register_router", "router_name",
           "router_class", "registered_routers", "config_kwargs", "check_limit"]
