r"""The QSV ablation study: full QSV against its ablations and controls, over seeds.

Reproduces the comparison of Foley et al., "QSV: Quat-Sphere-Vision for Coupled Quaternion
Attention on Spherical Lattices" (2026; notes in ``shared/papers/qsv.md``). The graph
variants, the digits model, the training runs and the main table are the package's
:mod:`quest_geometric.pipelines.qsv_ablation` (what the tour runs; its docstring gives the
variants and how they are trained alike); this folder adds ``resnet20``
(:class:`~benchmarks.qsv.ablation_study.resnet.ResNet20` on the images), the CIFAR datasets,
the quick presets, the analysis of the QSV-type models with
:mod:`quest_geometric.analysis.qsv` (``analyse=True``: a second table and two histograms),
variants trained longer and other file stems. Run
``python -m benchmarks.qsv.ablation --dataset digits`` (``--quick`` for a smoke test).
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
