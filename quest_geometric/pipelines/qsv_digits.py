r"""QSV against standard attention and a content-free baseline on digits: the tour's smoke run.

Trains three small :class:`~quest_geometric.models.QSVNet` classifiers of the same size
(within 5% of one another's parameter count) on scikit-learn's 8 x 8 handwritten digits,
each image mapped onto a two-shell Fibonacci-sphere graph by
:class:`~quest_geometric.transforms.ImageToSphere` followed by
:class:`~quest_geometric.transforms.AppendPosition`, batched by PyG's
:class:`~torch_geometric.loader.DataLoader`, for a few epochs with one seed:

* ``qsv``: :class:`~quest_geometric.nn.QSVConv` attention, one unit quaternion :math:`q_i`
  per node and head in place of :math:`W_Q, W_K, W_V`, the logit
  :math:`\langle q_i, q_j \rangle` and the value transported by
  :math:`r_{ij} = \bar q_i q_j`;
* ``standard_attention``: PyG's :class:`~torch_geometric.nn.conv.TransformerConv`
  (:math:`W_Q, W_K, W_V`) in the same network, its width set by
  :func:`~quest_geometric.models.match_parameter_count`;
* ``uniform``: QSV with uniform weights :math:`\alpha_{ij} = 1/\deg(i)`, the cheapest
  content-free baseline: what the network reaches when attention ignores the features.

Why: it shows the library's pieces working together and the comparison the QSV study makes;
a few epochs and one seed test none of its claims (the study,
``python -m benchmarks.qsv.ablation``, trains every variant to convergence over several seeds
and tests the paired differences).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Union

import torch
from torch import nn
from torch_geometric.data import Data
from torch_geometric.loader import DataLoader
from torch_geometric.transforms import Compose
from tqdm.auto import tqdm

from quest_geometric._utils import check_int, resolve_device
from quest_geometric._utils.checks import fail
from quest_geometric.datasets import DigitsGraphs
from quest_geometric.models import QSVNet, match_parameter_count
from quest_geometric.profile import write_results
from quest_geometric.training import ClassificationTask, TrainConfig, Trainer
from quest_geometric.transforms import AppendPosition, ImageToSphere

__all__ = ["SPHERE", "MODEL", "EPOCHS", "VARIANTS", "digits_graphs", "build_models",
           "accuracy", "train", "run"]

#: The sphere graph: Fibonacci shells of 16 and 64 nodes, each node with 8 in-neighbours on
#: its shell and 2 on the next (the QSV study's digits graph).
SPHERE: dict[str, Any] = {"sizes": (16, 64), "k": 8, "k_cross": 2}
#: The QSV models' size (the study's digits model).
MODEL: dict[str, int] = {"channels": 32, "heads": 2, "num_layers": 3}
#: Training epochs of each model.
EPOCHS = 6
#: The rows of the table, in order: name -> what the row's attention is.
VARIANTS: dict[str, str] = {
    "qsv": "QSV: quaternion attention, no W_Q, W_K, W_V",
    "standard_attention": "standard attention W_Q, W_K, W_V (param-matched)",
    "uniform": "QSV with uniform attention (content-free baseline)",
}
_BATCH, _LR, _WEIGHT_DECAY = 16, 5e-3, 0.05


def digits_graphs(split: str) -> list[Data]:
    """The ``'train'`` (1,437) or ``'test'`` (360) digits as sphere graphs of :data:`SPHERE`,
    each with its pixel value and centred position as node features (``x`` ``[80, 4]``),
    transformed once (the graphs are reused every epoch)."""
    graph = Compose([ImageToSphere(**SPHERE), AppendPosition()])
    dataset = DigitsGraphs(split=split, graph=graph)
    return [dataset[i] for i in range(len(dataset))]


def build_models(in_channels: int = 4, num_classes: int = 10, seed: int = 0
                 ) -> dict[str, QSVNet]:
    """The models of :data:`VARIANTS`, each initialised from ``torch.manual_seed(seed)``: QSV
    of size :data:`MODEL`, the standard-attention control with the width and MLP of
    :func:`~quest_geometric.models.match_parameter_count` for QSV's parameter count, and QSV
    with ``attention='uniform'`` in every :class:`~quest_geometric.nn.QSVConv`."""
    def seeded(**kwargs: Any) -> QSVNet:
        torch.manual_seed(seed)
        return QSVNet(in_channels, num_classes, **kwargs)

    qsv = seeded(**MODEL)
    shared = {"heads": MODEL["heads"], "num_layers": MODEL["num_layers"]}
    match = match_parameter_count(qsv.parameter_count(), in_channels, num_classes, **shared)
    return {"qsv": qsv,
            "standard_attention": seeded(channels=match["channels"], conv="transformer",
                                         mlp_hidden=match["mlp_hidden"], **shared),
            "uniform": seeded(qsv_kwargs={"attention": "uniform"}, **MODEL)}


@torch.no_grad()
def accuracy(model: nn.Module, graphs: list[Data], device: Union[str, torch.device] = "cpu"
             ) -> float:
    """The share of ``graphs`` whose label is the model's top class, in percent, in eval
    mode."""
    model.eval()
    correct = 0
    for batch in DataLoader(graphs, batch_size=256):
        batch = batch.to(device)
        correct += int((model(batch).argmax(-1) == batch.y).sum())
    return 100.0 * correct / len(graphs)


def train(model: nn.Module, graphs: list[Data], epochs: int = EPOCHS, seed: int = 0,
          device: Union[str, torch.device] = "cpu", progress: bool = False) -> nn.Module:
    """Train ``model`` in place on ``graphs`` with the library's
    :class:`~quest_geometric.training.Trainer` and
    :class:`~quest_geometric.training.ClassificationTask`: AdamW (weight decay 0.05), the
    learning rate 5e-3 after half an epoch of warm-up, cosine-decayed to zero, batches of 16
    in a per-epoch order drawn from ``seed`` (so every model sees the same batches).
    Returns the model."""
    cfg = TrainConfig(epochs=epochs, batch_size=_BATCH, lr=_LR, weight_decay=_WEIGHT_DECAY,
                      warmup_epochs=0.5, seed=seed, device=str(device), amp="off",
                      eval_every=0, checkpoint_every=0, progress=progress)
    Trainer(model, ClassificationTask(), cfg, graphs).fit()
    return model


def run(out_dir: Union[str, os.PathLike], device: Union[str, torch.device] = "cpu",
        progress: bool = True, epochs: int = EPOCHS, seed: int = 0) -> dict[str, Any]:
    """Train the models of :data:`VARIANTS` (:func:`build_models`, :func:`train`) on the
    training digits and write their table ``qsv_digits.{csv,json,md}`` to ``out_dir``.

    Args:
        out_dir (str or os.PathLike): where the table goes.
        device (str or torch.device): where to train. (default: ``'cpu'``)
        progress (bool): a progress bar per model. (default: :obj:`True`)
        epochs (int): training epochs of each model. (default: :data:`EPOCHS`)
        seed (int): the models' initialisation and batch order. (default: ``0``)

    Returns:
        dict: ``rows`` (``variant``, ``attention``, ``params``, ``test_acc`` and
        ``train_acc`` in percent, in eval mode after training), ``models`` (the trained
        models by variant), ``markdown`` (the table), ``summary`` (one line), ``paths`` and
        ``config`` (``epochs``, ``seed``).
    """
    where = "qsv_digits.run"
    if not isinstance(out_dir, (str, os.PathLike)):
        raise fail(TypeError, where, "out_dir", "a folder path", out_dir)
    epochs = check_int(epochs, "epochs", 1, where=where)
    seed = check_int(seed, "seed", 0, where=where)
    dev = resolve_device(device, f"{where}: 'device'")
    train_graphs, test_graphs = digits_graphs("train"), digits_graphs("test")
    models = build_models(train_graphs[0].num_features, 10, seed)
    rows = []
    for name, model in models.items():
        if progress:
            tqdm.write(f"[qsv_digits] training {name} ({epochs} epochs)")
        train(model, train_graphs, epochs, seed, dev, progress)
        rows.append({"variant": name, "attention": VARIANTS[name],
                     "params": model.parameter_count(),
                     "test_acc": accuracy(model, test_graphs, dev),
                     "train_acc": accuracy(model, train_graphs, dev)})
    notes = (f"Accuracy in percent on the {len(test_graphs):,} test and {len(train_graphs):,} "
             f"training digits after {epochs} epochs (one seed, {seed}); `params`: learnable "
             "parameters. One test image is "
             f"{100 / len(test_graphs):.2f} points, and one seed gives no spread: a smoke "
             "run, not a comparison.")
    paths = write_results(
        "qsv_digits", rows, Path(out_dir), title="QSV, standard and uniform attention on digits",
        columns=["variant", "attention", "params", "test_acc", "train_acc"], notes=notes,
        meta={"epochs": epochs, "seed": seed, "device": str(dev), "sphere": SPHERE,
              "model": MODEL},
        display={"test_acc": ("test acc (%)", lambda v: f"{v:.1f}"),
                 "train_acc": ("train acc (%)", lambda v: f"{v:.1f}")})
    summary = [", ".join(f"{r['variant']} {r['test_acc']:.1f}%" for r in rows)
               + f" test accuracy on digits ({epochs} epochs, one seed: a smoke run)"]
    return {"rows": rows, "models": models, "markdown": paths["md"].read_text(),
            "summary": summary, "paths": paths, "config": {"epochs": epochs, "seed": seed}}
