r"""The QSV ablation study: full QSV against its ablations and controls, over seeds.

Reproduces the comparison of Foley et al., "QSV: Quat-Sphere-Vision for Coupled Quaternion
Attention on Spherical Lattices" (2026; notes in ``shared/papers/qsv.md``) with the shared
:class:`~quest_geometric.training.trainer.Trainer`. Variants (:data:`VARIANTS`):

* ``qsv``: :class:`~quest_geometric.models.qsv_net.QSVNet` on the sphere graph;
* ``no_transport``: the same without the sandwich transport;
* ``uniform``: the same with uniform attention weights;
* ``standard_attention``: PyG's ``TransformerConv`` (:math:`W_Q, W_K, W_V`) on the same
  graph, width chosen so its parameter count is within 5% of ``qsv``
  (:func:`~quest_geometric.models.match_parameter_count`);
* ``lattice``: ``qsv`` trained on the flat 2-D pixel lattice instead of the sphere;
* ``resnet20``: :class:`~benchmarks.qsv.ablation_study.resnet.ResNet20` on the images (not
  parameter-matched).

Every variant is trained alike (optimiser, schedule, batch, augmentation, epochs); the table
gives the test accuracy (mean and sample std over seeds), the paired comparison with QSV,
parameters, time per epoch and the paper's number. Every run lives in its own folder, so a
killed run resumes and a finished one is never trained twice; under ``torchrun`` every rank
trains and rank 0 writes. On digits (:data:`DIGITS`) or CIFAR-10/100, with quick presets,
the analysis of the QSV-type models with :mod:`quest_geometric.analysis.qsv`
(``analyse=True``: a second table and two histograms), variants trained longer and other file
stems. Run ``python -m benchmarks.qsv.ablation --dataset digits`` (``--quick`` for a smoke
test).
"""
from benchmarks.qsv.ablation_study.analyse import analyse_model
from benchmarks.qsv.ablation_study.config import (DATASETS, DESCRIPTIONS, DIGITS, GRAPH_VARIANTS,
                                                  PAPER, PAPER_SOURCE, PRESETS, VARIANTS,
                                                  AblationConfig)
from benchmarks.qsv.ablation_study.data import (WithPosition, graph_loader, graph_transform,
                                                load_split, load_splits)
from benchmarks.qsv.ablation_study.plots import plot_histograms
from benchmarks.qsv.ablation_study.runs import (CleanTrainAccuracy, build_model, fit,
                                                make_loaders, train_run)
from benchmarks.qsv.ablation_study.study import run, train_all, train_variant, write_tables
from benchmarks.qsv.ablation_study.summary import (aggregate, aggregate_analysis, seed_rows,
                                                   variant_row)
from benchmarks.qsv.ablation_study.variants import qsv_variant

__all__ = ["VARIANTS", "GRAPH_VARIANTS", "DATASETS", "DESCRIPTIONS", "PAPER", "PAPER_SOURCE",
           "AblationConfig", "DIGITS", "PRESETS", "WithPosition", "graph_transform",
           "graph_loader", "load_split", "load_splits", "qsv_variant", "build_model",
           "CleanTrainAccuracy", "make_loaders", "fit", "train_run", "train_variant",
           "train_all", "analyse_model", "aggregate", "aggregate_analysis", "variant_row",
           "seed_rows", "plot_histograms", "write_tables", "run"]
