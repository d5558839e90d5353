"""Training runs of the whole query/key geometry study: the pipeline's
:func:`~benchmarks.qk_geometry.trajectories.runs.train_run` with the key-spectrum control
(modes ``'none'``, ``'hold'``, ``'shrink'``), the intervention runs and the probing overhead."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from benchmarks.qk_geometry.config import MODES, StudyConfig
from quest_geometric._utils import atomic_write_json, check_choice
from quest_geometric.analysis.spectral_control import KeySpectrumControl
from benchmarks.qk_geometry.trajectories import runs as pipeline
from benchmarks.qk_geometry.trajectories.runs import (ProbeCallback, build_model, load_corpus,
                                                        probe_batch)
from quest_geometric.training.config import TrainConfig
from quest_geometric.training.tasks import LanguageModelTask
from quest_geometric.training.trainer import Callback, Trainer


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


def train_run(cfg: StudyConfig, depth: int, init: str, seed: int, mode: str = "none",
              run_root: Optional[Union[str, os.PathLike]] = None, device: str = "cpu",
              progress: bool = False, corpus: Any = None) -> dict[str, Any]:
    """Train one CharGPT with periodic probes (resuming or reusing its run folder), under a
    key-spectrum control: :func:`~benchmarks.qk_geometry.trajectories.runs.train_run` with
    a :class:`KeySpectrumControl` applied after every optimiser step when ``mode`` is not
    ``'none'``.

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
    check_choice(mode, "mode", MODES, where="qk_geometry")

    def control(model: nn.Module) -> list[Callback]:
        return [_SpectrumControlCallback(KeySpectrumControl(
            model, mode=mode, per_head=cfg.control_per_head, decay=cfg.shrink_decay))]

    return pipeline.train_run(cfg, depth, init, seed, run_root, device, progress, corpus,
                              mode=mode, callbacks=control if mode != "none" else None)


def run_intervention(cfg: StudyConfig, run_root: Optional[Union[str, os.PathLike]] = None,
                     device: str = "cpu", progress: bool = True) -> list[dict[str, Any]]:
    """Train ``none``/``hold``/``shrink`` runs over ``cfg.intervention_seeds``."""
    corpus = load_corpus(cfg)
    # controlled runs first: the unconstrained ones may be shared with the trajectory grid
    grid = [(m, s) for m in ("hold", "shrink", "none") for s in cfg.intervention_seeds]
    return [train_run(cfg, cfg.intervention_depth, cfg.intervention_init, s, m, run_root,
                      device, False, corpus)
            for m, s in tqdm(grid, desc="intervention runs", disable=not progress)]


class TimedProbeCallback(ProbeCallback):
    """A :class:`~benchmarks.qk_geometry.trajectories.runs.ProbeCallback` that counts its
    probes (``calls``) and the wall-clock (``seconds``) and process CPU time
    (``cpu_seconds``) they take."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seconds, self.cpu_seconds, self.calls = 0.0, 0.0, 0

    def probe(self, trainer: Trainer, step: int) -> None:
        t0, c0 = time.perf_counter(), time.process_time()
        super().probe(trainer, step)
        self.seconds += time.perf_counter() - t0
        self.cpu_seconds += time.process_time() - c0
        self.calls += 1


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
    corpus = load_corpus(cfg)
    batch = probe_batch(corpus, cfg)
    on_cpu = torch.device(device).type == "cpu"
    clock = time.process_time if on_cpu else time.perf_counter
    times: dict[str, list[float]] = {"plain": [], "probed": []}
    walls: dict[str, list[float]] = {"plain": [], "probed": []}
    probe_secs, probes = [], 0
    for _ in tqdm(range(cfg.overhead_repeats), desc="overhead", disable=not progress):
        for variant in ("plain", "probed"):
            model = build_model(cfg, cfg.overhead_depth, "independent", 0, corpus.vocab_size)
            cbs: list[Callback] = []
            if variant == "probed":
                cb = TimedProbeCallback(batch, cfg.overhead_probe_every, None,
                                        {"run": "overhead"}, cfg.probe_max_tokens)
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
