"""The report prose of the query/key geometry trajectories: table notes, the findings and
the configuration paragraph (the study's verdicts, intervention and overhead prose are in
``benchmarks/qk_geometry/report.py``)."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from quest_geometric.profile import markdown_table
from benchmarks.qk_geometry.trajectories.config import StudyConfig
from benchmarks.qk_geometry.trajectories.summary import (first_sustained_step, milestone_steps,
                                                           share_series)


#: How a smoke run's finding ends: its numbers, no verdict on the paper's finding.
SMOKE = " -> smoke run (quick configuration): too small to test the paper's finding "


def end_share(a: Mapping[str, Any]) -> str:
    """The finding on the share of trajectories with PR_Q - PR_K > 0 at the end, from the
    ``all`` row of :func:`~benchmarks.qk_geometry.trajectories.summary.trajectory_summary`,
    without its verdict."""
    return (f"PR_Q - PR_K > 0 at the end in {a['share_end']:.0%} of {a['trajectories']} "
            f"seed-averaged trajectories (throughout training: {a['share_throughout']:.0%}; per "
            f"run and layer: {a['run_share_end']:.0%} at the end)")


def trajectory_findings(traj: Mapping[str, Any]) -> list[str]:
    """The findings after :func:`end_share`, one line each: the slopes, the share over
    training (if ``traj`` holds ``share_over_steps``) and the correlations."""
    a = traj["rows"][-1]
    lines = [
        f"Slopes over training: PR_Q {a['slope_q_per_1k']:+.3g}/1k steps (expands in "
        f"{a['share_q_expands']:.0%} of trajectories), PR_K {a['slope_k_per_1k']:+.3g}/1k "
        f"steps (shrinks in {a['share_k_shrinks']:.0%}); mean PR_Q {a['pr_q_start']:.2f} -> "
        f"{a['pr_q_end']:.2f}, PR_K {a['pr_k_start']:.2f} -> {a['pr_k_end']:.2f}. Second half "
        f"of training: PR_Q {a['slope_q_late_per_1k']:+.3g}/1k (expands in "
        f"{a['share_q_expands_late']:.0%}), PR_K {a['slope_k_late_per_1k']:+.3g}/1k (shrinks "
        f"in {a['share_k_shrinks_late']:.0%})."
    ]
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
    return lines


def findings(traj: Mapping[str, Any]) -> list[str]:
    """One line per finding of the quick (smoke) run: its numbers without verdicts on the
    paper's findings, which it is far too small to test."""
    return [end_share(traj["rows"][-1]) + SMOKE + "(goal >= 90%).", *trajectory_findings(traj)]


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


def config_sentence(cfg: StudyConfig) -> str:
    """The configuration paragraph's heading and its description of the model, the training
    and the grid (no trailing space)."""
    return (
        f"\n### Configuration\n\nCharGPT width {cfg.n_embd}, {cfg.n_head} heads of "
        f"{cfg.n_embd // cfg.n_head}, context {cfg.block_size}, batch {cfg.batch_size}, "
        f"{cfg.steps} AdamW steps (lr {cfg.lr:g} -> {cfg.min_lr:g} cosine, warmup "
        f"{cfg.warmup_steps}, weight decay {cfg.weight_decay:g}, grad clip 1), corpus "
        f"`{cfg.corpus}` (the Python language reference shipped with CPython, standing in for "
        f"WikiText-103 which cannot be downloaded here). Depths {list(cfg.depths)}, inits "
        f"{list(cfg.inits)}, seeds {list(cfg.seeds)}; probes every {cfg.probe_every} steps on a "
        f"fixed validation batch of {cfg.probe_batch_size} x {cfg.block_size} characters."
    )


#: What the configuration paragraph says of the scale, before :data:`QUICK_SCALE`.
PAPER_SCALE = "The paper used four seeds and far larger models and data; "
#: The end of the configuration paragraph of a quick run.
QUICK_SCALE = ("this is the --quick configuration (one seed, tiny width, few steps), a smoke "
               "test of the pipeline rather than a measurement.\n")


def config_notes(cfg: StudyConfig) -> str:
    """The configuration paragraph of the report of a quick run."""
    return config_sentence(cfg) + " " + PAPER_SCALE + QUICK_SCALE


def assemble(md: Sequence[str], summary: Sequence[str], notes: str) -> str:
    """The report: the heading (``md[0]``), the findings, the configuration paragraph
    ``notes``, then the parts' tables and figures (``md[1:]``)."""
    report = list(md[:1]) + ["### Findings\n", "\n".join(f"- {s}" for s in summary) + "\n",
                             notes] + list(md[1:])
    return "\n".join(report)
