r"""Query/key geometry probes: forward hooks that measure the attention layers of a model
(:class:`QKProbe`; the layer classes it knows are listed by :func:`supported_attention_types`,
others are taught with :func:`register_attention_adapter`).

Design choices (argued in ``docs/qk_geometry.md``): a forward *pre*-hook recomputes q and k
from the module's own inputs (exactly what the kernel receives; outputs bitwise unchanged); PR
is measured after any rotary embedding; the ranks use the *unmasked* logit matrix (masked
entries have no finite value, and zero-filling measures the mask), the entropy the attention
the model actually computes.
"""
from __future__ import annotations

import math
import weakref
from typing import Any, Callable, Iterable, Optional, Union

import torch
from torch import Tensor, nn

from quest_geometric._utils.checks import check_all_finite, check_choice, check_int, fail
from quest_geometric._utils.device import move_to_device
from quest_geometric.adapters import (
    AttentionAdapter, QKView, get_attention_adapter, register_attention_adapter,
    supported_attention_types, unregister_attention_adapter,
)
from quest_geometric.analysis.metrics import participation_ratio_from_covariance
from quest_geometric.analysis.qsv import node_attention_entropy
from quest_geometric.analysis.streaming import StreamingCovariance

__all__ = [
    "QKView", "QKProbe", "register_attention_adapter", "unregister_attention_adapter",
    "supported_attention_types", "logit_singular_values", "masked_softmax_entropy", "probe_model",
    "QKTrajectory",
]

# The registry and the view type live in quest_geometric.adapters; re-exported here.


_PROBE_KEYS = ("qk_effective_rank", "qk_stable_rank", "attention_entropy")


def _call_model(model: nn.Module, batch: Any) -> Any:
    """``model(*batch)`` for a tuple, ``model(**batch)`` for a dict, else ``model(batch)``."""
    if isinstance(batch, tuple):
        return model(*batch)
    if isinstance(batch, dict):
        return model(**batch)
    return model(batch)


def logit_singular_values(q: Tensor, k: Tensor, scale: float = 1.0, fast: bool = True) -> Tensor:
    r"""Singular values of the logit matrices :math:`L = s\, Q K^\top` without forming them.

    With thin QR factorisations :math:`Q = U_Q R_Q` and :math:`K = U_K R_K`
    (:math:`U` with orthonormal columns, :math:`R` of size :math:`d \times d`),

    .. math::
        L = s\, U_Q \,(R_Q R_K^\top)\, U_K^\top
        \quad\Rightarrow\quad \sigma(L) = |s|\, \sigma(R_Q R_K^\top),

    so one :math:`d \times d` SVD replaces a :math:`T \times S` one (:math:`L` has rank at
    most :math:`d`; the dropped singular values are zero and change neither the effective
    nor the stable rank). Used when :math:`\min(T, S) > d`; otherwise, or with
    ``fast=False``, the plain SVD of :math:`L`.

    Args:
        q (Tensor): queries ``[..., T, d]``.
        k (Tensor): keys ``[..., S, d]``.
        scale (float): :math:`s`. (default: ``1.0``)
        fast (bool): use the QR route when it is cheaper. (default: :obj:`True`)

    Returns:
        Tensor: singular values ``[..., r]`` in descending order, ``r = min(T, S, d)`` on the
        fast route and ``min(T, S)`` on the plain one.

    Raises:
        ValueError: a NaN or infinite entry in ``q`` or ``k`` (LAPACK would print a warning
            and return NaN singular values).
    """
    check_all_finite((("q", q), ("k", k)), where="logit_singular_values")
    d = q.size(-1)
    if fast and min(q.size(-2), k.size(-2)) > d:
        rq = torch.linalg.qr(q, mode="r").R
        rk = torch.linalg.qr(k, mode="r").R
        return torch.linalg.svdvals(rq @ rk.transpose(-1, -2)) * abs(scale)
    return torch.linalg.svdvals((q @ k.transpose(-1, -2)) * scale)


def masked_softmax_entropy(logits: Tensor, allowed: Tensor) -> tuple[Tensor, Tensor]:
    r"""Normalised entropy of each row of :math:`\mathrm{softmax}` over the allowed keys.

    The same quantity as :func:`~quest_geometric.analysis.metrics.attention_entropy` applied
    to the masked softmax, computed from the log-probabilities
    in three passes, without forming and re-validating the probabilities:

    .. math::
        \tilde H_i = \frac{-\sum_{j \in \mathcal{S}_i} a_{ij} \log a_{ij}}{\log |\mathcal{S}_i|},
        \qquad \log a_{ij} = \ell_{ij} - \operatorname{logsumexp}_{j' \in \mathcal{S}_i} \ell_{ij'}.

    Args:
        logits (Tensor): ``[..., T, S]``.
        allowed (Tensor): bool, broadcastable to ``logits``; :obj:`True` = key attended.

    Returns:
        (Tensor, Tensor): entropies ``[..., T]`` (``0`` where undefined) and the bool mask of
        rows with at least two allowed keys.

    Raises:
        ValueError: a NaN or infinite logit (mask a key through ``allowed``, not with
            :math:`-\infty`): it would make its row's entropy NaN.
    """
    check_all_finite((("logits", logits),), where="masked_softmax_entropy")
    allowed = torch.broadcast_to(allowed, logits.shape)
    logp = logits.masked_fill(~allowed, float("-inf")).log_softmax(-1)
    h = -(logp.exp() * logp.masked_fill(~allowed, 0.0)).sum(-1)
    support = allowed.sum(-1)
    valid = support > 1
    h = torch.where(valid, h / support.clamp_min(2).to(h.dtype).log(), torch.zeros_like(h))
    return h, valid


def _mean_or_none(vals: Optional[list]) -> Optional[float]:
    if not vals or any(v is None for v in vals):
        return None
    return float(sum(vals) / len(vals))


def _ranks_from_singular_values(s: Tensor) -> tuple[Tensor, Tensor]:
    """Effective rank and stable rank from descending singular values ``[..., r]`` (the
    formulas of :func:`~quest_geometric.analysis.metrics.effective_rank` and
    :func:`~quest_geometric.analysis.metrics.stable_rank`)."""
    top = s[..., 0]
    if bool((top <= 0).any()):
        raise ValueError("the logit matrix Q K^T is zero for some head (zero queries or keys); "
                         "its rank measures are undefined")
    p = s / s.sum(-1, keepdim=True)
    return (-torch.special.xlogy(p, p).sum(-1)).exp(), s.square().sum(-1) / top.square()


class _Layer:
    """Hook and accumulators of one attention layer."""

    def __init__(self, index: int, name: str, module: nn.Module, adapter: AttentionAdapter) -> None:
        self.index, self.name, self.module, self.adapter = index, name, module, adapter
        self.handle: Any = None
        self.acc_q: Optional[StreamingCovariance] = None
        self.acc_k: Optional[StreamingCovariance] = None
        self.heads = 0
        self.reset()

    def reset(self) -> None:
        for acc in (self.acc_q, self.acc_k):
            if acc is not None:
                acc.reset()
        self.probe_done = False
        self.probe: dict[str, Tensor] = {}
        self.probe_undefined: dict[str, str] = {}
        self.probe_tokens = 0


class QKProbe:
    r"""Forward-hook probe of the query/key geometry of every attention layer of a model.

    For each hooked layer and head :math:`h` it reports

    .. math::
        \mathrm{PR}(Z) = \frac{(\operatorname{tr}\Sigma_Z)^2}{\lVert\Sigma_Z\rVert_F^2},
        \quad
        \mathrm{erank}(L_h) = \exp\Big(-\sum_k p_k \log p_k\Big),\;
        p_k = \frac{\sigma_k(L_h)}{\sum_l \sigma_l(L_h)},
        \quad
        \mathrm{srank}(L_h) = \frac{\lVert L_h\rVert_F^2}{\lVert L_h\rVert_2^2},

    with :math:`\Sigma_Z` the covariance of the queries (keys) of all tokens seen since
    :meth:`reset` (streamed in float64), :math:`L_h = s\, Q_h K_h^\top` the unmasked logit
    matrix of each sequence of the probe batch (ranks averaged over sequences), and the
    attention entropy :math:`\tilde H_i = -\sum_j a_{ij}\log a_{ij} / \log|\mathcal{S}_i|`
    averaged over the query rows of the probe batch with at least two allowed keys (causal
    mask, padding and graph edges applied). Layer values are means over heads; the PR is also
    reported on the concatenated heads (``pr_q_concat``, ``pr_k_concat``).

    **Probe batch.** The logit-matrix metrics and the entropy come from the first
    non-empty forward call of each layer after construction or :meth:`reset`, capped at
    ``max_tokens`` query tokens (whole sequences, at least one). With an explicit
    ``probe_batch`` the probe runs ``model(probe_batch)`` itself at the first :meth:`results`
    call after a reset, in ``eval()`` mode (restored afterwards) under :func:`torch.no_grad`;
    that forward does not enter the PR accumulators.

    **Cost** (``docs/qk_geometry.md``): each hook recomputes q and k without gradient and
    updates a covariance (:math:`O(n (Hd)^2)`, :math:`O(n H d^2)` with ``concat_heads=False``).
    With ``enabled = False`` a hook returns at once; :meth:`remove` removes the hooks, and so
    does dropping the probe (they hold it only weakly). Outputs and gradients never change;
    Hugging Face calls with a non-empty KV cache are skipped with a warning; a recognised
    module is not searched for nested ones.

    Args:
        model (torch.nn.Module): the model (or a single attention module).
        layers (iterable, optional): which attention layers: names (as in
            ``model.named_modules()``), indices into the found layers, or modules.
            (default: :obj:`None`, all)
        heads (bool): include one record per head in :meth:`results`. (default: :obj:`True`)
        probe_batch (Any, optional): a fixed model input for the logit-matrix metrics, called
            as ``model(*t)`` (tuple), ``model(**d)`` (dict) or ``model(obj)``.
            (default: :obj:`None`, the first batch seen)
        max_tokens (int): cap on the query tokens of the probe batch (whole sequences; graph
            attention keeps the first ``max_tokens`` nodes for the ranks). (default: ``2048``)
        concat_heads (bool): accumulate the concatenated-head covariance (whose diagonal
            blocks are the per-head ones). (default: :obj:`True`)
        enabled (bool): initial value of :attr:`enabled`. (default: :obj:`True`)

    Example::

        with QKProbe(model) as probe:
            model(x)
        records = probe.results()
    """

    def __init__(self, model: nn.Module,
                 layers: Optional[Iterable[Union[str, int, nn.Module]]] = None,
                 heads: bool = True, probe_batch: Any = None, max_tokens: int = 2048,
                 concat_heads: bool = True, enabled: bool = True) -> None:
        if not isinstance(model, nn.Module):
            raise fail(TypeError, "QKProbe", "model", "a torch.nn.Module", model)
        check_int(max_tokens, "max_tokens", 2, where="QKProbe")
        self.model, self.probe_batch, self.max_tokens = model, probe_batch, max_tokens
        self.heads, self.concat_heads, self.enabled = bool(heads), bool(concat_heads), bool(enabled)
        self._probe_only = False
        found = self._find_layers(model)
        self._layers = [_Layer(i, n, m, a)
                        for i, (n, m, a) in enumerate(self._select(found, layers))]
        # The hooks hold the probe only weakly: when it is collected, this removes them.
        self._finalizer = weakref.finalize(self, QKProbe._remove_hooks, self._layers)
        self._finalizer.atexit = False
        self._attach()

    @staticmethod
    def _find_layers(model: nn.Module) -> list[tuple[str, nn.Module, AttentionAdapter]]:
        found: list[tuple[str, nn.Module, AttentionAdapter]] = []
        for name, mod in model.named_modules():
            if any(p == "" or name == p or name.startswith(p + ".") for p, _, _ in found):
                continue
            fn = get_attention_adapter(mod)
            if fn is not None:
                found.append((name, mod, fn))
        if not found:
            raise fail(
                ValueError, "QKProbe", "model", "a model with a recognisable attention layer "
                f"(supported types: {', '.join(supported_attention_types())})",
                got_text=f"a {type(model).__name__} without one",
                hint="; for another class, register an adapter: "
                "quest_geometric.adapters.register_attention_adapter(MyAttention, fn) with "
                "fn(module, args, kwargs) -> (q [B, H, T, d], k [B, H, S, d]) or a QKView")
        return found

    @staticmethod
    def _select(found: list, layers: Any) -> list:
        if layers is None:
            return found
        what = "names, indices or modules of the attention layers"
        if isinstance(layers, (str, int, nn.Module)):
            layers = [layers]
        if not isinstance(layers, Iterable):
            raise fail(TypeError, "QKProbe", "layers", what, layers)
        names = [n for n, _, _ in found]
        seen: set[int] = set()
        for sel in layers:
            if isinstance(sel, bool):
                raise fail(TypeError, "QKProbe", "layers", what, got_text=f"an entry {sel!r}")
            if isinstance(sel, int):
                if not -len(found) <= sel < len(found):
                    raise fail(ValueError, "QKProbe", "layers", f"indices in "
                               f"[{-len(found)}, {len(found)}) ({len(found)} layers found)",
                               got_text=f"index {sel}")
                i = sel % len(found)
            elif isinstance(sel, str):
                if sel not in names:
                    raise fail(ValueError, "QKProbe", "layers", f"names among {names}",
                               got_text=repr(sel))
                i = names.index(sel)
            elif isinstance(sel, nn.Module):
                ids = [j for j, (_, m, _) in enumerate(found) if m is sel]
                if not ids:
                    raise fail(ValueError, "QKProbe", "layers", f"modules among the attention "
                               f"layers found ({names})", got_text=f"a {type(sel).__name__} "
                               "not among them")
                i = ids[0]
            else:
                raise fail(TypeError, "QKProbe", "layers", what, got_text=f"an entry of type "
                           f"{type(sel).__name__}")
            seen.add(i)
        if not seen:
            raise fail(ValueError, "QKProbe", "layers", "a selection of at least one layer",
                       layers)
        return [found[i] for i in sorted(seen)]

    @property
    def layer_names(self) -> list[str]:
        """Names of the hooked layers, in model order."""
        return [layer.name for layer in self._layers]

    def _attach(self) -> None:
        for layer in self._layers:
            if layer.handle is None:
                layer.handle = layer.module.register_forward_pre_hook(
                    QKProbe._make_hook(weakref.ref(self), layer), with_kwargs=True)

    @property
    def attached(self) -> bool:
        """Whether the hooks are registered."""
        return any(layer.handle is not None for layer in self._layers)

    @staticmethod
    def _remove_hooks(layers: list[_Layer]) -> None:
        for layer in layers:
            if layer.handle is not None:
                layer.handle.remove()
                layer.handle = None

    def remove(self) -> None:
        """Remove every hook (accumulated statistics stay readable by :meth:`results`)."""
        self._remove_hooks(self._layers)

    def reattach(self) -> "QKProbe":
        """Register the hooks again after :meth:`remove` (statistics are kept)."""
        self._attach()
        return self

    def __enter__(self) -> "QKProbe":
        self._attach()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.remove()

    def reset(self) -> "QKProbe":
        """Forget all statistics; the next batch (or the explicit probe batch) becomes the
        probe batch."""
        for layer in self._layers:
            layer.reset()
        return self

    @staticmethod
    def _make_hook(probe_ref: weakref.ref[QKProbe], layer: _Layer) -> Callable:
        """The forward pre-hook of ``layer``; it refers to the probe only through
        ``probe_ref``, so the model does not keep the probe alive."""
        def hook(module: nn.Module, args: tuple, kwargs: dict) -> None:
            self = probe_ref()
            if self is None or not self.enabled or (self._probe_only and layer.probe_done):
                return None
            with torch.no_grad():
                view = self._view(layer, module, args, kwargs)
                if view is None:
                    return None
                if not self._probe_only:
                    self._accumulate(layer, view)
                if not layer.probe_done and (self._probe_only or self.probe_batch is None):
                    self._measure(layer, view)
                    layer.probe_done = True
            return None
        return hook

    def _view(self, layer: _Layer, module: nn.Module, args: tuple,
              kwargs: dict) -> Optional[QKView]:
        out = layer.adapter.qk_view(module, args, kwargs)
        if out is None:
            return None
        if isinstance(out, tuple) and len(out) == 2:
            out = QKView(*out)
        where = f"QKProbe: the adapter of {type(module).__name__} ({layer.name or 'root'})"
        if not isinstance(out, QKView):
            raise TypeError(f"{where} returned {type(out).__name__}; expected (q, k), a QKView or "
                            "None")
        q, k = out.q, out.k
        if not (isinstance(q, Tensor) and isinstance(k, Tensor)) or q.dim() != 4 or k.dim() != 4:
            raise ValueError(f"{where} must give q [B, H, T, d] and k [B, H, S, d], got "
                             f"{tuple(getattr(q, 'shape', ()))} and "
                             f"{tuple(getattr(k, 'shape', ()))}")
        if q.size(0) != k.size(0) or q.size(1) != k.size(1) or q.size(3) != k.size(3):
            raise ValueError(f"{where}: q {tuple(q.shape)} and k {tuple(k.shape)} must share B, H "
                             "and d")
        if out.edge_index is not None and q.size(0) != 1:
            raise ValueError(f"{where}: graph attention (edge_index) needs B == 1, got {q.size(0)}")
        if q.numel() == 0 or k.numel() == 0:
            return None  # an empty batch carries no sample
        return out

    def _accumulate(self, layer: _Layer, view: QKView) -> None:
        for which, t, valid in (("q", view.q, view.q_valid), ("k", view.k, view.k_valid)):
            B, H, T, d = t.shape
            z = t.detach().transpose(1, 2)  # [B, T, H, d]
            z = z[valid] if valid is not None else z.reshape(B * T, H, d)
            acc = getattr(layer, "acc_" + which)
            if acc is None:
                acc = (StreamingCovariance(H * d, device=t.device) if self.concat_heads
                       else StreamingCovariance(d, shape=(H,), device=t.device))
                setattr(layer, "acc_" + which, acc)
                layer.heads = H
            expected = (H * d,) if self.concat_heads else (H, d)
            got = (acc.dim,) if self.concat_heads else (*acc.shape, acc.dim)
            if got != expected:
                raise ValueError(f"QKProbe: layer {layer.name!r} changed its {which} shape from "
                                 f"{got} to {expected} between calls")
            acc.update(z.reshape(-1, H * d) if self.concat_heads else z.transpose(0, 1))

    def _measure(self, layer: _Layer, view: QKView) -> None:
        q = view.q.detach().to(torch.float64)
        k = view.k.detach().to(torch.float64)
        B, H, T, d = q.shape
        S = k.size(2)
        scale = float(view.scale) if view.scale is not None else 1.0 / math.sqrt(d)
        layer.heads = H
        if view.edge_index is not None:
            self._measure_graph(layer, view, q, k, scale)
            return
        b = max(1, min(B, self.max_tokens // max(T, 1)))
        q, k = q[:b], k[:b]
        qv = view.q_valid[:b] if view.q_valid is not None else None
        kv = view.k_valid[:b] if view.k_valid is not None else None
        logits = (q @ k.transpose(-1, -2)) * scale  # [b, H, T, S], unmasked
        layer.probe_tokens = int(qv.sum()) if qv is not None else b * T
        self._ranks(layer, q, k, scale, qv, kv)
        allowed = torch.ones(T, S, dtype=torch.bool, device=q.device)
        if view.causal:
            allowed = allowed.tril(S - T)
        allowed = allowed.expand(b, H, T, S)
        if view.mask is not None:
            allowed = allowed & torch.broadcast_to(view.mask.to(q.device)[:b], (b, H, T, S))
        if kv is not None:
            allowed = allowed & kv[:, None, None, :]
        ent, valid = masked_softmax_entropy(logits, allowed)
        if qv is not None:
            valid = valid & qv[:, None, :]
        self._set_entropy(layer, ent, valid, dims=(0, 2),
                          why="every query row of the probe batch has fewer than 2 allowed keys "
                              f"(T={T}); the normalised entropy is undefined")

    def _ranks(self, layer: _Layer, q: Tensor, k: Tensor, scale: float,
               qv: Optional[Tensor], kv: Optional[Tensor]) -> None:
        """Effective and stable rank per head of ``scale * q k^T`` (``q [b, H, T, d]``),
        averaged over the probe sequences (valid tokens only)."""
        svs: list[Tensor] = []
        if qv is None and kv is None:
            if q.size(-2) >= 2 and k.size(-2) >= 2:
                svs = [logit_singular_values(q, k, scale)]
        else:
            for i in range(q.size(0)):
                qi = q[i][:, qv[i]] if qv is not None else q[i]
                ki = k[i][:, kv[i]] if kv is not None else k[i]
                if qi.size(-2) >= 2 and ki.size(-2) >= 2:
                    svs.append(logit_singular_values(qi, ki, scale).unsqueeze(0))
        try:
            if not svs:
                raise ValueError("the probe batch has fewer than 2 (valid) tokens per sequence; "
                                 "the rank of a logit matrix with one row or column is 1 by "
                                 "construction, not a measurement")
            ranks = [_ranks_from_singular_values(sv) for sv in svs]
        except ValueError as e:
            layer.probe_undefined.update(dict.fromkeys(_PROBE_KEYS[:2], str(e)))
            return
        layer.probe["qk_effective_rank"] = torch.cat([r[0] for r in ranks], 0).mean(0)  # [H]
        layer.probe["qk_stable_rank"] = torch.cat([r[1] for r in ranks], 0).mean(0)

    def _set_entropy(self, layer: _Layer, ent: Tensor, valid: Tensor, dims: tuple,
                     why: str) -> None:
        count = valid.sum(dims)
        if bool((count == 0).any()):
            layer.probe_undefined["attention_entropy"] = why
            return
        layer.probe["attention_entropy"] = (ent * valid).sum(dims) / count

    def _measure_graph(self, layer: _Layer, view: QKView, q: Tensor, k: Tensor,
                       scale: float) -> None:
        from torch_geometric.utils import softmax as pyg_softmax

        H, N, M = q.size(1), q.size(2), k.size(2)
        n, m = min(N, self.max_tokens), min(M, self.max_tokens)
        layer.probe_tokens = N
        self._ranks(layer, q[:, :, :n], k[:, :, :m], scale, None, None)
        src, dst = view.edge_index.to(q.device)
        if view.edge_logits is not None:
            e = view.edge_logits.detach().to(torch.float64)
        else:
            e = (q[0][:, dst] * k[0][:, src]).sum(-1).transpose(0, 1) * scale  # [E, H]
        ent = node_attention_entropy(pyg_softmax(e, dst, num_nodes=N), dst, N)
        self._set_entropy(layer, ent.entropy[0], ent.valid.unsqueeze(-1).expand(N, H), dims=(0,),
                          why="no node of the probe batch has 2 or more in-edges; the normalised "
                              "entropy is undefined")

    def _run_probe_batch(self) -> None:
        was_attached = [layer.handle is not None for layer in self._layers]
        flags = [(m, m.training) for m in self.model.modules()]
        enabled, self.enabled, self._probe_only = self.enabled, True, True
        self._attach()
        try:
            self.model.eval()
            with torch.no_grad():
                _call_model(self.model, self.probe_batch)
        finally:
            for m, t in flags:
                m.training = t
            self._probe_only, self.enabled = False, enabled
            for layer, a in zip(self._layers, was_attached):
                if not a and layer.handle is not None:
                    layer.handle.remove()
                    layer.handle = None
        for layer in self._layers:
            if not layer.probe_done:
                layer.probe_done = True
                for key in _PROBE_KEYS:
                    layer.probe_undefined.setdefault(
                        key, "the explicit probe batch did not reach this layer")

    @staticmethod
    def _pr(acc: Optional[StreamingCovariance], heads: int, concat: bool, all_reduce: bool
            ) -> tuple[Optional[list[Optional[float]]], Optional[float], Optional[str], int]:
        """Per-head PRs, concatenated PR, a reason if undefined, and the token count."""
        if acc is None or acc.count == 0:
            return None, None, "no token seen since reset()", 0
        if all_reduce:
            acc = acc.all_reduce()
        if acc.count < 2:
            return None, None, (f"{acc.count} token seen since reset(); the participation ratio "
                                "needs at least 2 samples"), acc.count
        cov = acc.covariance
        if concat:
            d = acc.dim // heads
            blocks = torch.stack([cov[h * d:(h + 1) * d, h * d:(h + 1) * d] for h in range(heads)])
        else:
            blocks = cov
        per_head: list[Optional[float]] = []
        why = None
        for h in range(blocks.size(0)):
            try:
                per_head.append(float(participation_ratio_from_covariance(blocks[h])))
            except ValueError:
                per_head.append(None)
                why = f"zero variance in head {h}: the participation ratio is undefined"
        full = None
        if concat:
            try:
                full = float(participation_ratio_from_covariance(cov))
            except ValueError:
                why = why or "zero variance: the participation ratio is undefined"
        return per_head, full, why, acc.count

    def results(self, strict: bool = False, all_reduce: bool = False) -> list[dict[str, Any]]:
        r"""The measurements: a list of flat, JSON-ready records.

        Per layer (in model order), one record per head (when ``heads=True``), then one
        layer record with ``head=None``. Keys: ``layer`` (module name), ``layer_index``,
        ``type`` (class name), ``head``, ``pr_q``, ``pr_k``, ``pr_q_minus_pr_k``,
        ``qk_effective_rank``, ``qk_stable_rank``, ``attention_entropy``, ``tokens``
        (samples in the PR accumulators), ``probe_tokens`` and ``undefined``
        (``{metric: reason}``); the layer record adds ``pr_q_concat``, ``pr_k_concat`` and
        ``heads``. An undefined metric (too few tokens, zero variance) is :obj:`None` with its
        reason in ``undefined``; never NaN.

        Args:
            strict (bool): raise a :class:`ValueError` instead of returning undefined
                metrics. (default: :obj:`False`)
            all_reduce (bool): merge the PR accumulators of all DDP ranks
                (:meth:`StreamingCovariance.all_reduce`; every rank must call).
                (default: :obj:`False`)

        """
        if self.probe_batch is not None and not all(layer.probe_done for layer in self._layers):
            self._run_probe_batch()
        out: list[dict[str, Any]] = []
        for layer in self._layers:
            H = layer.heads
            undefined: dict[str, str] = {}
            pq, pq_full, why_q, n_q = self._pr(layer.acc_q, H, self.concat_heads, all_reduce)
            pk, pk_full, why_k, _ = self._pr(layer.acc_k, H, self.concat_heads, all_reduce)
            for key, why in (("pr_q", why_q), ("pr_k", why_k), ("pr_q_minus_pr_k", why_q or why_k)):
                if why:
                    undefined[key] = why
            if not layer.probe_done:
                undefined.update(dict.fromkeys(_PROBE_KEYS, "no forward call seen since reset()"))
            undefined.update(layer.probe_undefined)
            if strict and undefined:
                key, why = next(iter(undefined.items()))
                raise ValueError(f"QKProbe: {key} of layer {layer.name!r} is undefined: {why}")
            probe = {key: v.tolist() for key, v in layer.probe.items()}
            base = {"layer": layer.name, "layer_index": layer.index,
                    "type": type(layer.module).__name__}

            def record(head: Optional[int], pick: Callable, **extra: Any) -> dict[str, Any]:
                a, b = pick(pq), pick(pk)
                rec = dict(base, head=head, pr_q=a, pr_k=b,
                           pr_q_minus_pr_k=None if a is None or b is None else a - b)
                rec.update({key: pick(probe.get(key)) for key in _PROBE_KEYS})
                rec.update(extra, tokens=n_q, probe_tokens=layer.probe_tokens)
                return rec

            for h in range(H if self.heads else 0):
                rec = record(h, lambda vals: None if vals is None or h >= len(vals) else vals[h])
                rec["undefined"] = {k_: v for k_, v in undefined.items() if rec.get(k_) is None}
                out.append(rec)
            rec = record(None, _mean_or_none, pr_q_concat=pq_full, pr_k_concat=pk_full, heads=H)
            rec["undefined"] = undefined
            out.append(rec)
        return out

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({type(self.model).__name__}, "
                f"layers={len(self._layers)}, "
                f"enabled={self.enabled}, attached={self.attached})")


@torch.no_grad()
def probe_model(model: nn.Module, batch: Union[Tensor, tuple, dict], max_tokens: int = 4096
                ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Optional[float]]:
    """Run :class:`QKProbe` on one fixed batch (eval mode, no gradient, hooks removed and the
    training mode restored after): the PR and the probe-batch metrics see exactly this batch.

    Args:
        model (nn.Module): a model whose attention layers :class:`QKProbe` knows.
        batch: ``(x, y)`` for CharGPT (the loss is returned too), a tensor of ids, or a
            dict of keyword inputs (Hugging Face models).
        max_tokens (int): cap on the probe-batch query tokens. (default: ``4096``)

    Returns:
        (list, list, float or None): layer records, head records, the batch's loss.
    """
    was_training = model.training
    model.eval()
    loss = None
    try:
        with QKProbe(model, heads=True, max_tokens=max_tokens) as probe:
            out = _call_model(model, batch)
        if isinstance(out, tuple) and len(out) > 1 and isinstance(out[1], Tensor):
            loss = float(out[1])
        records = probe.results()
    finally:
        model.train(was_training)
    layers = [r for r in records if r["head"] is None]
    heads = [r for r in records if r["head"] is not None]
    return layers, heads, loss


class QKTrajectory:
    r"""The query/key geometry of a model over training: each call probes ``model`` on one
    fixed ``batch`` with :func:`probe_model` and appends one record per attention layer, so
    that :math:`\mathrm{PR}_Q`, :math:`\mathrm{PR}_K` and the attention entropy can be
    followed step by step on the same tokens.

    It is called as ``fn(trainer, step)``, the periodic function of the training loop's
    :class:`~quest_geometric.training.EveryNSteps` (the analysis layer does not import the
    training loop; any loop can call it with ``trainer=None``).

    Args:
        model (torch.nn.Module): the trained model itself (not a DDP wrapper), with attention
            layers :class:`QKProbe` knows.
        batch: the fixed probe input: ``(x, y)`` for
            :class:`~quest_geometric.models.CharGPT` (the records then carry its loss), token
            ids, or a dict of keyword inputs; moved to the model's device at each call.
        max_tokens (int): cap on the query tokens of the ranks and the entropy.
            (default: ``512``)

    Attributes:
        records (list of dict): one per call and layer: ``step``, ``layer`` (index),
            ``pr_q``, ``pr_k``, ``pr_q_minus_pr_k``, ``qk_effective_rank``,
            ``attention_entropy`` (layer means over heads; :obj:`None` where undefined) and
            ``loss``.

    Example::

        trajectory = QKTrajectory(model, corpus.get_batch("val", 16))
        Trainer(model, LanguageModelTask(), config, corpus.get_batch,
                callbacks=[EveryNSteps(trajectory, every=25, at_start=True)]).fit()
        pr_q = trajectory.layer_mean("pr_q")  # {step: mean over layers}
    """

    KEYS = ("pr_q", "pr_k", "pr_q_minus_pr_k", "qk_effective_rank", "attention_entropy")

    def __init__(self, model: nn.Module, batch: Any, max_tokens: int = 512) -> None:
        if not isinstance(model, nn.Module):
            raise fail(TypeError, "QKTrajectory", "model", "a torch.nn.Module", model)
        check_int(max_tokens, "max_tokens", 2, where="QKTrajectory")
        self.model, self.batch, self.max_tokens = model, batch, max_tokens
        self.records: list[dict[str, Any]] = []

    def __call__(self, trainer: Any = None, step: int = 0) -> list[dict[str, Any]]:
        """Probe now and record the result as ``step``; returns the new records."""
        batch = move_to_device(self.batch, next(self.model.parameters()).device)
        layers, _, loss = probe_model(self.model, batch, self.max_tokens)
        new = [{"step": int(step), "layer": r["layer_index"], **{k: r[k] for k in self.KEYS},
                "loss": loss} for r in layers]
        self.records.extend(new)
        return new

    def layer_mean(self, key: str) -> dict[int, float]:
        """``{step: mean of key over the layers}`` (undefined values left out)."""
        check_choice(key, "key", self.KEYS + ("loss",), where="QKTrajectory.layer_mean")
        by_step: dict[int, list[float]] = {}
        for r in self.records:
            if r[key] is not None:
                by_step.setdefault(r["step"], []).append(r[key])
        return {s: sum(v) / len(v) for s, v in by_step.items()}

    def __repr__(self) -> str:
        return f"QKTrajectory({type(self.model).__name__}, records={len(self.records)})"
