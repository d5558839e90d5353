r"""Query expansion and key specialisation: the query/key geometry study on CharGPT.

Reproduces, at CPU scale, the measurements of Gupta et al., "Query Expansion and Key
Specialization in Transformer Attention Geometry" (2026; notes in
``shared/papers/qk_geometry.md``):

* **Trajectories.** :class:`~quest_geometric.models.char_gpt.CharGPT` of depths 4, 6, 8
  with three query/key initialisations (``independent``, ``tied``, ``orthogonal``) and
  several seeds is trained on the character corpus with the shared
  :class:`~quest_geometric.training.trainer.Trainer`. Every ``probe_every`` steps an
  :class:`~quest_geometric.training.trainer.EveryNSteps` callback runs
  :class:`~quest_geometric.analysis.probe.QKProbe` (under :func:`torch.no_grad`, in eval
  mode) on a fixed probe batch of the validation split and logs, per layer, the
  participation ratios :math:`\mathrm{PR}_Q`, :math:`\mathrm{PR}_K`, the effective rank of
  :math:`QK^\top/\sqrt d` and the normalised attention entropy (JSON lines). A *trajectory*
  is one layer's seed-averaged curve for one (depth, init), as in the paper
  (4 + 6 + 8 layers x 3 inits = 54).
* **Intervention.** :class:`~quest_geometric.analysis.spectral_control.KeySpectrumControl`
  ``'hold'`` vs ``'shrink'`` vs unconstrained over five seeds at one depth/init; attention
  entropy and validation loss at the end, the per-seed sign of
  :math:`H_\text{shrink} - H_\text{hold}` and a sign test across seeds
  (:func:`directional_probability`).
* **Pretrained analysis** (:func:`hf_analysis`): the same probes on local Hugging Face
  checkpoints (for example Pythia's intermediate revisions), PR_Q - PR_K per layer against
  the training step.
* **Overhead** (:func:`measure_overhead`): training time with a probe every 100 steps vs
  without.

Every run lives in its own folder (``checkpoint.pt`` of the shared harness, the probe
records ``probe.jsonl`` and, once finished, ``run.json``), so an interrupted study resumes
where it stopped and a finished run is never trained twice.

Run ``python benchmarks/qk_geometry.py`` (``--quick`` for the small CPU configuration,
``--hf-model PATH ...`` for the pretrained analysis).
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import os
import re
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence, Union

import numpy as np
import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from quest_geometric.analysis.probe import QKProbe
from quest_geometric.analysis.spectral_control import KeySpectrumControl, spectrum_participation_ratio
from quest_geometric.experiments.common import markdown_table, write_results
from quest_geometric.training.config import TrainConfig
from quest_geometric.training.seed import seed_everything
from quest_geometric.training.tasks import LanguageModelTask
from quest_geometric.training.trainer import Callback, EveryNSteps, Trainer

__all__ = [
    "StudyConfig",
    "QUICK",
    "FULL",
    "probe_model",
    "train_run",
    "run_trajectories",
    "trajectory_summary",
    "run_intervention",
    "intervention_summary",
    "directional_probability",
    "measure_overhead",
    "hf_analysis",
    "run",
    "main",
]

INITS = ("independent", "tied", "orthogonal")
MODES = ("none", "hold", "shrink")
_METRIC_KEYS = ("pr_q", "pr_k", "pr_q_minus_pr_k", "pr_q_concat", "pr_k_concat",
                "qk_effective_rank", "qk_stable_rank", "attention_entropy")


# ============================================================================ configuration
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
            the entropy (whole sequences; two SVDs per head and sequence dominate the probe's
            cost). (default: ``512``)
        eval_batches (int): validation batches of the final evaluation. (default: ``20``)
        depths (tuple): depths of the trajectory grid. (default: ``(4, 6, 8)``)
        inits (tuple): query/key initialisations. (default: all three)
        seeds (tuple): seeds of the trajectory grid. (default: ``(0, 1)``)
        intervention_seeds (tuple): seeds of the intervention. (default: ``(0, 1, 2, 3, 4)``)
        intervention_depth (int): depth of the intervention runs. (default: ``4``)
        intervention_init (str): initialisation of the intervention runs.
            (default: ``'independent'``)
        shrink_decay (float): ``KeySpectrumControl`` decay per step for ``'shrink'``.
            (default: ``0.01``)
        control_per_head (bool): control each head's rows of :math:`W_K` separately.
            (default: :obj:`True`)
        overhead_depth (int): depth of the overhead measurement. (default: ``6``)
        overhead_steps (int): steps of each overhead run. (default: ``200``)
        overhead_probe_every (int): probe period of the overhead measurement.
            (default: ``100``)
        overhead_repeats (int): alternating repeats of each overhead variant. (default: ``3``)
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
    intervention_seeds: tuple = (0, 1, 2, 3, 4)
    intervention_depth: int = 4
    intervention_init: str = "independent"
    shrink_decay: float = 0.01
    control_per_head: bool = True
    overhead_depth: int = 6
    overhead_steps: int = 200
    overhead_probe_every: int = 100
    overhead_repeats: int = 3
    corpus: str = "python-reference"

    def __post_init__(self) -> None:
        self.depths = tuple(self.depths)
        self.inits = tuple(self.inits)
        self.seeds = tuple(self.seeds)
        self.intervention_seeds = tuple(self.intervention_seeds)
        for name in ("n_embd", "n_head", "block_size", "batch_size", "steps", "warmup_steps",
                     "probe_every", "probe_batch_size", "probe_max_tokens", "eval_batches", "intervention_depth",
                     "overhead_depth", "overhead_steps", "overhead_probe_every", "overhead_repeats"):
            v = getattr(self, name)
            minimum = 0 if name == "warmup_steps" else 1
            if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
                raise ValueError(f"StudyConfig: {name} must be an int >= {minimum}, got {v!r}")
        if self.n_embd % self.n_head:
            raise ValueError(f"StudyConfig: n_embd={self.n_embd} must be divisible by n_head={self.n_head}")
        for name in ("depths",):
            vals = getattr(self, name)
            if not vals or any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in vals):
                raise ValueError(f"StudyConfig: {name} must be a non-empty tuple of positive ints "
                                 f"(numbers of layers), got {vals!r}")
        for name in ("seeds", "intervention_seeds"):
            vals = getattr(self, name)
            if not vals or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in vals):
                raise ValueError(f"StudyConfig: {name} must be a non-empty tuple of ints >= 0, got {vals!r}")
            if len(set(vals)) != len(vals):
                raise ValueError(f"StudyConfig: {name} has duplicates: {vals!r}")
        bad = [i for i in self.inits if i not in INITS]
        if not self.inits or bad:
            raise ValueError(f"StudyConfig: inits must be a non-empty subset of {INITS}, got unknown {bad or self.inits!r}")
        if self.intervention_init not in INITS:
            raise ValueError(f"StudyConfig: intervention_init must be one of {INITS}, got {self.intervention_init!r}")
        if not (isinstance(self.shrink_decay, (int, float)) and self.shrink_decay >= 0):
            raise ValueError(f"StudyConfig: shrink_decay must be >= 0, got {self.shrink_decay!r}")
        if self.block_size < 2:
            raise ValueError("StudyConfig: block_size must be >= 2 (the entropy needs two keys)")

    def replace(self, **changes: Any) -> "StudyConfig":
        """A validated copy with ``changes`` applied (``None`` values are ignored)."""
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})

    def run_tag(self) -> str:
        """A short hash of everything that shapes a training run (not depth/init/seed)."""
        keys = ("n_embd", "n_head", "block_size", "batch_size", "steps", "lr", "min_lr",
                "warmup_steps", "weight_decay", "probe_every", "probe_batch_size", "probe_max_tokens",
                "eval_batches",
                "shrink_decay", "control_per_head", "corpus")
        blob = json.dumps({k: getattr(self, k) for k in keys}, sort_keys=True)
        return hashlib.sha1(blob.encode()).hexdigest()[:10]


#: The full CPU configuration (about 40 minutes on two heavily shared cores): width 48, 4
#: heads of 12, context 64, batch 12, 600 steps, probes every 50 steps, 2 seeds per
#: (depth, init), 5 intervention seeds at depth 4.
FULL = StudyConfig()
#: The ``--quick`` configuration: width 32, 4 heads of 8, context 32, batch 8, 200 steps,
#: 1 seed per (depth, init), 5 intervention seeds.
QUICK = StudyConfig(n_embd=32, n_head=4, block_size=32, batch_size=8, steps=200, lr=3e-3,
                    min_lr=3e-4, warmup_steps=20, probe_every=25, probe_batch_size=16,
                    eval_batches=10, seeds=(0,), overhead_steps=200, overhead_repeats=2)


# ============================================================================ one training run
def _corpus(cfg: StudyConfig):
    from quest_geometric.datasets.char_corpus import CharCorpus

    return CharCorpus(cfg.corpus, block_size=cfg.block_size)


def _probe_batch(corpus: Any, cfg: StudyConfig) -> tuple[Tensor, Tensor]:
    """The fixed probe batch: ``probe_batch_size`` blocks of the validation split (seed 1234)."""
    return corpus.get_batch("val", cfg.probe_batch_size, generator=torch.Generator().manual_seed(1234))


def _check_depth_init(depth: Any, init: Any) -> None:
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ValueError(f"qk_geometry: depth must be a positive int (number of layers), got {depth!r}")
    if init not in INITS:
        raise ValueError(f"qk_geometry: init must be one of {INITS}, got {init!r}")


def _build_model(cfg: StudyConfig, depth: int, init: str, seed: int, vocab_size: int) -> nn.Module:
    from quest_geometric.models.char_gpt import CharGPT, GPTConfig

    _check_depth_init(depth, init)
    seed_everything(seed)
    return CharGPT(GPTConfig(vocab_size=vocab_size, block_size=cfg.block_size, n_layer=depth,
                             n_head=cfg.n_head, n_embd=cfg.n_embd, qk_init=init))


def _key_weight_pr(model: nn.Module) -> list[float]:
    """Participation ratio of each layer's :math:`W_K` spectrum (mean over heads)."""
    out = []
    for block in model.blocks:
        attn = block.attn
        w = attn.k_proj.weight.detach().double()
        h = attn.n_head
        s = torch.linalg.svdvals(w.view(h, w.size(0) // h, w.size(1)))
        out.append(float(spectrum_participation_ratio(s).mean()))
    return out


@torch.no_grad()
def probe_model(model: nn.Module, batch: Union[Tensor, tuple, dict], max_tokens: int = 4096
                ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Optional[float]]:
    """Run :class:`QKProbe` on one fixed batch (eval mode, no gradient, hooks removed after).

    The PR accumulators and the probe-batch metrics both see exactly this batch.

    Args:
        batch: ``(x, y)`` for CharGPT (the loss is returned too), a tensor of ids, or a
            dict of keyword inputs (Hugging Face models).
        max_tokens (int): cap on the probe-batch query tokens. (default: ``4096``)

    Returns:
        (list, list, float or None): layer records, head records, the batch's loss.
    """
    was_training = model.training
    model.eval()
    loss = None
    try:
        with QKProbe(model, heads=True, max_tokens=max_tokens) as probe:
            if isinstance(batch, dict):
                out = model(**batch)
            elif isinstance(batch, tuple):
                out = model(*batch)
            else:
                out = model(batch)
        if isinstance(out, tuple) and len(out) > 1 and isinstance(out[1], Tensor):
            loss = float(out[1])
        records = probe.results()
    finally:
        model.train(was_training)
    layers = [r for r in records if r["head"] is None]
    heads = [r for r in records if r["head"] is not None]
    return layers, heads, loss


def _round(v: Any, digits: int = 6) -> Any:
    if isinstance(v, float):
        return float(f"{v:.{digits}g}") if math.isfinite(v) else None
    if isinstance(v, list):
        return [_round(x, digits) for x in v]
    return v


def _layer_rows(layers: list[dict], heads: list[dict], step: int, loss: Optional[float],
                wk_pr: Optional[list[float]], meta: Mapping[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for rec in layers:
        i = rec["layer_index"]
        row: dict[str, Any] = {"kind": "probe", **meta, "step": step, "layer": i}
        for key in _METRIC_KEYS:
            row[key] = _round(rec.get(key))
        for key in ("pr_q", "pr_k", "attention_entropy", "qk_effective_rank"):
            row[key + "_heads"] = [_round(h.get(key), 5) for h in heads if h["layer_index"] == i]
        if wk_pr is not None:
            row["pr_wk"] = _round(wk_pr[i])
        row["probe_loss"] = _round(loss)
        if rec.get("undefined"):
            row["undefined"] = rec["undefined"]
        rows.append(row)
    return rows


class _ProbeCallback(EveryNSteps):
    """Probe every ``every`` steps, at step 0 and at the last step; append to a JSONL file."""

    def __init__(self, batch: tuple[Tensor, Tensor], every: int, path: Optional[Path],
                 meta: Mapping[str, Any], max_tokens: int = 512, sink: Optional[list] = None) -> None:
        super().__init__(self._probe, every=every, at_start=True)
        self.batch, self.path, self.meta, self.max_tokens = batch, path, dict(meta), max_tokens
        self.sink = sink if sink is not None else []
        self.seconds = 0.0
        self.cpu_seconds = 0.0
        self.calls = 0

    def _probe(self, trainer: Trainer, step: int) -> None:
        t0, c0 = time.perf_counter(), time.process_time()
        model = trainer.raw_model
        batch = tuple(t.to(trainer.device) for t in self.batch)
        layers, heads, loss = probe_model(model, batch, self.max_tokens)
        rows = _layer_rows(layers, heads, step, loss, _key_weight_pr(model), self.meta)
        if trainer.is_main:
            self.sink.extend(rows)
            if self.path is not None:
                with open(self.path, "a", encoding="utf-8") as f:
                    for r in rows:
                        f.write(json.dumps(r) + "\n")
        self.seconds += time.perf_counter() - t0
        self.cpu_seconds += time.process_time() - c0
        self.calls += 1

    def on_step_end(self, trainer: Trainer, step: int, metrics: dict[str, Any]) -> None:
        if step % self.every == 0 or step == trainer.total_steps:
            self.fn(trainer, step)


class _SpectrumControlCallback(Callback):
    """Applies a :class:`KeySpectrumControl` after every optimiser step (state kept in checkpoints)."""

    def __init__(self, control: KeySpectrumControl) -> None:
        self.control = control

    def after_optimizer_step(self, trainer: Trainer, step: int) -> None:
        self.control.step()

    def state_dict(self) -> dict[str, Any]:
        return self.control.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.control.load_state_dict(state)


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:  # a line cut by a kill
            continue
    return rows


def _dedupe(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Keep the last record of each (step, layer): a resumed run re-probes the steps after
    its checkpoint."""
    last: dict[tuple, dict] = {}
    for r in rows:
        last[(r["step"], r["layer"])] = r
    return sorted(last.values(), key=lambda r: (r["step"], r["layer"]))


def _run_name(depth: int, init: str, mode: str, seed: int) -> str:
    return f"L{depth}_{init}_{mode}_s{seed}"


def train_run(
    cfg: StudyConfig,
    depth: int,
    init: str,
    seed: int,
    mode: str = "none",
    run_root: Optional[Union[str, os.PathLike]] = None,
    device: str = "cpu",
    progress: bool = False,
    corpus: Any = None,
) -> dict[str, Any]:
    """Train one CharGPT with periodic probes (resuming or reusing its run folder).

    Args:
        cfg (StudyConfig): the sizes.
        depth (int): number of layers.
        init (str): ``'independent'``, ``'tied'`` or ``'orthogonal'``.
        seed (int): model-init and training seed.
        mode (str): ``'none'`` (unconstrained), ``'hold'`` or ``'shrink'`` key-spectrum
            control. (default: ``'none'``)
        run_root (path, optional): parent of the run folder; :obj:`None` keeps nothing on
            disk. (default: :obj:`None`)
        device (str): training device. (default: ``'cpu'``)
        progress (bool): the harness's progress bar. (default: :obj:`False`)
        corpus (CharCorpus, optional): reuse a loaded corpus. (default: :obj:`None`)

    Returns:
        dict: ``meta`` (depth, init, mode, seed, run), ``final`` (the trainer's final record:
        ``val_loss``...), ``records`` (probe rows, one per step and layer), ``seconds``.
    """
    _check_depth_init(depth, init)
    if mode not in MODES:
        raise ValueError(f"qk_geometry: mode must be one of {MODES}, got {mode!r}")
    name = _run_name(depth, init, mode, seed)
    meta = {"run": name, "depth": depth, "init": init, "mode": mode, "seed": seed}
    run_dir = Path(run_root) / name if run_root is not None else None
    if run_dir is not None:
        done = run_dir / "run.json"
        if done.exists():  # finished before (the run root is specific to the config hash)
            info = json.loads(done.read_text())
            return {"meta": meta, "final": info["final"], "seconds": info["seconds"],
                    "records": _dedupe(_read_jsonl(run_dir / "probe.jsonl"))}
        run_dir.mkdir(parents=True, exist_ok=True)
    corpus = corpus if corpus is not None else _corpus(cfg)
    model = _build_model(cfg, depth, init, seed, corpus.vocab_size)
    callbacks: list[Callback] = []
    if mode != "none":
        control = KeySpectrumControl(model, mode=mode, per_head=cfg.control_per_head,
                                     decay=cfg.shrink_decay)
        callbacks.append(_SpectrumControlCallback(control))
    probe_path = run_dir / "probe.jsonl" if run_dir is not None else None
    resuming = run_dir is not None and (run_dir / "checkpoint.pt").exists()
    if probe_path is not None and not resuming and probe_path.exists():
        probe_path.unlink()
    probe_cb = _ProbeCallback(_probe_batch(corpus, cfg), cfg.probe_every, probe_path, meta,
                              cfg.probe_max_tokens)
    callbacks.append(probe_cb)
    tc = TrainConfig(
        max_steps=cfg.steps, batch_size=cfg.batch_size, eval_batches=cfg.eval_batches,
        lr=cfg.lr, min_lr=cfg.min_lr, warmup_steps=cfg.warmup_steps,
        weight_decay=cfg.weight_decay, grad_clip=1.0, seed=seed, device=device,
        log_every=max(1, cfg.probe_every), eval_every=0,
        checkpoint_every=max(cfg.probe_every, cfg.steps // 4),
        out_dir=os.fspath(run_dir) if run_dir is not None else None, progress=progress,
        extra={"study": "qk_geometry", **meta, "n_embd": cfg.n_embd, "n_head": cfg.n_head,
               "block_size": cfg.block_size},
    )
    trainer = Trainer(model, LanguageModelTask(), tc, corpus.get_batch, corpus.get_batch,
                      callbacks=callbacks)
    t0 = time.perf_counter()
    final = trainer.fit(resume="auto" if run_dir is not None else False)
    seconds = time.perf_counter() - t0
    final = {k: v for k, v in final.items() if isinstance(v, (int, float, str)) or v is None}
    records = (_dedupe(_read_jsonl(probe_path)) if probe_path is not None
               else _dedupe(probe_cb.sink))
    if run_dir is not None:
        tmp = run_dir / "run.json.tmp"
        tmp.write_text(json.dumps({"config": dataclasses.asdict(cfg), "meta": meta,
                                   "final": final, "seconds": seconds}, default=list))
        os.replace(tmp, run_dir / "run.json")
    return {"meta": meta, "final": final, "records": records, "seconds": seconds}


# ============================================================================ trajectories
def run_trajectories(cfg: StudyConfig, run_root: Optional[Union[str, os.PathLike]] = None,
                     device: str = "cpu", progress: bool = True) -> list[dict[str, Any]]:
    """Train the depth x init x seed grid; return one :func:`train_run` result per run."""
    corpus = _corpus(cfg)
    grid = [(d, i, s) for d in cfg.depths for i in cfg.inits for s in cfg.seeds]
    out = []
    for d, i, s in tqdm(grid, desc="trajectory runs", disable=not progress):
        out.append(train_run(cfg, d, i, s, "none", run_root, device, False, corpus))
    return out


def _slope(steps: Sequence[float], values: Sequence[float]) -> float:
    """Least-squares slope of ``values`` against ``steps``."""
    x = np.asarray(steps, dtype=float)
    y = np.asarray(values, dtype=float)
    if len(x) < 2 or np.ptp(x) == 0:
        return math.nan
    return float(np.polyfit(x, y, 1)[0])


def _late(steps: Sequence[int], values: Sequence[float]) -> tuple[list, list]:
    """The second half of training: points with ``step >= last_step / 2``."""
    half = steps[-1] / 2
    pts = [(s, v) for s, v in zip(steps, values) if s >= half]
    return [p[0] for p in pts], [p[1] for p in pts]


def _usable(r: Mapping[str, Any]) -> bool:
    return r.get("pr_q") is not None and r.get("pr_k") is not None


def trajectory_summary(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    r"""Summarise probe records into trajectories, shares and slopes.

    A *trajectory* is one layer's curve for one (depth, init), averaged over the seeds at
    each step logged by every seed. For a trajectory with differences
    :math:`\Delta_t = \overline{\mathrm{PR}}_{Q,t} - \overline{\mathrm{PR}}_{K,t}`:

    * **end**: :math:`\Delta_{T} > 0` at the last step;
    * **throughout**: :math:`\Delta_t > 0` at every logged step after initialisation
      (:math:`t > 0`; at :math:`t = 0` a tied init has :math:`\Delta_0 = 0` by construction);
    * **slopes**: least-squares slopes of :math:`\mathrm{PR}_Q` and :math:`\mathrm{PR}_K`
      against the step, reported per 1,000 steps, over all of training and over its second
      half (``*_late``: steps :math:`\ge T/2`, after the early transient).

    The same shares are reported over the individual runs (each run's layer, no seed
    averaging). Records whose PR is undefined (``None``) are skipped.

    Args:
        records (iterable of dict): probe rows (``depth``, ``init``, ``seed``, ``step``,
            ``layer``, ``pr_q``, ``pr_k``, ``attention_entropy``, ...).

    Returns:
        dict: ``trajectories`` (one dict per trajectory), ``rows`` (one per (depth, init)
        and an ``all`` row), ``run_layers`` (per run and layer), ``correlations``.
    """
    recs = [dict(r) for r in records if _usable(r)]
    if not recs:
        raise ValueError("trajectory_summary: no probe record with defined PR_Q and PR_K")
    groups: dict[tuple, dict[int, dict[int, dict]]] = {}
    for r in recs:
        groups.setdefault((r["depth"], r["init"], r["layer"]), {}).setdefault(r["seed"], {})[r["step"]] = r

    def curve_stats(steps: list[int], pq: list[float], pk: list[float]) -> dict[str, Any]:
        diff = [a - b for a, b in zip(pq, pk)]
        later = [d for s, d in zip(steps, diff) if s > 0]
        return {
            "steps": steps, "pr_q": pq, "pr_k": pk, "diff": diff,
            "pr_q_start": pq[0], "pr_k_start": pk[0], "pr_q_end": pq[-1], "pr_k_end": pk[-1],
            "diff_end": diff[-1], "positive_end": diff[-1] > 0,
            "positive_throughout": bool(later) and all(d > 0 for d in later),
            "slope_q": 1000.0 * _slope(steps, pq), "slope_k": 1000.0 * _slope(steps, pk),
            "slope_q_late": 1000.0 * _slope(*_late(steps, pq)),
            "slope_k_late": 1000.0 * _slope(*_late(steps, pk)),
        }

    trajectories, run_layers = [], []
    for (depth, init, layer), by_seed in sorted(groups.items()):
        common = sorted(set.intersection(*(set(v) for v in by_seed.values())))
        if not common:
            continue
        pq = [float(np.mean([by_seed[s][t]["pr_q"] for s in by_seed])) for t in common]
        pk = [float(np.mean([by_seed[s][t]["pr_k"] for s in by_seed])) for t in common]
        ent = [by_seed[s][common[-1]].get("attention_entropy") for s in by_seed]
        ent = [e for e in ent if e is not None]
        t = {"depth": depth, "init": init, "layer": layer, "seeds": sorted(by_seed),
             **curve_stats(common, pq, pk),
             "entropy_end": float(np.mean(ent)) if ent else math.nan}
        trajectories.append(t)
        for seed, by_step in sorted(by_seed.items()):
            steps = sorted(by_step)
            run_layers.append({"depth": depth, "init": init, "layer": layer, "seed": seed,
                               **curve_stats(steps, [by_step[s]["pr_q"] for s in steps],
                                             [by_step[s]["pr_k"] for s in steps])})

    def share(items: list[dict], key: str) -> float:
        return float(np.mean([bool(x[key]) for x in items])) if items else math.nan

    def agg(label_depth: Any, label_init: Any, ts: list[dict], rl: list[dict]) -> dict[str, Any]:
        return {
            "depth": label_depth, "init": label_init, "trajectories": len(ts),
            "share_end": share(ts, "positive_end"),
            "share_throughout": share(ts, "positive_throughout"),
            "run_layers": len(rl), "run_share_end": share(rl, "positive_end"),
            "run_share_throughout": share(rl, "positive_throughout"),
            "pr_q_start": float(np.mean([t["pr_q_start"] for t in ts])),
            "pr_q_end": float(np.mean([t["pr_q_end"] for t in ts])),
            "pr_k_start": float(np.mean([t["pr_k_start"] for t in ts])),
            "pr_k_end": float(np.mean([t["pr_k_end"] for t in ts])),
            "slope_q_per_1k": float(np.mean([t["slope_q"] for t in ts])),
            "slope_k_per_1k": float(np.mean([t["slope_k"] for t in ts])),
            "share_q_expands": float(np.mean([t["slope_q"] > 0 for t in ts])),
            "share_k_shrinks": float(np.mean([t["slope_k"] < 0 for t in ts])),
            "slope_q_late_per_1k": float(np.mean([t["slope_q_late"] for t in ts])),
            "slope_k_late_per_1k": float(np.mean([t["slope_k_late"] for t in ts])),
            "share_q_expands_late": float(np.mean([t["slope_q_late"] > 0 for t in ts])),
            "share_k_shrinks_late": float(np.mean([t["slope_k_late"] < 0 for t in ts])),
            "entropy_end": float(np.nanmean([t["entropy_end"] for t in ts])) if ts else math.nan,
        }

    rows = []
    for depth, init in sorted({(t["depth"], t["init"]) for t in trajectories},
                              key=lambda k: (k[0], INITS.index(k[1]) if k[1] in INITS else 99)):
        ts = [t for t in trajectories if t["depth"] == depth and t["init"] == init]
        rl = [r for r in run_layers if r["depth"] == depth and r["init"] == init]
        rows.append(agg(depth, init, ts, rl))
    rows.append(agg("all", "all", trajectories, run_layers))
    return {"trajectories": trajectories, "rows": rows, "run_layers": run_layers,
            "correlations": _correlations(recs, trajectories)}


def _spearman(x: Sequence[float], y: Sequence[float]) -> tuple[float, float, int]:
    from scipy.stats import spearmanr

    pairs = [(a, b) for a, b in zip(x, y) if a is not None and b is not None
             and math.isfinite(a) and math.isfinite(b)]
    if len(pairs) < 3 or len({p[0] for p in pairs}) < 2 or len({p[1] for p in pairs}) < 2:
        return math.nan, math.nan, len(pairs)  # too few points or a constant variable
    res = spearmanr([p[0] for p in pairs], [p[1] for p in pairs])
    return float(res.statistic), float(res.pvalue), len(pairs)


def _correlations(recs: list[dict], trajectories: list[dict]) -> list[dict[str, Any]]:
    """Spearman correlations of PR_K with attention entropy and with the QK^T effective rank."""
    out = []
    trained = [r for r in recs if r["step"] > 0]
    for what, key in (("attention_entropy", "attention_entropy"), ("qk_effective_rank", "qk_effective_rank")):
        rho, p, n = _spearman([r["pr_k"] for r in trained], [r.get(key) for r in trained])
        out.append({"x": "pr_k", "y": what, "over": "all probe records (step > 0)",
                    "spearman_rho": rho, "p_value": p, "n": n})
    rho, p, n = _spearman([t["pr_k_end"] for t in trajectories], [t["entropy_end"] for t in trajectories])
    out.append({"x": "pr_k", "y": "attention_entropy", "over": "trajectory end points",
                "spearman_rho": rho, "p_value": p, "n": n})
    return out


def _binomial_interval(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Exact (Clopper-Pearson) interval of a binomial share ``k / n`` (SciPy's
    :meth:`scipy.stats.binomtest(...).proportion_ci`)."""
    from scipy.stats import binomtest

    if n == 0:
        return math.nan, math.nan
    ci = binomtest(k, n).proportion_ci(confidence_level=level, method="exact")
    return float(ci.low), float(ci.high)


def share_over_steps(summary: Mapping[str, Any], level: float = 0.95) -> list[dict[str, Any]]:
    r"""The share of trajectories with :math:`\mathrm{PR}_Q - \mathrm{PR}_K > 0` at every
    probed step, with its exact binomial (Clopper-Pearson) interval.

    For each step :math:`t` logged by every trajectory of a group, :math:`k_t` of the
    :math:`n` trajectories have :math:`\Delta_t > 0`; the row gives
    :math:`\hat p_t = k_t / n` and the interval :math:`[p_\mathrm{lo}, p_\mathrm{hi}]` with
    :math:`P(\mathrm{Bin}(n, p_\mathrm{lo}) \ge k_t) = P(\mathrm{Bin}(n, p_\mathrm{hi}) \le k_t)
    = (1 - \mathrm{level}) / 2`. Groups: every trajectory (``depth = init = 'all'``), each
    depth, each initialisation, and the individual runs' layers without seed averaging
    (``unit = 'run layer'``).

    The interval treats the trajectories as independent draws; layers of one model are
    correlated, so it is narrower than an interval over independent models would be.

    Args:
        summary (dict): the result of :func:`trajectory_summary`.
        level (float): confidence level of the interval. (default: ``0.95``)

    Returns:
        list of dict: one row per (group, step): ``unit``, ``depth``, ``init``, ``step``,
        ``k``, ``n``, ``share``, ``ci_low``, ``ci_high``, ``mean_diff``.
    """
    if not (0 < level < 1):
        raise ValueError(f"share_over_steps: level must be in (0, 1), got {level!r}")

    def rows_for(items: list[dict], unit: str, depth: Any, init: Any) -> list[dict[str, Any]]:
        if not items:
            return []
        steps = sorted(set.intersection(*(set(t["steps"]) for t in items)))
        out = []
        for step in steps:
            diffs = [t["diff"][t["steps"].index(step)] for t in items]
            k = int(sum(d > 0 for d in diffs))
            lo, hi = _binomial_interval(k, len(diffs), level)
            out.append({"unit": unit, "depth": depth, "init": init, "step": step, "k": k,
                        "n": len(diffs), "share": k / len(diffs), "ci_low": lo, "ci_high": hi,
                        "mean_diff": float(np.mean(diffs))})
        return out

    ts = list(summary["trajectories"])
    rows = rows_for(ts, "trajectory", "all", "all")
    for depth in sorted({t["depth"] for t in ts}):
        rows += rows_for([t for t in ts if t["depth"] == depth], "trajectory", depth, "all")
    for init in [i for i in INITS if any(t["init"] == i for t in ts)]:
        rows += rows_for([t for t in ts if t["init"] == init], "trajectory", "all", init)
    rows += rows_for(list(summary.get("run_layers", [])), "run layer", "all", "all")
    return rows


def first_sustained_step(rows: Sequence[Mapping[str, Any]], threshold: float = 0.9,
                         unit: str = "trajectory", depth: Any = "all", init: Any = "all"
                         ) -> Optional[int]:
    """The first probed step from which the share stays at or above ``threshold`` until the
    end of training (:obj:`None` if it never does), for one group of :func:`share_over_steps`."""
    sel = sorted((r for r in rows if r["unit"] == unit and r["depth"] == depth and r["init"] == init),
                 key=lambda r: r["step"])
    first = None
    for r in sel:
        if r["share"] >= threshold:
            first = r["step"] if first is None else first
        else:
            first = None
    return first


# ============================================================================ intervention
def run_intervention(cfg: StudyConfig, run_root: Optional[Union[str, os.PathLike]] = None,
                     device: str = "cpu", progress: bool = True) -> list[dict[str, Any]]:
    """Train ``none``/``hold``/``shrink`` runs over ``cfg.intervention_seeds``."""
    corpus = _corpus(cfg)
    # controlled runs first: the unconstrained ones may be shared with the trajectory grid
    grid = [(m, s) for m in ("hold", "shrink", "none") for s in cfg.intervention_seeds]
    out = []
    for m, s in tqdm(grid, desc="intervention runs", disable=not progress):
        out.append(train_run(cfg, cfg.intervention_depth, cfg.intervention_init, s, m,
                             run_root, device, False, corpus))
    return out


def directional_probability(a: Sequence[float], b: Sequence[float]) -> dict[str, Any]:
    r"""Paired sign test of ``a < b`` across seeds.

    With :math:`d_s = a_s - b_s`, ties (:math:`d_s = 0`) are dropped as in the classical sign
    test; among the :math:`n` remaining seeds :math:`k` have :math:`d_s < 0`. The directional
    probability is :math:`k/n` and the one-sided p-value
    :math:`P(X \ge k)`, :math:`X \sim \mathrm{Binomial}(n, 1/2)`
    (:func:`scipy.stats.binomtest` with ``alternative='greater'``).

    Args:
        a (sequence of float): per-seed values of the first condition (e.g. entropy under
            ``'shrink'``).
        b (sequence of float): the paired values of the second (``'hold'``).

    Returns:
        dict: ``n_seeds``, ``n_untied``, ``k_less`` (seeds with a < b), ``share_less``
        (:math:`k/n`), ``p_value``, ``signs`` (per seed: -1, 0 or +1), ``mean_diff``.
    """
    from scipy.stats import binomtest

    a = [float(v) for v in a]
    b = [float(v) for v in b]
    if len(a) != len(b) or not a:
        raise ValueError(f"directional_probability: a and b must be non-empty and paired, got "
                         f"{len(a)} and {len(b)} values")
    if not all(math.isfinite(v) for v in a + b):
        raise ValueError("directional_probability: values must be finite")
    diffs = [x - y for x, y in zip(a, b)]
    signs = [int(np.sign(d)) for d in diffs]
    n = sum(1 for s in signs if s != 0)
    k = sum(1 for s in signs if s < 0)
    p = float(binomtest(k, n, 0.5, alternative="greater").pvalue) if n else math.nan
    return {"n_seeds": len(a), "n_untied": n, "k_less": k,
            "share_less": k / n if n else math.nan, "p_value": p, "signs": signs,
            "mean_diff": float(np.mean(diffs))}


def _end_values(result: Mapping[str, Any]) -> dict[str, float]:
    recs = result["records"]
    last = max(r["step"] for r in recs)
    end = [r for r in recs if r["step"] == last]

    def mean(key: str) -> float:
        vals = [r[key] for r in end if r.get(key) is not None]
        return float(np.mean(vals)) if vals else math.nan

    return {"step": last, "entropy": mean("attention_entropy"), "pr_k": mean("pr_k"),
            "pr_q": mean("pr_q"), "pr_wk": mean("pr_wk"), "qk_erank": mean("qk_effective_rank"),
            "val_loss": float(result["final"].get("val_loss", math.nan))}


def intervention_summary(results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per-seed end values of each mode, per-mode means and the shrink-vs-hold sign tests.

    Returns:
        dict: ``per_seed`` rows (seed, mode, entropy, val_loss, pr_k, pr_wk...), ``rows``
        (one per mode: means and standard deviations over seeds), ``tests`` (sign tests of
        entropy and validation loss, shrink < hold and shrink < none, hold > none).
    """
    per_seed = []
    for r in results:
        per_seed.append({"seed": r["meta"]["seed"], "mode": r["meta"]["mode"], **_end_values(r)})
    rows = []
    for mode in MODES:
        sel = [p for p in per_seed if p["mode"] == mode]
        if not sel:
            continue
        row: dict[str, Any] = {"mode": mode, "seeds": len(sel)}
        for key in ("entropy", "val_loss", "pr_k", "pr_q", "pr_wk", "qk_erank"):
            vals = np.array([p[key] for p in sel], dtype=float)
            row[key] = float(np.mean(vals))
            row[key + "_std"] = float(np.std(vals, ddof=1)) if len(vals) > 1 else math.nan
        rows.append(row)

    def paired(mode_a: str, mode_b: str, key: str) -> Optional[dict]:
        a = {p["seed"]: p[key] for p in per_seed if p["mode"] == mode_a}
        b = {p["seed"]: p[key] for p in per_seed if p["mode"] == mode_b}
        seeds = sorted(set(a) & set(b))
        if not seeds:
            return None
        res = directional_probability([a[s] for s in seeds], [b[s] for s in seeds])
        return {"test": f"{key}({mode_a}) < {key}({mode_b})", "seeds": seeds, **res}

    tests = [t for t in (paired("shrink", "hold", "entropy"), paired("shrink", "none", "entropy"),
                         paired("none", "hold", "entropy"), paired("shrink", "hold", "val_loss"),
                         paired("shrink", "hold", "pr_k")) if t is not None]
    return {"per_seed": per_seed, "rows": rows, "tests": tests}


# ============================================================================ overhead
def measure_overhead(cfg: StudyConfig, device: str = "cpu", progress: bool = False,
                     cache: Optional[Union[str, os.PathLike]] = None) -> dict[str, Any]:
    """Training time with a probe every ``cfg.overhead_probe_every`` steps vs without.

    The two variants train the same model (depth ``cfg.overhead_depth``, independent init,
    seed 0) for ``cfg.overhead_steps`` steps without writing files, alternating
    ``cfg.overhead_repeats`` times (A B A B ...) so that drifts of a shared machine hit both;
    the medians are compared. On CPU the comparison uses the **process CPU time**
    (:func:`time.process_time`): on cores shared with other work, wall-clock differences of
    a few seconds are scheduling noise, while the CPU time this process spends is not; the
    wall-clock overhead is reported beside it (``overhead_wall_pct``). On CUDA both are wall
    clock.

    Args:
        cfg (StudyConfig): the sizes.
        device (str): training device. (default: ``'cpu'``)
        progress (bool): progress bar. (default: :obj:`False`)
        cache (path, optional): a JSON file: read if it exists, else written.
            (default: :obj:`None`)

    Returns:
        dict: ``seconds_plain``, ``seconds_probed``, ``overhead_pct``, ``probes``,
        ``ms_per_probe``, ``ms_per_step`` and the raw times.
    """
    if cache is not None and Path(cache).is_file():
        return json.loads(Path(cache).read_text())
    corpus = _corpus(cfg)
    batch = _probe_batch(corpus, cfg)
    on_cpu = torch.device(device).type == "cpu"
    clock = time.process_time if on_cpu else time.perf_counter
    times: dict[str, list[float]] = {"plain": [], "probed": []}
    walls: dict[str, list[float]] = {"plain": [], "probed": []}
    probe_secs, probes = [], 0
    for _ in tqdm(range(cfg.overhead_repeats), desc="overhead", disable=not progress):
        for variant in ("plain", "probed"):
            model = _build_model(cfg, cfg.overhead_depth, "independent", 0, corpus.vocab_size)
            cbs: list[Callback] = []
            if variant == "probed":
                cb = _ProbeCallback(batch, cfg.overhead_probe_every, None, {"run": "overhead"},
                                    cfg.probe_max_tokens)
                cb.at_start = False
                cbs.append(cb)
            tc = TrainConfig(max_steps=cfg.overhead_steps, batch_size=cfg.batch_size,
                             eval_batches=1, lr=cfg.lr, min_lr=cfg.min_lr,
                             warmup_steps=min(cfg.warmup_steps, cfg.overhead_steps - 1),
                             weight_decay=cfg.weight_decay, grad_clip=1.0, seed=0, device=device,
                             log_every=cfg.overhead_probe_every, eval_every=0, checkpoint_every=0,
                             progress=False)
            trainer = Trainer(model, LanguageModelTask(), tc, corpus.get_batch, None, callbacks=cbs)
            t0, w0 = clock(), time.perf_counter()
            trainer.fit()
            times[variant].append(clock() - t0)
            walls[variant].append(time.perf_counter() - w0)
            if variant == "probed":
                probe_secs.append(cb.cpu_seconds if on_cpu else cb.seconds)
                probes = cb.calls
    plain, probed = float(np.median(times["plain"])), float(np.median(times["probed"]))
    wplain, wprobed = float(np.median(walls["plain"])), float(np.median(walls["probed"]))
    result = {
        "depth": cfg.overhead_depth, "steps": cfg.overhead_steps,
        "probe_every": cfg.overhead_probe_every, "probes": probes,
        "clock": "process CPU time" if on_cpu else "wall clock",
        "seconds_plain": plain, "seconds_probed": probed,
        "overhead_pct": 100.0 * (probed - plain) / plain,
        "ms_per_step": 1e3 * plain / cfg.overhead_steps,
        "ms_per_probe": 1e3 * float(np.median(probe_secs)) / max(probes, 1),
        "probe_share_pct": 100.0 * float(np.median(probe_secs)) / probed,
        "wall_plain": wplain, "wall_probed": wprobed,
        "overhead_wall_pct": 100.0 * (wprobed - wplain) / wplain,
        "times_plain": times["plain"], "times_probed": times["probed"],
        "walls_plain": walls["plain"], "walls_probed": walls["probed"],
    }
    if cache is not None:
        Path(cache).parent.mkdir(parents=True, exist_ok=True)
        Path(cache).write_text(json.dumps(result))
    return result


# ============================================================================ pretrained models
_STEP_RE = re.compile(r"step[-_]?(\d+)", re.IGNORECASE)
_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json",
                 "pytorch_model.bin.index.json")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")


def _checkpoint_step(path: Path, config: Any, position: int) -> tuple[int, str]:
    """The training step of a checkpoint: from the folder name (``step143000``,
    ``pythia-70m-step1000``), else from a ``step`` entry of its config, else its position."""
    for part in reversed(path.resolve().parts):
        m = _STEP_RE.search(part)
        if m:
            return int(m.group(1)), "folder name"
    for key in ("step", "training_step", "global_step"):
        v = getattr(config, key, None)
        if isinstance(v, int) and not isinstance(v, bool):
            return v, f"config.{key}"
    return position, "order given"


def _check_hf_dir(path: Union[str, os.PathLike]) -> Path:
    p = Path(path)
    if not p.is_dir():
        raise ValueError(f"hf_analysis: {os.fspath(path)!r} is not a directory holding a Hugging Face "
                         "model (expected a folder written by save_pretrained with config.json and "
                         "model.safetensors or pytorch_model.bin)")
    if not (p / "config.json").is_file():
        raise ValueError(f"hf_analysis: {os.fspath(path)!r} does not hold a Hugging Face model: no "
                         "config.json (a folder written by save_pretrained is expected)")
    if not any((p / f).is_file() for f in _WEIGHT_FILES):
        raise ValueError(f"hf_analysis: {os.fspath(path)!r} has a config.json but no weights "
                         f"(none of {list(_WEIGHT_FILES)}); it does not hold a model")
    return p


def _byte_ids(text: str, vocab_size: int) -> list[int]:
    if vocab_size < 256:
        raise ValueError(f"hf_analysis: the byte-level fallback needs vocab_size >= 256, the model "
                         f"has {vocab_size}")
    return list(text.encode("utf-8"))


def hf_analysis(
    paths: Sequence[Union[str, os.PathLike]],
    text: Optional[str] = None,
    seq_len: int = 128,
    batch_size: int = 8,
    byte_fallback: bool = False,
    corpus: str = "python-reference",
    progress: bool = False,
    device: str = "cpu",
) -> dict[str, Any]:
    r"""Probe local Hugging Face causal LMs (e.g. a series of Pythia revisions).

    Each folder (written by ``save_pretrained``) is loaded with
    ``AutoModelForCausalLM.from_pretrained`` (GPT-2, GPT-NeoX / Pythia and any model whose
    attention class :class:`QKProbe` knows). The text is tokenised by the tokenizer saved in
    the same folder; the first ``batch_size * seq_len`` tokens form the probe batch
    ``[batch_size, seq_len]``. Checkpoints are ordered by training step, parsed from the
    folder name (``step1000``), else from a ``step`` entry of the config, else the order
    given.

    Args:
        paths (sequence of path): checkpoint folders.
        text (str, optional): the text to probe on; :obj:`None` uses the validation split
            of ``corpus``. (default: :obj:`None`)
        seq_len (int): tokens per sequence (capped at the model's context). (default: ``128``)
        batch_size (int): sequences. (default: ``8``)
        byte_fallback (bool): for a folder without a tokenizer, use the UTF-8 bytes of the
            text as token ids (needs ``vocab_size >= 256``; meaningful only for testing the
            pipeline, since the model was not trained on these ids). Without it a folder
            without tokenizer is an error. (default: :obj:`False`)
        corpus (str): CharCorpus source for the default text. (default: ``'python-reference'``)
        progress (bool): progress bar. (default: :obj:`False`)
        device (str): where to run the models. (default: ``'cpu'``)

    Returns:
        dict: ``rows`` (one per checkpoint and layer: ``checkpoint``, ``step``, ``layer``,
        ``pr_q``, ``pr_k``, ``pr_q_minus_pr_k``, ``qk_effective_rank``,
        ``attention_entropy``...), ``pivot`` (PR_Q - PR_K per layer with one column per
        step) and ``correlations`` (per checkpoint, Spearman of the QK^T effective rank
        with the entropy over layers and heads).
    """
    try:
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    except ImportError as e:  # pragma: no cover - optional dependency
        raise ImportError("hf_analysis needs the 'transformers' package (pip install transformers)") from e
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    if not paths:
        raise ValueError("hf_analysis: no checkpoint path given")
    dirs = [_check_hf_dir(p) for p in paths]
    if text is None:
        from quest_geometric.datasets.char_corpus import CharCorpus

        c = CharCorpus(corpus, block_size=8)
        text = c.decode(c.splits["val"].long())
    entries = []
    for pos, d in enumerate(dirs):
        cfg = AutoConfig.from_pretrained(d)
        step, source = _checkpoint_step(d, cfg, pos)
        entries.append((step, pos, source, d))
    entries.sort(key=lambda e: (e[0], e[1]))
    rows, corr = [], []
    for step, pos, source, d in tqdm(entries, desc="checkpoints", disable=not progress):
        has_tok = any((d / f).is_file() for f in _TOKENIZER_FILES)
        model = AutoModelForCausalLM.from_pretrained(d).to(device)
        vocab = int(model.config.vocab_size)
        ctx = getattr(model.config, "n_positions", None) or getattr(model.config, "max_position_embeddings", None)
        T = min(seq_len, int(ctx)) if ctx else seq_len
        # subword tokens average a few characters (GPT-2: ~4 on English): 16 characters per
        # needed token is ample, and the whole corpus need not be tokenised
        snippet = text[:16 * batch_size * T]
        if has_tok:
            tok = AutoTokenizer.from_pretrained(d)
            ids = tok(snippet, add_special_tokens=False)["input_ids"]
            tokenizer_name = type(tok).__name__
        elif byte_fallback:
            ids = _byte_ids(snippet, vocab)
            tokenizer_name = "utf-8 bytes (fallback)"
        else:
            raise ValueError(f"hf_analysis: {os.fspath(d)!r} holds no tokenizer (none of "
                             f"{list(_TOKENIZER_FILES)}); save it beside the model "
                             "(tokenizer.save_pretrained(path)) or pass byte_fallback=True "
                             "(--hf-byte-fallback) to probe on UTF-8 byte ids")
        need = batch_size * T
        if len(ids) < 2 * batch_size:
            raise ValueError(f"hf_analysis: the text gives only {len(ids)} tokens; need at least {2 * batch_size}")
        if len(ids) < need:
            T = len(ids) // batch_size
        if max(ids[:batch_size * T]) >= vocab:
            raise ValueError(f"hf_analysis: token ids reach {max(ids)}, beyond the model's vocab_size {vocab}")
        x = torch.tensor(ids[:batch_size * T], dtype=torch.long, device=device).view(batch_size, T)
        layers, heads, _ = probe_model(model, {"input_ids": x, "use_cache": False},
                                       max_tokens=batch_size * T)
        for rec in layers:
            rows.append({"checkpoint": d.name, "path": os.fspath(d), "step": step, "step_from": source,
                         "tokenizer": tokenizer_name, "layer": rec["layer_index"],
                         **{k: rec.get(k) for k in _METRIC_KEYS}})
        rho, p, n = _spearman([h["qk_effective_rank"] for h in heads], [h["attention_entropy"] for h in heads])
        corr.append({"checkpoint": d.name, "step": step, "x": "qk_effective_rank",
                     "y": "attention_entropy", "over": "layers x heads", "spearman_rho": rho,
                     "p_value": p, "n": n})
        del model
    steps = sorted({r["step"] for r in rows})
    pivot = []
    for layer in sorted({r["layer"] for r in rows}):
        prow: dict[str, Any] = {"layer": layer}
        for s in steps:
            vals = [r["pr_q_minus_pr_k"] for r in rows if r["layer"] == layer and r["step"] == s
                    and r["pr_q_minus_pr_k"] is not None]
            prow[f"step {s}"] = float(np.mean(vals)) if vals else math.nan
        pivot.append(prow)
    return {"rows": rows, "pivot": pivot, "steps": steps, "correlations": corr}


# ============================================================================ plots
def _plt():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover
        return None
    return plt


def plot_trajectories(summary: Mapping[str, Any], path: Path) -> Optional[Path]:
    """Per-layer seed-averaged PR_Q (solid) and PR_K (dashed), one panel per (depth, init).

    Every panel has its axis labels; each row's layers are named in a legend beside the
    row, and a legend above the panels says which line style is which."""
    plt = _plt()
    if plt is None:
        return None
    from matplotlib.lines import Line2D

    ts = summary["trajectories"]
    depths = sorted({t["depth"] for t in ts})
    inits = [i for i in INITS if any(t["init"] == i for t in ts)]
    fig, axes = plt.subplots(len(depths), len(inits),
                             figsize=(4.2 * len(inits) + 1.2, 3.0 * len(depths) + 0.6),
                             squeeze=False, sharex=True)
    cmap = plt.get_cmap("viridis")
    for a, depth in enumerate(depths):
        for b, init in enumerate(inits):
            ax = axes[a][b]
            sel = [t for t in ts if t["depth"] == depth and t["init"] == init]
            for t in sel:
                c = cmap(t["layer"] / max(depth - 1, 1))
                ax.plot(t["steps"], t["pr_q"], color=c, lw=1.4, label=f"layer {t['layer']}")
                ax.plot(t["steps"], t["pr_k"], color=c, lw=1.4, ls="--")
            ax.set_title(f"depth {depth}, {init} init", fontsize=10)
            ax.grid(alpha=0.3)
            ax.set_ylabel("participation ratio")
            ax.set_xlabel("training step")
            if b == len(inits) - 1 and sel:
                ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0),
                          title=f"depth {depth}", title_fontsize=8)
    styles = [Line2D([], [], color="0.3", lw=1.4, label="PR_Q (queries)"),
              Line2D([], [], color="0.3", lw=1.4, ls="--", label="PR_K (keys)")]
    fig.legend(handles=styles, loc="upper center", ncol=2, fontsize=9, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / (3.0 * len(depths) + 0.6)))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_diff(summary: Mapping[str, Any], path: Path) -> Optional[Path]:
    """PR_Q - PR_K per layer over training, one panel per (depth, init): the line is the
    seed mean, the band spans the seeds (min to max), the black line is zero (above it,
    queries are spread over more directions than keys, the paper's ordering)."""
    plt = _plt()
    if plt is None:
        return None
    ts = summary["trajectories"]
    runs = summary.get("run_layers", [])
    depths = sorted({t["depth"] for t in ts})
    inits = [i for i in INITS if any(t["init"] == i for t in ts)]
    fig, axes = plt.subplots(len(depths), len(inits),
                             figsize=(4.2 * len(inits) + 1.2, 3.0 * len(depths) + 0.8),
                             squeeze=False, sharex=True, sharey=True)
    cmap = plt.get_cmap("viridis")
    for a, depth in enumerate(depths):
        for b, init in enumerate(inits):
            ax = axes[a][b]
            sel = [t for t in ts if t["depth"] == depth and t["init"] == init]
            for t in sel:
                c = cmap(t["layer"] / max(depth - 1, 1))
                ax.plot(t["steps"], t["diff"], color=c, lw=1.3, label=f"layer {t['layer']}")
                per_seed = [r for r in runs if r["depth"] == depth and r["init"] == init
                            and r["layer"] == t["layer"]]
                if len(per_seed) > 1:
                    vals = np.array([[r["diff"][r["steps"].index(st)] for st in t["steps"]]
                                     for r in per_seed])
                    ax.fill_between(t["steps"], vals.min(0), vals.max(0), color=c, alpha=0.15, lw=0)
            ax.axhline(0.0, color="k", lw=0.8)
            ax.set_title(f"depth {depth}, {init} init", fontsize=10)
            ax.grid(alpha=0.3)
            ax.set_ylabel("PR_Q - PR_K")
            ax.set_xlabel("training step")
            if b == len(inits) - 1 and sel:
                ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0),
                          title=f"depth {depth}", title_fontsize=8)
    n_seeds = len({r["seed"] for r in runs}) if runs else 1
    fig.suptitle(f"PR_Q - PR_K per layer (line: mean of {n_seeds} seeds; band: seed range)",
                 fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.3 / (3.0 * len(depths) + 0.8)))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_share_over_steps(rows: Sequence[Mapping[str, Any]], path: Path,
                          title: str = "Share of trajectories with PR_Q > PR_K") -> Optional[Path]:
    """Left: the share over all trajectories (with its exact 95% interval) and over the
    runs' layers; right: the share per depth. Both against the training step."""
    plt = _plt()
    if plt is None:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)

    def series(unit: str, depth: Any, init: Any) -> list:
        return sorted((r for r in rows if r["unit"] == unit and r["depth"] == depth
                       and r["init"] == init), key=lambda r: r["step"])

    allr = series("trajectory", "all", "all")
    if allr:
        st = [r["step"] for r in allr]
        axes[0].plot(st, [r["share"] for r in allr], color="tab:blue", lw=1.6,
                     label=f"seed-averaged trajectories (n = {allr[0]['n']})")
        axes[0].fill_between(st, [r["ci_low"] for r in allr], [r["ci_high"] for r in allr],
                             color="tab:blue", alpha=0.2, lw=0, label="exact 95% interval")
    runr = series("run layer", "all", "all")
    if runr:
        axes[0].plot([r["step"] for r in runr], [r["share"] for r in runr], color="tab:orange",
                     lw=1.2, ls="--", label=f"individual runs' layers (n = {runr[0]['n']})")
    depths = sorted({r["depth"] for r in rows if r["depth"] != "all"})
    cmap = plt.get_cmap("plasma")
    for i, depth in enumerate(depths):
        d = series("trajectory", depth, "all")
        axes[1].plot([r["step"] for r in d], [r["share"] for r in d], lw=1.4,
                     color=cmap(i / max(len(depths), 1)), label=f"depth {depth} (n = {d[0]['n']})")
    for ax, sub in zip(axes, ("all trajectories", "per depth")):
        ax.axhline(0.5, color="0.5", lw=0.8, ls=":")
        ax.axhline(0.9, color="tab:green", lw=0.8, ls=":", label="90% (the paper: every one)")
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("training step")
        ax.set_ylabel("share with PR_Q - PR_K > 0")
        ax.set_title(sub, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7.5, loc="lower right")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_prk_entropy(records: Sequence[Mapping[str, Any]], path: Path) -> Optional[Path]:
    """Scatter of PR_K against attention entropy over all probe records (colour = step)."""
    plt = _plt()
    if plt is None:
        return None
    pts = [(r["pr_k"], r["attention_entropy"], r["step"]) for r in records
           if r.get("pr_k") is not None and r.get("attention_entropy") is not None]
    fig, ax = plt.subplots(figsize=(5, 4))
    if pts:
        x, y, s = zip(*pts)
        sc = ax.scatter(x, y, c=s, s=6, cmap="plasma", alpha=0.6)
        fig.colorbar(sc, ax=ax, label="step")
    ax.set_xlabel("PR_K (per-head mean)")
    ax.set_ylabel("normalised attention entropy")
    ax.set_title("Key participation ratio vs attention entropy", fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_intervention(results: Sequence[Mapping[str, Any]], path: Path) -> Optional[Path]:
    """Layer-mean attention entropy and PR_K over training for each control mode and seed."""
    plt = _plt()
    if plt is None:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    colors = {"none": "tab:gray", "hold": "tab:blue", "shrink": "tab:red"}
    seen = set()
    for r in results:
        mode = r["meta"]["mode"]
        steps = sorted({x["step"] for x in r["records"]})
        for ax, key in zip(axes, ("attention_entropy", "pr_k")):
            ys = [np.mean([x[key] for x in r["records"] if x["step"] == s and x.get(key) is not None])
                  for s in steps]
            ax.plot(steps, ys, color=colors[mode], alpha=0.7, lw=1,
                    label=mode if (mode, key) not in seen else None)
            seen.add((mode, key))
    axes[0].set_ylabel("attention entropy (layer mean)")
    axes[1].set_ylabel("PR_K (layer mean)")
    for ax in axes:
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_hf(result: Mapping[str, Any], path: Path) -> Optional[Path]:
    """PR_Q - PR_K per layer against the checkpoint step."""
    plt = _plt()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for prow in result["pivot"]:
        ys = [prow[f"step {s}"] for s in result["steps"]]
        ax.plot(result["steps"], ys, marker="o", label=f"layer {prow['layer']}")
    ax.axhline(0, color="k", lw=0.8)
    ax.set_xlabel("training step")
    ax.set_ylabel("PR_Q - PR_K")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ============================================================================ the study
def _cfg_meta(cfg: StudyConfig, quick: bool, device: str) -> dict[str, Any]:
    return {"quick": quick, "device": str(device), "torch_threads": torch.get_num_threads(),
            **{k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(cfg).items()}}


def _findings(traj: Optional[dict], inter: Optional[dict], smoke: bool = False) -> list[str]:
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
            f"Slopes over training: PR_Q {a['slope_q_per_1k']:+.3g}/1k steps "
            f"(expands in {a['share_q_expands']:.0%} of trajectories), PR_K {a['slope_k_per_1k']:+.3g}/1k "
            f"steps (shrinks in {a['share_k_shrinks']:.0%}); mean PR_Q {a['pr_q_start']:.2f} -> "
            f"{a['pr_q_end']:.2f}, PR_K {a['pr_k_start']:.2f} -> {a['pr_k_end']:.2f}. Second half of "
            f"training: PR_Q {a['slope_q_late_per_1k']:+.3g}/1k (expands in "
            f"{a['share_q_expands_late']:.0%}), PR_K {a['slope_k_late_per_1k']:+.3g}/1k (shrinks in "
            f"{a['share_k_shrinks_late']:.0%})."
        )
        sos = traj.get("share_over_steps")
        if sos:
            allr = sorted((r for r in sos if r["unit"] == "trajectory" and r["depth"] == "all"
                           and r["init"] == "all"), key=lambda r: r["step"])
            last = allr[-1]["step"]
            picks = sorted({min(allr, key=lambda r: abs(r["step"] - f * last))["step"]
                            for f in (0.25, 0.5, 0.75, 1.0)})
            at = ", ".join(f"{r['share']:.0%} [{r['ci_low']:.0%}, {r['ci_high']:.0%}] at step {r['step']}"
                           for r in allr if r["step"] in picks)
            peak = max(allr[1:] or allr, key=lambda r: r["share"])
            first = first_sustained_step(sos, 0.9)
            depths = sorted({r["depth"] for r in sos if r["depth"] != "all"})
            per_depth = "; ".join(
                f"depth {d}: " + ", ".join(
                    f"{r['share']:.0%}" for r in sorted((r for r in sos if r["unit"] == "trajectory"
                                                        and r["depth"] == d), key=lambda r: r["step"])
                    if r["step"] in picks)
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
        t = next((t for t in inter["tests"] if t["test"].startswith("entropy(shrink) < entropy(hold)")), None)
        if t is not None:
            ok = t["k_less"] >= 4 and t["n_seeds"] >= 5
            lines.append(
                f"Intervention: entropy(shrink) < entropy(hold) in {t['k_less']} of {t['n_untied']} "
                f"seeds (signs of shrink - hold: {t['signs']}; one-sided sign test p = {t['p_value']:.3g}; "
                f"mean difference {t['mean_diff']:+.4f})"
                + (untested + "(goal: >= 4 of 5 seeds)." if smoke else
                   " -> the paper's causal finding is " + ("reproduced (goal: >= 4 of 5 seeds)."
                   if ok else "NOT reproduced (goal: >= 4 of 5 seeds)."))
            )
        lo = next((t for t in inter["tests"] if t["test"].startswith("val_loss(shrink)")), None)
        if lo is not None:
            lines.append(f"Validation loss: shrink < hold in {lo['k_less']} of {lo['n_untied']} seeds "
                         f"(mean difference {lo['mean_diff']:+.4f} nats).")
    return lines


def run(
    quick: bool = False,
    device: str = "cpu",
    out_dir: Union[str, os.PathLike] = "benchmarks/results",
    progress: bool = True,
    parts: Sequence[str] = ("trajectories", "intervention", "overhead"),
    hf_models: Optional[Sequence[Union[str, os.PathLike]]] = None,
    hf_byte_fallback: bool = False,
    name: str = "qk_geometry",
    **overrides: Any,
) -> dict[str, Any]:
    """Run the study and write its tables, JSON lines and plots to ``out_dir``.

    Files (``<name>`` = ``qk_geometry``): ``<name>_trajectories.{csv,json,md}`` (per
    depth/init shares and slopes), ``<name>_records.jsonl`` (every probe record),
    ``<name>_trajectories.png``, ``<name>_prk_entropy.png``, ``<name>_intervention.*``,
    ``<name>_overhead.*``, ``<name>_hf.*`` and the report ``<name>.md``. Training runs live
    in ``out_dir/<name>_runs/<config hash>/<run>/`` (checkpoints; resumed or reused).

    Args:
        quick (bool): :data:`QUICK` instead of :data:`FULL`. (default: :obj:`False`)
        device (str): training device. (default: ``'cpu'``)
        out_dir (path): result folder. (default: ``'benchmarks/results'``)
        progress (bool): progress bars. (default: :obj:`True`)
        parts (sequence of str): any of ``'trajectories'``, ``'intervention'``,
            ``'overhead'``, ``'hf'``. (default: the first three)
        hf_models (sequence of path, optional): checkpoint folders for ``'hf'`` (implies it).
            (default: :obj:`None`)
        hf_byte_fallback (bool): see :func:`hf_analysis`. (default: :obj:`False`)
        name (str): file stem. (default: ``'qk_geometry'``)
        **overrides: :class:`StudyConfig` fields (``depths``, ``inits``, ``seeds``,
            ``steps``, ``n_embd``...); :obj:`None` values are ignored.

    Returns:
        dict: ``trajectories``, ``intervention``, ``overhead``, ``hf`` (each a summary or
        :obj:`None`), ``markdown`` (the report) and ``summary`` (the findings, one line each).
    """
    known = {f.name for f in dataclasses.fields(StudyConfig)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise TypeError(f"qk_geometry.run: unknown overrides {unknown}; expected StudyConfig fields")
    cfg = (QUICK if quick else FULL).replace(**overrides)
    parts = list(parts)
    if hf_models:
        parts = list(dict.fromkeys(parts + ["hf"]))
    bad = [p for p in parts if p not in ("trajectories", "intervention", "overhead", "hf")]
    if bad:
        raise ValueError(f"qk_geometry.run: unknown parts {bad}")
    if "hf" in parts and not hf_models:
        raise ValueError("qk_geometry.run: part 'hf' needs hf_models (checkpoint folders)")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    run_root = out / f"{name}_runs" / cfg.run_tag()
    meta = _cfg_meta(cfg, quick, device)
    md: list[str] = [f"## Query/key geometry study ({'quick' if quick else 'full'} configuration)\n"]
    traj = inter = over = hf = None
    traj_results: list = []
    if "trajectories" in parts:
        traj_results = run_trajectories(cfg, run_root, device, progress)
        records = [r for res in traj_results for r in res["records"]]
        with open(out / f"{name}_records.jsonl", "w", encoding="utf-8") as f:
            for r in records:
                f.write(json.dumps({k: v for k, v in r.items() if not k.endswith("_heads")}) + "\n")
        traj = trajectory_summary(records)
        for row in traj["rows"]:
            losses = [res["final"].get("val_loss") for res in traj_results
                      if row["depth"] in ("all", res["meta"]["depth"]) and row["init"] in ("all", res["meta"]["init"])]
            row["val_loss"] = float(np.mean([v for v in losses if v is not None]))
        cols = ["depth", "init", "trajectories", "share_end", "share_throughout", "run_share_end",
                "run_share_throughout", "pr_q_start", "pr_q_end", "pr_k_start", "pr_k_end",
                "slope_q_per_1k", "slope_k_per_1k", "share_q_expands", "share_k_shrinks",
                "slope_q_late_per_1k", "slope_k_late_per_1k", "share_q_expands_late",
                "share_k_shrinks_late", "entropy_end", "val_loss"]
        p = write_results(f"{name}_trajectories", traj["rows"], out, meta=meta, columns=cols,
                          title="PR_Q - PR_K over training, per depth and initialisation",
                          notes=_TRAJ_NOTES)
        write_results(f"{name}_correlations", traj["correlations"], out, meta=meta,
                      title="PR_K vs attention entropy and QK^T effective rank (Spearman)")
        traj["share_over_steps"] = share_over_steps(traj)
        ps = write_results(f"{name}_share_over_steps", traj["share_over_steps"], out, meta=meta,
                           columns=["unit", "depth", "init", "step", "k", "n", "share", "ci_low",
                                    "ci_high", "mean_diff"],
                           title="Share of trajectories with PR_Q - PR_K > 0 at each probed step",
                           notes=_SHARE_NOTES)
        plot_trajectories(traj, out / f"{name}_trajectories.png")
        plot_diff(traj, out / f"{name}_diff.png")
        plot_prk_entropy(records, out / f"{name}_prk_entropy.png")
        plot_share_over_steps(traj["share_over_steps"], out / f"{name}_share_over_steps.png",
                              title=f"Share of trajectories with PR_Q > PR_K (width {cfg.n_embd}, "
                                    f"{cfg.steps} steps)")
        md += [p["md"].read_text(), "\n", markdown_table(traj["correlations"]),
               f"\n![PR_Q - PR_K]({name}_diff.png)\n\n![share over steps]({name}_share_over_steps.png)"
               f"\n\n![trajectories]({name}_trajectories.png)\n\n![PR_K vs entropy]({name}_prk_entropy.png)\n",
               "\n" + _share_milestones_table(traj["share_over_steps"]) + "\n"]
    if "intervention" in parts:
        inter_results = run_intervention(cfg, run_root, device, progress)
        inter = intervention_summary(inter_results)
        p1 = write_results(f"{name}_intervention", inter["rows"], out, meta=meta,
                           columns=["mode", "seeds", "entropy", "entropy_std", "val_loss", "val_loss_std",
                                    "pr_k", "pr_q", "pr_wk", "qk_erank"],
                           title=f"Key-spectrum control at depth {cfg.intervention_depth} "
                                 f"({cfg.intervention_init} init), end of training",
                           notes=_INTER_NOTES.format(decay=cfg.shrink_decay))
        tests = [{k: (str(v) if isinstance(v, list) else v) for k, v in t.items()} for t in inter["tests"]]
        p2 = write_results(f"{name}_intervention_tests", tests, out, meta=meta,
                           columns=["test", "seeds", "n_untied", "k_less", "share_less", "p_value",
                                    "signs", "mean_diff"],
                           title="Directional probability across seeds (one-sided sign test)")
        write_results(f"{name}_intervention_seeds", inter["per_seed"], out, meta=meta,
                      columns=["seed", "mode", "step", "entropy", "val_loss", "pr_k", "pr_q", "pr_wk",
                               "qk_erank"], title="Intervention: per-seed end values")
        plot_intervention(inter_results, out / f"{name}_intervention.png")
        md += [p1["md"].read_text(), "\n", p2["md"].read_text(),
               "\n", markdown_table(inter["per_seed"]),
               f"\n![intervention]({name}_intervention.png)\n"]
    if "overhead" in parts:
        over = measure_overhead(cfg, device, progress, cache=run_root / "overhead.json")
        row = {k: v for k, v in over.items() if not k.startswith(("times_", "walls_"))}
        p = write_results(f"{name}_overhead", [row], out,
                          meta={**meta, **{k: v for k, v in over.items() if k.startswith(("times_", "walls_"))}},
                          title="Training-time overhead of probing (target < 10%)",
                          notes="Median of alternating repeats; same model, data and seed with and "
                                "without an EveryNSteps(QKProbe) callback; no files written. "
                                "`overhead_pct` compares the process CPU time (on CPU), robust to the "
                                "other work sharing the cores; `overhead_wall_pct` compares wall "
                                "clock; `probe_share_pct` is the time spent inside the probes.")
        md += [p["md"].read_text()]
    if "hf" in parts:
        hf = hf_analysis(hf_models, byte_fallback=hf_byte_fallback, corpus=cfg.corpus,
                         progress=progress, device=device)
        p = write_results(f"{name}_hf", hf["rows"], out, meta={"device": str(device)},
                          columns=["checkpoint", "step", "step_from", "tokenizer", "layer", "pr_q", "pr_k",
                                   "pr_q_minus_pr_k", "qk_effective_rank", "attention_entropy"],
                          title="Pretrained checkpoints: per-layer query/key geometry")
        p2 = write_results(f"{name}_hf_pivot", hf["pivot"], out, meta={"device": str(device)},
                           title="PR_Q - PR_K per layer (rows) against training step (columns)")
        plot_hf(hf, out / f"{name}_hf.png")
        md += [p2["md"].read_text(), "\n", p["md"].read_text(), "\n", markdown_table(hf["correlations"]),
               f"\n![hf]({name}_hf.png)\n"]
    summary = _findings(traj, inter, smoke=quick)
    if over is not None:
        share = over["probe_share_pct"]
        summary.append(
            f"Overhead of probing every {over['probe_every']} steps: the probes take {share:.1f}% of the "
            f"probed run ({over['ms_per_probe']:.0f} ms per probe vs {over['ms_per_step']:.0f} ms per "
            f"training step, {over.get('clock', 'wall clock')}) -> "
            + ("within" if share < 10 else "ABOVE") + " the 10% target. End-to-end difference "
            f"probed - plain: {over['overhead_pct']:+.1f}% ({over.get('clock', 'wall clock')}), "
            f"{over.get('overhead_wall_pct', over['overhead_pct']):+.1f}% wall clock: on cores shared "
            "with other work this difference is dominated by scheduling noise."
        )
    report = md[:1] + ["### Findings\n", "\n".join(f"- {s}" for s in summary) + "\n",
                       _config_notes(cfg, quick)] + md[1:]
    markdown = "\n".join(report)
    if {"trajectories", "intervention", "overhead"} & set(parts):
        (out / f"{name}.md").write_text(markdown, encoding="utf-8")
    return {"config": cfg, "trajectories": traj, "intervention": inter, "overhead": over, "hf": hf,
            "markdown": markdown, "summary": summary, "run_root": run_root}


_TRAJ_NOTES = """\
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

_SHARE_NOTES = """\
`k` of `n` trajectories have PR_Q - PR_K > 0 at that step; `ci_low`/`ci_high`: exact
(Clopper-Pearson) 95% interval of the share, treating trajectories as independent (layers of
one model are not, so the true uncertainty is larger). `unit`: seed-averaged trajectories per
group (`depth`, `init`; `all` = every one) or the individual runs' layers (no seed averaging).
`mean_diff`: mean PR_Q - PR_K over the group."""


def _share_milestones_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The share at a few steps (a quarter, half, three quarters and the end of training)
    per group, plus the first step from which it stays >= 90%."""
    groups = []
    for r in rows:
        g = (r["unit"], r["depth"], r["init"])
        if g not in groups:
            groups.append(g)
    steps = sorted({r["step"] for r in rows})
    if not steps:
        return ""
    last = steps[-1]
    marks = sorted({min(steps, key=lambda s: abs(s - f * last)) for f in (0.25, 0.5, 0.75, 1.0)})
    table = []
    for unit, depth, init in groups:
        sel = {r["step"]: r for r in rows if (r["unit"], r["depth"], r["init"]) == (unit, depth, init)}
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


_INTER_NOTES = """\
`KeySpectrumControl` after every optimiser step, per head: `hold` keeps the shape of the
initial W_K spectrum, `shrink` multiplies singular value k by exp(-{decay} k / (r - 1))
each step; both keep ||W_K||_F. `none` is unconstrained training. Values are means over
seeds (std across seeds) of the layer-mean end values: normalised attention entropy,
validation loss (nats/char), PR of the keys (activations) and of W_K's spectrum."""


def _config_notes(cfg: StudyConfig, quick: bool) -> str:
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
        f"{list(cfg.intervention_seeds)}. The paper used four seeds and far larger models and data; "
        + ("this is the --quick configuration (one seed, tiny width, few steps), a smoke test "
           "of the pipeline rather than a measurement.\n" if quick else
           f"this is a configuration two CPU cores can train in about "
           f"{'an hour' if cfg.steps <= 600 else 'two hours'}.\n")
    )


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    """Command-line entry of ``benchmarks/qk_geometry.py``."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small CPU configuration (~10 min)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--parts", nargs="+", default=None,
                        choices=["trajectories", "intervention", "overhead", "hf"],
                        help="which parts to run (default: trajectories intervention overhead; "
                             "only hf when --hf-model is given)")
    parser.add_argument("--hf-model", nargs="+", default=None, metavar="PATH",
                        help="local Hugging Face checkpoint folders (e.g. Pythia revisions)")
    parser.add_argument("--hf-byte-fallback", action="store_true",
                        help="probe folders without a tokenizer on UTF-8 byte ids (pipeline test only)")
    parser.add_argument("--depths", type=int, nargs="+", default=None)
    parser.add_argument("--inits", nargs="+", default=None)
    parser.add_argument("--seeds", type=int, nargs="+", default=None)
    parser.add_argument("--intervention-seeds", type=int, nargs="+", default=None)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--n-embd", type=int, default=None)
    parser.add_argument("--n-head", type=int, default=None)
    parser.add_argument("--block-size", type=int, default=None)
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--probe-every", type=int, default=None)
    parser.add_argument("--corpus", default=None, help="CharCorpus source (file or WikiText-103 dir)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads (1 is fastest for these tiny models on shared cores)")
    parser.add_argument("--name", default="qk_geometry",
                        help="file stem of the results and of the run folder <out>/<name>_runs "
                             "(default: qk_geometry)")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    parts = args.parts or (["hf"] if args.hf_model else ["trajectories", "intervention", "overhead"])
    result = run(quick=args.quick, device=args.device, out_dir=args.out, progress=not args.no_progress,
                 parts=parts, hf_models=args.hf_model, hf_byte_fallback=args.hf_byte_fallback,
                 name=args.name,
                 depths=tuple(args.depths) if args.depths else None,
                 inits=tuple(args.inits) if args.inits else None,
                 seeds=tuple(args.seeds) if args.seeds else None,
                 intervention_seeds=tuple(args.intervention_seeds) if args.intervention_seeds else None,
                 steps=args.steps, n_embd=args.n_embd, n_head=args.n_head, block_size=args.block_size,
                 batch_size=args.batch_size, probe_every=args.probe_every, corpus=args.corpus)
    print(result["markdown"])
    return result
