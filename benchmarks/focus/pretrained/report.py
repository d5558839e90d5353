"""The text of the experiment's tables: titles, columns and the notes under each table."""
from __future__ import annotations

import math
from typing import Any, Dict, List, Sequence

#: Title of the table :func:`~benchmarks.focus.pretrained.run` writes.
TITLE = "Focus composed onto SmolLM2-135M (routers trained only)"

#: Title of :func:`~benchmarks.focus.pretrained.evaluate_saved`'s table.
REEVAL_TITLE = "Saved Focus routers on SmolLM2-135M, evaluated again"

#: Title of :func:`~benchmarks.focus.pretrained.run_speed`'s table.
SPEED_TITLE = "SmolLM2-135M: greedy cached decoding, tokens per second"

#: Title of :func:`~benchmarks.focus.pretrained.write_decode_bounds`' table.
BOUNDS_TITLE = "SmolLM2-135M decoding: what the context costs a step"

#: Columns of the main table (``train_far_share`` added with a pair budget).
COLUMNS = ["model", "gate", "eval", "val_ppl", "delta_pct", "delta_sem", "blocks_worse",
           "pairs_kept", "soft_keep", "balance", "trainable",
           "steps", "train_s", "loss_last_a", "loss_last_b", "revisit_n", "revisit_mean",
           "revisit_sem"]

#: Columns of the re-evaluation table.
REEVAL_COLUMNS = ["routers", "gate", "gate_bias", "eval", "val_ppl", "delta_pct", "delta_sem",
                  "blocks_worse", "pairs_kept", "soft_keep", "balance", "steps",
                  "trained_val_ppl"]


def columns(pair_budget: bool) -> List[str]:
    """:data:`COLUMNS`, with ``train_far_share`` when the routers trained with a budget."""
    return COLUMNS + (["train_far_share"] if pair_budget else [])


def headlines(rows: Sequence[Dict[str, Any]], gates: Sequence[str], tag: str,
              val_blocks: int) -> str:
    """The notes under the main table: one headline per gate (soft and hard top-2 and top-1
    against full attention, whether training finished or still learns), then the columns
    explained."""
    heads = []
    for gate in gates:
        by = {r["eval"]: r for r in rows if r["gate"] == gate}
        if not by:
            continue
        first = next(iter(by.values()))
        fin = "" if first.get("finished") else " (training not finished: a cost, not a verdict)"
        if first["revisit_n"] and first["revisit_mean"] + 2 * first["revisit_sem"] < 0:
            fin += (f" (not at a plateau: a block's loss is {-first['revisit_mean']:.3f} +- "
                    f"{first['revisit_sem']:.3f} nats lower at its next visit, "
                    f"{first['revisit_n']} revisits in the second half)")
        soft_txt = ""
        if "soft" in by:
            keep = by["soft"].get("soft_keep", math.nan)
            soft_txt = (f"soft {by['soft']['delta_pct']:+.2f}% perplexity against full "
                        f"attention" + ("" if math.isnan(keep) else
                                        f" (the gate keeps {100 * keep:.1f}% of the causal "
                                        f"pairs' weight)") + "; ")
        heads.append(
            f"- headline ({gate} gate{tag}, {first['steps']} router steps{fin}): {soft_txt}"
            f"hard top-2 "
            f"{by['hard top-2']['delta_pct']:+.2f}% (+- {by['hard top-2']['delta_sem']:.2f} "
            f"over the {val_blocks} blocks, worse on {by['hard top-2']['blocks_worse']}) keeping "
            f"{100 * by['hard top-2']['pairs_kept']:.1f}% "
            f"of the causal pairs; hard top-1 {by['hard top-1']['delta_pct']:+.2f}% keeping "
            f"{100 * by['hard top-1']['pairs_kept']:.1f}%")
    heads.append(
        "- `loss_last_a`, `loss_last_b`: mean router training loss over the first and second "
        "half of the last 40% of steps; `revisit_mean` +- `revisit_sem`: mean change of a "
        "training block's loss from one visit to its next, over the `revisit_n` revisits in "
        "the second half of training (`revisit_drop`; near 0 at a plateau, negative while the "
        "routers still learn); `delta_sem`: standard error over the validation blocks of the "
        "per-block perplexity change, `blocks_worse`: blocks on which it is positive "
        "(`paired_block_delta`); `soft_keep` (soft additive rows): the mean factor by which "
        "the gate scales a causal pair's unnormalised attention weight "
        "(`additive_gate_share`; 1 for full attention, the share of pairs kept for a 0/1 "
        "gate), comparable with the hard rows' `pairs_kept`")
    return "\n".join(heads)


#: The notes under the re-evaluation table.
REEVAL_NOTES = ("Saved routers evaluated again, without training (`evaluate_saved`). "
             "`delta_sem`: standard error over the validation blocks of the per-block "
             "perplexity change, `blocks_worse`: blocks on which it is positive "
             "(`paired_block_delta`); `soft_keep` (soft additive rows): the mean factor by "
             "which the gate scales a causal pair's attention weight (`additive_gate_share`, "
             "comparable with `pairs_kept`); `steps` and `trained_val_ppl`: from the table of the "
             "run that trained the routers (the re-evaluation should reproduce its "
             "perplexity up to rounding; empty for a soft row evaluated with another "
             "`gate_bias` than the one trained).")
