r"""Streaming mean and covariance in float64, mergeable exactly across batches and DDP ranks,
so that probes never store activations."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional, Union

import torch
from torch import Tensor

from quest_geometric._utils.checks import all_finite, check_int
from quest_geometric.analysis.metrics import participation_ratio_from_covariance

__all__ = ["StreamingCovariance"]


class StreamingCovariance:
    r"""Running mean and covariance of ``dim``-dimensional samples (float64, exact merges).

    The state is the sample count :math:`n`, the mean :math:`\mu` and the centred
    scatter matrix :math:`M_2 = \sum_i (z_i - \mu)(z_i - \mu)^\top`. A batch (or another
    accumulator) with statistics :math:`(n_b, \mu_b, M_{2,b})` is merged exactly with the
    parallel formula of Chan, Golub and LeVeque (1979):

    .. math::
        n = n_a + n_b, \quad \delta = \mu_b - \mu_a, \quad
        \mu = \mu_a + \delta \frac{n_b}{n}, \quad
        M_2 = M_{2,a} + M_{2,b} + \delta \delta^\top \frac{n_a n_b}{n}.

    Centred statistics avoid the cancellation of raw moments (:math:`\sum z z^\top - n
    \mu\mu^\top`) when the mean is large compared to the spread. :attr:`covariance` is
    :math:`M_2 / (n - 1)`. A leading ``shape`` holds independent accumulators that see the
    same number of samples, e.g. ``shape=(H,)`` with :meth:`update` on ``[H, n, dim]``.

    Args:
        dim (int): sample dimension.
        shape (Sequence[int]): leading shape of independent accumulators. (default: ``()``)
        dtype (torch.dtype): accumulation type. (default: :obj:`torch.float64`)
        device (torch.device or str, optional): where the state lives (CUDA for NCCL).
            (default: :obj:`None`, CPU)
    """

    def __init__(self, dim: int, shape: Sequence[int] = (), dtype: torch.dtype = torch.float64,
                 device: Optional[Union[torch.device, str]] = None) -> None:
        check_int(dim, "dim", 1, where="StreamingCovariance")
        shape = tuple(shape)
        for i, s in enumerate(shape):
            check_int(s, f"shape[{i}] (of {shape!r})", 1, where="StreamingCovariance")
        if dtype not in (torch.float64, torch.float32):
            raise TypeError(f"StreamingCovariance: dtype must be float64 or float32, got {dtype}")
        self.dim, self.shape, self.dtype, self.count = dim, shape, dtype, 0
        self._mean = torch.zeros(*shape, dim, dtype=dtype, device=device)
        self._m2 = torch.zeros(*shape, dim, dim, dtype=dtype, device=device)

    @property
    def device(self) -> torch.device:
        """Device of the state."""
        return self._mean.device

    def reset(self) -> "StreamingCovariance":
        """Forget every sample."""
        self.count = 0
        self._mean.zero_()
        self._m2.zero_()
        return self

    def _combine(self, n_b: int, mean_b: Tensor, m2_b: Tensor) -> None:
        n_a = self.count
        n = n_a + n_b
        if n_b == 0:
            return
        delta = mean_b - self._mean
        self._mean = self._mean + delta * (n_b / n)
        self._m2 = self._m2 + m2_b + delta.unsqueeze(-1) * delta.unsqueeze(-2) * (n_a * n_b / n)
        self.count = n

    @torch.no_grad()
    def update(self, z: Tensor) -> "StreamingCovariance":
        """Add a batch of samples ``z [*shape, n, dim]`` (any float type; detached); returns
        ``self``."""
        if not isinstance(z, Tensor):
            raise TypeError("StreamingCovariance.update: z must be a tensor, got "
                            f"{type(z).__name__}")
        expected = (*self.shape, "n", self.dim)
        if (z.dim() != len(self.shape) + 2 or tuple(z.shape[:-2]) != self.shape
                or z.size(-1) != self.dim):
            raise ValueError(
                f"StreamingCovariance.update: z must have shape {expected}, got {tuple(z.shape)}")
        z = z.detach().to(device=self.device, dtype=self.dtype)
        if not all_finite(z):
            raise ValueError("StreamingCovariance.update: z contains NaN or infinite values")
        n_b = z.size(-2)
        if n_b == 0:
            return self
        mean_b = z.mean(dim=-2)
        zc = z - mean_b.unsqueeze(-2)
        self._combine(n_b, mean_b, zc.transpose(-2, -1) @ zc)
        return self

    @torch.no_grad()
    def merge(self, other: "StreamingCovariance") -> "StreamingCovariance":
        """Merge another accumulator's samples into this one, exactly; returns ``self``."""
        if not isinstance(other, StreamingCovariance):
            raise TypeError("StreamingCovariance.merge: expected a StreamingCovariance, got "
                            f"{type(other).__name__}")
        if other.dim != self.dim or other.shape != self.shape:
            raise ValueError(
                f"StreamingCovariance.merge: incompatible accumulators (dim {self.dim} vs "
                f"{other.dim}, shape {self.shape} vs {other.shape})")
        self._combine(other.count, other._mean.to(device=self.device, dtype=self.dtype),
                      other._m2.to(device=self.device, dtype=self.dtype))
        return self

    def copy(self) -> "StreamingCovariance":
        """An independent copy."""
        out = StreamingCovariance(self.dim, self.shape, self.dtype, self.device)
        out.count, out._mean, out._m2 = self.count, self._mean.clone(), self._m2.clone()
        return out

    @torch.no_grad()
    def all_reduce(self, group: Any = None) -> "StreamingCovariance":
        r"""A **new** accumulator of all samples seen by every rank of a process group
        (``self`` keeps its local samples, so repeated calls never double-count); a copy of
        ``self`` when :mod:`torch.distributed` is not initialised.

        The counts and weighted means :math:`n_r \mu_r` are summed first, giving the global
        mean :math:`\mu`; then each rank shifts its scatter matrix to it (parallel-axis
        theorem) and those are summed:

        .. math::
            M_2 = \sum_r \Big(M_{2,r} + n_r (\mu_r - \mu)(\mu_r - \mu)^\top\Big).

        Exact and centred like the pairwise merge, with :math:`O(\mathrm{dim}^2)` traffic per
        rank (gathering every rank's state would cost :math:`O(\mathrm{world} \cdot
        \mathrm{dim}^2)`). For NCCL the state must be on the rank's GPU.

        Args:
            group (ProcessGroup, optional): the process group. (default: :obj:`None`, world)
        """
        out = self.copy()
        dist = torch.distributed
        if not (dist.is_available() and dist.is_initialized()):
            return out
        counts = torch.tensor([float(self.count)], dtype=self.dtype, device=self.device)
        wmean = self._mean * float(self.count)
        dist.all_reduce(counts, group=group)
        dist.all_reduce(wmean, group=group)
        n = int(round(counts.item()))
        if n == 0:
            return out.reset()
        mean = wmean / n
        delta = self._mean - mean
        m2 = self._m2 + delta.unsqueeze(-1) * delta.unsqueeze(-2) * float(self.count)
        dist.all_reduce(m2, group=group)
        out.count, out._mean, out._m2 = n, mean, m2
        return out

    def _need(self, k: int, what: str) -> None:
        if self.count < k:
            raise ValueError(
                f"StreamingCovariance: {what} needs at least {k} sample(s), have {self.count}"
                + ("; the covariance (and the participation ratio) is undefined" if k == 2 else ""))

    @property
    def mean(self) -> Tensor:
        """Sample mean ``[*shape, dim]``."""
        self._need(1, "mean")
        return self._mean.clone()

    @property
    def scatter(self) -> Tensor:
        r"""Centred scatter matrix :math:`M_2` ``[*shape, dim, dim]``."""
        return self._m2.clone()

    @property
    def covariance(self) -> Tensor:
        """Unbiased sample covariance :math:`M_2/(n-1)` ``[*shape, dim, dim]``."""
        self._need(2, "covariance")
        return self._m2 / (self.count - 1)

    def eigenvalues(self) -> Tensor:
        """Eigenvalues of :attr:`covariance` in descending order ``[*shape, dim]`` (round-off
        negatives clamped to zero)."""
        ev = torch.linalg.eigvalsh(self.covariance)
        return ev.flip(-1).clamp_min(0.0)

    def participation_ratio(self) -> Tensor:
        r"""Participation ratio :math:`(\sum\lambda)^2/\sum\lambda^2` of the covariance
        ``[*shape]``; a :class:`ValueError` with fewer than two samples or zero variance."""
        self._need(2, "participation_ratio")
        return participation_ratio_from_covariance(self.covariance)

    def state_dict(self) -> dict[str, Any]:
        """Serialisable state (for checkpoints)."""
        return {"dim": self.dim, "shape": self.shape, "count": self.count,
                "mean": self._mean.clone(), "m2": self._m2.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> "StreamingCovariance":
        """Restore :meth:`state_dict` output."""
        if state.get("dim") != self.dim or tuple(state.get("shape", ())) != self.shape:
            raise ValueError("StreamingCovariance.load_state_dict: dim/shape mismatch")
        self.count = int(state["count"])
        self._mean = state["mean"].to(device=self.device, dtype=self.dtype).clone()
        self._m2 = state["m2"].to(device=self.device, dtype=self.dtype).clone()
        return self

    def __repr__(self) -> str:
        shape = f", shape={self.shape}" if self.shape else ""
        return f"{self.__class__.__name__}({self.dim}{shape}, count={self.count})"
