r"""Focus on SmolLM2-135M at one operating point (issue 31): routers trained on the training
split, every choice made on the validation split, each configuration reported once on the
test split (no 32-token window shared with the training text) and on out-of-domain prose,
beside full attention and the content-free baselines at the same pattern.

A **configuration** is a named entry of :data:`CONFIGS`: the Focus pattern (``K`` groups,
``top_k`` groups per token, a local ``window``) and, for a trained one, the router objective
(``'lm'`` or ``'distill'``, :func:`~quest_geometric.training.router_loss`); ``NAME@topK``
evaluates a trained configuration's routers at another ``top_k``, and ``NAME+sinks`` adds
:data:`NUM_SINKS` attention sinks to row ``NAME`` (every query also attends to the first
tokens, which pretrained models use as a resting place for attention; routers trained without
sinks are run with them, unchanged). Content-free rows need no
training: ``random`` routes with :class:`~quest_geometric.nn.focus.RandomGroupsRouter` at
the same ``K`` and ``top_k``, and ``sinks@NAME`` is the sliding window plus
:data:`NUM_SINKS` attention sinks (:class:`~quest_geometric.nn.focus.WindowOnlyRouter`)
widened to keep the share of causal pairs that row ``NAME`` was *measured* to keep on the
evaluation blocks (:func:`~quest_geometric.nn.focus.window_for_share`).

Steps (each resumable, each writing one file):

1. ``train NAME``: :func:`~quest_geometric.training.train_routers` with the straight-through
   gate (training sees the hard top-:math:`k` pattern) on the training blocks, checkpointed
   every 5 steps in ``runs/focus_operating_point/NAME``; the routers are saved to
   ``benchmarks/focus/results/focus_operating_point/routers_NAME`` when the steps are done.
2. ``evaluate NAME``: the per-block losses of validation, test and out-of-domain blocks,
   paired with full attention's (computed once and cached in ``full.json``), and the share
   of causal pairs kept, written to ``benchmarks/focus/results/focus_operating_point/NAME.json``.
3. ``table``: every evaluated row into ``focus_operating_point.{md,json,csv}``.
4. ``verdict``: every row's quality, passkey accuracy and measured speed against the
   target, criterion by criterion, into ``focus_verdict.{md,json,csv,png}``
   (:mod:`~benchmarks.focus.verdict`).

**Pairs kept at 8K** are extrapolated from the blocks: with :math:`s_n` the measured share of
causal pairs kept at :math:`n` tokens and :math:`w_n` the share the window alone keeps, the
far-pair rate :math:`r = (s_n - w_n) / (1 - w_n)` (the share of pairs beyond the window whose
groups intersect) is measured, and the share at :math:`T` tokens is
:math:`w_T + (1 - w_T)\,r` (:func:`extrapolated_share`), exact when the rate does not depend on
the distance, as for random groups.
"""
from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from quest_geometric._utils.checks import check_choice, check_int

__all__ = ["CONFIGS", "OOD_BLOCKS_PER_SOURCE", "NUM_SINKS", "SINKS_SUFFIX", "base_name",
           "extrapolated_share",
           "load_splits", "pinned_ood_files", "pin_ood_files", "OOD_PIN",
           "resolve_config", "compose_config", "apply_config", "build_model",
           "train_config", "eval_indices", "training_record", "saved_training_record",
           "evaluate_config",
           "paired_comparisons", "table_rows", "write_table",
           "attention_mac_share", "prefill_speedup_bound", "SMOLLM2_DIMS", "SPLITS", "block_sha",
           "refresh_full", "main"]


def _at_4k(K: int, objective: str, steps: int, init_from: str) -> Dict[str, Any]:
    """A top-2, window-256, 4-sink row trained ``steps`` steps on 4,096-token blocks from the
    routers ``init_from``: decoder checkpointing and a loss chunked by 512 tokens let a 4K
    step fit in memory (:mod:`benchmarks.focus.router_step_cost` measures it), and a
    checkpoint every 2 steps bounds what a killed run loses."""
    return {"kind": "trained", "K": K, "top_k": 2, "window": 256, "objective": objective,
            "num_sinks": 4, "steps": steps, "block": 4096, "checkpointing": True,
            "loss_chunk": 512, "ckpt_every": 2, "init_from": init_from}


#: The configurations: pattern, kind (``'trained'`` / ``'random'`` / ``'full'``), objective.
CONFIGS: Dict[str, Dict[str, Any]] = {
    "full": {"kind": "full"},
    "K8_top2_w64_distill": {"kind": "trained", "K": 8, "top_k": 2, "window": 64,
                            "objective": "distill"},
    "K8_top2_w64_lm": {"kind": "trained", "K": 8, "top_k": 2, "window": 64,
                       "objective": "lm"},
    "K4_top2_w64_distill": {"kind": "trained", "K": 4, "top_k": 2, "window": 64,
                            "objective": "distill"},
    # the grid's K = 16 and window-256 corner (4 sinks, from scratch, as K4_..._s4)
    "K16_top2_w256_distill_s4": {"kind": "trained", "K": 16, "top_k": 2, "window": 256,
                                 "objective": "distill", "num_sinks": 4, "steps": 80},
    # the committed routers of the earlier study (straight-through, pair budget 0.75, 620
    # steps): trained on the earlier split, whose training topics hold the test topics, so
    # only their out-of-domain column is out of sample
    "K4_top2_w64_lm_earlier": {
        "kind": "trained", "K": 4, "top_k": 2, "window": 64, "objective": "lm",
        "routers": "benchmarks/focus/results/focus_pretrained_st_budget75_s620_routers_"
                   "straight_through_st_budget75_s620", "in_domain_out_of_sample": False},
    # trained with 4 sinks, starting from the 'distill' routers trained without
    "K8_top2_w64_distill_s4": {"kind": "trained", "K": 8, "top_k": 2, "window": 64,
                               "objective": "distill", "num_sinks": 4,
                               "init_from": "routers_K8_top2_w64_distill"},
    # the same training run to 120 steps (its first 40 steps are the 40-step run's: same
    # initial routers, same seeded block order), for the plateau the 40 steps did not reach
    "K8_top2_w64_distill_s4_120": {"kind": "trained", "K": 8, "top_k": 2, "window": 64,
                                   "objective": "distill", "num_sinks": 4, "steps": 120,
                                   "init_from": "routers_K8_top2_w64_distill"},
    # K = 4 trained from scratch on the new split with 4 sinks: the K = 4 row whose test
    # column is out of sample (the earlier K = 4 routers saw the test topics)
    "K4_top2_w64_distill_s4": {"kind": "trained", "K": 4, "top_k": 2, "window": 64,
                               "objective": "distill", "num_sinks": 4, "steps": 80},
    # trained at top-1 (the pattern sparse enough to be fast at 8K), starting from the
    # 120-step top-2 routers, which lose much quality when merely evaluated at top-1
    "K8_top1_w64_distill_s4": {"kind": "trained", "K": 8, "top_k": 1, "window": 64,
                               "objective": "distill", "num_sinks": 4, "steps": 80,
                               "init_from": "routers_K8_top2_w64_distill_s4_120"},
    # continuations (``init_from``, ``_cNNN``: NNN steps in all) train a row further while its
    # revisit measure says it is still learning; a continuation draws its blocks in the
    # seeded order from its own start, so it revisits the first run's first blocks, and
    # replaces its parent only when better on validation (the test split is never used to
    # choose)
    "K16_top2_w256_distill_s4_c120": {"kind": "trained", "K": 16, "top_k": 2, "window": 256,
                                      "objective": "distill", "num_sinks": 4, "steps": 40,
                                      "init_from": "routers_K16_top2_w256_distill_s4"},
    "K16_top2_w256_distill_s4_c200": {"kind": "trained", "K": 16, "top_k": 2, "window": 256,
                                      "objective": "distill", "num_sinks": 4, "steps": 80,
                                      "init_from": "routers_K16_top2_w256_distill_s4_c120"},
    "K4_top2_w64_distill_s4_c120": {"kind": "trained", "K": 4, "top_k": 2, "window": 64,
                                    "objective": "distill", "num_sinks": 4, "steps": 40,
                                    "init_from": "routers_K4_top2_w64_distill_s4"},
    "K16_top2_w256_distill_s4_c280": {"kind": "trained", "K": 16, "top_k": 2, "window": 256,
                                      "objective": "distill", "num_sinks": 4, "steps": 80,
                                      "init_from": "routers_K16_top2_w256_distill_s4_c200"},
    "K4_top2_w64_distill_s4_c200": {"kind": "trained", "K": 4, "top_k": 2, "window": 64,
                                    "objective": "distill", "num_sinks": 4, "steps": 80,
                                    "init_from": "routers_K4_top2_w64_distill_s4_c120"},
    "K4_top2_w64_distill_s4_c280": {"kind": "trained", "K": 4, "top_k": 2, "window": 64,
                                    "objective": "distill", "num_sinks": 4, "steps": 80,
                                    "init_from": "routers_K4_top2_w64_distill_s4_c200"},
    "K8_top2_w64_distill_s4_c200": {"kind": "trained", "K": 8, "top_k": 2, "window": 64,
                                    "objective": "distill", "num_sinks": 4, "steps": 80,
                                    "init_from": "routers_K8_top2_w64_distill_s4_120"},
    "K8_top2_w64_distill_s4_c280": {"kind": "trained", "K": 8, "top_k": 2, "window": 64,
                                    "objective": "distill", "num_sinks": 4, "steps": 80,
                                    "init_from": "routers_K8_top2_w64_distill_s4_c200"},
    # issue 54 part 2: the best rows trained on where they are used, 4,096-token blocks of
    # the joined training topics (12 blocks; steps 13-16 revisit the first four), from their
    # 1K-trained routers (_at_4k)
    "K16_top2_w256_distill_s4_c200_4k": _at_4k(16, "distill", 16,
                                               "routers_K16_top2_w256_distill_s4_c200"),
    # the 4K-trained routers trained on (12 more steps, one more pass over the 12 blocks)
    # while their revisit measure said they were still learning, and the same start
    # trained with the 'lm' objective instead, to compare the two objectives at 4K
    "K16_top2_w256_distill_s4_c200_4k_c28": _at_4k(16, "distill", 12,
                                                   "routers_K16_top2_w256_distill_s4_c200_4k"),
    "K16_top2_w256_lm_s4_c200_4k": _at_4k(16, "lm", 16, "routers_K16_top2_w256_distill_s4_c200"),
    # the sparsest row after K = 16, so that the 8K measures compare 1K- and 4K-trained
    # routers at two sparsities
    "K8_top2_w256_distill_s4_c160_4k": _at_4k(8, "distill", 16,
                                              "routers_K8_top2_w256_distill_s4_c160"),
    "K8_top2_w256_lm_s4_c160_4k": _at_4k(8, "lm", 16, "routers_K8_top2_w256_distill_s4_c160"),
    # the grid's window 256 at K = 8 (4 sinks, from scratch, as the K = 16 corner)
    "K8_top2_w256_distill_s4": {"kind": "trained", "K": 8, "top_k": 2, "window": 256,
                                "objective": "distill", "num_sinks": 4, "steps": 80},
    "K8_top2_w64_distill_s4_c360": {"kind": "trained", "K": 8, "top_k": 2, "window": 64,
                                    "objective": "distill", "num_sinks": 4, "steps": 80,
                                    "init_from": "routers_K8_top2_w64_distill_s4_c280"},
    # the grid's two missing corners: window 256 at K = 4, and the 'lm' objective at the
    # K = 16 window-256 corner (4 sinks, 80 steps from scratch, as the rows they pair with)
    "K4_top2_w256_distill_s4": {"kind": "trained", "K": 4, "top_k": 2, "window": 256,
                                "objective": "distill", "num_sinks": 4, "steps": 80},
    "K16_top2_w256_lm_s4": {"kind": "trained", "K": 16, "top_k": 2, "window": 256,
                            "objective": "lm", "num_sinks": 4, "steps": 80},
    "K16_top2_w256_lm_s4_c160": {"kind": "trained", "K": 16, "top_k": 2, "window": 256,
                                 "objective": "lm", "num_sinks": 4, "steps": 80,
                                 "init_from": "routers_K16_top2_w256_lm_s4"},
    "K16_top2_w256_lm_s4_c240": {"kind": "trained", "K": 16, "top_k": 2, "window": 256,
                                 "objective": "lm", "num_sinks": 4, "steps": 80,
                                 "init_from": "routers_K16_top2_w256_lm_s4_c160"},
    # the window-256 K = 8 row continued: the sparsest top-2 row whose pairs kept at 8K leave
    # room for the prefill target (prefill_speedup_bound)
    "K8_top2_w256_distill_s4_c160": {"kind": "trained", "K": 8, "top_k": 2, "window": 256,
                                     "objective": "distill", "num_sinks": 4, "steps": 80,
                                     "init_from": "routers_K8_top2_w256_distill_s4"},
    "K8_top2_w256_distill_s4_c240": {"kind": "trained", "K": 8, "top_k": 2, "window": 256,
                                     "objective": "distill", "num_sinks": 4, "steps": 80,
                                     "init_from": "routers_K8_top2_w256_distill_s4_c160"},
    "K8_top2_w64_random": {"kind": "random", "K": 8, "top_k": 2, "window": 64},
    "K8_top1_w64_random": {"kind": "random", "K": 8, "top_k": 1, "window": 64},
    "K4_top2_w64_random": {"kind": "random", "K": 4, "top_k": 2, "window": 64},
    "K16_top2_w256_random": {"kind": "random", "K": 16, "top_k": 2, "window": 256},
    "K8_top2_w256_random": {"kind": "random", "K": 8, "top_k": 2, "window": 256},
    "K4_top2_w256_random": {"kind": "random", "K": 4, "top_k": 2, "window": 256},
}

#: Attention sinks of the ``sinks@NAME`` baseline (StreamingLLM keeps 4).
NUM_SINKS = 4
#: Out-of-domain blocks of each prose source evaluated (the first ones of each source).
OOD_BLOCKS_PER_SOURCE = 16
#: Blocks of each split a row is evaluated on (the first ones; out of domain: the first of
#: each source), against full attention's losses on the same blocks.
EVAL_BLOCKS = {"val": 9, "test": 13, "ood_per_source": 8}
#: Training settings shared by every trained configuration.
TRAIN = {"block": 1024, "lr": 2e-3, "steps": 160, "seed": 0, "gate": "straight_through"}
#: Sequence length at which the table reports pairs kept.
REPORT_LEN = 8192

RESULTS = Path("benchmarks/focus/results/focus_operating_point")
#: The pinned out-of-domain files (:func:`pin_ood_files`, command ``pin-ood``): every
#: evaluation reads exactly these files, checked by SHA-256, instead of whatever the machine
#: has installed.
OOD_PIN = RESULTS.parent / "focus_ood_files.json"
RUNS = Path("runs/focus_operating_point")


def extrapolated_share(share: float, n: int, window: int, target: int) -> float:
    r"""The share of causal pairs kept at ``target`` tokens by a pattern that keeps ``share``
    of them at ``n`` tokens with this ``window``: the measured far-pair rate
    :math:`r = (s_n - w_n)/(1 - w_n)` applied beyond the window at ``target``
    (:math:`w_T + (1 - w_T) r`); see the module docstring."""
    from quest_geometric.nn.focus import pattern_share

    wn, wt = pattern_share(n, window), pattern_share(target, window)
    if wn >= 1.0:
        raise ValueError(f"extrapolated_share: the window {window} covers all {n} tokens; "
                         f"no far pair was measured")
    rate = min(max((share - wn) / (1.0 - wn), 0.0), 1.0)
    return wt + (1.0 - wt) * rate


#: SmolLM2-135M's dimensions for the multiply-add count of :func:`prefill_speedup_bound`.
SMOLLM2_DIMS = {"hidden": 576, "ffn": 1536, "heads": 9, "kv_heads": 3, "head_dim": 64}


def attention_mac_share(seq_len: int, dims: Optional[Dict[str, int]] = None) -> float:
    r"""The share of a causal prefill's multiply-adds spent in attention (scores and the
    weighted sum), per layer, for a Llama-shaped model (``dims``: :data:`SMOLLM2_DIMS`):

    .. math::
        a(T) = \frac{H d_h (T + 1)}{H d_h (T + 1) + d (2 d + 2 H_{kv} d_h) + 3 d f},

    :math:`H d_h (T+1)` being a token's average over the :math:`T` causal rows of
    :math:`2 \cdot H d_h \cdot (i+1)` multiply-adds (:math:`QK^\top` and :math:`AV`), the
    rest the four projections and the gated MLP (the embedding and the head are left out)."""
    check_int(seq_len, "seq_len", 1, where="attention_mac_share")
    d = dict(SMOLLM2_DIMS, **(dims or {}))
    att = d["heads"] * d["head_dim"] * (seq_len + 1)
    lin = d["hidden"] * (2 * d["heads"] * d["head_dim"] + 2 * d["kv_heads"] * d["head_dim"])
    return att / (att + lin + 3 * d["hidden"] * d["ffn"])


def prefill_speedup_bound(share: float, seq_len: int,
                          dims: Optional[Dict[str, int]] = None) -> float:
    r"""The prefill speed-up a pattern keeping ``share`` of the causal pairs could reach at
    ``seq_len`` tokens if its attention cost were exactly proportional to the pairs kept and
    routing were free: :math:`1 / ((1 - a) + a\,s)` with :math:`a` the
    :func:`attention_mac_share`. An upper bound, not a measurement: a configuration whose
    bound is below a target cannot meet it with any kernel."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"prefill_speedup_bound: 'share' must be in [0, 1], got {share!r}")
    a = attention_mac_share(seq_len, dims)
    return 1.0 / ((1.0 - a) + a * share)


def pinned_ood_files(path: Path = OOD_PIN) -> Optional[Dict[str, List[Dict[str, Any]]]]:
    """The pinned out-of-domain files (``{source: [{'path', 'sha256', 'chars'}]}``) of
    :data:`OOD_PIN`, or :obj:`None` where no pin is written."""
    return json.loads(Path(path).read_text())["files"] if Path(path).is_file() else None


def pin_ood_files(tok: Any, files: Dict[str, List[Dict[str, Any]]], block: int = 1024,
                  out: Optional[Path] = OOD_PIN,
                  want_sha: Optional[List[str]] = None) -> Dict[str, Any]:
    """Pin the out-of-domain text: per source, the shortest prefix of ``files`` (a record's
    file lists, in reading order) whose first :data:`OOD_BLOCKS_PER_SOURCE` blocks equal
    those of the whole list, so that a machine needs only the files the evaluated blocks
    come from. With ``want_sha`` (full attention's recorded :func:`block_sha`) the pinned
    blocks must hash to it. Writes ``{'files', 'block_sha', 'blocks_per_source'}`` to
    ``out`` (unless :obj:`None`) and returns it.

    Raises:
        ValueError: when the pinned blocks differ from ``want_sha``.
    """
    from benchmarks.focus.prose import ood_prose_blocks

    def blocks(source: str, fl: List[Dict[str, Any]]) -> Optional[torch.Tensor]:
        try:
            return ood_prose_blocks(tok, block, 1, sources=[source], files={source: fl},
                                    max_blocks_per_source=OOD_BLOCKS_PER_SOURCE)[0]
        except ValueError:  # fewer tokens than one block
            return None

    pinned, all_blocks = {}, []
    for source, fl in files.items():
        want = blocks(source, fl)
        lo, hi = 1, len(fl)  # the shortest prefix that gives the same blocks
        while lo < hi:
            mid = (lo + hi) // 2
            got = blocks(source, fl[:mid])
            if got is not None and got.shape == want.shape and torch.equal(got, want):
                hi = mid
            else:
                lo = mid + 1
        pinned[source] = fl[:lo]
        all_blocks.append(want)
    sha = block_sha(torch.cat(all_blocks))
    if want_sha is not None and sha != list(want_sha):
        raise ValueError("pin_ood_files: the pinned files' blocks differ from the recorded "
                         f"block hashes ({sum(a != b for a, b in zip(sha, want_sha))} of "
                         f"{len(want_sha)} blocks)")
    rec = {"files": pinned, "block_sha": sha, "blocks_per_source": OOD_BLOCKS_PER_SOURCE}
    if out is not None:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(rec, indent=1) + "\n")
    return rec


def load_splits(tok: Any, block: int = 1024, pinned: bool = True
                ) -> Dict[str, torch.Tensor]:
    """``{'train', 'val', 'test', 'ood'}`` token blocks: the deduplicated language-reference
    splits (:func:`~quest_geometric.datasets.pydoc_splits`) and the first
    :data:`OOD_BLOCKS_PER_SOURCE` blocks of each out-of-domain prose source
    (:func:`~benchmarks.focus.prose.ood_prose_blocks`), read from the pinned files
    of :data:`OOD_PIN` where it exists and ``pinned`` (the same blocks on every machine
    that has those files; refused, naming the file, on one that lacks them), else by the
    prose module's rule from this machine's files."""
    from benchmarks.focus.prose import ood_prose_blocks
    from quest_geometric.datasets.pydoc_text import pydoc_splits

    sp = pydoc_splits(tok, block_size=block)
    ood, record = ood_prose_blocks(tok, block_len=block,
                                   max_blocks_per_source=OOD_BLOCKS_PER_SOURCE,
                                   files=pinned_ood_files() if pinned else None)
    return {"train": sp.train, "val": sp.val, "test": sp.test, "ood": ood,
            "ood_record": record}


def compose_config(model: Any, cfg: Dict[str, Any]) -> Any:
    """Compose ``model`` with configuration ``cfg`` (an entry of :data:`CONFIGS`, or a
    ``{'kind': 'sinks', 'window': w}`` baseline): learned routers (untrained) with the
    straight-through gate, random groups, or window plus sinks; back-end ``'blocks'``."""
    from quest_geometric.nn.focus import RandomGroupsRouter, WindowOnlyRouter, compose_focus

    if cfg["kind"] == "sinks":
        return compose_focus(model, num_groups=1, top_k=0, window=cfg["window"],
                             backend="blocks", num_sinks=cfg.get("num_sinks", NUM_SINKS),
                             router=WindowOnlyRouter())
    if cfg["kind"] == "random":  # layer l draws its groups with seed l
        seeds = iter(range(10_000))
        return compose_focus(model, num_groups=cfg["K"], top_k=cfg["top_k"],
                             window=cfg["window"], backend="blocks",
                             num_sinks=cfg.get("num_sinks", 0),
                             router=lambda _dim: RandomGroupsRouter(cfg["K"], cfg["top_k"],
                                                                    seed=next(seeds)))
    return compose_focus(model, num_groups=cfg["K"], top_k=cfg["top_k"], window=cfg["window"],
                         backend="blocks", gate=TRAIN["gate"],
                         num_sinks=cfg.get("num_sinks", 0))


def train_config(name: str, steps: Optional[int] = None, max_minutes: Optional[float] = None,
                 progress: bool = True) -> Dict[str, Any]:
    """Train (or resume) the routers of the trained configuration ``name``; save them once
    its steps are done: ``steps``, else the configuration's own ``'steps'``, else
    ``TRAIN['steps']``. The configuration may set its block length (``'block'``, else
    ``TRAIN['block']``), ``'checkpointing'`` and ``'loss_chunk'`` (the memory options of
    :func:`~quest_geometric.training.train_routers`) and ``'ckpt_every'`` (default 5).
    Returns :func:`~quest_geometric.training.train_routers`' record."""
    from quest_geometric.models.smollm2 import load_smollm2
    from quest_geometric.nn.focus import save_routers
    from quest_geometric.training import freeze_all_but_routers, train_routers

    from quest_geometric.datasets.pydoc_text import pydoc_splits

    cfg = CONFIGS[name]
    if cfg["kind"] != "trained" or "routers" in cfg:
        raise ValueError(f"train_config: {name!r} is not a configuration this study trains")
    torch.manual_seed(TRAIN["seed"])
    model, tok = load_smollm2()
    train = pydoc_splits(tok, block_size=cfg.get("block", TRAIN["block"])).train
    compose_config(model, cfg)
    freeze_all_but_routers(model)
    out = train_routers(model, train, steps or cfg.get("steps", TRAIN["steps"]),
                        TRAIN["lr"],
                        RUNS / name, seed=TRAIN["seed"], ckpt_every=cfg.get("ckpt_every", 5),
                        progress=progress,
                        max_minutes=max_minutes, desc=name, objective=cfg["objective"],
                        init_from=(RESULTS / cfg["init_from"]) if "init_from" in cfg else None,
                        gradient_checkpointing=cfg.get("checkpointing", False),
                        loss_chunk=cfg.get("loss_chunk"))
    if out["finished"]:
        folder = RESULTS / f"routers_{name}"
        save_routers(model, str(folder))
        record = training_record(name, train.size(0))
        (folder / TRAINING_FILE).write_text(json.dumps(record, indent=1) + "\n")
    return out


#: The training record saved beside a trained configuration's routers
#: (:func:`training_record`), so that its rows can be evaluated without the run folder.
TRAINING_FILE = "training.json"


def _block_losses(model: Any, blocks: torch.Tensor, desc: str, progress: bool
                  ) -> Dict[str, Any]:
    """Mean next-token loss of each block, the share of causal pairs the Focus layers kept
    (1 without Focus) and the seconds:
    :func:`~quest_geometric.training.evaluate_lm`."""
    from quest_geometric.training import evaluate_lm

    r = evaluate_lm(model, blocks, progress=progress, desc=desc)
    kept = r["pairs_kept"]
    return {"block_loss": r["block_loss"], "seconds": r["seconds"],
            "pairs_kept": 1.0 if math.isnan(kept) else kept}


def _split_columns(base: Dict[str, Any], row: Dict[str, Any]) -> Dict[str, Any]:
    from benchmarks.focus.pretrained.evaluate import paired_block_delta

    mean = lambda v: sum(v) / len(v)  # noqa: E731
    d = paired_block_delta(base["block_loss"], row["block_loss"])
    return {"ppl": math.exp(mean(row["block_loss"])),
            "delta_pct": 100.0 * math.expm1(mean(row["block_loss"]) - mean(base["block_loss"])),
            "delta_sem": d["delta_sem"], "blocks_worse": d["blocks_worse"],
            "blocks": len(row["block_loss"])}


#: The suffix of a row run with :data:`NUM_SINKS` attention sinks added.
SINKS_SUFFIX = "+sinks"


def base_name(name: str) -> str:
    """The :data:`CONFIGS` entry a row name is built on: ``sinks@`` not included, ``@topK``
    and ``+sinks`` stripped (``'K8_top2_w64_distill@top1+sinks'`` -> ``'K8_top2_w64_distill'``).
    """
    return name.partition("@top")[0].removesuffix(SINKS_SUFFIX)


def resolve_config(name: str, results: Path = RESULTS, length: Optional[int] = None
                   ) -> Dict[str, Any]:
    """The configuration of a row name: ``NAME`` (an entry of :data:`CONFIGS`), ``NAME@topK``
    (another ``top_k``), either followed by ``+sinks`` (:data:`NUM_SINKS` attention sinks
    added; ``num_sinks`` is 0 otherwise), or ``sinks@NAME`` (window plus sinks at the share
    that row ``NAME``, already evaluated in ``results``, keeps).

    ``sinks@NAME`` matches the share at the evaluation length (``TRAIN['block']`` tokens)
    by default. With ``length`` :math:`L`, it matches the share row ``NAME`` keeps at
    :math:`L` tokens instead: the share measured on the evaluation blocks, extrapolated to
    :math:`L` with row ``NAME``'s own window (:func:`extrapolated_share`), and the window
    :func:`~quest_geometric.nn.focus.window_for_share` ``(L, share_L, NUM_SINKS)``. A window
    matched at 1,024 tokens keeps a smaller share of longer sequences than the Focus row
    does (its far pairs grow with :math:`L`, the band does not), so a long-context test
    (passkey, speed at 8K) must match at its own length."""
    if length is not None and (isinstance(length, bool) or not isinstance(length, int)
                               or length < 2):
        raise ValueError(f"resolve_config: 'length' must be an int >= 2 or None, got {length!r}")
    if name.startswith("sinks@"):
        ref_name = name[len("sinks@"):]
        ref = Path(results) / f"{ref_name}.json"
        if not ref.is_file():
            raise FileNotFoundError(f"resolve_config: evaluate {ref_name!r} before {name!r} "
                                    f"(its measured share sets the window); no {ref}")
        from quest_geometric.nn.focus import window_for_share

        row = json.loads(ref.read_text())
        share = row["pairs_kept_eval"]
        at = TRAIN["block"]
        if length is not None and length != TRAIN["block"]:
            ref_window = (row.get("config") or resolve_config(ref_name, results))["window"]
            share = extrapolated_share(share, TRAIN["block"], ref_window, length)
            at = length
        window = window_for_share(at, share, num_sinks=NUM_SINKS)
        return {"kind": "sinks", "window": window, "num_sinks": NUM_SINKS, "match": ref_name,
                "K": 1, "top_k": 0, "matched_length": at, "matched_share": share}
    sinks = name.endswith(SINKS_SUFFIX)
    stem = name.removesuffix(SINKS_SUFFIX)
    base, _, k = stem.partition("@top")
    if base not in CONFIGS or (k and not k.isdigit()) or (sinks and base == "full"):
        raise ValueError(f"resolve_config: 'name' must be one of {sorted(CONFIGS)} (with an "
                         f"optional @topK, then an optional {SINKS_SUFFIX}; not full"
                         f"{SINKS_SUFFIX}) or sinks@NAME, got {name!r}")
    cfg = dict(CONFIGS[base])
    if k:
        cfg["top_k"] = int(k)
    if base != "full":
        cfg["num_sinks"] = NUM_SINKS if sinks else cfg.get("num_sinks", 0)
    return cfg


def eval_indices(data: Dict[str, Any]) -> Dict[str, List[int]]:
    """The blocks of each split a row is evaluated on (:data:`EVAL_BLOCKS`): the first ones
    of validation and test, the first of each out-of-domain source."""
    owner = data["ood_record"]["block_source"]
    ood = [i for src in dict.fromkeys(owner)
           for i in [j for j, o in enumerate(owner) if o == src][:EVAL_BLOCKS["ood_per_source"]]]
    return {"val": list(range(min(EVAL_BLOCKS["val"], len(data["val"])))),
            "test": list(range(min(EVAL_BLOCKS["test"], len(data["test"])))), "ood": ood}


def apply_config(model: Any, name: str, results: Path = RESULTS,
                 length: Optional[int] = None) -> Dict[str, Any]:
    """Turn the plain model ``model`` into row ``name`` in place (:func:`resolve_config`;
    ``length`` as there): nothing for ``'full'``, the routers saved in
    ``results/routers_NAME`` for a trained row (at the row's ``top_k``), else
    :func:`compose_config`. Returns the resolved configuration."""
    from quest_geometric.nn.focus import load_routers, set_focus_options

    cfg = resolve_config(name, results, length)
    if cfg["kind"] == "trained":
        load_routers(model, cfg.get("routers") or str(
            Path(results) / f"routers_{base_name(name)}"))
        set_focus_options(model, top_k=cfg["top_k"], num_sinks=cfg["num_sinks"])
    elif cfg["kind"] != "full":
        compose_config(model, cfg)
    return cfg


def build_model(name: str, results: Path = RESULTS, length: Optional[int] = None
                ) -> Tuple[Any, Any]:
    """SmolLM2-135M as row ``name``, in evaluation mode: ``(model, tokenizer)``.

    ``'full'`` is the plain model; a trained row loads its routers from
    ``results/routers_NAME``; ``random`` and ``sinks@NAME`` rows are composed by
    :func:`compose_config` (``sinks@NAME`` matched at ``length`` tokens when given, see
    :func:`resolve_config`). Every experiment that runs a row (evaluation, passkey, speed)
    builds it here, so a row name means the same model everywhere."""
    from quest_geometric.models.smollm2 import load_smollm2

    resolve_config(name, results, length)  # a bad name fails before the model is loaded
    model, tok = load_smollm2()
    apply_config(model, name, results, length)
    return model.eval(), tok


def training_record(name: str, num_blocks: int, runs: Path = RUNS) -> Dict[str, Any]:
    """The training of configuration ``name`` as its checkpoint records it: steps, seconds,
    objective, the loss of the first and last tenth of the steps, and the paired revisit
    measure of a plateau (:func:`~benchmarks.focus.pretrained.summary.
    revisit_columns`: the mean change of a block's loss from one visit to the next over the
    second half of training; near 0 at a plateau, negative while the routers still learn)."""
    from benchmarks.focus.pretrained.summary import revisit_columns
    from quest_geometric.training.routers import block_order, read_router_checkpoint

    state = read_router_checkpoint(Path(runs) / name)["state"]
    curve = state["curve"]
    tenth = max(1, len(curve) // 10)
    return {"steps": state["step"], "seconds": state["seconds"],
            "objective": state["objective"], "loss_first": sum(curve[:tenth]) / tenth,
            "loss_last": sum(curve[-tenth:]) / tenth, "curve": curve,
            **revisit_columns(curve, block_order(num_blocks, len(curve), TRAIN["seed"]))}


def saved_training_record(name: str, num_blocks: int, runs: Path = RUNS,
                          results: Path = RESULTS) -> Dict[str, Any]:
    """The training record of configuration ``name``: from its run checkpoint
    (:func:`training_record`) where the run folder is still there, else the copy saved
    beside its routers (``results/routers_NAME/training.json``, written when the training
    finished)."""
    from quest_geometric.training.routers import CHECKPOINT_RECORD

    if (Path(runs) / name / CHECKPOINT_RECORD).is_file():
        return training_record(name, num_blocks, runs)
    saved = Path(results) / f"routers_{name}" / TRAINING_FILE
    if not saved.is_file():
        raise FileNotFoundError(f"saved_training_record: no run checkpoint in "
                                f"{Path(runs) / name} and no {saved}")
    return json.loads(saved.read_text())


SPLITS = ("val", "test", "ood")


def block_sha(blocks: torch.Tensor) -> List[str]:
    """The first 16 hex digits of the SHA-256 of each block's token ids (int64 bytes): the
    identity of the text a loss was computed on. The out-of-domain blocks come from files
    of the machine (:mod:`benchmarks.focus.prose`), which differ between machines,
    so a loss may be compared with full attention's only on the same block."""
    import hashlib

    return [hashlib.sha256(b.to(torch.int64).contiguous().numpy().tobytes()).hexdigest()[:16]
            for b in blocks]


def _check_same_blocks(full: Dict[str, Any], sha: Dict[str, List[str]], where: str) -> None:
    """Refuse to compare with full attention's losses computed on other text."""
    if "block_sha" not in full:
        raise RuntimeError(f"{where}: full.json records no block hashes, so its losses cannot "
                           "be matched to this machine's blocks; run `evaluate full --refresh "
                           "ood` here first")
    for s, cur in sha.items():
        old = full["block_sha"].get(s)
        if old != cur:
            diff = [i for i, (a, b) in enumerate(zip(old or [], cur)) if a != b]
            raise RuntimeError(
                f"{where}: the {s} blocks on this machine differ from those full.json was "
                f"computed on (blocks {diff}, counts {len(old or [])} / {len(cur)}); the "
                "out-of-domain texts are this machine's files: run `evaluate full --refresh "
                f"{s}` and then re-evaluate every row's {s} split (`--splits {s}`)")


def refresh_full(splits: Sequence[str] = ("ood",), progress: bool = True) -> Dict[str, Any]:
    """Recompute full attention's per-block losses of ``splits`` on this machine's blocks
    and record every split's block hashes (:func:`block_sha`) in ``full.json``; the other
    splits' losses are kept (the validation and test texts are CPython's documentation,
    fixed by the Python version)."""
    from benchmarks.focus.pretrained.config import MODEL_NOTE, load_average

    for s in splits:
        check_choice(s, "'splits'", SPLITS, where="refresh_full")
    torch.manual_seed(0)
    model, tok = build_model("full")
    data = load_splits(tok, TRAIN["block"])
    RESULTS.mkdir(parents=True, exist_ok=True)
    full_file = RESULTS / "full.json"
    full = json.loads(full_file.read_text()) if full_file.is_file() else {}
    for s in SPLITS:
        if s in splits or s not in full:
            full[s] = _block_losses(model, data[s], f"full {s}", progress)
    full["block_sha"] = {s: block_sha(data[s]) for s in SPLITS}
    meta = dict(full.get("meta", {}))
    meta.update({"model": MODEL_NOTE, "threads": torch.get_num_threads(),
                 "load": load_average(), "torch": torch.__version__,
                 "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                 "refreshed": list(splits),
                 "ood_sources": {k: v["blocks"] for k, v in
                                 data["ood_record"]["sources"].items()},
                 "ood_files": {k: v.get("files") for k, v in
                               data["ood_record"]["sources"].items()}})
    full["meta"] = meta
    full_file.write_text(json.dumps(full))
    return full


def evaluate_config(name: str, progress: bool = True,
                    splits: Sequence[str] = SPLITS) -> Dict[str, Any]:
    """Evaluate row ``name`` on the validation, test and out-of-domain blocks against full
    attention (whose per-block losses are computed once and kept in ``full.json``, with the
    hashes of the blocks they were computed on), and write
    ``benchmarks/focus/results/focus_operating_point/<name>.json``; with ``splits`` a subset, only
    those splits are evaluated and the row's other splits are kept from its file.

    Raises:
        RuntimeError: when this machine's blocks differ from full attention's (the
            out-of-domain texts are the machine's files; :func:`refresh_full`).
    """
    from benchmarks.focus.pretrained.config import load_average

    resolve_config(name)
    for s in splits:
        check_choice(s, "'splits'", SPLITS, where="evaluate_config")
    if name == "full":
        return refresh_full(progress=progress)
    torch.manual_seed(0)
    model, tok = build_model("full")
    data = load_splits(tok, TRAIN["block"])
    full_file = RESULTS / "full.json"
    if not full_file.is_file():
        raise FileNotFoundError(f"evaluate_config: no {full_file}; run `evaluate full` first")
    full = json.loads(full_file.read_text())
    _check_same_blocks(full, {s: block_sha(data[s]) for s in splits}, "evaluate_config")
    row_file = RESULTS / f"{name}.json"
    old = None
    if set(splits) != set(SPLITS):
        if not row_file.is_file():
            raise FileNotFoundError(f"evaluate_config: only {list(splits)} asked but no "
                                    f"{row_file} holds the other splits")
        old = json.loads(row_file.read_text())
    if old is not None and old["config"]["kind"] == "sinks":
        # the window the kept splits ran with (a new match could move it by the change of
        # the matched row's share)
        cfg = old["config"]
        compose_config(model, cfg)
    else:
        cfg = apply_config(model, name)
    model.eval()
    row: Dict[str, Any] = {"name": name, "config": cfg}
    if old is not None:
        row.update({s: old[s] for s in SPLITS if s not in splits})
        if "meta" in old:
            row["meta_before"] = old["meta"]
    idx = eval_indices(data)
    for s in splits:
        r = _block_losses(model, data[s][idx[s]], f"{name} {s}", progress)
        base = {"block_loss": [full[s]["block_loss"][i] for i in idx[s]]}
        row[s] = {**_split_columns(base, r), "block_loss": r["block_loss"], "blocks": idx[s],
                  "seconds": r["seconds"], "pairs_kept": r["pairs_kept"],
                  "block_sha": [full["block_sha"][s][i] for i in idx[s]]}
    kept = [row[s]["pairs_kept"] for s in ("val", "test", "ood")]
    row["pairs_kept_eval"] = sum(kept) / len(kept)
    row["pairs_kept_8k"] = extrapolated_share(row["pairs_kept_eval"], TRAIN["block"],
                                              cfg["window"], REPORT_LEN)
    if cfg["kind"] == "sinks":  # no extrapolation needed: the band is exact
        from quest_geometric.nn.focus import pattern_share

        row["pairs_kept_8k"] = pattern_share(REPORT_LEN, cfg["window"], cfg["num_sinks"])
    if cfg["kind"] == "trained" and "routers" not in cfg:
        row["training"] = saved_training_record(base_name(name), data["train"].size(0))
    row["meta"] = {"threads": torch.get_num_threads(), "load": load_average(),
                   "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                   "splits": list(splits)}
    row_file.write_text(json.dumps(row))
    return row


def _check_row_blocks(row: Dict[str, Any], full: Dict[str, Any]) -> None:
    """A row's losses were computed on full attention's blocks: its recorded block hashes
    match ``full.json``'s; the out-of-domain split must carry them (its texts are the
    machine's files), the validation and test splits (CPython's documentation, fixed by the
    Python version) may predate them."""
    for s in (s for s in SPLITS if s in row):
        have = row[s].get("block_sha")
        if have is None:
            if s == "ood":
                raise RuntimeError(
                    f"row {row['name']!r}: its out-of-domain losses carry no block hashes, so "
                    "they cannot be matched to full attention's blocks; re-evaluate it with "
                    "`evaluate NAME --splits ood`")
            continue
        want = [full["block_sha"][s][i] for i in row[s]["blocks"]]
        if have != want:
            raise RuntimeError(
                f"row {row['name']!r}: its {s} losses were computed on other blocks than "
                f"full.json's (another machine's files); re-evaluate it with `evaluate NAME "
                f"--splits {s}`")


def paired_comparisons(results: Path = RESULTS) -> list:
    r"""Every Focus row against each content-free row at its budget, block by block: for the
    out-of-domain and test blocks, the paired differences of the mean next-token loss
    :math:`d_b = \ell^{\text{Focus}}_b - \ell^{\text{baseline}}_b`, their mean as a
    perplexity ratio :math:`100\,(e^{\bar d} - 1)` percent (positive: Focus worse), the 95%
    paired t interval of that ratio, the exact permutation and sign tests
    (:func:`~quest_geometric.analysis.paired_t_test`,
    :func:`~quest_geometric.analysis.paired_permutation_test`,
    :func:`~quest_geometric.analysis.paired_sign_test`) and the blocks on which Focus is worse.
    The baselines of row ``NAME`` are ``sinks@NAME`` (else, for ``NAME+sinks``, the sinks row
    matched to ``NAME``; else the sinks row matched to the random row of the same ``K``,
    ``top_k`` and window) and that random row; ``focus_pairs`` and ``baseline_pairs`` give
    the shares both kept."""
    from quest_geometric.analysis import paired_permutation_test, paired_sign_test, paired_t_test
    from benchmarks.focus.pretrained.evaluate import paired_block_delta

    results = Path(results)
    full = json.loads((results / "full.json").read_text())
    rows = {f.stem: json.loads(f.read_text()) for f in results.glob("*.json")
            if f.name != "full.json"}
    for r in rows.values():
        _check_row_blocks(r, full)
    out = []
    for name, r in sorted(rows.items()):
        c = r["config"]
        if c["kind"] != "trained":
            continue
        rnd = f"K{c['K']}_top{c['top_k']}_w{c['window']}_random"
        # the window matched to this row, else (a +sinks row) to the same routers without
        # sinks, else to the random row: the table gives both rows' measured shares
        own = next((b for b in (f"sinks@{name}", f"sinks@{name.removesuffix(SINKS_SUFFIX)}",
                                f"sinks@{rnd}") if b in rows), None)
        for base in dict.fromkeys(b for b in (own, rnd) if b is not None):
            if base not in rows:
                continue
            b = rows[base]
            for split in ("ood", "test"):
                a_l, b_l = r[split]["block_loss"], b[split]["block_loss"]
                t = paired_t_test(a_l, b_l)
                out.append({
                    "focus": name, "baseline": base, "split": split, "blocks": t["n"],
                    "focus_pairs": r["pairs_kept_eval"], "baseline_pairs": b["pairs_kept_eval"],
                    "diff_pct": 100 * math.expm1(t["mean"]),
                    "ci_low_pct": 100 * math.expm1(t["ci_low"]),
                    "ci_high_pct": 100 * math.expm1(t["ci_high"]), "t_p": t["p"],
                    "perm_p": paired_permutation_test(a_l, b_l)["p"],
                    "sign_p": paired_sign_test(a_l, b_l)["p"],
                    "focus_worse": sum(x > y for x, y in zip(a_l, b_l)),
                    "median_diff_pct": paired_block_delta(b_l, a_l)["delta_median"]})
    return out


#: The table's columns (split columns are ``<split>_<column>``).
COLUMNS = ["row", "kind", "K", "top_k", "window", "objective", "pairs_kept_1k",
           "pairs_kept_8k", "prefill_bound_8k", "ood_delta_pct", "ood_delta_sem",
           "ood_median_pct", "ood_worse", "test_delta_pct", "test_delta_sem",
           "test_median_pct", "test_worse", "val_delta_pct", "steps", "revisit_mean",
           "revisit_sem"]


def table_rows(results: Path = RESULTS) -> List[Dict[str, Any]]:
    """One row per evaluated configuration (``results/*.json``), sorted by pairs kept, full
    attention first: the columns of :data:`COLUMNS`, ``name``, the row's name (``row`` adds
    a remark where its test column is not out of sample), and ``<split>_best_block_pct``,
    the change of the block that gains most against full attention."""
    from benchmarks.focus.pretrained.evaluate import paired_block_delta

    results = Path(results)
    full = json.loads((results / "full.json").read_text())
    rows = []
    for f in sorted(results.glob("*.json")):
        if f.name == "full.json":
            continue
        r = json.loads(f.read_text())
        _check_row_blocks(r, full)
        medians = {f"{s}_median_pct": paired_block_delta(
            [full[s]["block_loss"][i] for i in r[s]["blocks"]], r[s]["block_loss"]
        )["delta_median"] for s in ("ood", "test") if "block_loss" in r[s] and "blocks" in r[s]}
        # the block that moves most in the row's favour (a mean it carries is not typical)
        best = {f"{s}_best_block_pct": 100 * math.expm1(min(
            b - full[s]["block_loss"][i] for i, b in zip(r[s]["blocks"], r[s]["block_loss"])))
            for s in ("ood", "test") if "block_loss" in r[s] and "blocks" in r[s]}
        c = r["config"]
        rows.append({"name": r["name"],
                     "row": r["name"] + ("" if c.get("in_domain_out_of_sample", True)
                                         else " (test not out of sample)"),
                     "kind": c["kind"], "K": c.get("K"),
                     "top_k": c.get("top_k"), "window": c.get("window"),
                     "objective": c.get("objective", "-"),
                     "pairs_kept_1k": r["pairs_kept_eval"], "pairs_kept_8k": r["pairs_kept_8k"],
                     "prefill_bound_8k": prefill_speedup_bound(r["pairs_kept_8k"], REPORT_LEN),
                     **{f"{s}_{k}": r[s][v] for s in ("ood", "test") for k, v in
                        (("delta_pct", "delta_pct"), ("delta_sem", "delta_sem"),
                         ("worse", "blocks_worse"))},
                     "val_delta_pct": r["val"]["delta_pct"], **medians, **best,
                     **({k: r["training"][k] for k in ("steps", "revisit_mean", "revisit_sem")}
                        if "training" in r else {})})
    rows.sort(key=lambda r: -r["pairs_kept_1k"])
    rows.insert(0, {"name": "full", "row": "full attention", "kind": "full",
                    "pairs_kept_1k": 1.0, "pairs_kept_8k": 1.0, "prefill_bound_8k": 1.0,
                    "ood_delta_pct": 0.0, "test_delta_pct": 0.0, "val_delta_pct": 0.0})
    return rows


def write_table(out: Path = Path("benchmarks/focus/results"), name: str = "focus_operating_point",
                results: Path = RESULTS) -> Dict[str, Any]:
    """Every evaluated row (:func:`table_rows`) into one table ``<name>.{md,json,csv}`` in
    ``out``, and the paired comparisons (:func:`paired_comparisons`) into
    ``<name>_paired.{md,json,csv}``; returns both."""
    from quest_geometric.profile import write_results

    results = Path(results)
    full = json.loads((results / "full.json").read_text())
    rows = table_rows(results)
    first = json.loads(next(f for f in sorted(results.glob("*.json"))
                             if f.name != "full.json").read_text()) if rows[1:] else None
    used = {s: (first[s].get("blocks") if first else None) or list(
        range(len(full[s]["block_loss"]))) for s in ("val", "test", "ood")}
    blocks = {s: len(used[s]) for s in used}
    notes = [f"blocks of {TRAIN['block']} tokens: validation {blocks['val']}, test "
             f"{blocks['test']} (language reference, no 32-token window shared with the "
             f"training text), out of domain {blocks['ood']} (licences and Debian release "
             f"notes); `*_delta_pct`: perplexity change against full attention on that "
             f"split, `*_delta_sem` its standard error over blocks (paired by block), "
             f"`*_median_pct`: the median over blocks of the per-block change (a mean can "
             f"move with one outlier block), `*_worse`: blocks on which the row is worse; "
             f"`pairs_kept_1k`: measured share of "
             f"causal pairs kept on the evaluation blocks, `pairs_kept_8k`: extrapolated at "
             f"{REPORT_LEN} tokens (module docstring); `prefill_bound_8k`: the prefill speed-up "
             f"that share could give at most, with attention cost proportional to pairs and "
             f"free routing (attention is {100 * attention_mac_share(REPORT_LEN):.1f}% of a "
             f"{REPORT_LEN}-token prefill's multiply-adds; `prefill_speedup_bound`): an upper "
             f"bound, not a timing. `steps`, `revisit_mean` +- `revisit_sem`: router steps "
             f"and the paired revisit measure of a plateau (near 0 at a plateau, negative "
             f"while the routers still learn; `training_record`). Rows sorted by pairs "
             f"kept."]
    meta = {"model": full["meta"]["model"], "full_attention_ppl": {
        s: math.exp(sum(full[s]["block_loss"][i] for i in used[s]) / len(used[s]))
        for s in used}, "train": TRAIN, "num_sinks": NUM_SINKS, "eval_blocks": EVAL_BLOCKS}
    write_results(name, rows, out, meta=meta, notes="\n".join(notes), columns=COLUMNS,
                  title="Focus on SmolLM2-135M: out-of-sample quality at each pattern")
    paired = paired_comparisons(results)
    if paired:
        write_results(f"{name}_paired", paired, out, meta=meta,
                      title="Focus against content-free patterns at its budget, block by block",
                      notes="`diff_pct`: perplexity of the Focus row relative to the baseline "
                            "on the same blocks (positive: Focus worse), with its 95% paired t "
                            "interval; `median_diff_pct`: the median block's difference; "
                            "exact permutation and sign tests over the blocks; "
                            "`focus_worse`: blocks on which Focus is worse "
                            "(`paired_comparisons`).")
    return {"rows": rows, "paired": paired}


def main(argv: Optional[Sequence[str]] = None) -> None:
    """``python -m benchmarks.focus.operating_point {train,evaluate,pin-ood,table} ...``
    (the verdict over these rows: ``python -m benchmarks.focus.verdict``)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train", help="train (or resume) a configuration's routers")
    t.add_argument("name", choices=[n for n, c in CONFIGS.items()
                                    if c["kind"] == "trained" and "routers" not in c])
    t.add_argument("--steps", type=int, default=None)
    t.add_argument("--max-minutes", type=float, default=None)
    t.add_argument("--no-progress", action="store_true")
    e = sub.add_parser("evaluate", help="evaluate a row: NAME, NAME@topK, NAME+sinks, "
                                         "NAME@topK+sinks or sinks@NAME")
    e.add_argument("name")
    e.add_argument("--no-progress", action="store_true")
    e.add_argument("--splits", nargs="+", choices=SPLITS, default=list(SPLITS),
                   help="evaluate only these splits, keeping the row's others from its file")
    e.add_argument("--refresh", nargs="+", choices=SPLITS, default=None,
                   help="with NAME 'full': recompute full attention's losses of these splits "
                        "on this machine's blocks (and record every split's block hashes)")
    sub.add_parser("pin-ood", help="pin the out-of-domain files full.json's blocks came from "
                                   "(the shortest prefix per source), checked against its "
                                   "block hashes, into focus_ood_files.json")
    sub.add_parser("table", help="write the table of every evaluated row")
    a = p.parse_args(argv)
    if a.cmd == "pin-ood":
        from quest_geometric.models.smollm2 import load_smollm2

        full = json.loads((RESULTS / "full.json").read_text())
        ood = full["meta"]["ood_files"]
        rec = pin_ood_files(load_smollm2()[1], ood, TRAIN["block"],
                            want_sha=full["block_sha"]["ood"])
        print({s: f"{len(v)} of {len(ood[s])} files" for s, v in rec["files"].items()})
        return
    if a.cmd == "evaluate":
        if a.refresh is not None:
            if a.name != "full":
                p.error("--refresh applies to the row 'full' only")
            refresh_full(a.refresh, not a.no_progress)
            return
        evaluate_config(a.name, not a.no_progress, a.splits)
        return
    if a.cmd == "table":
        print(write_table()["rows"])
        return
    if a.cmd == "train":
        started = time.time()
        out = train_config(a.name, a.steps, a.max_minutes, not a.no_progress)
        print(json.dumps({"name": a.name, "step": out["step"], "finished": out["finished"],
                          "seconds": round(time.time() - started, 1),
                          "loss_last": out["curve"][-1] if out["curve"] else math.nan}))


if __name__ == "__main__":
    main()
