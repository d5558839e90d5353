r"""Query expansion and key specialisation: the query/key geometry study on CharGPT.

Reproduces, at CPU scale, the measurements of Gupta et al., "Query Expansion and Key
Specialization in Transformer Attention Geometry" (2026; notes in
``shared/papers/qk_geometry.md``):

* **Trajectories.** :class:`~quest_geometric.models.char_gpt.CharGPT` of several depths,
  query/key initialisations and seeds, trained with the shared
  :class:`~quest_geometric.training.trainer.Trainer`; every ``probe_every`` steps
  :class:`~quest_geometric.analysis.probe.QKProbe` logs, per layer, the participation ratios
  :math:`\mathrm{PR}_Q`, :math:`\mathrm{PR}_K`, the effective rank of
  :math:`QK^\top/\sqrt d` and the attention entropy on a fixed validation batch. A
  *trajectory* is one layer's seed-averaged curve for one (depth, init), as in the paper.
* **Intervention.** :class:`~quest_geometric.analysis.spectral_control.KeySpectrumControl`
  ``'hold'`` vs ``'shrink'`` vs unconstrained over seeds; the per-seed sign of
  :math:`H_\text{shrink} - H_\text{hold}` and a sign test across seeds.
* **Pretrained analysis** (:func:`hf_analysis`) and **overhead** (:func:`measure_overhead`).

Every run lives in its own folder, so an interrupted study resumes where it stopped and a
finished run is never trained twice.

Run ``python -m benchmarks.qk_geometry.study`` (``--quick`` for the small CPU configuration,
``--hf-model PATH ...`` for the pretrained analysis).
"""
from quest_geometric.pipelines.qk_geometry.config import FULL, INITS, MODES, QUICK, StudyConfig
from quest_geometric.pipelines.qk_geometry.plots import (plot_diff, plot_hf, plot_intervention,
                                                      plot_prk_entropy, plot_share_over_steps,
                                                      plot_trajectories)
from quest_geometric.pipelines.qk_geometry.pretrained import hf_analysis
from quest_geometric.pipelines.qk_geometry.runs import _dedupe  # noqa: F401  (used by the tests)
from quest_geometric.pipelines.qk_geometry.runs import (measure_overhead, run_intervention,
                                                     run_trajectories, train_run)
from quest_geometric.pipelines.qk_geometry.study import run
from quest_geometric.pipelines.qk_geometry.summary import (first_sustained_step,
                                                        intervention_summary,
                                                        run_bootstrap_shares, share_over_steps,
                                                        trajectory_summary)

__all__ = ["StudyConfig", "QUICK", "FULL", "INITS", "MODES", "train_run", "run_trajectories",
           "trajectory_summary", "share_over_steps", "run_bootstrap_shares",
           "first_sustained_step", "run_intervention", "intervention_summary", "measure_overhead",
           "hf_analysis", "plot_trajectories", "plot_diff", "plot_share_over_steps",
           "plot_prk_entropy", "plot_intervention", "plot_hf", "run"]
