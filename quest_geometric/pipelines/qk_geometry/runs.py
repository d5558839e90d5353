"""Training runs of the query/key geometry study: one resumable run per (depth, init, mode,
seed) with its probe and spectrum-control callbacks, the trajectory grid, the intervention
runs and the probing overhead."""
from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from pathlib import Path
from typing import Any, Mapping, Optional, Union

import numpy as np
import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from quest_geometric._utils import atomic_write_json, check_choice
from quest_geometric.analysis.probe import probe_model
from quest_geometric.analysis.spectral_control import (KeySpectrumControl,
                                                       spectrum_participation_ratio)
from quest_geometric.pipelines.qk_geometry.config import _METRIC_KEYS, INITS, MODES, StudyConfig
from quest_geometric.training.config import TrainConfig
from quest_geometric.training.seed import seed_everything
from quest_geometric.training.tasks import LanguageModelTask
from quest_geometric.training.trainer import Callback, EveryNSteps, Trainer


def _corpus(cfg: StudyConfig):
    from quest_geometric.datasets.char_corpus import CharCorpus

    return CharCorpus(cfg.corpus, block_size=cfg.block_size)


def _probe_batch(corpus: Any, cfg: StudyConfig) -> tuple[Tensor, Tensor]:
    """The fixed probe batch: ``probe_batch_size`` blocks of the validation split (seed 1234)."""
    return corpus.get_batch("val", cfg.probe_batch_size,
                            generator=torch.Generator().manual_seed(1234))


def _check_depth_init(depth: Any, init: Any) -> None:
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ValueError("qk_geometry: depth must be a positive int (number of layers), got "
                         f"{depth!r}")
    check_choice(init, "init", INITS, where="qk_geometry")


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
        w, h = block.attn.k_proj.weight.detach().double(), block.attn.n_head
        s = torch.linalg.svdvals(w.view(h, w.size(0) // h, w.size(1)))
        out.append(float(spectrum_participation_ratio(s).mean()))
    return out


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
                 meta: Mapping[str, Any], max_tokens: int = 512,
                 sink: Optional[list] = None) -> None:
        super().__init__(self._probe, every=every, at_start=True)
        self.batch, self.path, self.meta, self.max_tokens = batch, path, dict(meta), max_tokens
        self.sink = sink if sink is not None else []
        self.seconds, self.cpu_seconds, self.calls = 0.0, 0.0, 0

    def _probe(self, trainer: Trainer, step: int) -> None:
        t0, c0 = time.perf_counter(), time.process_time()
        model = trainer.raw_model
        layers, heads, loss = probe_model(model, tuple(t.to(trainer.device) for t in self.batch),
                                          self.max_tokens)
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
    """Applies a :class:`KeySpectrumControl` after every optimiser step (state kept in
    checkpoints)."""

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


def train_run(cfg: StudyConfig, depth: int, init: str, seed: int, mode: str = "none",
              run_root: Optional[Union[str, os.PathLike]] = None, device: str = "cpu",
              progress: bool = False, corpus: Any = None) -> dict[str, Any]:
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
    check_choice(mode, "mode", MODES, where="qk_geometry")
    name = f"L{depth}_{init}_{mode}_s{seed}"
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
        atomic_write_json(run_dir / "run.json", {"config": dataclasses.asdict(cfg), "meta": meta,
                                                 "final": final, "seconds": seconds},
                          default=list)
    return {"meta": meta, "final": final, "records": records, "seconds": seconds}


def run_trajectories(cfg: StudyConfig, run_root: Optional[Union[str, os.PathLike]] = None,
                     device: str = "cpu", progress: bool = True) -> list[dict[str, Any]]:
    """Train the depth x init x seed grid; return one :func:`train_run` result per run."""
    corpus = _corpus(cfg)
    grid = [(d, i, s) for d in cfg.depths for i in cfg.inits for s in cfg.seeds]
    return [train_run(cfg, d, i, s, "none", run_root, device, False, corpus)
            for d, i, s in tqdm(grid, desc="trajectory runs", disable=not progress)]


def run_intervention(cfg: StudyConfig, run_root: Optional[Union[str, os.PathLike]] = None,
                     device: str = "cpu", progress: bool = True) -> list[dict[str, Any]]:
    """Train ``none``/``hold``/``shrink`` runs over ``cfg.intervention_seeds``."""
    corpus = _corpus(cfg)
    # controlled runs first: the unconstrained ones may be shared with the trajectory grid
    grid = [(m, s) for m in ("hold", "shrink", "none") for s in cfg.intervention_seeds]
    return [train_run(cfg, cfg.intervention_depth, cfg.intervention_init, s, m, run_root,
                      device, False, corpus)
            for m, s in tqdm(grid, desc="intervention runs", disable=not progress)]


def measure_overhead(cfg: StudyConfig, device: str = "cpu", progress: bool = False,
                     cache: Optional[Union[str, os.PathLike]] = None) -> dict[str, Any]:
    """Training time with a probe every ``cfg.overhead_probe_every`` steps vs without.

    The two variants train the same model (depth ``cfg.overhead_depth``, seed 0) for
    ``cfg.overhead_steps`` steps without writing files, alternating
    ``cfg.overhead_repeats`` times so that drifts of a shared machine hit both; the medians
    are compared. On CPU the comparison uses the process CPU time, since on shared cores
    wall-clock differences are scheduling noise; the wall-clock overhead is reported beside
    it (``overhead_wall_pct``). On CUDA both are wall clock.

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
    result = {"depth": cfg.overhead_depth, "steps": cfg.overhead_steps,
              "probe_every": cfg.overhead_probe_every, "probes": probes,
              "clock": "process CPU time" if on_cpu else "wall clock", "seconds_plain": plain,
              "seconds_probed": probed, "overhead_pct": 100.0 * (probed - plain) / plain,
              "ms_per_step": 1e3 * plain / cfg.overhead_steps,
              "ms_per_probe": 1e3 * float(np.median(probe_secs)) / max(probes, 1),
              "probe_share_pct": 100.0 * float(np.median(probe_secs)) / probed,
              "wall_plain": wplain, "wall_probed": wprobed,
              "overhead_wall_pct": 100.0 * (wprobed - wplain) / wplain,
              "times_plain": times["plain"], "times_probed": times["probed"],
              "walls_plain": walls["plain"], "walls_probed": walls["probed"]}
    if cache is not None:
        atomic_write_json(cache, result)
    return result
