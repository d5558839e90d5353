r"""Tasks: what one training step computes, so that one loop trains graph classifiers and
language models alike. A task turns ``(model, batch)`` into a mean loss and **sums**
(``loss_sum``, ``count``, ``correct``...), which the trainer accumulates and reduces over
ranks; :meth:`Task.summarize` turns the totals into metrics.
"""
from __future__ import annotations

import inspect
import math
from typing import Any, Iterable, Mapping, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from quest_geometric._utils.device import move_to_device

Sums = dict[str, Any]


class Task:
    """Base class of a training task: subclasses implement :meth:`training_step`.

    Attributes:
        count_unit (str): what ``count`` counts (``'samples'`` or ``'tokens'``); the throughput
            in the progress bar is reported in this unit.
    """

    count_unit: str = "samples"

    def to_device(self, batch: Any, device: torch.device) -> Any:
        """Move ``batch`` to ``device`` (override for custom batch types)."""
        return move_to_device(batch, device)

    def training_step(self, model: nn.Module, batch: Any) -> tuple[Tensor, Sums]:
        """Return the mean loss to back-propagate and the batch's sums.

        Args:
            model (torch.nn.Module): the (possibly DDP-wrapped) model, in training mode.
            batch: one batch, already on the device.

        Returns:
            (torch.Tensor, dict): the scalar loss and sums with at least ``loss_sum`` and
            ``count`` (tensors, summed without a host sync, or numbers).
        """
        raise NotImplementedError

    @torch.no_grad()
    def eval_step(self, model: nn.Module, batch: Any) -> Sums:
        """Return the sums of one evaluation batch (the model is in eval mode)."""
        return self.training_step(model, batch)[1]

    def summarize(self, sums: Mapping[str, float]) -> dict[str, float]:
        """Turn summed totals into metrics: ``loss = loss_sum / count`` and, when ``correct``
        is summed, ``acc = correct / count``."""
        count = float(sums.get("count", 0.0))
        if count <= 0:
            return {}
        out = {"loss": float(sums["loss_sum"]) / count}
        if "correct" in sums:
            out["acc"] = float(sums["correct"]) / count
        return out

    @torch.no_grad()
    def evaluate(self, model: nn.Module, batches: Iterable[Any],
                 device: Optional[torch.device] = None) -> dict[str, float]:
        """The metrics of :meth:`summarize` over ``batches`` in this process (no cross-rank
        reduction), the model in eval mode meanwhile.

        Args:
            model (torch.nn.Module): the model.
            batches (iterable): a loader or any iterable of batches.
            device (torch.device, optional): where batches go; :obj:`None`: the model's device.
                (default: :obj:`None`)
        """
        if device is None:
            p = next(iter(model.parameters()), None)
            device = p.device if p is not None else torch.device("cpu")
        was_training = model.training
        model.eval()
        totals: dict[str, float] = {}
        try:
            for batch in batches:
                for k, v in self.eval_step(model, self.to_device(batch, device)).items():
                    totals[k] = totals.get(k, 0.0) + float(v)
        finally:
            model.train(was_training)
        return self.summarize(totals)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class ClassificationTask(Task):
    r"""Classification with cross-entropy: graph-level PyG batches or ``(x, y)`` tuples.

    .. math::
        \ell = -\frac{1}{B}\sum_{i=1}^{B} \log \operatorname{softmax}(z_i)_{y_i},
        \qquad \mathrm{acc} = \frac{1}{B}\sum_i [\arg\max z_i = y_i]

    A batch with a ``target`` attribute (a PyG :class:`~torch_geometric.data.Batch`) gives
    ``logits = model(batch)``, an ``(x, y)`` tuple ``logits = model(x)``.

    Args:
        label_smoothing (float): cross-entropy label smoothing (included in the reported
            ``loss``). (default: :obj:`0.0`)
        target (str): the label attribute of graph batches. (default: :obj:`'y'`)

    Shapes:
        - **logits:** :math:`(B, C)`
        - **labels:** :math:`(B,)` or :math:`(B, 1)`, integer classes
    """

    def __init__(self, label_smoothing: float = 0.0, target: str = "y") -> None:
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"ClassificationTask: `label_smoothing` must be in [0, 1), "
                             f"got {label_smoothing}")
        self.label_smoothing = float(label_smoothing)
        self.target = target

    def forward(self, model: nn.Module, batch: Any) -> tuple[Tensor, Tensor]:
        """Return ``(logits, labels)`` for a batch."""
        if hasattr(batch, self.target) and not isinstance(batch, (tuple, list)):
            logits, y = model(batch), getattr(batch, self.target)
        elif isinstance(batch, (tuple, list)) and len(batch) == 2:
            x, y = batch
            logits = model(x)
        else:
            raise TypeError("ClassificationTask: a batch must be a PyG Batch with "
                            f"`{self.target}` or an (x, y) pair, got {type(batch).__name__}")
        if y is None:
            raise ValueError(f"ClassificationTask: the batch has no labels (`{self.target}` is "
                             "None)")
        y = y.reshape(-1)
        if logits.dim() != 2 or logits.size(0) != y.numel():
            raise ValueError(f"ClassificationTask: expected logits of shape (B, C) with "
                             f"B = {y.numel()} labels, got {tuple(logits.shape)}")
        if y.dtype.is_floating_point:
            raise TypeError(f"ClassificationTask: labels must be integer classes, got {y.dtype}")
        return logits, y

    def training_step(self, model: nn.Module, batch: Any) -> tuple[Tensor, Sums]:
        logits, y = self.forward(model, batch)
        loss = F.cross_entropy(logits.float(), y, label_smoothing=self.label_smoothing)
        n = y.numel()
        correct = (logits.detach().argmax(dim=-1) == y).sum()
        return loss, {"loss_sum": loss.detach().double() * n, "correct": correct, "count": n}

    def __repr__(self) -> str:
        return f"ClassificationTask(label_smoothing={self.label_smoothing})"


class LanguageModelTask(Task):
    r"""Next-token prediction on ``(x, y)`` blocks; reports loss, bits per character and token
    accuracy.

    .. math::
        \ell = -\frac{1}{BT}\sum_{b,t}\log p(y_{bt} \mid x_{b, \le t}), \qquad
        \mathrm{bpc} = \ell / \ln 2

    With ``pass_targets`` the model is called nanoGPT style, ``model(x, y) -> (logits, loss)``
    (or the loss alone, a token mean, which is then back-propagated); else
    ``model(x) -> logits`` (or ``(logits, ...)``) and the cross-entropy is computed here.

    Args:
        pass_targets (bool, optional): call ``model(x, y)``; :obj:`None` decides from the
            model's ``forward`` signature (two or more parameters). (default: :obj:`None`)
        ignore_index (int): target id excluded from loss and counts. (default: :obj:`-1`)

    Shapes:
        - **x, y:** :math:`(B, T)` token ids
        - **logits:** :math:`(B, T, V)`
    """

    count_unit = "tokens"

    def __init__(self, pass_targets: Optional[bool] = None, ignore_index: int = -1) -> None:
        self.pass_targets = pass_targets
        self.ignore_index = ignore_index
        self._signature_cache: dict[type, bool] = {}

    def _wants_targets(self, model: nn.Module) -> bool:
        if self.pass_targets is not None:
            return self.pass_targets
        inner = getattr(model, "module", model)
        cls = type(inner)
        if cls not in self._signature_cache:
            try:
                params = [p for p in inspect.signature(inner.forward).parameters.values()
                          if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
                self._signature_cache[cls] = len(params) >= 2
            except (TypeError, ValueError):
                self._signature_cache[cls] = False
        return self._signature_cache[cls]

    def training_step(self, model: nn.Module, batch: Any) -> tuple[Tensor, Sums]:
        if not isinstance(batch, (tuple, list)) or len(batch) != 2:
            raise TypeError(f"LanguageModelTask: a batch must be an (x, y) pair of token "
                            f"tensors, got {type(batch).__name__}")
        x, y = batch
        out = model(x, y) if self._wants_targets(model) else model(x)
        logits: Optional[Tensor] = out
        loss: Optional[Tensor] = None
        if isinstance(out, (tuple, list)):
            logits, loss = out[0], (out[1] if len(out) > 1 else None)
        elif isinstance(out, Tensor) and out.dim() == 0:
            logits, loss = None, out
        valid = y != self.ignore_index
        n = valid.sum()
        if logits is not None:
            if logits.shape[:-1] != y.shape:
                raise ValueError(f"LanguageModelTask: logits of shape {tuple(logits.shape)} do "
                                 f"not match targets of shape {tuple(y.shape)} (+ vocab dim)")
            if loss is None:
                loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)),
                                       y.reshape(-1), ignore_index=self.ignore_index)
        if loss is None:
            raise ValueError("LanguageModelTask: the model returned neither logits nor a loss")
        sums: Sums = {"loss_sum": loss.detach().double() * n, "count": n}
        if logits is not None:
            sums["correct"] = ((logits.detach().argmax(-1) == y) & valid).sum()
        return loss, sums

    def summarize(self, sums: Mapping[str, float]) -> dict[str, float]:
        out = super().summarize(sums)
        if "loss" in out:
            out["bpc"] = out["loss"] / math.log(2.0)
        return out

    def __repr__(self) -> str:
        return f"LanguageModelTask(pass_targets={self.pass_targets})"


__all__ = ["Task", "ClassificationTask", "LanguageModelTask"]
