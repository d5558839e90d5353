"""Training runs of the QSV ablation: the models, the clean-training-accuracy callback and one
resumable run per (variant, seed)."""
from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
from pathlib import Path
from typing import Any, Optional, Union

from torch import nn

from quest_geometric._utils import atomic_write_json, check_choice, resolve_device
from quest_geometric.pipelines.qsv_ablation.analyse import analyse_model
from quest_geometric.pipelines.qsv_ablation.config import (VARIANTS, AblationConfig,
                                                           _check_dataset)
from quest_geometric.pipelines.qsv_ablation.data import (_shapes, graph_loader, graph_transform,
                                                         load_split)
from quest_geometric.pipelines.qsv_ablation.variants import qsv_variant
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
    """The model of one row (random init from the global generator).

    Args:
        variant (str): one of :data:`VARIANTS`.
        cfg (AblationConfig): the sizes.
        in_channels (int): node feature size (graph variants) or image channels (ResNet).
        num_classes (int): classes.
        num_nodes (int, optional): template nodes (for ``positions='embedding'``).
    """
    check_choice(variant, "variant", VARIANTS, where="qsv_ablation")
    if variant == "resnet20":
        from quest_geometric.models.resnet import ResNet20

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


def train_variant(variant: str, seed: int, cfg: AblationConfig, dataset: str = "digits",
                  root: Optional[Union[str, os.PathLike]] = None,
                  run_root: Optional[Union[str, os.PathLike]] = None, device: str = "cpu",
                  progress: bool = False, analyse: bool = False, download: bool = False,
                  data: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """Train (or resume, or reuse) one variant with one seed.

    Args:
        variant (str): one of :data:`VARIANTS`.
        seed (int): model-init and training seed.
        cfg (AblationConfig): the settings.
        dataset (str): one of :data:`DATASETS`. (default: ``'digits'``)
        root (path, optional): CIFAR root. (default: :obj:`None`)
        run_root (path, optional): parent of the run folder; :obj:`None` keeps nothing on
            disk. (default: :obj:`None`)
        device (str): training device. (default: ``'cpu'``)
        progress (bool): the harness's progress bar. (default: :obj:`False`)
        analyse (bool): also run :func:`analyse_model` (rank 0). (default: :obj:`False`)
        download (bool): let CIFAR download when absent. (default: :obj:`False`)
        data (dict, optional): a cache ``{graph kind: (train, test)}`` shared across runs.
            (default: :obj:`None`)

    Returns:
        dict: ``variant``, ``seed``, ``params``, ``acc`` (test accuracy in percent),
        ``train_acc``, ``epoch_s`` (mean training time per epoch), ``epochs``, and
        ``analysis`` (or :obj:`None`).
    """
    from quest_geometric.training.checkpoint import load_checkpoint
    from quest_geometric.training.config import TrainConfig
    from quest_geometric.training.distributed import broadcast_object, init_distributed
    from quest_geometric.training.seed import seed_everything
    from quest_geometric.training.tasks import ClassificationTask
    from quest_geometric.training.trainer import Trainer

    check_choice(variant, "variant", VARIANTS, where="qsv_ablation")
    _check_dataset(dataset)
    info = init_distributed()
    kind = "image" if variant == "resnet20" else ("lattice" if variant == "lattice" else "sphere")
    data = {} if data is None else data
    if kind not in data:
        graph = graph_transform(variant, cfg)
        train_split = load_split(dataset, True, graph, cfg, root, download)
        clean = (train_split if not cfg.augment
                 else load_split(dataset, True, graph, cfg.replace(augment=False), root,
                                 download))
        data[kind] = (train_split, load_split(dataset, False, graph, cfg, root, download), clean)
    train, test, clean_train = data[kind]
    in_channels, num_nodes = _shapes(train[0])
    num_classes = int(train.num_classes)

    run_dir = Path(run_root) / f"{variant}_s{seed}" if run_root is not None else None
    done_file = run_dir / "run.json" if run_dir is not None else None
    previous = None
    if done_file is not None and info.is_main and done_file.exists():
        previous = json.loads(done_file.read_text())
    previous = broadcast_object(previous)

    seed_everything(seed)
    model = build_model(variant, cfg, in_channels, num_classes, num_nodes)
    params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    if previous is not None:
        result = previous["result"]
        if analyse and result.get("analysis") is None and variant != "resnet20" and info.is_main:
            load_checkpoint(run_dir / "checkpoint.pt", model)
            result["analysis"] = analyse_model(model, variant, test, cfg, resolve_device(device))
            atomic_write_json(done_file, {"config": dataclasses.asdict(cfg), "result": result},
                              default=str)
        return result

    if run_dir is not None and info.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
    tc = TrainConfig(
        epochs=cfg.epochs, batch_size=cfg.batch_size, eval_batch_size=cfg.eval_batch_size,
        lr=cfg.lr, min_lr=cfg.min_lr, weight_decay=cfg.weight_decay,
        warmup_epochs=cfg.warmup_epochs, grad_clip=cfg.grad_clip, seed=seed, device=device,
        log_every=10, eval_every=cfg.eval_every, checkpoint_every=1,
        out_dir=os.fspath(run_dir) if run_dir is not None else None, progress=progress,
        extra={"study": "qsv_ablation", "dataset": dataset, "variant": variant, "seed": seed},
    )
    task = ClassificationTask(label_smoothing=cfg.label_smoothing)
    clean_loader = graph_loader(clean_train, cfg.eval_batch_size, shuffle=False)
    trainer = Trainer(model, task, tc,
                      graph_loader(train, cfg.batch_size, shuffle=True, seed=seed),
                      graph_loader(test, cfg.eval_batch_size, shuffle=False),
                      callbacks=[CleanTrainAccuracy(clean_loader, task)])
    final = trainer.fit(resume="auto" if run_dir is not None else False)
    epoch_times = [r["time_s"] for r in trainer.history if r.get("kind") == "epoch"]
    clean_acc = final.get("train_clean_acc")
    if clean_acc is None:  # the last epoch was trained before a resume: measure it now
        clean_acc = CleanTrainAccuracy(clean_loader, task).measure(trainer)
    result: dict[str, Any] = {
        "variant": variant, "seed": seed, "params": params,
        "acc": 100.0 * float(final["val_acc"]),
        "train_acc": 100.0 * float(final["train_acc"]),
        "train_clean_acc": 100.0 * float(clean_acc),
        "epoch_s": statistics.fmean(epoch_times) if epoch_times else math.nan,
        "epochs": int(final.get("epoch", cfg.epochs)), "analysis": None,
    }
    if analyse and variant != "resnet20" and info.is_main:
        result["analysis"] = analyse_model(trainer.raw_model, variant, test, cfg, trainer.device)
    if done_file is not None and info.is_main:
        atomic_write_json(done_file, {"config": dataclasses.asdict(cfg), "result": result},
                          default=str)
    return result
