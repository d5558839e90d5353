"""The QSV ablation's report prose: the setting of every dataset, the headline, the findings
and the notes under its tables."""
from __future__ import annotations

import math
from typing import Any, Mapping, Optional, Sequence

from benchmarks.qsv.ablation_study.config import (DESCRIPTIONS, PAPER_SOURCE, TEST_SET,
                                                  AblationConfig)


def fmt(v: float, digits: int = 1) -> str:
    """``v`` with ``digits`` decimals, ``'n/a'`` when it is not finite."""
    return "n/a" if not math.isfinite(v) else f"{v:.{digits}f}"


#: The significance level at which :func:`verdict` calls a sign decided.
ALPHA = 0.05


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


def setting(dataset: str, rows: Sequence[dict[str, Any]],
            cfg: Optional[AblationConfig] = None) -> str:
    """One sentence on what the setting of ``dataset`` can show: image size, sphere nodes,
    model size, the accuracy range of the rows and the number of test images (one image in
    points, :data:`~benchmarks.qsv.ablation_study.config.TEST_SET`)."""
    n_test, side = TEST_SET[dataset]
    by = {r["variant"]: r for r in rows}
    nodes = f" on {sum(cfg.sphere_sizes)} sphere nodes" if cfg is not None else ""
    size = (f", ~{by['qsv']['params'] / 1000:.0f}K-parameter QSV models" if "qsv" in by else "")
    accs = [r["acc_mean"] for r in rows if math.isfinite(r["acc_mean"])]
    span = f", every row at {min(accs):.0f}-{max(accs):.0f}%" if accs else ""
    return (f"Setting: {dataset}, {side}x{side} images{nodes}{size}{span}; {n_test:,} test "
            f"images, so one image is {100.0 / n_test:.2f} points.")


def verdict(row: Mapping[str, Any], alpha: float = ALPHA) -> str:
    """``'decided'`` when the paired comparison with QSV has its 95% :math:`t` interval off
    zero and both exact tests (permutation and sign) below ``alpha``; ``'not decided'``
    otherwise (the sign of ``paired_delta`` is then not a finding)."""
    ok = (row.get("paired_n", 0) and math.isfinite(row.get("delta_ci_low", math.nan))
          and (row["delta_ci_low"] > 0 or row["delta_ci_high"] < 0)
          and row.get("perm_p", 1.0) < alpha and row.get("sign_p", 1.0) < alpha)
    return "decided" if ok else "not decided"


def headline(rows: Sequence[dict[str, Any]], dataset: str,
             cfg: Optional[AblationConfig] = None) -> str:
    """The table's first line: the limits of the setting of ``dataset`` (:func:`setting`)
    next to the comparison the paper's ablation turns on, standard attention against QSV
    (mean paired difference, 95% paired :math:`t` interval, the three tests and
    :func:`verdict`)."""
    out = setting(dataset, rows, cfg)
    by = {r["variant"]: r for r in rows}
    r = by.get("standard_attention")
    if r is not None and r.get("paired_n"):
        out += (f" Standard attention minus QSV: {fmt(r['paired_delta'], 2)} points over "
                f"{r['paired_n']} paired seeds (95% t interval {fmt(r['delta_ci_low'], 2)} to "
                f"{fmt(r['delta_ci_high'], 2)}; t-test p={fmt(r['t_p'], 3)}, permutation "
                f"p={fmt(r['perm_p'], 3)}, sign test p={fmt(r['sign_p'], 3)}): sign {verdict(r)}.")
    return out


def findings(rows: Sequence[dict[str, Any]],
             analysis: Sequence[dict[str, Any]] = ()) -> list[str]:
    """The findings, one sentence each: parameter counts, one line per table row
    (accuracy, spread, the paired comparison with QSV: mean difference, 95% paired
    :math:`t` interval, :math:`t`, permutation and sign tests, and :func:`verdict`; clean
    training accuracy, the paper's numbers), and the trained QSV's ``analysis`` row."""
    by = {r["variant"]: r for r in rows}
    out = []
    if "qsv" in by and "standard_attention" in by:
        q, s = by["qsv"], by["standard_attention"]
        out.append(f"Parameters: QSV {q['params']:,}, standard attention {s['params']:,} "
                   f"({100.0 * (s['params'] - q['params']) / q['params']:+.1f}%).")
    for v, r in by.items():
        spread = (f" +- {fmt(r['acc_std'], 2)}% ({r['seeds']} seeds" if r["seeds"] > 1
                  else f"% ({r['seeds']} seed, no spread")
        paired = ""
        if r.get("paired_n"):
            paired = (f"; paired per-seed delta {fmt(r['paired_delta'], 2)} over "
                      f"{r['paired_n']} seeds [95% t interval {fmt(r['delta_ci_low'], 2)}, "
                      f"{fmt(r['delta_ci_high'], 2)}], t-test p={fmt(r['t_p'], 3)}, exact "
                      f"permutation p={fmt(r['perm_p'], 3)}, wins {r['wins_vs_qsv']}, exact "
                      f"sign test p={fmt(r['sign_p'], 3)}: sign {verdict(r)}")
        matched = ("" if r.get("param_matched", "yes") != "no"
                   else f"; {r['params']:,} parameters, NOT parameter-matched")
        out.append(f"{DESCRIPTIONS[v]}: {fmt(r['acc_mean'], 2)}{spread}{matched}; delta vs QSV "
                   f"{fmt(r['delta'], 2)}{paired}; clean training accuracy "
                   f"{fmt(r.get('train_clean_acc_mean', math.nan), 1)}%; paper "
                   f"{fmt(r['paper'])}, paper delta {fmt(r['paper_delta'])}).")
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


def table_notes(cfg: AblationConfig, dataset: str, seeds: Sequence[int], summary: list[str],
                variant_epochs: Optional[Mapping[str, int]] = None,
                rows: Optional[Sequence[dict[str, Any]]] = None) -> str:
    """The notes under the main table: the :func:`headline` first (with ``rows``), what each
    column means (the paper's numbers from
    :data:`~benchmarks.qsv.ablation_study.config.PAPER_SOURCE`), the configuration (with the
    variants of ``variant_epochs`` that trained longer), and ``summary`` (the
    :func:`findings`) as a list."""
    head = headline(rows, dataset, cfg) if rows is not None else ""
    paper_source = PAPER_SOURCE[dataset]
    graph = (f"sphere of {len(cfg.sphere_sizes)} Fibonacci shells {list(cfg.sphere_sizes)} "
             f"(in-degree {cfg.k} + {cfg.k_cross})")
    return (
        f"{head}\n\nTest accuracy in percent, "
        f"mean and sample std over seeds {list(seeds)} (the `seeds` column: how many each row "
        "has); `delta`: points vs full QSV. `paper`/`paper_delta`: the QSV paper's numbers for "
        f"{paper_source} (n/a where it gives none; ResNet-20 is 'within 2.1 points' of "
        "the lattice). `paired_delta`: mean over seeds of the per-seed difference to QSV (same "
        "seed, over the seeds both rows have), with the 95% paired t interval "
        "`delta_ci_low`-`delta_ci_high` and its two-sided p `t_p`, the exact two-sided "
        "permutation test over all 2^n sign flips `perm_p`, and the two-sided exact sign test "
        "`sign_p` (`wins_vs_qsv`: seeds where the variant beats QSV; the smallest possible sign p "
        "is 0.0625 with 5 seeds, 0.002 with 10); a sign is called decided only when the interval "
        f"is off zero and both exact tests are below {ALPHA}. `param_matched`: parameter count "
        "within 5% of QSV's (ResNet-20 is not). `train_clean_acc_mean`: accuracy on the clean "
        "training images after the last epoch (eval mode); `train_acc_mean`: the harness's "
        "running accuracy over the last epoch's steps. `epoch_s`: training seconds per epoch "
        f"(evaluation excluded). QSVNet width {cfg.channels}, {cfg.heads} heads, {cfg.num_layers} "
        f"blocks, positions={cfg.positions!r}, on a {graph}; lattice k={cfg.lattice_k}. All "
        f"variants: {cfg.epochs} epochs{_longer(variant_epochs)}, batch {cfg.batch_size}, AdamW "
        f"lr {cfg.lr:g} -> {cfg.min_lr:g} cosine, warmup {cfg.warmup_epochs:g} epochs, weight "
        f"decay {cfg.weight_decay:g}, grad clip {cfg.grad_clip}, augmentation "
        f"{'on' if cfg.augment else 'off'}"
        f"{'' if cfg.train_limit is None else f', first {cfg.train_limit} training images'}; "
        "batches built by the vectorised graph_batch pipeline.\n\n"
        + "\n".join(f"- {s}" for s in summary)
    )
