"""Training runs of the QSV ablation: the models, the clean-training-accuracy callback and one
run per (variant, seed), in its own folder, reused once finished (:func:`train_run`)."""
from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Union

from torch import nn

from benchmarks.qsv.ablation_study.config import VARIANTS, AblationConfig
from benchmarks.qsv.ablation_study.data import graph_loader, sample_shapes
from benchmarks.qsv.ablation_study.variants import qsv_variant
from quest_geometric._utils import atomic_write_json, check_choice, resolve_device
from quest_geometric.training.trainer import Callback


def _model_kwargs(cfg: AblationConfig, num_nodes: Optional[int]) -> dict[str, Any]:
    kw: dict[str, Any] = dict(channels=cfg.channels, heads=cfg.heads, num_layers=cfg.num_layers,
                              stem=cfg.stem, readout=cfg.readout, mlp_ratio=cfg.mlp_ratio,
                              dropout=cfg.dropout)
    if cfg.temperature is not None:
        kw["qsv_kwargs"] = {"temperature": cfg.temperature}
    if cfg.positions == "embedding":
        kw.update(pos_embedding=True, num_nodes=num_nodes)
    return kw


def build_model(variant: str, cfg: AblationConfig, in_channels: int, num_classes: int,
                num_nodes: Optional[int] = None) -> nn.Module:
    """The model of one row (random init from the global generator):
    :func:`~benchmarks.qsv.ablation_study.variants.qsv_variant` for a graph row, or
    :class:`~benchmarks.qsv.ablation_study.resnet.ResNet20` on the images for ``'resnet20'``.

    Args:
        variant (str): one of :data:`VARIANTS`.
        cfg (AblationConfig): the sizes.
        in_channels (int): node feature size (graph rows) or image channels (ResNet).
        num_classes (int): classes.
        num_nodes (int, optional): template nodes (for ``positions='embedding'``).
    """
    check_choice(variant, "variant", VARIANTS, where="qsv_ablation")
    if variant == "resnet20":
        from benchmarks.qsv.ablation_study.resnet import ResNet20

        return ResNet20(num_classes=num_classes, in_channels=in_channels)
    return qsv_variant(variant, in_channels, num_classes, **_model_kwargs(cfg, num_nodes))


class CleanTrainAccuracy(Callback):
    r"""Accuracy on the **clean** (never augmented) training images, measured in eval mode
    after every epoch on which the trainer evaluates, stored as ``train_clean_acc`` in that
    epoch's record, beside the harness's ``train_acc`` (the running accuracy of the epoch's
    training steps, on augmented images, with the weights changing during the epoch).

    Args:
        batches (iterable): the clean training batches (re-iterated each time).
        task (ClassificationTask): computes the sums.
    """

    def __init__(self, batches: Any, task: Any) -> None:
        self.batches, self.task = batches, task

    def measure(self, trainer: Any) -> float:
        """The clean training accuracy of ``trainer``'s model now (a fraction)."""
        metrics = self.task.evaluate(trainer.raw_model, self.batches, trainer.device)
        return float(metrics.get("acc", math.nan))

    def on_epoch_end(self, trainer: Any, epoch: int, metrics: dict[str, float]) -> None:
        if "val_acc" not in metrics:
            return
        acc = self.measure(trainer)
        trainer.history[-1]["train_clean_acc"] = acc
        if trainer.logger is not None:
            trainer.logger.log({"kind": "clean_train", "step": trainer.step, "epoch": epoch,
                                "train_clean_acc": acc})

    def __repr__(self) -> str:
        return "CleanTrainAccuracy()"


def load_run(run_dir: Optional[Path]) -> Optional[dict[str, Any]]:
    """The result of a finished run in ``run_dir`` (its ``run.json``, read by rank 0 and
    sent to every rank), or :obj:`None`."""
    from quest_geometric.training.distributed import broadcast_object, get_dist_info

    previous = None
    done_file = run_dir / "run.json" if run_dir is not None else None
    if done_file is not None and get_dist_info().is_main and done_file.exists():
        previous = json.loads(done_file.read_text())["result"]
    return broadcast_object(previous)


def save_run(run_dir: Optional[Path], cfg: AblationConfig, result: dict[str, Any]) -> None:
    """Mark the run in ``run_dir`` finished: its ``run.json`` holds ``cfg`` and ``result``
    (rank 0 writes; nothing without a folder)."""
    from quest_geometric.training.distributed import get_dist_info

    if run_dir is not None and get_dist_info().is_main:
        atomic_write_json(run_dir / "run.json", {"config": dataclasses.asdict(cfg),
                                                 "result": result}, default=str)


def fit(model: nn.Module, seed: int, cfg: AblationConfig, loaders: tuple[Any, Any, Any],
        run_dir: Optional[Path], device: str, progress: bool, extra: dict[str, Any]
        ) -> tuple[dict[str, Any], Any]:
    """Train ``model`` with the shared :class:`~quest_geometric.training.trainer.Trainer` on
    ``loaders`` (training, test and clean training batches, :func:`make_loaders`), resuming
    from ``run_dir`` when it holds a checkpoint; ``extra`` goes into the run's configuration.

    Returns:
        tuple: the result (``acc``, ``train_acc`` and ``train_clean_acc`` in percent,
        ``epoch_s`` the mean training time per epoch, ``epochs``) and the trainer.
    """
    from quest_geometric.training.config import TrainConfig
    from quest_geometric.training.distributed import get_dist_info
    from quest_geometric.training.tasks import ClassificationTask
    from quest_geometric.training.trainer import Trainer

    train_loader, test_loader, clean_loader = loaders
    if run_dir is not None and get_dist_info().is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
    tc = TrainConfig(
        epochs=cfg.epochs, batch_size=cfg.batch_size, eval_batch_size=cfg.eval_batch_size,
        lr=cfg.lr, min_lr=cfg.min_lr, weight_decay=cfg.weight_decay,
        warmup_epochs=cfg.warmup_epochs, grad_clip=cfg.grad_clip, seed=seed, device=device,
        log_every=10, eval_every=cfg.eval_every, checkpoint_every=1,
        out_dir=os.fspath(run_dir) if run_dir is not None else None, progress=progress,
        extra={"study": "qsv_ablation", **extra, "seed": seed},
    )
    task = ClassificationTask(label_smoothing=cfg.label_smoothing)
    trainer = Trainer(model, task, tc, train_loader, test_loader,
                      callbacks=[CleanTrainAccuracy(clean_loader, task)])
    final = trainer.fit(resume="auto" if run_dir is not None else False)
    epoch_times = [r["time_s"] for r in trainer.history if r.get("kind") == "epoch"]
    clean_acc = final.get("train_clean_acc")
    if clean_acc is None:  # the last epoch was trained before a resume: measure it now
        clean_acc = CleanTrainAccuracy(clean_loader, task).measure(trainer)
    return {
        "acc": 100.0 * float(final["val_acc"]),
        "train_acc": 100.0 * float(final["train_acc"]),
        "train_clean_acc": 100.0 * float(clean_acc),
        "epoch_s": statistics.fmean(epoch_times) if epoch_times else math.nan,
        "epochs": int(final.get("epoch", cfg.epochs)),
    }, trainer


def make_loaders(splits: tuple[Any, Any, Any], cfg: AblationConfig, seed: int,
                 loader: Callable[..., Any] = graph_loader) -> tuple[Any, Any, Any]:
    """The training (shuffled by ``seed``), test and clean training batches of ``splits``,
    each ``loader(split, batch_size, shuffle, seed)`` (default: :func:`graph_loader`)."""
    train, test, clean = splits
    return (loader(train, cfg.batch_size, shuffle=True, seed=seed),
            loader(test, cfg.eval_batch_size, shuffle=False),
            loader(clean, cfg.eval_batch_size, shuffle=False))


def train_run(variant: str, seed: int, cfg: AblationConfig, splits: tuple[Any, Any, Any],
              run_root: Optional[Union[str, os.PathLike]] = None, device: str = "cpu",
              progress: bool = False, *, variants: Sequence[str] = VARIANTS,
              build: Callable[..., nn.Module] = build_model,
              loader: Callable[..., Any] = graph_loader, dataset: str = "digits",
              analyse: Optional[Callable[[nn.Module, dict[str, Any]],
                                         Optional[dict[str, Any]]]] = None) -> dict[str, Any]:
    """Train (or resume, or reuse) one variant with one seed on given splits; the keyword
    hooks take another model factory, loader or analysis
    (:func:`~benchmarks.qsv.ablation_study.study.train_variant` loads the splits and runs
    this).

    Args:
        variant (str): one of ``variants``.
        seed (int): model-init and training seed.
        cfg (AblationConfig): the settings.
        splits (tuple): the training, test and clean training graphs
            (:func:`~benchmarks.qsv.ablation_study.data.load_splits`).
        run_root (path, optional): parent of the run folder ``<variant>_s<seed>``;
            :obj:`None` keeps nothing on disk. (default: :obj:`None`)
        device (str): training device. (default: ``'cpu'``)
        progress (bool): the harness's progress bar. (default: :obj:`False`)
        variants (sequence of str): the variants ``build`` knows. (default: :data:`VARIANTS`)
        build (callable): the model factory, ``build(variant, cfg, in_channels, num_classes,
            num_nodes)`` (shapes of the first training sample). (default: :func:`build_model`)
        loader (callable): as in :func:`make_loaders`. (default: :func:`graph_loader`)
        dataset (str): the dataset's name in the run's configuration. (default: ``'digits'``)
        analyse (callable, optional): ``analyse(model, result)`` on rank 0 returns the
            result's ``analysis``, given the trained model on the training device; also on a
            reused run whose ``analysis`` is :obj:`None`, given the model of its
            ``checkpoint.pt`` (its ``run.json`` is rewritten). (default: :obj:`None`)

    Returns:
        dict: ``variant``, ``seed``, ``params``, ``acc`` (test accuracy in percent),
        ``train_acc``, ``train_clean_acc``, ``epoch_s`` (mean training time per epoch),
        ``epochs`` and ``analysis`` (:obj:`None` without ``analyse``).
    """
    from quest_geometric.training.checkpoint import load_checkpoint
    from quest_geometric.training.distributed import init_distributed
    from quest_geometric.training.seed import seed_everything

    check_choice(variant, "variant", variants, where="qsv_ablation")
    info = init_distributed()
    run_dir = Path(run_root) / f"{variant}_s{seed}" if run_root is not None else None
    result = load_run(run_dir)
    if result is not None and (analyse is None or result.get("analysis") is not None
                               or not info.is_main):
        return result
    train = splits[0]
    in_channels, num_nodes = sample_shapes(train[0])
    seed_everything(seed)
    model = build(variant, cfg, in_channels, int(train.num_classes), num_nodes)
    if result is None:  # train (the trainer moves model to the training device)
        params = sum(p.numel() for p in model.parameters() if p.requires_grad)
        measured, _ = fit(model, seed, cfg, make_loaders(splits, cfg, seed, loader), run_dir,
                          device, progress, {"dataset": dataset, "variant": variant})
        result = {"variant": variant, "seed": seed, "params": params, **measured, "analysis": None}
    else:  # a reused run, analysed now
        load_checkpoint(run_dir / "checkpoint.pt", model)
        model.to(resolve_device(device))
    if analyse is not None and info.is_main:
        result["analysis"] = analyse(model, result)
    save_run(run_dir, cfg, result)
    return result
