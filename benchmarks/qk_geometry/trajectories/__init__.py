r"""Query expansion and key specialisation: the query/key geometry trajectories on CharGPT.

Reproduces, at CPU scale, the trajectory measurements of Gupta et al., "Query Expansion and
Key Specialization in Transformer Attention Geometry" (2026; notes in
``shared/papers/qk_geometry.md``):
:class:`~quest_geometric.models.char_gpt.CharGPT` of several depths, query/key
initialisations and seeds, trained with the shared
:class:`~quest_geometric.training.trainer.Trainer`; every ``probe_every`` steps
:class:`~quest_geometric.analysis.probe.QKProbe` logs, per layer, the participation ratios
:math:`\mathrm{PR}_Q`, :math:`\mathrm{PR}_K`, the effective rank of
:math:`QK^\top/\sqrt d` and the attention entropy on a fixed validation batch. A
*trajectory* is one layer's seed-averaged curve for one (depth, init), as in the paper.
:mod:`~quest_geometric.pipelines.qk_geometry` probes every layer and head of a
pretrained model.

Every run lives in its own folder, so an interrupted run resumes where it stopped and a
finished run is never trained twice.

:func:`run` trains the quick configuration (the study's ``--quick``). The whole study (the
full configuration, the key-spectrum intervention, the probing overhead, a series of
pretrained checkpoints, intervals over runs) builds on this in ``benchmarks/qk_geometry/``:
run ``python -m benchmarks.qk_geometry.study``. The tour runs a smaller demonstration on the
library instead (:func:`quest_geometric.pipelines.qk_geometry.run`).
"""
from benchmarks.qk_geometry.trajectories.config import INITS, METRIC_KEYS, QUICK, StudyConfig
from benchmarks.qk_geometry.trajectories.plots import (plot_diff, plot_prk_entropy,
                                                         plot_share_over_steps, plot_trajectories)
from benchmarks.qk_geometry.trajectories.runs import (ProbeCallback, build_model, load_corpus,
                                                        probe_batch, run_trajectories, train_run)
from benchmarks.qk_geometry.trajectories.study import run
from benchmarks.qk_geometry.trajectories.summary import (first_sustained_step,
                                                           share_over_steps, trajectory_summary)

__all__ = ["StudyConfig", "QUICK", "INITS", "METRIC_KEYS", "load_corpus", "probe_batch",
           "build_model", "ProbeCallback", "train_run", "run_trajectories", "trajectory_summary",
           "share_over_steps", "first_sustained_step", "plot_trajectories", "plot_diff",
           "plot_share_over_steps", "plot_prk_entropy", "run"]
