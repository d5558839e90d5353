"""The configuration of a training run: :class:`TrainConfig`."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal, Optional

from quest_geometric._utils.checks import check_choice, check_int, check_real, fail

_OPTIMIZERS = ("adamw", "sgd")
_SCHEDULES = ("cosine", "constant")
_AMP = ("auto", "off", "bf16", "fp16")

#: Fields that may differ between a run and its resumption without changing the trajectory.
NON_TRAJECTORY_FIELDS = frozenset({"epochs", "max_steps", "progress", "out_dir", "device",
                                   "log_every", "checkpoint_every"})


@dataclass
class TrainConfig:
    r"""Everything that defines a run of :class:`~quest_geometric.training.trainer.Trainer`.

    A run is **epoch-based** (``epochs`` set; the data a dataset or loader) or **step-based**
    (``max_steps`` set; the data a ``get_batch(split, batch_size, generator)`` function);
    setting both on an epoch-based run stops at whichever comes first. The learning rate warms
    up linearly over :math:`W` steps, then decays by a cosine to ``min_lr`` at the last step
    :math:`T` (``schedule='constant'`` keeps :math:`\eta`):

    .. math::
        \eta_t = \begin{cases}
            \eta \, \frac{t + 1}{W} & t < W \\
            \eta_{\min} + \frac{1}{2}(\eta - \eta_{\min})
            \left(1 + \cos\left(\pi \frac{t - W}{T - W}\right)\right) & t \ge W
        \end{cases}

    Args:
        epochs (int, optional): epochs of an epoch-based run. (default: :obj:`None`)
        max_steps (int, optional): optimiser steps (required for step-based data).
            (default: :obj:`None`)
        batch_size (int): the *global* batch size; each of ``W`` DDP ranks takes
            ``batch_size / W`` (it must divide). (default: :obj:`32`)
        eval_batch_size (int, optional): global evaluation batch size; :obj:`None` uses
            ``batch_size``. (default: :obj:`None`)
        eval_batches (int): batches per evaluation of step-based data. (default: :obj:`20`)
        lr (float): peak learning rate. (default: :obj:`1e-3`)
        min_lr (float): final learning rate of the cosine schedule. (default: :obj:`0.0`)
        weight_decay (float): decoupled (AdamW) or L2 (SGD) weight decay. (default: :obj:`0.0`)
        optimizer (str): ``'adamw'`` or ``'sgd'``. (default: :obj:`'adamw'`)
        betas (tuple): AdamW betas. (default: :obj:`(0.9, 0.999)`)
        momentum (float): SGD momentum. (default: :obj:`0.9`)
        nesterov (bool): SGD Nesterov momentum. (default: :obj:`False`)
        schedule (str): ``'cosine'`` or ``'constant'`` after the warmup. (default: :obj:`'cosine'`)
        warmup_steps (int): warmup length in optimiser steps. (default: :obj:`0`)
        warmup_epochs (float): warmup length in epochs (epoch-based runs; exclusive with
            ``warmup_steps``). (default: :obj:`0.0`)
        grad_clip (float, optional): clip the global gradient norm to this. (default: :obj:`None`)
        amp (str): ``'auto'`` (bf16 autocast on CUDA when supported, else fp16 with a gradient
            scaler; off on CPU), ``'off'``, ``'bf16'`` or ``'fp16'`` (CUDA only).
            (default: :obj:`'auto'`)
        seed (int): seed of every random stream (model init is the caller's). (default: :obj:`0`)
        deterministic (bool): call :func:`~quest_geometric.training.seed.enable_determinism`.
            (default: :obj:`False`)
        device (str): ``'auto'`` (``cuda:LOCAL_RANK`` if available, else CPU) or a
            ``torch.device`` string. (default: :obj:`'auto'`)
        num_workers (int): workers of the loaders the trainer builds. (default: :obj:`0`)
        log_every (int): optimiser steps between progress-bar updates and ``"step"`` records.
            (default: :obj:`50`)
        eval_every (int): evaluate every this many epochs (epoch-based) or optimiser steps
            (step-based), and at the end; :obj:`0` only at the end. (default: :obj:`1`)
        checkpoint_every (int): write ``out_dir/checkpoint.pt`` every this many epochs or
            steps, and at the end; :obj:`0` only at the end. (default: :obj:`1`)
        out_dir (str, optional): where ``metrics.jsonl`` and ``checkpoint.pt`` go; :obj:`None`
            writes nothing. (default: :obj:`None`)
        progress (bool): show tqdm progress bars (rank 0 only). (default: :obj:`True`)
        extra (dict): free-form JSON-serialisable values stored with the config.
            (default: :obj:`{}`)
    """

    epochs: Optional[int] = None
    max_steps: Optional[int] = None
    batch_size: int = 32
    eval_batch_size: Optional[int] = None
    eval_batches: int = 20
    lr: float = 1e-3
    min_lr: float = 0.0
    weight_decay: float = 0.0
    optimizer: Literal["adamw", "sgd"] = "adamw"
    betas: tuple[float, float] = (0.9, 0.999)
    momentum: float = 0.9
    nesterov: bool = False
    schedule: Literal["cosine", "constant"] = "cosine"
    warmup_steps: int = 0
    warmup_epochs: float = 0.0
    grad_clip: Optional[float] = None
    amp: Literal["auto", "off", "bf16", "fp16"] = "auto"
    seed: int = 0
    deterministic: bool = False
    device: str = "auto"
    num_workers: int = 0
    log_every: int = 50
    eval_every: int = 1
    checkpoint_every: int = 1
    out_dir: Optional[str] = None
    progress: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Check every field; raise :class:`ValueError`/:class:`TypeError` naming the field."""
        where = "TrainConfig"

        def _int(name: str, minimum: int, optional: bool = False) -> None:
            v = getattr(self, name)
            if v is None and optional:
                return
            check_int(v, f"{name} (or None)" if optional else name, minimum, where=where)

        def _float(name: str, minimum: float, strict: bool = False, optional: bool = False) -> None:
            v = getattr(self, name)
            if v is None and optional:
                return
            arg = f"{name} (or None)" if optional else name
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise fail(TypeError, where, arg, "a real number", v)
            check_real(v, arg, where=where)
            if v < minimum or (strict and v == minimum):
                op = ">" if strict else ">="
                raise fail(ValueError, where, arg, f"a finite number {op} {minimum}", v)

        for name in ("epochs", "max_steps"):
            _int(name, 1, optional=True)
        if self.epochs is None and self.max_steps is None:
            raise fail(ValueError, where, "epochs", "set (an epoch-based run) when 'max_steps' "
                       "(a step-based run) is None", None)
        _int("batch_size", 1)
        _int("eval_batch_size", 1, optional=True)
        _int("eval_batches", 1)
        _float("lr", 0.0, strict=True)
        _float("min_lr", 0.0)
        if self.min_lr > self.lr:
            raise fail(ValueError, where, "min_lr", f"at most lr ({self.lr})", self.min_lr)
        _float("weight_decay", 0.0)
        check_choice(self.optimizer, "optimizer", _OPTIMIZERS, where=where)
        betas_what = "two numbers in [0, 1)"
        if not isinstance(self.betas, (tuple, list)) or any(
                isinstance(b, bool) or not isinstance(b, (int, float)) for b in self.betas):
            raise fail(TypeError, where, "betas", betas_what, self.betas)
        if len(self.betas) != 2 or not all(0.0 <= b < 1.0 for b in self.betas):
            raise fail(ValueError, where, "betas", betas_what, self.betas)
        self.betas = (float(self.betas[0]), float(self.betas[1]))
        _float("momentum", 0.0)
        if self.momentum >= 1.0:
            raise fail(ValueError, where, "momentum", "in [0, 1)", self.momentum)
        if self.nesterov and (self.optimizer != "sgd" or self.momentum == 0.0):
            raise fail(ValueError, where, "nesterov", "False unless optimizer='sgd' and "
                       "momentum > 0", self.nesterov)
        check_choice(self.schedule, "schedule", _SCHEDULES, where=where)
        _int("warmup_steps", 0)
        _float("warmup_epochs", 0.0)
        if self.warmup_steps and self.warmup_epochs:
            raise fail(ValueError, where, "warmup_epochs", "0 when warmup_steps is set (set "
                       "one of them, not both)", self.warmup_epochs)
        if self.warmup_epochs and self.epochs is None:
            raise fail(ValueError, where, "warmup_epochs", "0 in a step-based run (epochs=None; "
                       "use warmup_steps there)", self.warmup_epochs)
        _float("grad_clip", 0.0, strict=True, optional=True)
        check_choice(self.amp, "amp", _AMP, where=where)
        _int("seed", 0)
        if not isinstance(self.device, str):
            raise fail(TypeError, where, "device", "a str", self.device)
        for name, low in (("num_workers", 0), ("log_every", 1), ("eval_every", 0),
                          ("checkpoint_every", 0)):
            _int(name, low)
        if self.out_dir is not None and not isinstance(self.out_dir, str):
            self.out_dir = str(self.out_dir)
        if not isinstance(self.extra, dict):
            raise fail(TypeError, where, "extra", "a dict", self.extra)

    def to_dict(self) -> dict[str, Any]:
        """Return the config as a plain (JSON- and ``weights_only``-safe) dictionary."""
        d = dataclasses.asdict(self)
        d["betas"] = list(d["betas"])
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TrainConfig":
        """Build a config from :meth:`to_dict` output; unknown keys raise :class:`ValueError`."""
        if not isinstance(d, dict):
            raise fail(TypeError, "TrainConfig.from_dict", "d", "a dict", d)
        unknown = sorted(set(d) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise fail(ValueError, "TrainConfig.from_dict", "d", "a dict of TrainConfig "
                       "fields", got_text=f"unknown fields {unknown}")
        d = dict(d)
        if "betas" in d:
            d["betas"] = tuple(d["betas"])
        return cls(**d)

    def replace(self, **changes: Any) -> "TrainConfig":
        """Return a validated copy with ``changes`` applied."""
        return dataclasses.replace(self, **changes)

    def trajectory_diff(self, other: "TrainConfig") -> dict[str, tuple[Any, Any]]:
        """Fields that differ from ``other`` and change the training trajectory."""
        a, b = self.to_dict(), other.to_dict()
        return {k: (a[k], b[k]) for k in a if k not in NON_TRAJECTORY_FIELDS and a[k] != b[k]}


__all__ = ["TrainConfig"]
