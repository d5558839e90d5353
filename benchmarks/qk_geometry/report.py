"""The report prose of the whole query/key geometry study beyond the pipeline's
(:mod:`benchmarks.qk_geometry.trajectories.report`): the verdicts on the paper's findings,
the intervention's and the overhead's findings and notes, and the configuration paragraph."""
from __future__ import annotations

from typing import Any, Mapping, Optional

from benchmarks.qk_geometry.config import StudyConfig
from benchmarks.qk_geometry.trajectories import report as pipeline
from benchmarks.qk_geometry.trajectories.report import SMOKE


def findings(traj: Optional[dict], inter: Optional[dict], smoke: bool = False) -> list[str]:
    """One line per finding; a ``smoke`` run (the quick configuration) gives its numbers
    without verdicts on the paper's findings, which it is far too small to test."""
    lines = []
    if traj is not None:
        ok = traj["rows"][-1]["share_end"] >= 0.9
        lines.append(
            pipeline.end_share(traj["rows"][-1])
            + (SMOKE + "(goal >= 90%)." if smoke else " -> the paper's 'every trajectory' "
               "finding is " + ("reproduced (goal >= 90%)." if ok else
                                "NOT reproduced at this scale (goal >= 90%)."))
        )
        lines += pipeline.trajectory_findings(traj)
    if inter is not None:
        t = next((t for t in inter["tests"]
                  if t["test"].startswith("entropy(shrink) < entropy(hold)")), None)
        if t is not None:
            ok = t["k_less"] >= 4 and t["n_seeds"] >= 5
            lines.append(
                f"Intervention: entropy(shrink) < entropy(hold) in {t['k_less']} of "
                f"{t['n_untied']} seeds (signs of shrink - hold: {t['signs']}; one-sided sign "
                f"test p = {t['p_value']:.3g}; mean difference {t['mean_diff']:+.4f})"
                + (SMOKE + "(goal: >= 4 of 5 seeds)." if smoke else
                   " -> the paper's causal finding is " + ("reproduced (goal: >= 4 of 5 seeds)."
                   if ok else "NOT reproduced (goal: >= 4 of 5 seeds)."))
            )
        lo = next((t for t in inter["tests"] if t["test"].startswith("val_loss(shrink)")), None)
        if lo is not None:
            lines.append(f"Validation loss: shrink < hold in {lo['k_less']} of {lo['n_untied']} "
                         f"seeds (mean difference {lo['mean_diff']:+.4f} nats).")
    return lines


#: The notes under the intervention table (``{decay}``: the shrink decay).
INTER_NOTES = """\
`KeySpectrumControl` after every optimiser step, per head: `hold` keeps the shape of the
initial W_K spectrum, `shrink` multiplies singular value k by exp(-{decay} k / (r - 1))
each step; both keep ||W_K||_F. `none` is unconstrained training. Values are means over
seeds (std across seeds) of the layer-mean end values: normalised attention entropy,
validation loss (nats/char), PR of the keys (activations) and of W_K's spectrum."""



def config_notes(cfg: StudyConfig, quick: bool) -> str:
    """The configuration paragraph of the report: the pipeline's, with the intervention's
    settings, and for the full configuration how long it trains."""
    return (
        pipeline.config_sentence(cfg)
        + f" Intervention: depth {cfg.intervention_depth}, {cfg.intervention_init} init, seeds "
        f"{list(cfg.intervention_seeds)}. " + pipeline.PAPER_SCALE
        + (pipeline.QUICK_SCALE if quick else
           f"this is a configuration two CPU cores can train in about "
           f"{'an hour' if cfg.steps <= 600 else 'two hours'}.\n")
    )


def overhead_finding(over: Mapping[str, Any]) -> str:
    """The finding line of the overhead measurement (against the 10% target)."""
    share = over["probe_share_pct"]
    return (
        f"Overhead of probing every {over['probe_every']} steps: the probes take {share:.1f}% of "
        f"the probed run ({over['ms_per_probe']:.0f} ms per probe vs {over['ms_per_step']:.0f} ms "
        f"per training step, {over.get('clock', 'wall clock')}) -> "
        + ("within" if share < 10 else "ABOVE") + " the 10% target. End-to-end difference "
        f"probed - plain: {over['overhead_pct']:+.1f}% ({over.get('clock', 'wall clock')}), "
        f"{over.get('overhead_wall_pct', over['overhead_pct']):+.1f}% wall clock: on cores shared "
        "with other work this difference is dominated by scheduling noise."
    )


#: The notes under the overhead table.
OVERHEAD_NOTES = ("Median of alternating repeats; same model, data and seed with and "
                  "without an EveryNSteps(QKProbe) callback; no files written. "
                  "`overhead_pct` compares the process CPU time (on CPU), robust to the "
                  "other work sharing the cores; `overhead_wall_pct` compares wall "
                  "clock; `probe_share_pct` is the time spent inside the probes.")


#: Title and notes of the run-bootstrap share table.
RUN_BOOTSTRAP_TITLE = ("Share of trajectories with PR_Q - PR_K > 0, with intervals over runs "
                       "(not trajectories)")
RUN_BOOTSTRAP_NOTES = """\
`share`: share of the seed-averaged trajectories with PR_Q - PR_K > 0 at the step;
`share_every_later`: share positive at every probe from that step to the end of training.
The trajectories are not independent (the layers of one run share its training, and every
trajectory averages the same runs), so the intervals resample **runs**: within each (depth,
init) cell its seeds are drawn with replacement, the trajectories re-averaged and both shares
recomputed; `boot_low`-`boot_high` and `every_later_boot_*` are the 2.5 and 97.5 percentiles
over the resamples. With 4 runs per cell these are rough intervals, conditional on the depths
and initialisations studied; a resample averages fewer distinct runs, so its shares are
noisier than the point estimate and the interval can sit below it."""
