"""The report prose of the query/key geometry study: table notes, the findings and the
configuration paragraph."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from quest_geometric.profile import markdown_table
from quest_geometric.pipelines.qk_geometry.config import StudyConfig
from quest_geometric.pipelines.qk_geometry.summary import (first_sustained_step, milestone_steps,
                                                           share_series)


def findings(traj: Optional[dict], inter: Optional[dict], smoke: bool = False) -> list[str]:
    """One line per finding; a ``smoke`` run (the quick configuration) gives its numbers
    without verdicts on the paper's findings, which it is far too small to test."""
    lines = []
    untested = " -> smoke run (quick configuration): too small to test the paper's finding "
    if traj is not None:
        a = traj["rows"][-1]
        n = a["trajectories"]
        ok = a["share_end"] >= 0.9
        lines.append(
            f"PR_Q - PR_K > 0 at the end in {a['share_end']:.0%} of {n} seed-averaged trajectories "
            f"(throughout training: {a['share_throughout']:.0%}; per run and layer: "
            f"{a['run_share_end']:.0%} at the end)"
            + (untested + "(goal >= 90%)." if smoke else " -> the paper's 'every trajectory' "
               "finding is " + ("reproduced (goal >= 90%)." if ok else
                                "NOT reproduced at this scale (goal >= 90%)."))
        )
        lines.append(
            f"Slopes over training: PR_Q {a['slope_q_per_1k']:+.3g}/1k steps (expands in "
            f"{a['share_q_expands']:.0%} of trajectories), PR_K {a['slope_k_per_1k']:+.3g}/1k "
            f"steps (shrinks in {a['share_k_shrinks']:.0%}); mean PR_Q {a['pr_q_start']:.2f} -> "
            f"{a['pr_q_end']:.2f}, PR_K {a['pr_k_start']:.2f} -> {a['pr_k_end']:.2f}. Second half "
            f"of training: PR_Q {a['slope_q_late_per_1k']:+.3g}/1k (expands in "
            f"{a['share_q_expands_late']:.0%}), PR_K {a['slope_k_late_per_1k']:+.3g}/1k (shrinks "
            f"in {a['share_k_shrinks_late']:.0%})."
        )
        sos = traj.get("share_over_steps")
        if sos:
            allr = share_series(sos)
            picks = sorted(set(milestone_steps([r["step"] for r in allr])))
            at = ", ".join(f"{r['share']:.0%} [{r['ci_low']:.0%}, {r['ci_high']:.0%}] at step "
                           f"{r['step']}"
                           for r in allr if r["step"] in picks)
            peak = max(allr[1:] or allr, key=lambda r: r["share"])
            first = first_sustained_step(sos, 0.9)
            depths = sorted({r["depth"] for r in sos if r["depth"] != "all"})
            per_depth = "; ".join(
                f"depth {d}: " + ", ".join(
                    f"{r['share']:.0%}" for r in share_series(sos, depth=d) if r["step"] in picks)
                for d in depths)
            lines.append(
                f"Share of the {allr[0]['n']} trajectories with PR_Q - PR_K > 0 over training "
                f"(exact 95% interval): {at}; highest {peak['share']:.0%} at step {peak['step']}; "
                + ("it never stays at or above 90%." if first is None else
                   f"it stays at or above 90% from step {first} on.")
                + f" Per depth at the same steps: {per_depth}."
            )
        for c in traj["correlations"]:
            lines.append(f"Spearman rho(PR_K, {c['y']}) over {c['over']}: {c['spearman_rho']:+.2f} "
                         f"(p = {c['p_value']:.2g}, n = {c['n']}).")
    if inter is not None:
        t = next((t for t in inter["tests"]
                  if t["test"].startswith("entropy(shrink) < entropy(hold)")), None)
        if t is not None:
            ok = t["k_less"] >= 4 and t["n_seeds"] >= 5
            lines.append(
                f"Intervention: entropy(shrink) < entropy(hold) in {t['k_less']} of "
                f"{t['n_untied']} seeds (signs of shrink - hold: {t['signs']}; one-sided sign "
                f"test p = {t['p_value']:.3g}; mean difference {t['mean_diff']:+.4f})"
                + (untested + "(goal: >= 4 of 5 seeds)." if smoke else
                   " -> the paper's causal finding is " + ("reproduced (goal: >= 4 of 5 seeds)."
                   if ok else "NOT reproduced (goal: >= 4 of 5 seeds)."))
            )
        lo = next((t for t in inter["tests"] if t["test"].startswith("val_loss(shrink)")), None)
        if lo is not None:
            lines.append(f"Validation loss: shrink < hold in {lo['k_less']} of {lo['n_untied']} "
                         f"seeds (mean difference {lo['mean_diff']:+.4f} nats).")
    return lines


#: The notes under the trajectory table.
TRAJ_NOTES = """\
A trajectory is one layer's seed-averaged curve for one (depth, init) (the paper's unit:
4 + 6 + 8 layers x 3 inits = 54). `share_end`: share of trajectories with PR_Q - PR_K > 0
at the last probe; `share_throughout`: > 0 at every probe after step 0 (a tied init has
PR_Q = PR_K exactly at step 0); `run_share_*`: the same over every run's layers, without
seed averaging. PR is the per-head participation ratio of the queries/keys of the fixed
validation probe batch, averaged over heads. Slopes: least squares of PR against step,
per 1,000 steps; `share_q_expands` / `share_k_shrinks`: share of trajectories with a
positive PR_Q / negative PR_K slope; `*_late`: the same over the second half of training
(steps >= T/2), after the early collapse. `entropy_end`: normalised causal attention entropy
at the end; `val_loss`: validation cross-entropy (nats/char) at the end."""

#: The notes under the share-over-steps table.
SHARE_NOTES = """\
`k` of `n` trajectories have PR_Q - PR_K > 0 at that step; `ci_low`/`ci_high`: exact
(Clopper-Pearson) 95% interval of the share, treating trajectories as independent (layers of
one model are not, so the true uncertainty is larger). `unit`: seed-averaged trajectories per
group (`depth`, `init`; `all` = every one) or the individual runs' layers (no seed averaging).
`mean_diff`: mean PR_Q - PR_K over the group."""


def share_milestones_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The share at a few steps (a quarter, half, three quarters and the end of training)
    per group, plus the first step from which it stays >= 90%."""
    groups = list(dict.fromkeys((r["unit"], r["depth"], r["init"]) for r in rows))
    steps = sorted({r["step"] for r in rows})
    if not steps:
        return ""
    marks = sorted(set(milestone_steps(steps)))
    table = []
    for unit, depth, init in groups:
        sel = {r["step"]: r for r in rows if (r["unit"], r["depth"], r["init"]) == (unit, depth,
                                                                                    init)}
        row = {"unit": unit, "depth": depth, "init": init, "n": next(iter(sel.values()))["n"]}
        for m in marks:
            r = sel.get(m)
            row[f"step {m}"] = (f"{r['share']:.0%} [{r['ci_low']:.0%}, {r['ci_high']:.0%}]"
                                if r is not None else "")
        first = first_sustained_step(rows, 0.9, unit, depth, init)
        row["stays >= 90% from"] = "never" if first is None else f"step {first}"
        table.append(row)
    return ("#### Share with PR_Q - PR_K > 0 at a few steps [exact 95% interval]\n\n"
            + markdown_table(table))


#: The notes under the intervention table (``{decay}``: the shrink decay).
INTER_NOTES = """\
`KeySpectrumControl` after every optimiser step, per head: `hold` keeps the shape of the
initial W_K spectrum, `shrink` multiplies singular value k by exp(-{decay} k / (r - 1))
each step; both keep ||W_K||_F. `none` is unconstrained training. Values are means over
seeds (std across seeds) of the layer-mean end values: normalised attention entropy,
validation loss (nats/char), PR of the keys (activations) and of W_K's spectrum."""


def config_notes(cfg: StudyConfig, quick: bool) -> str:
    """The configuration paragraph of the report."""
    return (
        f"\n### Configuration\n\nCharGPT width {cfg.n_embd}, {cfg.n_head} heads of "
        f"{cfg.n_embd // cfg.n_head}, context {cfg.block_size}, batch {cfg.batch_size}, "
        f"{cfg.steps} AdamW steps (lr {cfg.lr:g} -> {cfg.min_lr:g} cosine, warmup "
        f"{cfg.warmup_steps}, weight decay {cfg.weight_decay:g}, grad clip 1), corpus "
        f"`{cfg.corpus}` (the Python language reference shipped with CPython, standing in for "
        f"WikiText-103 which cannot be downloaded here). Depths {list(cfg.depths)}, inits "
        f"{list(cfg.inits)}, seeds {list(cfg.seeds)}; probes every {cfg.probe_every} steps on a "
        f"fixed validation batch of {cfg.probe_batch_size} x {cfg.block_size} characters. "
        f"Intervention: depth {cfg.intervention_depth}, {cfg.intervention_init} init, seeds "
        f"{list(cfg.intervention_seeds)}. The paper used four seeds and far larger models and "
        "data; "
        + ("this is the --quick configuration (one seed, tiny width, few steps), a smoke test "
           "of the pipeline rather than a measurement.\n" if quick else
           f"this is a configuration two CPU cores can train in about "
           f"{'an hour' if cfg.steps <= 600 else 'two hours'}.\n")
    )


def assemble(md: Sequence[str], summary: Sequence[str], cfg: StudyConfig, quick: bool) -> str:
    """The report: the heading (``md[0]``), the findings, the configuration paragraph, then
    the parts' tables and figures (``md[1:]``)."""
    report = list(md[:1]) + ["### Findings\n", "\n".join(f"- {s}" for s in summary) + "\n",
                             config_notes(cfg, quick)] + list(md[1:])
    return "\n".join(report)


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
