r"""One seeded, exactly resumable, DDP-ready training loop for graph classifiers and language
models: :class:`Trainer`."""
from __future__ import annotations

import contextlib
import math
import os
import time
import warnings
from typing import Any, Callable, Iterable, Optional, Sequence, Union

import torch
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from quest_geometric._utils.checks import check_int, fail
from quest_geometric._utils.device import resolve_device
from quest_geometric._utils.io import remove_stale_temporaries
from quest_geometric._utils.lock import FolderInUseError, FolderLock
from quest_geometric.training.checkpoint import (CheckpointError, apply_checkpoint,
                                                  read_checkpoint, save_checkpoint, unwrap_model)
from quest_geometric.training.config import TrainConfig
from quest_geometric.training.data import is_step_data, make_loader
from quest_geometric.training.distributed import (DistInfo, all_gather_object, barrier,
                                                   init_distributed, reduce_sums)
from quest_geometric.training.logging import MetricsLogger, truncate_metrics
from quest_geometric.training.seed import (derive_seed, enable_determinism, get_rng_state,
                                            seed_everything, set_rng_state)
from quest_geometric.training.tasks import Task

CHECKPOINT_NAME = "checkpoint.pt"
#: The lock file that :meth:`Trainer.fit` holds in ``out_dir`` while it runs.
LOCK_NAME = ".trainer.lock"
METRICS_NAME = "metrics.jsonl"


class Callback:
    """Base class of trainer callbacks; override the hooks you need. Hooks run on **every** rank
    (use ``trainer.is_main`` to write from rank 0 only); state that must survive a resume is
    returned by :meth:`state_dict` (tensors, numbers, strings and containers only)."""

    def on_fit_start(self, trainer: "Trainer") -> None:
        """After set-up and any resume, before the first step."""

    def after_optimizer_step(self, trainer: "Trainer", step: int) -> None:
        """Right after ``optimizer.step()`` (``step`` from 1): the place for weight constraints."""

    def on_step_end(self, trainer: "Trainer", step: int, metrics: dict[str, Any]) -> None:
        """After each optimiser step; ``metrics`` holds ``loss`` (a 0-dim tensor: reading it
        syncs the device), ``lr`` and ``epoch``."""

    def on_eval_end(self, trainer: "Trainer", step: int, metrics: dict[str, float]) -> None:
        """After each evaluation, with the reduced ``val_*`` metrics."""

    def on_epoch_end(self, trainer: "Trainer", epoch: int, metrics: dict[str, float]) -> None:
        """After each epoch (``epoch`` from 1) with its record, before its checkpoint."""

    def on_fit_end(self, trainer: "Trainer", metrics: dict[str, float]) -> None:
        """After the last step, evaluation and checkpoint."""

    def state_dict(self) -> Optional[dict[str, Any]]:
        """State to store in checkpoints (:obj:`None`: nothing)."""
        return None

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the state returned by :meth:`state_dict`."""


class EveryNSteps(Callback):
    """Call ``fn(trainer, step)`` every ``every`` optimiser steps (a periodic probe).

    Args:
        fn (callable): ``fn(trainer, step)``.
        every (int): the period in optimiser steps.
        at_start (bool): also call it once before the first step (``step = 0`` for a fresh
            run). (default: :obj:`False`)
    """

    def __init__(self, fn: Callable[["Trainer", int], Any], every: int,
                 at_start: bool = False) -> None:
        check_int(every, "`every`", 1, where="EveryNSteps")
        self.fn, self.every, self.at_start = fn, every, at_start

    def on_fit_start(self, trainer: "Trainer") -> None:
        if self.at_start and trainer.step == 0:
            self.fn(trainer, 0)

    def on_step_end(self, trainer: "Trainer", step: int, metrics: dict[str, Any]) -> None:
        if step % self.every == 0:
            self.fn(trainer, step)

    def __repr__(self) -> str:
        return f"EveryNSteps({getattr(self.fn, '__name__', self.fn)!r}, every={self.every})"


class WarmupCosine:
    r"""Learning-rate factor: linear warmup over ``warmup`` steps, then cosine (or constant)
    decay to ``min_ratio`` at ``total`` steps (see :class:`TrainConfig`).

    Args:
        total (int): total optimiser steps.
        warmup (int): warmup steps. (default: :obj:`0`)
        min_ratio (float): final factor ``min_lr / lr``. (default: :obj:`0.0`)
        cosine (bool): cosine decay after the warmup, else constant. (default: :obj:`True`)
    """

    def __init__(self, total: int, warmup: int = 0, min_ratio: float = 0.0,
                 cosine: bool = True) -> None:
        self.total, self.warmup = int(total), int(warmup)
        self.min_ratio, self.cosine = float(min_ratio), bool(cosine)

    def __call__(self, step: int) -> float:
        if step < self.warmup:
            return (step + 1) / self.warmup
        if not self.cosine:
            return 1.0
        span = max(1, self.total - self.warmup)
        progress = min(1.0, (step - self.warmup) / span)
        return self.min_ratio + 0.5 * (1.0 - self.min_ratio) * (1.0 + math.cos(math.pi * progress))

    def __repr__(self) -> str:
        return (f"WarmupCosine(total={self.total}, warmup={self.warmup}, "
                f"min_ratio={self.min_ratio}, cosine={self.cosine})")


def build_optimizer(model: nn.Module, config: TrainConfig) -> torch.optim.Optimizer:
    """AdamW or SGD over the trainable parameters; weight decay applies to tensors with two or
    more dimensions (weights, embeddings), not to biases and normalisation gains."""
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise fail(ValueError, "build_optimizer", "model", "a model with trainable parameters "
                   "(requires_grad=True)", got_text=f"a {type(model).__name__} without any")
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [g for g in ({"params": decay, "weight_decay": config.weight_decay},
                          {"params": no_decay, "weight_decay": 0.0}) if g["params"]]
    if config.optimizer == "adamw":
        return torch.optim.AdamW(groups, lr=config.lr, betas=config.betas)
    return torch.optim.SGD(groups, lr=config.lr, momentum=config.momentum,
                           nesterov=config.nesterov)


def _resolve_device(config: TrainConfig, info: DistInfo) -> torch.device:
    """The run's device: ``config.device`` parsed by :func:`resolve_device`; a bare
    ``'cuda'`` (or ``'auto'`` on a GPU machine) becomes ``cuda:LOCAL_RANK``."""
    device = resolve_device(config.device, name="TrainConfig.device")
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", info.local_rank % max(1, torch.cuda.device_count()))
    return device


def _amp_dtype(config: TrainConfig, device: torch.device) -> Optional[torch.dtype]:
    if config.amp == "off" or (config.amp == "auto" and device.type != "cuda"):
        return None
    if config.amp == "auto":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if config.amp == "fp16" and device.type != "cuda":
        raise fail(ValueError, "Trainer", "config.amp", f"'bf16', 'off' or 'auto' on a "
                   f"{device.type} device ('fp16' needs a CUDA device)", config.amp)
    return torch.bfloat16 if config.amp == "bf16" else torch.float16


def _to_float(v: Any) -> float:
    return float(v.item()) if isinstance(v, Tensor) else float(v)


def _add(acc: dict[str, Any], sums: dict[str, Any]) -> None:
    for k, v in sums.items():
        if isinstance(v, Tensor):
            v = v.detach().double()
        acc[k] = acc[k] + v if k in acc else v


class Trainer:
    """Train ``model`` on ``task`` with the settings of ``config``.

    Metrics are kept as on-device sums, reduced over ranks only at log, evaluation and epoch
    boundaries, and recorded in ``history`` and ``out_dir/metrics.jsonl``; ``checkpoint.pt``
    holds everything a resume needs to continue exactly (every rank's random streams
    included). :meth:`fit` holds a lock on ``out_dir``. Under ``torchrun`` the model is
    wrapped in :class:`~torch.nn.parallel.DistributedDataParallel` and only rank 0 writes.

    Example:
        .. code-block:: python

            from quest_geometric.training import (ClassificationTask, TrainConfig, Trainer,
                                                  seed_everything)

            seed_everything(0)
            model = MyGNN()
            cfg = TrainConfig(epochs=30, batch_size=64, lr=1e-3, warmup_epochs=1,
                              out_dir="runs/gnn", seed=0)
            final = Trainer(model, ClassificationTask(), cfg, train_ds, val_ds).fit(resume="auto")
            # final["val_acc"], final["train_loss"], ...

    Args:
        model (torch.nn.Module): the model (moved to the run's device).
        task (Task): what a step computes
            (:class:`~quest_geometric.training.tasks.ClassificationTask`,
            :class:`~quest_geometric.training.tasks.LanguageModelTask`, or your own).
        config (TrainConfig): the run's settings.
        train_data: a map-style dataset, a :class:`~torch.utils.data.DataLoader` (its sampler's
            ``set_epoch`` is called each epoch; under DDP it must shard), or a step-based
            ``get_batch`` function (see :mod:`quest_geometric.training.data`).
        val_data (optional): the same kinds, for evaluation. (default: :obj:`None`)
        callbacks (sequence of Callback, optional): hooks. (default: :obj:`None`)
        optimizer (torch.optim.Optimizer, optional): used instead of building one from the
            config (the schedule still applies). (default: :obj:`None`)
        ddp_kwargs (dict, optional): extra arguments of
            :class:`~torch.nn.parallel.DistributedDataParallel`. (default: :obj:`None`)
    """

    def __init__(self, model: nn.Module, task: Task, config: TrainConfig, train_data: Any,
                 val_data: Any = None, callbacks: Optional[Sequence[Callback]] = None,
                 optimizer: Optional[torch.optim.Optimizer] = None,
                 ddp_kwargs: Optional[dict[str, Any]] = None) -> None:
        if not isinstance(model, nn.Module):
            raise fail(TypeError, "Trainer", "model", "a torch.nn.Module", model)
        if not isinstance(config, TrainConfig):
            raise fail(TypeError, "Trainer", "config", "a TrainConfig", config)
        if not callable(getattr(task, "training_step", None)):
            raise fail(TypeError, "Trainer", "task", "an object with a "
                       "training_step(model, batch) method",
                       got_text=f"an object of type {type(task).__name__} without one")
        if train_data is None:
            raise fail(TypeError, "Trainer", "train_data", "a dataset, a DataLoader or a "
                       "get_batch function", None)
        callbacks = list(callbacks or [])
        bad = next((cb for cb in callbacks if not isinstance(cb, Callback)), None)
        if bad is not None:
            raise fail(TypeError, "Trainer", "callbacks", "Callback instances",
                       got_text=f"a {type(bad).__name__}")
        config.validate()
        self.config, self.task, self.callbacks = config, task, callbacks
        self.dist = init_distributed()
        self.device = _resolve_device(config, self.dist)
        if config.deterministic:
            enable_determinism()
        self.amp_dtype = _amp_dtype(config, self.device)
        ws = self.dist.world_size
        if config.batch_size % ws:
            raise fail(ValueError, "Trainer", "config.batch_size", f"divisible by the world "
                       f"size {ws} (each rank takes batch_size / world_size)", config.batch_size)
        eval_bs = config.eval_batch_size or config.batch_size
        if eval_bs % ws:
            raise fail(ValueError, "Trainer", "config.eval_batch_size", f"divisible by the "
                       f"world size {ws}", eval_bs)
        self.local_batch_size, self.local_eval_batch_size = config.batch_size // ws, eval_bs // ws

        self.step_based = is_step_data(train_data)
        self.train_data, self.val_data = train_data, val_data
        self.generator: Optional[torch.Generator] = None
        if self.step_based:
            if config.max_steps is None:
                raise fail(ValueError, "Trainer", "config.max_steps", "set for step-based "
                           "train_data (a get_batch function)", None)
            if val_data is not None and not is_step_data(val_data):
                raise fail(TypeError, "Trainer", "val_data", "a get_batch function (or None) "
                           "with step-based train_data", got_text=f"a {type(val_data).__name__}")
            self.generator = torch.Generator().manual_seed(
                derive_seed(config.seed, "train", self.dist.rank))
            self.train_loader = self.val_loader = self.steps_per_epoch = None
            self.total_steps = config.max_steps
        else:
            if config.epochs is None:
                raise fail(ValueError, "Trainer", "config.epochs", "set for dataset/loader "
                           "train_data", None)
            self.train_loader = self._as_loader(train_data, train=True)
            self.val_loader = None if val_data is None else self._as_loader(val_data, train=False)
            self.steps_per_epoch = len(self.train_loader)
            if self.steps_per_epoch == 0:
                raise fail(ValueError, "Trainer", "train_data", "data of at least one batch",
                           got_text="a loader that yields no batches")
            total = config.epochs * self.steps_per_epoch
            self.total_steps = min(total, config.max_steps) if config.max_steps else total

        self.raw_model = unwrap_model(model).to(self.device)
        self.optimizer = build_optimizer(self.raw_model, config) if optimizer is None else optimizer
        warmup = config.warmup_steps
        if config.warmup_epochs and self.steps_per_epoch:
            warmup = int(round(config.warmup_epochs * self.steps_per_epoch))
        self.lr_lambda = WarmupCosine(self.total_steps, warmup, config.min_lr / config.lr,
                                      cosine=config.schedule == "cosine")
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self.lr_lambda)
        self.scaler = torch.amp.GradScaler(self.device.type,
                                           enabled=self.amp_dtype == torch.float16)
        self.model: nn.Module = self.raw_model
        if self.dist.distributed:
            kw = dict(ddp_kwargs or {})
            if self.device.type == "cuda":
                kw.setdefault("device_ids", [self.device.index])
            self.model = DistributedDataParallel(self.raw_model, **kw)

        self.step, self.epoch = 0, 0  # optimiser steps and epochs completed
        self.history: list[dict[str, Any]] = []
        self._epoch_sums: dict[str, Any] = {}  # sums since the last record
        self._window_sums: dict[str, Any] = {}  # sums since the last log line
        self.out_dir = config.out_dir
        self.logger = MetricsLogger(self.metrics_path,
                                    enabled=self.is_main) if self.out_dir else None

    @property
    def is_main(self) -> bool:
        """Whether this process is rank 0."""
        return self.dist.is_main

    @property
    def checkpoint_path(self) -> Optional[str]:
        """``out_dir/checkpoint.pt`` (:obj:`None` without an ``out_dir``)."""
        return os.path.join(self.config.out_dir, CHECKPOINT_NAME) if self.config.out_dir else None

    @property
    def metrics_path(self) -> Optional[str]:
        """``out_dir/metrics.jsonl`` (:obj:`None` without an ``out_dir``)."""
        return os.path.join(self.config.out_dir, METRICS_NAME) if self.config.out_dir else None

    @property
    def lr(self) -> float:
        """The current learning rate of the first parameter group."""
        return float(self.optimizer.param_groups[0]["lr"])

    def _as_loader(self, data: Any, train: bool) -> DataLoader:
        if isinstance(data, DataLoader):
            sampler = getattr(data, "sampler", None)
            if self.dist.distributed and train and not hasattr(sampler, "set_epoch"):
                raise fail(ValueError, "Trainer", "train_data", "a dataset, or a DataLoader "
                           "that shards its data under DDP (e.g. with a DistributedSampler)",
                           got_text="a DataLoader that does not", hint="; pass the dataset "
                           "instead and the trainer builds one")
            return data
        if is_step_data(data):
            raise fail(TypeError, "Trainer", "val_data", "a dataset or a loader (or None) with "
                       "epoch-based train_data", got_text="a get_batch function")
        return make_loader(data, self.local_batch_size if train else self.local_eval_batch_size,
                           shuffle=train, seed=self.config.seed, rank=self.dist.rank,
                           world_size=self.dist.world_size, num_workers=self.config.num_workers)

    def _autocast(self) -> contextlib.AbstractContextManager:
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.amp_dtype)

    def _call(self, hook: str, *args: Any) -> None:
        for cb in self.callbacks:
            getattr(cb, hook)(self, *args)

    def train_step(self, batch: Any) -> Tensor:
        """Run one optimiser step on ``batch``; return the (detached) loss."""
        self.model.train()
        batch = self.task.to_device(batch, self.device)
        with self._autocast():
            loss, sums = self.task.training_step(self.model, batch)
        if not isinstance(loss, Tensor) or loss.dim() != 0:
            raise TypeError("Trainer: task.training_step must return a scalar loss tensor first")
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        if self.config.grad_clip is not None:
            self.scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(self.raw_model.parameters(), self.config.grad_clip)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.scheduler.step()
        self.step += 1
        self._call("after_optimizer_step", self.step)
        _add(self._epoch_sums, sums)
        _add(self._window_sums, sums)
        return loss.detach()

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """Evaluate on ``val_data`` on every rank, reduced over ranks: the task's metrics
        prefixed ``val_`` (``{}`` without val data)."""
        if self.val_data is None:
            return {}
        model = self.raw_model
        was_training = model.training
        model.eval()
        totals: dict[str, Any] = {}
        try:
            if self.step_based:
                gen = torch.Generator().manual_seed(derive_seed(self.config.seed, "val",
                                                                self.dist.rank))
                batches: Iterable[Any] = (self.val_data("val", self.local_eval_batch_size, gen)
                                          for _ in range(self.config.eval_batches))
            else:
                batches = self.val_loader
            for batch in batches:
                with self._autocast():
                    _add(totals, self.task.eval_step(model, self.task.to_device(batch,
                                                                                self.device)))
        finally:
            model.train(was_training)
        keys = sorted(set().union(*all_gather_object(sorted(totals))))  # a rank may have no batch
        return self._metrics({k: totals.get(k, 0.0) for k in keys}, "val", "validation")

    def _metrics(self, sums: dict[str, Any], prefix: str, what: str) -> dict[str, float]:
        """The task's metrics of ``sums`` reduced over ranks, refusing non-finite ones."""
        device = self.device if self.device.type == "cuda" else torch.device("cpu")
        reduced = reduce_sums({k: _to_float(v) for k, v in sums.items()}, device)
        metrics = {f"{prefix}_{k}": v for k, v in self.task.summarize(reduced).items()}
        bad = [k for k, v in metrics.items() if not math.isfinite(v)]
        if bad:
            raise FloatingPointError(f"Trainer: {what} metrics {bad} became non-finite at or "
                                     f"before step {self.step} (lr={self.lr:.3g}); lower the "
                                     f"learning rate, enable grad_clip, or check the data")
        return metrics

    def save_checkpoint(self, path: Optional[Union[str, os.PathLike]] = None
                        ) -> Optional[Union[str, os.PathLike]]:
        """Write a checkpoint (collective: every rank must call it; rank 0 writes).

        Args:
            path (str or os.PathLike, optional): the file; :obj:`None` uses
                ``out_dir/checkpoint.pt``. (default: :obj:`None`)

        Returns:
            str or None: the path written (on rank 0).
        """
        path = path or self.checkpoint_path
        if path is None:
            raise fail(ValueError, "Trainer.save_checkpoint", "path", "given when "
                       "TrainConfig.out_dir is None", None)
        rank_states = all_gather_object({
            "rng": get_rng_state(self.generator),
            "epoch_sums": {k: _to_float(v) for k, v in self._epoch_sums.items()},
            "window_sums": {k: _to_float(v) for k, v in self._window_sums.items()}})
        if self.is_main:
            cb_states = {f"{i}:{type(cb).__name__}": cb.state_dict() for i, cb in
                         enumerate(self.callbacks) if cb.state_dict() is not None}
            cls = type(self.raw_model)
            save_checkpoint(path, {
                "config": self.config.to_dict(), "model": self.raw_model.state_dict(),
                "model_class": f"{cls.__module__}.{cls.__qualname__}",
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "scaler": self.scaler.state_dict() if self.scaler.is_enabled() else None,
                "rank_states": rank_states, "world_size": self.dist.world_size,
                "epoch": self.epoch, "step": self.step, "history": self.history,
                "callbacks": cb_states, "torch_version": str(torch.__version__)})
        barrier()
        return path if self.is_main else None

    def _resolve_resume(self, resume: Union[bool, str, os.PathLike]) -> Optional[str]:
        if resume is False or resume is None:
            return None
        if resume == "auto":
            p = self.checkpoint_path
            return p if p is not None and os.path.isfile(p) else None
        if resume is True:
            p = self.checkpoint_path
            if p is None:
                raise fail(ValueError, "Trainer.fit", "resume", "False, 'auto' or a path when "
                           "TrainConfig.out_dir is None", True)
            if not os.path.isfile(p):
                raise FileNotFoundError(f"Trainer.fit(resume=True): no checkpoint at {p!r}")
            return p
        if isinstance(resume, (str, os.PathLike)):
            return os.fspath(resume)
        raise fail(TypeError, "Trainer.fit", "resume", "False, True, 'auto' or a path", resume)

    def _resume_from(self, path: str) -> None:
        payload = read_checkpoint(path)  # verified: integrity, format, version
        try:
            saved_cfg = TrainConfig.from_dict(payload["config"])
        except (TypeError, ValueError) as e:
            raise CheckpointError(f"checkpoint {path!r} carries an invalid config: {e}") from e
        diff = self.config.trajectory_diff(saved_cfg)
        if diff:
            warnings.warn(f"Trainer: resuming {path!r} with a different config {diff} "
                          f"(now, checkpoint); the run will not match an uninterrupted one",
                          stacklevel=3)
        lr_lambda_state = dict(self.lr_lambda.__dict__)
        apply_checkpoint(payload, self.raw_model, self.optimizer, self.scheduler,
                         self.scaler if self.scaler.is_enabled() else None,
                         source=f"checkpoint {path!r}")
        if self.lr_lambda.__dict__ != lr_lambda_state:  # the schedule follows the *new* config
            self.lr_lambda.__dict__.update(lr_lambda_state)
            for g, base in zip(self.optimizer.param_groups, self.scheduler.base_lrs):
                g["lr"] = base * self.lr_lambda(self.scheduler.last_epoch)
        self.step, self.epoch = int(payload["step"]), int(payload["epoch"])
        self.history = list(payload.get("history", []))
        states = payload.get("rank_states") or []
        if len(states) == self.dist.world_size:
            mine = states[self.dist.rank]
            set_rng_state(mine["rng"], self.generator)
            self._epoch_sums = dict(mine.get("epoch_sums", {}))
            self._window_sums = dict(mine.get("window_sums", {}))
        else:
            warnings.warn(f"Trainer: checkpoint written by {len(states)} rank(s), resuming on "
                          f"{self.dist.world_size}: random streams are re-seeded, so the run "
                          f"continues correctly but not bitwise like an uninterrupted one",
                          stacklevel=3)
            seed_everything((self.config.seed + 1_000_003 * (self.step + 1) + self.dist.rank)
                            % 2**63)
            if self.generator is not None:
                self.generator.manual_seed(derive_seed(self.config.seed, "train", self.dist.rank,
                                                       self.step))
            self._epoch_sums, self._window_sums = {}, {}
        cb_states = payload.get("callbacks") or {}
        for i, cb in enumerate(self.callbacks):
            key = f"{i}:{type(cb).__name__}"
            if key in cb_states:
                cb.load_state_dict(cb_states[key])
        if self.is_main and self.metrics_path:
            truncate_metrics(self.metrics_path, self.step)
        barrier()

    def _close_epoch(self, kind: str, t0: float) -> dict[str, Any]:
        """Record the training metrics summed since ``t0`` (and evaluate when due)."""
        count = _to_float(self._epoch_sums.get("count", 0.0))
        train_metrics = self._metrics(self._epoch_sums, "train", "training")
        self._epoch_sums = {}
        elapsed = time.perf_counter() - t0
        val = self.evaluate() if self._eval_due() else {}
        rec: dict[str, Any] = {
            "kind": kind, "step": self.step, **({} if self.step_based else {"epoch": self.epoch}),
            "lr": self.lr, **train_metrics, **val, "time_s": elapsed,
            f"{self.task.count_unit}_per_s": count * self.dist.world_size / max(elapsed, 1e-9)}
        self.history.append(rec)
        if self.logger is not None:
            self.logger.log(rec)
        if val:
            self._call("on_eval_end", self.step, val)
        return rec

    def _due(self, every: int) -> bool:
        """At the end of the run, or every ``every`` steps (step-based) or epochs."""
        if self.step >= self.total_steps or (not self.step_based
                                             and self.epoch >= self.config.epochs):
            return True
        return every > 0 and (self.step if self.step_based else self.epoch) % every == 0

    def _eval_due(self) -> bool:
        return self._due(self.config.eval_every)

    def _checkpoint_due(self) -> bool:
        return self.checkpoint_path is not None and self._due(self.config.checkpoint_every)

    def _log_window(self, bar: Any, t_window: float) -> float:
        """Reduce and log the running window every ``log_every`` steps; return the new start."""
        metrics = self._metrics(self._window_sums, "train", "training")
        now = time.perf_counter()
        count = _to_float(self._window_sums.get("count", 0.0)) * self.dist.world_size
        rate = count / max(now - t_window, 1e-9)
        if self.logger is not None:
            self.logger.log({"kind": "step", "step": self.step, "lr": self.lr,
                             **{k[len("train_"):]: v for k, v in metrics.items()},
                             f"{self.task.count_unit}_per_s": rate})
        acc = {"acc": f"{metrics['train_acc']:.3f}"} if "train_acc" in metrics else {}
        bar.set_postfix({"loss": f"{metrics.get('train_loss', float('nan')):.4f}", **acc,
                         "lr": f"{self.lr:.2e}", f"{self.task.count_unit}/s": f"{rate:.0f}"},
                        refresh=False)
        self._window_sums = {}
        return now

    def fit(self, resume: Union[bool, str, os.PathLike] = False,
            desc: Optional[str] = None, overwrite: bool = False) -> dict[str, Any]:
        """Train to the configured number of epochs or steps.

        Args:
            resume (bool or str): ``False`` starts afresh (seeding every stream from
                ``config.seed + rank`` and clearing ``metrics.jsonl``); ``True`` resumes from
                ``out_dir/checkpoint.pt`` (which must exist); ``'auto'`` resumes from it when it
                exists; a path resumes from that file. (default: :obj:`False`)
            desc (str, optional): label of the progress bar (an epoch-based run shows the epoch
                instead). (default: :obj:`None`)
            overwrite (bool): allow a fresh start over a previous run's checkpoint in ``out_dir``,
                replacing that run. (default: :obj:`False`)

        Returns:
            dict: the final record (``step``, ``epoch``, ``lr``, ``train_*``, ``val_*``, time and
            throughput), without its ``kind``; at once for a finished run resumed.

        Raises:
            FolderInUseError: another run holds ``out_dir``.
            FileExistsError: a fresh start over a previous run's checkpoint without
                ``overwrite=True`` (``resume='auto'`` continues that run).
        """
        if not isinstance(overwrite, bool):
            raise fail(TypeError, "Trainer.fit", "overwrite", "a bool", overwrite)
        path = self._resolve_resume(resume)
        lock = self._lock_out_dir(refuse_previous=path is None and not overwrite)
        try:
            return self._fit(path, desc)
        finally:
            if lock is not None:
                lock.release()

    def _lock_out_dir(self, refuse_previous: bool = False) -> Optional[FolderLock]:
        """Take the lock on ``out_dir`` (rank 0) and remove this trainer's stale temporaries.

        Every rank raises :class:`FolderInUseError` when another run holds the folder and,
        with ``refuse_previous``, :class:`FileExistsError` when it holds a previous run's
        checkpoint (checked under the lock by rank 0, which writes it).
        """
        if not self.out_dir:
            return None
        lock, error = None, None
        if self.is_main:
            lock = FolderLock(self.out_dir, LOCK_NAME, "Trainer.fit")
            try:
                lock.acquire()
            except FolderInUseError as e:
                lock, error = None, ("in use", str(e))
            else:
                if refuse_previous and os.path.lexists(self.checkpoint_path):
                    error = ("previous", (
                        f"Trainer.fit: out_dir {self.out_dir!r} holds a previous run's "
                        f"checkpoint ({self.checkpoint_path!r}); fit(resume='auto') continues "
                        "it (a finished run returns its final record at once), "
                        "fit(overwrite=True) starts over and replaces it, or choose another "
                        "out_dir"))
        errors = all_gather_object(error)
        if errors[0] is not None:
            if lock is not None:
                lock.release()
            kind, message = errors[0]
            raise (FolderInUseError if kind == "in use" else FileExistsError)(message)
        if self.is_main:  # writes killed mid-way left these; no other run writes here now
            for own in (self.checkpoint_path, self.metrics_path):
                remove_stale_temporaries(own)
        barrier()
        return lock

    def _fit(self, path: Optional[str], desc: Optional[str]) -> dict[str, Any]:
        if path is not None:
            self._resume_from(path)
        else:
            seed_everything(self.config.seed + self.dist.rank,
                            deterministic=self.config.deterministic)
            if self.generator is not None:
                self.generator.manual_seed(derive_seed(self.config.seed, "train", self.dist.rank))
            if self.is_main and self.metrics_path and os.path.exists(self.metrics_path):
                os.remove(self.metrics_path)
            barrier()
        self._call("on_fit_start")
        bar = tqdm(total=self.total_steps, initial=self.step, dynamic_ncols=True, desc=desc,
                   disable=not (self.config.progress and self.is_main), unit="step")
        try:
            if self.step < self.total_steps:
                if self.step_based:
                    self._fit_steps(bar)
                else:
                    self._fit_epochs(bar)
        finally:
            bar.close()
        final = {k: v for k, v in (self.history[-1] if self.history else {}).items() if k != "kind"}
        self._call("on_fit_end", final)
        return final

    def _step(self, batch: Any, bar: Any, t_window: float, epoch: Optional[int]) -> float:
        """One step of the loop, its callbacks and its log; returns the log window's start."""
        loss = self.train_step(batch)
        bar.update(1)
        self._call("on_step_end", self.step, {"loss": loss, "lr": self.lr, "epoch": epoch})
        if self.step % self.config.log_every == 0:
            t_window = self._log_window(bar, t_window)
        return t_window

    def _fit_epochs(self, bar: Any) -> None:
        cfg = self.config
        t_window = time.perf_counter()
        while self.epoch < cfg.epochs and self.step < self.total_steps:
            sampler = getattr(self.train_loader, "sampler", None)
            if hasattr(sampler, "set_epoch"):
                sampler.set_epoch(self.epoch)
            bar.set_description(f"epoch {self.epoch + 1}/{cfg.epochs}")
            t0 = time.perf_counter()
            for batch in self.train_loader:
                t_window = self._step(batch, bar, t_window, self.epoch)
                if self.step >= self.total_steps:
                    break
            self.epoch += 1
            rec = self._close_epoch("epoch", t0)
            self._call("on_epoch_end", self.epoch, {k: v for k, v in rec.items() if k != "kind"})
            if self._checkpoint_due():
                self.save_checkpoint()

    def _fit_steps(self, bar: Any) -> None:
        assert self.generator is not None
        t_window = t0 = time.perf_counter()
        while self.step < self.total_steps:
            batch = self.train_data("train", self.local_batch_size, self.generator)
            t_window = self._step(batch, bar, t_window, None)
            if self._eval_due():
                self._close_epoch("eval", t0)
                t0 = time.perf_counter()
            if self._checkpoint_due():
                self.save_checkpoint()

    def __repr__(self) -> str:
        mode = (f"max_steps={self.config.max_steps}" if self.step_based
                else f"epochs={self.config.epochs}")
        return (f"Trainer({type(self.raw_model).__name__}, {self.task!r}, {mode}, "
                f"world_size={self.dist.world_size}, device={self.device})")


__all__ = ["Trainer", "Callback", "EveryNSteps", "WarmupCosine", "build_optimizer"]
