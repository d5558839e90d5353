"""Training runs of the query/key geometry trajectories: one resumable run per (depth, init,
seed) with its probe callback, and the trajectory grid (the study's key-spectrum control and
probing overhead build on these in ``benchmarks/qk_geometry/runs.py``)."""
from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence, Union

import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from quest_geometric._utils import atomic_write_json, check_choice
from quest_geometric.analysis.probe import probe_model
from quest_geometric.analysis.spectral_control import spectrum_participation_ratio
from benchmarks.qk_geometry.trajectories.config import INITS, METRIC_KEYS, StudyConfig
from quest_geometric.training.config import TrainConfig
from quest_geometric.training.seed import seed_everything
from quest_geometric.training.tasks import LanguageModelTask
from quest_geometric.training.trainer import Callback, EveryNSteps, Trainer


def load_corpus(cfg: StudyConfig):
    """The :class:`~quest_geometric.datasets.char_corpus.CharCorpus` of ``cfg`` (its
    ``corpus`` source, in blocks of ``block_size`` characters)."""
    from quest_geometric.datasets.char_corpus import CharCorpus

    return CharCorpus(cfg.corpus, block_size=cfg.block_size)


def probe_batch(corpus: Any, cfg: StudyConfig) -> tuple[Tensor, Tensor]:
    """The fixed probe batch: ``probe_batch_size`` blocks of the validation split (seed 1234)."""
    return corpus.get_batch("val", cfg.probe_batch_size,
                            generator=torch.Generator().manual_seed(1234))


def _check_depth_init(depth: Any, init: Any) -> None:
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ValueError("qk_geometry: depth must be a positive int (number of layers), got "
                         f"{depth!r}")
    check_choice(init, "init", INITS, where="qk_geometry")


def build_model(cfg: StudyConfig, depth: int, init: str, seed: int, vocab_size: int) -> nn.Module:
    """A :class:`~quest_geometric.models.char_gpt.CharGPT` of ``depth`` layers with the
    query/key initialisation ``init``, its weights drawn after seeding with ``seed``."""
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
        for key in METRIC_KEYS:
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


class ProbeCallback(EveryNSteps):
    """Probe every ``every`` steps, at step 0 and at the last step; append to a JSONL file.

    Args:
        batch (tuple of Tensor): the fixed probe batch (:func:`probe_batch`).
        every (int): steps between probes.
        path (path, optional): the JSONL file the records are appended to; :obj:`None`
            writes nothing.
        meta (dict): fields copied into every record (``run``, ``depth``...).
        max_tokens (int): query tokens for the ranks and the entropy. (default: ``512``)
        sink (list, optional): where the records are also collected (default: a new list).
    """

    def __init__(self, batch: tuple[Tensor, Tensor], every: int, path: Optional[Path],
                 meta: Mapping[str, Any], max_tokens: int = 512,
                 sink: Optional[list] = None) -> None:
        super().__init__(self.probe, every=every, at_start=True)
        self.batch, self.path, self.meta, self.max_tokens = batch, path, dict(meta), max_tokens
        self.sink = sink if sink is not None else []

    def probe(self, trainer: Trainer, step: int) -> None:
        """Probe the trainer's model on the fixed batch and record one row per layer."""
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

    def on_step_end(self, trainer: Trainer, step: int, metrics: dict[str, Any]) -> None:
        if step % self.every == 0 or step == trainer.total_steps:
            self.fn(trainer, step)


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


def train_run(cfg: StudyConfig, depth: int, init: str, seed: int,
              run_root: Optional[Union[str, os.PathLike]] = None, device: str = "cpu",
              progress: bool = False, corpus: Any = None, mode: str = "none",
              callbacks: Optional[Callable[[nn.Module], Sequence[Callback]]] = None
              ) -> dict[str, Any]:
    """Train one CharGPT with periodic probes (resuming or reusing its run folder).

    Args:
        cfg (StudyConfig): the sizes.
        depth (int): number of layers.
        init (str): ``'independent'``, ``'tied'`` or ``'orthogonal'``.
        seed (int): model-init and training seed.
        run_root (path, optional): parent of the run folder; :obj:`None` keeps nothing on
            disk. (default: :obj:`None`)
        device (str): training device. (default: ``'cpu'``)
        progress (bool): the harness's progress bar. (default: :obj:`False`)
        corpus (CharCorpus, optional): reuse a loaded corpus. (default: :obj:`None`)
        mode (str): the run's name for how it trains, in its folder
            ``L<depth>_<init>_<mode>_s<seed>`` and its records; ``'none'`` is plain
            (unconstrained) training. (default: ``'none'``)
        callbacks (callable, optional): ``callbacks(model)`` gives further trainer callbacks
            built on the fresh model, run before the probe (the study's key-spectrum control
            in ``benchmarks/qk_geometry``). (default: :obj:`None`)

    Returns:
        dict: ``meta`` (depth, init, mode, seed, run), ``final`` (the trainer's final record:
        ``val_loss``...), ``records`` (probe rows, one per step and layer), ``seconds``.
    """
    _check_depth_init(depth, init)
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
    corpus = corpus if corpus is not None else load_corpus(cfg)
    model = build_model(cfg, depth, init, seed, corpus.vocab_size)
    extra = list(callbacks(model)) if callbacks is not None else []
    probe_path = run_dir / "probe.jsonl" if run_dir is not None else None
    resuming = run_dir is not None and (run_dir / "checkpoint.pt").exists()
    if probe_path is not None and not resuming and probe_path.exists():
        probe_path.unlink()
    probe_cb = ProbeCallback(probe_batch(corpus, cfg), cfg.probe_every, probe_path, meta,
                             cfg.probe_max_tokens)
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
                      callbacks=[*extra, probe_cb])
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
    corpus = load_corpus(cfg)
    grid = [(d, i, s) for d in cfg.depths for i in cfg.inits for s in cfg.seeds]
    return [train_run(cfg, d, i, s, run_root, device, False, corpus)
            for d, i, s in tqdm(grid, desc="trajectory runs", disable=not progress)]
