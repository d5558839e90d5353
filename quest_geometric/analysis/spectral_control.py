r"""Key-spectrum control: clamp or sharpen the singular-value spectrum of :math:`W_K` during
training, at fixed Frobenius norm (the intervention of the query/key geometry study).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor, nn

from quest_geometric._utils.checks import (
    all_finite, check_all_finite, check_choice, check_int, check_positive_float,
)

__all__ = ["KeySpectrumControl", "spectrum_participation_ratio", "qk_weight_kernels"]

_MODES = ("hold", "shrink")


def spectrum_participation_ratio(s: Tensor) -> Tensor:
    r"""Participation ratio (float64 ``[...]``) of a singular-value spectrum ``s [..., r]``.

    .. math::
        \mathrm{PR}(s) = \frac{(\sum_k s_k^2)^2}{\sum_k s_k^4},

    that of the eigenvalues :math:`s_k^2` of :math:`W^\top W` (1 for rank one, ``r`` flat).

    Args:
        s (Tensor): singular values ``[..., r]``.

    Raises:
        ValueError: an all-zero spectrum, or a NaN or infinite singular value.
    """
    check_all_finite((("s", s),), where="spectrum_participation_ratio")
    s = s.detach().to(torch.float64)
    lam = s.square()
    den = lam.square().sum(-1)
    if (den <= 0).any():
        raise ValueError("spectrum_participation_ratio: an all-zero spectrum has no participation "
                         "ratio")
    return lam.sum(-1).square() / den


def _find_key_weights(model: nn.Module) -> list[tuple[str, nn.Module, Tensor, Optional[int]]]:
    found = []
    for name, module in model.named_modules():
        k = getattr(module, "k_proj", None)
        if isinstance(k, nn.Linear):
            heads = getattr(module, "n_head", None) or getattr(module, "num_heads", None)
            found.append((f"{name}.k_proj" if name else "k_proj", module, k.weight, heads))
    return found


def qk_weight_kernels(model: nn.Module) -> list[Tensor]:
    r"""Data-free query/key interaction kernels of every attention layer, per head.

    .. math::
        K_h = W_Q^{h\top} W_K^h \in \mathbb{R}^{C \times C}, \qquad
        q_i^{(h)} \cdot k_j^{(h)} = x_i^\top K_h x_j \;(\text{biases aside}),

    so :func:`~quest_geometric.analysis.metrics.effective_rank` of the result is the
    weight-only counterpart of the interaction rank of :math:`QK^\top/\sqrt{d}`.

    Args:
        model (nn.Module): a model whose attention modules have ``q_proj`` and ``k_proj``
            :class:`~torch.nn.Linear` layers and ``n_head`` or ``num_heads``.

    Returns:
        list[Tensor]: one float64 tensor ``[H, C, C]`` per attention layer, in module order.
    """
    out = []
    for name, module, wk, heads in _find_key_weights(model):
        q = getattr(module, "q_proj", None)
        if not isinstance(q, nn.Linear) or q.weight.shape != wk.shape:
            raise ValueError(f"qk_weight_kernels: {name} has no q_proj Linear matching its k_proj")
        if not isinstance(heads, int) or heads < 1 or wk.size(0) % heads:
            raise ValueError(f"qk_weight_kernels: {name}'s module lacks a head count dividing its "
                             "rows")
        d = wk.size(0) // heads
        wq_h = q.weight.detach().double().view(heads, d, -1)
        wk_h = wk.detach().double().view(heads, d, -1)
        out.append(wq_h.transpose(-2, -1) @ wk_h)
    if not out:
        raise ValueError(
            f"qk_weight_kernels: {type(model).__name__} has no recognisable attention layer "
            "(expected modules with q_proj/k_proj nn.Linear)")
    return out


class KeySpectrumControl:
    r"""Controls the singular-value spectrum of every key projection :math:`W_K`.

    Call :meth:`step` after each ``optimizer.step()``. Every ``every`` calls, the ``k_proj``
    :class:`~torch.nn.Linear` weight of each attention layer (or each head's rows
    :math:`W_K^h` with ``per_head=True``) is decomposed as :math:`W = U \operatorname{diag}(s)
    V^\top` (float64) and rebuilt with new singular values :math:`s'`, keeping the learned
    singular vectors:

    * ``'hold'``: the spectrum's **shape** stays at its initial dispersion,
      :math:`s' = \lVert s \rVert_2 \, \hat s^{(0)}` with :math:`\hat s^{(0)} = s^{(0)} /
      \lVert s^{(0)} \rVert_2` recorded at construction;
    * ``'shrink'``: extra decay relative to the current shape,
      :math:`s'_k \propto s_k \, e^{-\mathrm{decay} \cdot k / (r - 1)}` (``k = 0`` the
      largest, ``r`` the number of singular values), rescaled to :math:`\lVert s \rVert_2`.

    Both modes keep :math:`\lVert W_K \rVert_F`, so the intervention changes the spectral
    shape, not the softmax temperature. Decay by rank index rather than a power law
    :math:`s_k^{1+\gamma}` because it is scale-free and also acts on flat spectra (e.g. an
    orthogonal init), where a power law does nothing. The decay compounds over applications,
    a steady pressure that gradient updates push against; hence the small default.

    Args:
        model (nn.Module): the model (a DDP wrapper works too: it is searched recursively).
        mode (str): ``'hold'`` or ``'shrink'``. (default: ``'hold'``)
        per_head (bool): control each head's rows of :math:`W_K` separately (needs
            ``n_head`` or ``num_heads`` on the attention module). (default: :obj:`False`)
        decay (float): decay rate per application for ``'shrink'`` (>= 0).
            (default: ``0.01``)
        every (int): apply on every ``every``-th call of :meth:`step`. (default: ``1``)

    Raises:
        ValueError: for a model without attention layers, key weights that are not 2-D,
            all-zero or non-finite, or heads that do not divide the rows.
    """

    def __init__(self, model: nn.Module, mode: str = "hold", per_head: bool = False,
                 decay: float = 0.01, every: int = 1) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError("KeySpectrumControl: 'model' must be an nn.Module, got "
                            f"{type(model).__name__}")
        check_choice(mode, "mode", _MODES, where="KeySpectrumControl")
        decay = check_positive_float(decay, "decay", where="KeySpectrumControl",
                                     allow_zero=True)
        check_int(every, "every", 1, where="KeySpectrumControl")
        self.mode, self.per_head, self.decay, self.every = mode, bool(per_head), decay, every
        self.num_calls = self.num_applied = 0

        found = _find_key_weights(model)
        if not found:
            raise ValueError(
                f"KeySpectrumControl: {type(model).__name__} has no recognisable attention layer "
                "(expected modules with a `k_proj` nn.Linear, such as CharGPT's blocks)")
        for name, _, w, heads in found:
            if w.dim() != 2:
                raise ValueError(f"KeySpectrumControl: {name}.weight must be 2-D, got shape "
                                 f"{tuple(w.shape)}")
            if self.per_head and (not isinstance(heads, int) or heads < 1
                                  or w.size(0) % heads != 0):
                raise ValueError(
                    f"KeySpectrumControl: per_head=True needs a head count (n_head/num_heads) "
                    f"dividing the {w.size(0)} rows of {name}.weight, got {heads!r}")
        self.names: list[str] = [name for name, _, _, _ in found]
        self.weights: list[Tensor] = [w for _, _, w, _ in found]
        self.heads: list[int] = [heads if self.per_head else 1 for _, _, _, heads in found]
        #: Initial normalised spectra :math:`s^{(0)}/\lVert s^{(0)}\rVert_2`, ``[heads, r]`` each.
        self.initial_shapes: list[Tensor] = [s / s.norm(dim=-1, keepdim=True)
                                             for s in self.spectra()]

    def _blocks(self, i: int) -> Tensor:
        w = self.weights[i].detach().to(torch.float64)
        h = self.heads[i]
        return w.view(h, w.size(0) // h, w.size(1))

    def _svd(self, i: int) -> tuple[Tensor, Tensor, Tensor]:
        w = self._blocks(i)
        name = self.names[i]
        if not all_finite(w):
            raise ValueError(f"KeySpectrumControl: {name}.weight contains NaN or infinite values")
        if (w.square().sum((-2, -1)) == 0).any():
            raise ValueError(
                f"KeySpectrumControl: {name}.weight (or one head's rows) is all zero; its spectral "
                "shape is undefined and the Frobenius norm cannot be kept")
        return torch.linalg.svd(w, full_matrices=False)

    def _target(self, i: int, s: Tensor) -> Tensor:
        if self.mode == "hold":
            shape = self.initial_shapes[i].to(s.device)
        else:
            r = s.size(-1)
            k = torch.arange(r, dtype=s.dtype, device=s.device)
            shape = s * torch.exp(-self.decay * k / max(r - 1, 1))
            shape = shape / shape.norm(dim=-1, keepdim=True)
        return shape * s.norm(dim=-1, keepdim=True)

    @torch.no_grad()
    def apply(self) -> None:
        """Replace the singular values of every controlled weight now."""
        for i, w in enumerate(self.weights):
            u, s, vh = self._svd(i)
            blocks = (u * self._target(i, s).unsqueeze(-2)) @ vh
            w.copy_(blocks.reshape(w.shape).to(w.dtype))
        self.num_applied += 1

    @torch.no_grad()
    def step(self) -> bool:
        """Call after each optimiser step; applies the control every ``every`` calls and
        returns whether it did on this call."""
        self.num_calls += 1
        if self.num_calls % self.every != 0:
            return False
        self.apply()
        return True

    def spectra(self) -> list[Tensor]:
        """Current singular values (descending, float64) of each weight, ``[heads, r]``."""
        return [self._svd(i)[1] for i in range(len(self.weights))]

    def participation_ratios(self) -> Tensor:
        """Participation ratio of each controlled spectrum, ``[layers, heads]`` (float64)."""
        return torch.stack([spectrum_participation_ratio(s) for s in self.spectra()])

    def state_dict(self) -> dict:
        """Serialisable state (initial shapes and counters), for resuming training."""
        return {"initial_shapes": [s.clone() for s in self.initial_shapes],
                "num_calls": self.num_calls, "num_applied": self.num_applied}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` output (the initial shapes of a resumed run)."""
        shapes = state["initial_shapes"]
        if len(shapes) != len(self.initial_shapes) or any(
            a.shape != b.shape for a, b in zip(shapes, self.initial_shapes)):
            raise ValueError("KeySpectrumControl.load_state_dict: spectra do not match this model")
        self.initial_shapes = [s.clone().to(torch.float64) for s in shapes]
        self.num_calls = int(state["num_calls"])
        self.num_applied = int(state["num_applied"])

    def __repr__(self) -> str:
        extra = f", decay={self.decay}" if self.mode == "shrink" else ""
        return (
            f"{self.__class__.__name__}(mode={self.mode!r}, layers={len(self.weights)}, "
            f"per_head={self.per_head}{extra}, every={self.every})"
        )
