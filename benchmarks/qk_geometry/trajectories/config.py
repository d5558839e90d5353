"""The settings of the query/key geometry trajectories: initialisations, the configuration
and its quick preset (the study's ``--quick``; the study's other settings and presets are in
``benchmarks/qk_geometry/config.py``)."""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from quest_geometric._utils import check_int

INITS = ("independent", "tied", "orthogonal")
#: The per-layer measurements of a probe record.
METRIC_KEYS = ("pr_q", "pr_k", "pr_q_minus_pr_k", "pr_q_concat", "pr_k_concat",
               "qk_effective_rank", "qk_stable_rank", "attention_entropy")


@dataclass
class StudyConfig:
    """Sizes of the study (model, training, probing, seeds).

    Args:
        n_embd (int): model width. (default: ``48``)
        n_head (int): attention heads. (default: ``4``)
        block_size (int): context length in characters. (default: ``64``)
        batch_size (int): training batch (sequences). (default: ``12``)
        steps (int): optimiser steps per run. (default: ``600``)
        lr (float): peak AdamW learning rate. (default: ``3e-3``)
        min_lr (float): final learning rate of the cosine schedule. (default: ``3e-4``)
        warmup_steps (int): linear warmup. (default: ``50``)
        weight_decay (float): AdamW weight decay on matrices. (default: ``0.1``)
        probe_every (int): steps between probes (plus one at step 0 and one at the end).
            (default: ``50``)
        probe_batch_size (int): sequences in the fixed validation probe batch (all of
            them enter the PR). (default: ``16``)
        probe_max_tokens (int): query tokens of the probe batch used for the QK^T ranks and
            the entropy (whole sequences; their SVDs dominate the probe's cost).
            (default: ``512``)
        eval_batches (int): validation batches of the final evaluation. (default: ``20``)
        depths (tuple): depths of the trajectory grid. (default: ``(4, 6, 8)``)
        inits (tuple): query/key initialisations. (default: all three)
        seeds (tuple): seeds of the trajectory grid. (default: ``(0, 1)``)
        corpus (str): :class:`~quest_geometric.datasets.char_corpus.CharCorpus` source.
            (default: ``'python-reference'``)
    """

    n_embd: int = 48
    n_head: int = 4
    block_size: int = 64
    batch_size: int = 12
    steps: int = 600
    lr: float = 3e-3
    min_lr: float = 3e-4
    warmup_steps: int = 50
    weight_decay: float = 0.1
    probe_every: int = 50
    probe_batch_size: int = 16
    probe_max_tokens: int = 512
    eval_batches: int = 20
    depths: tuple = (4, 6, 8)
    inits: tuple = INITS
    seeds: tuple = (0, 1)
    corpus: str = "python-reference"

    def __post_init__(self) -> None:
        self.depths = tuple(self.depths)
        self.inits = tuple(self.inits)
        self.seeds = tuple(self.seeds)
        for name in ("n_embd", "n_head", "block_size", "batch_size", "steps", "warmup_steps",
                     "probe_every", "probe_batch_size", "probe_max_tokens", "eval_batches"):
            check_int(getattr(self, name), name, 0 if name == "warmup_steps" else 1,
                      where="StudyConfig")
        if self.n_embd % self.n_head:
            raise ValueError(f"StudyConfig: n_embd={self.n_embd} must be divisible by "
                             f"n_head={self.n_head}")
        for name, minimum in (("depths", 1), ("seeds", 0)):
            vals = getattr(self, name)
            if not vals:
                raise ValueError(f"StudyConfig: {name} must be a non-empty tuple of ints >= "
                                 f"{minimum}, got {vals!r}")
            for i, v in enumerate(vals):
                check_int(v, f"{name}[{i}] (of {vals!r})", minimum, where="StudyConfig")
            if name != "depths" and len(set(vals)) != len(vals):
                raise ValueError(f"StudyConfig: {name} has duplicates: {vals!r}")
        bad = [i for i in self.inits if i not in INITS]
        if not self.inits or bad:
            raise ValueError(f"StudyConfig: inits must be a non-empty subset of {INITS}, got "
                             f"unknown {bad or self.inits!r}")
        if self.block_size < 2:
            raise ValueError("StudyConfig: block_size must be >= 2 (the entropy needs two keys)")

    def replace(self, **changes: Any) -> "StudyConfig":
        """A validated copy with ``changes`` applied (``None`` values are ignored)."""
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})

    #: The fields that shape a training run (not depth/init/seed), hashed by :meth:`run_tag`.
    TAG_FIELDS = ("n_embd", "n_head", "block_size", "batch_size", "steps", "lr", "min_lr",
                  "warmup_steps", "weight_decay", "probe_every", "probe_batch_size",
                  "probe_max_tokens", "eval_batches", "corpus")

    def run_tag(self) -> str:
        """A short hash of everything that shapes a training run (not depth/init/seed): the
        :attr:`TAG_FIELDS`, in sorted order."""
        blob = json.dumps({k: getattr(self, k) for k in self.TAG_FIELDS}, sort_keys=True)
        return hashlib.sha1(blob.encode()).hexdigest()[:10]


#: The quick configuration: width 32, 4 heads of 8, context 32, batch 8, 200 steps, one seed
#: per (depth, init) (the study's ``--quick`` adds the intervention's and overhead's fields).
QUICK = StudyConfig(n_embd=32, n_head=4, block_size=32, batch_size=8, steps=200, lr=3e-3,
                    min_lr=3e-4, warmup_steps=20, probe_every=25, probe_batch_size=16,
                    eval_batches=10, seeds=(0,))
