"""The QSV ablation study's report prose beyond the package's
(:mod:`quest_geometric.pipelines.qsv_ablation.report`): the setting of every dataset, the
analysis notes and finding, and the variants trained longer."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from benchmarks.qsv.ablation_study.config import DESCRIPTIONS, PAPER_SOURCE, TEST_SET
from benchmarks.qsv.pipelines.qsv_ablation import AblationConfig
from benchmarks.qsv.pipelines.qsv_ablation import report as base
from benchmarks.qsv.pipelines.qsv_ablation.report import fmt

#: The notes under the analysis table.
ANALYSIS_NOTES = """\
Measured on the trained models, mean (std) over seeds. `entropy_mean`: normalised attention
entropy per node (1 = uniform averaging over the in-neighbours), averaged over nodes, layers
and heads of the analysed test graphs; `entropy_frac_above_0.95`: share of node-head values
above 0.95. `angle_median_deg`: median rotation angle of r_ij = conj(q_i) q_j over edges,
layers and heads; `angle_frac_below_10deg`: share below 10 degrees. `acc_trained`: test
accuracy (%) of the model as trained; `delta_*`: change in points when the ablation is
switched on at test time in every QSVConv, without retraining (no_transport: no sandwich
transport; uniform: alpha = 1/deg; both)."""


def headline(rows: Sequence[dict[str, Any]], dataset: str,
             cfg: Optional[AblationConfig] = None) -> str:
    """The table's first line for ``dataset``: the package's
    :func:`~quest_geometric.pipelines.qsv_ablation.report.headline` with the dataset's
    :func:`~quest_geometric.pipelines.qsv_ablation.report.setting` (:data:`TEST_SET`)."""
    return base.headline(rows, base.setting(dataset, TEST_SET[dataset], rows, cfg))


def findings(rows: Sequence[dict[str, Any]], analysis: Sequence[dict[str, Any]]) -> list[str]:
    """The package's findings
    (:func:`~quest_geometric.pipelines.qsv_ablation.report.findings`, ResNet-20 named too)
    and the trained QSV's analysis."""
    out = base.findings(rows, DESCRIPTIONS)
    for a in analysis:
        if a["variant"] == "qsv":
            out.append(
                f"Trained QSV: mean normalised attention entropy {fmt(a['entropy_mean'], 3)}, "
                f"median rotation angle {fmt(a['angle_median_deg'])} deg; test-time ablation: "
                f"transport off {fmt(a['delta_no_transport'], 2)} points, uniform attention "
                f"{fmt(a['delta_uniform'], 2)} points.")
    return out


def _longer(variant_epochs: Optional[Mapping[str, int]]) -> str:
    if not variant_epochs:
        return ""
    named = ", ".join(f"{v} {e}" for v, e in variant_epochs.items())
    return (f" (except {named}, trained longer to fit its clean training images; the "
            f"cosine schedule spans its epochs)")


def table_notes(cfg: AblationConfig, dataset: str, seeds: Sequence[int],
                summary: list[str], variant_epochs: Optional[Mapping[str, int]] = None,
                rows: Optional[Sequence[dict[str, Any]]] = None) -> str:
    """The package's notes under the main table
    (:func:`~quest_geometric.pipelines.qsv_ablation.report.table_notes`): the
    :func:`headline` first (with ``rows``), what each column means, the configuration (with
    the variants of ``variant_epochs`` that trained longer), and ``summary`` (the
    :func:`findings`) as a list."""
    head = headline(rows, dataset, cfg) if rows is not None else ""
    notes = base.table_notes(cfg, seeds, summary, head, PAPER_SOURCE[dataset])
    anchor = f"All variants: {cfg.epochs} epochs, "
    assert anchor in notes, "the package's notes no longer state the epochs"
    return notes.replace(anchor, f"All variants: {cfg.epochs} epochs{_longer(variant_epochs)}, ",
                         1)
