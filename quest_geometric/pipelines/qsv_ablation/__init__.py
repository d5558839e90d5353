r"""The QSV ablation table: full QSV against its ablations and controls, over seeds.

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

Run ``python -m benchmarks.qsv.ablation --dataset digits`` (``--quick`` for a smoke test).
"""
from quest_geometric.pipelines.qsv_ablation.analyse import analyse_model
from quest_geometric.pipelines.qsv_ablation.config import (DATASETS, GRAPH_VARIANTS, PAPER,
                                                           PRESETS, VARIANTS, AblationConfig)
from quest_geometric.pipelines.qsv_ablation.data import (WithPosition, graph_loader,
                                                         graph_transform, load_split)
from quest_geometric.pipelines.qsv_ablation.plots import plot_histograms
from quest_geometric.pipelines.qsv_ablation.runs import (CleanTrainAccuracy, build_model,
                                                         train_variant)
from quest_geometric.pipelines.qsv_ablation.study import run
from quest_geometric.pipelines.qsv_ablation.summary import aggregate, aggregate_analysis
from quest_geometric.pipelines.qsv_ablation.variants import match_parameter_count, qsv_variant

__all__ = ["VARIANTS", "GRAPH_VARIANTS", "DATASETS", "PAPER", "AblationConfig", "PRESETS",
           "WithPosition", "CleanTrainAccuracy", "graph_loader", "graph_transform", "load_split",
           "build_model", "qsv_variant", "match_parameter_count", "analyse_model",
           "train_variant", "aggregate", "aggregate_analysis", "plot_histograms", "run"]
