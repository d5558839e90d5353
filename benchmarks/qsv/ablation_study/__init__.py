r"""The QSV ablation study: full QSV against its ablations and controls, over seeds.

Reproduces the comparison of Foley et al., "QSV: Quat-Sphere-Vision for Coupled Quaternion
Attention on Spherical Lattices" (2026; notes in ``shared/papers/qsv.md``) with the shared
:class:`~quest_geometric.training.trainer.Trainer`. Variants (:data:`VARIANTS`):

* ``qsv``: :class:`~quest_geometric.models.qsv_net.QSVNet` on the sphere graph;
* ``no_transport``: the same without the sandwich transport;
* ``uniform``: the same with uniform attention weights;
* ``standard_attention``: PyG's ``TransformerConv`` (:math:`W_Q, W_K, W_V`) on the same
  graph, width chosen so its parameter count is within 5% of ``qsv``;
* ``lattice``: ``qsv`` trained on the flat 2-D pixel lattice instead of the sphere;
* ``resnet20``: :class:`~quest_geometric.models.resnet.ResNet20` on the images.

Every variant is trained alike (optimiser, schedule, batch, augmentation, epochs); the table
gives the test accuracy (mean and sample std over seeds), parameters, time per epoch and the
paper's number. With ``analyse=True`` the QSV-type models are also measured with
:mod:`quest_geometric.analysis.qsv` (a second table and two histograms). Every run lives in
its own folder, so a killed run resumes and a finished one is never trained twice; under
``torchrun`` every rank trains and rank 0 writes.

The graph variants, the digits model, the training runs and the main table are the package's
:mod:`quest_geometric.pipelines.qsv_ablation` (what the tour runs); this folder adds the CIFAR
datasets, ResNet-20, the quick presets, the analysis, variants trained longer and other file
stems. Run ``python -m benchmarks.qsv.ablation --dataset digits`` (``--quick`` for a smoke
test).
"""
from benchmarks.qsv.ablation_study.analyse import analyse_model
from benchmarks.qsv.ablation_study.config import (DATASETS, PAPER, PAPER_SOURCE, PRESETS,
                                                  VARIANTS)
from benchmarks.qsv.ablation_study.data import graph_loader, graph_transform, load_split
from benchmarks.qsv.ablation_study.plots import plot_histograms
from benchmarks.qsv.ablation_study.study import (aggregate, aggregate_analysis, build_model, run,
                                                 train_variant, write_tables)

__all__ = ["VARIANTS", "DATASETS", "PAPER", "PAPER_SOURCE", "PRESETS",
           "graph_loader", "graph_transform", "load_split", "build_model", "analyse_model",
           "train_variant", "aggregate", "aggregate_analysis", "plot_histograms",
           "write_tables", "run"]
