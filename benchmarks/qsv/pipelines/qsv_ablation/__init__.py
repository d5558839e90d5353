r"""The QSV ablation table on digits: full QSV against its ablations and controls, over seeds.

Reproduces the comparison of Foley et al., "QSV: Quat-Sphere-Vision for Coupled Quaternion
Attention on Spherical Lattices" (2026; notes in ``shared/papers/qsv.md``) with the shared
:class:`~quest_geometric.training.trainer.Trainer`. Variants (:data:`VARIANTS`):

* ``qsv``: :class:`~quest_geometric.models.qsv_net.QSVNet` on the sphere graph;
* ``no_transport``: the same without the sandwich transport;
* ``uniform``: the same with uniform attention weights;
* ``standard_attention``: PyG's ``TransformerConv`` (:math:`W_Q, W_K, W_V`) on the same
  graph, width chosen so its parameter count is within 5% of ``qsv``;
* ``lattice``: ``qsv`` trained on the flat 2-D pixel lattice instead of the sphere.

Every variant is trained alike (optimiser, schedule, batch, augmentation, epochs); the table
gives the test accuracy (mean and sample std over seeds), parameters, time per epoch and the
paper's number. Every run lives in its own folder, so a killed run resumes and a finished one
is never trained twice; under ``torchrun`` every rank trains and rank 0 writes. The tour runs
:func:`run`; the study (``benchmarks/qsv/ablation_study/``, run with
``python -m benchmarks.qsv.ablation --dataset digits``) builds on it with CIFAR, ResNet-20,
the analysis of the trained models, the quick preset and the merge of per-seed files.
"""
from benchmarks.qsv.pipelines.qsv_ablation.config import (DESCRIPTIONS, DIGITS, PAPER,
                                                           PAPER_SOURCE, VARIANTS, AblationConfig)
from benchmarks.qsv.pipelines.qsv_ablation.data import (WithPosition, digits_splits,
                                                         graph_loader, graph_transform,
                                                         load_digits)
from benchmarks.qsv.pipelines.qsv_ablation.runs import (CleanTrainAccuracy, build_model, fit,
                                                         make_loaders, train_variant)
from benchmarks.qsv.pipelines.qsv_ablation.study import run, train_all, write_tables
from benchmarks.qsv.pipelines.qsv_ablation.summary import aggregate, seed_rows, variant_row
from benchmarks.qsv.pipelines.qsv_ablation.variants import qsv_variant

__all__ = ["VARIANTS", "DESCRIPTIONS", "PAPER", "PAPER_SOURCE", "AblationConfig", "DIGITS",
           "WithPosition", "CleanTrainAccuracy", "graph_loader", "graph_transform",
           "load_digits", "digits_splits", "build_model", "qsv_variant",
           "make_loaders", "fit", "train_variant", "train_all",
           "aggregate", "variant_row", "seed_rows", "write_tables", "run"]
