"""Does Focus keep language-model quality? Character-level bits per character.

Three models on the same corpus (the embedded Python reference by default, ``--data`` for a
text file or a WikiText-103 raw directory), trained with the shared
:class:`~quest_geometric.training.trainer.Trainer`:

(a) a full-attention :class:`~quest_geometric.models.char_gpt.CharGPT`;
(b) the same with :class:`~quest_geometric.nn.focus.module.FocusAttention` trained from
    scratch (soft gates in training);
(c) model (a) frozen, with Focus routers composed onto it
    (:func:`~quest_geometric.nn.focus.compose.compose_focus`) and only the routers trained.

(b) and (c) are trained once per soft gate (the paper's ``'multiplicative'`` gate and our
``'additive'`` log-sigmoid relaxation) and evaluated soft and hard at top-k = 1, 2 and K on
the same validation batches; the soft-hard gap at the training top-k measures how far soft
training and hard inference disagree. A run folder holding a checkpoint of the same setting
is resumed or reloaded instead of retrained (``--no-reuse`` retrains).

    python -m benchmarks.focus.lm [--quick] [--data PATH] [--gates additive multiplicative]

(``--quick`` for a few-minute smoke run; ``--rewrite JSON`` renders a committed table again
from its results file, training nothing.)
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import json
import math
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

import torch
from torch import nn

from quest_geometric._utils import atomic_write_text
from quest_geometric.profile import write_results

GATES = ("additive", "multiplicative")
SETUP_NAME = "focus_lm_setup.json"
COLUMNS = ["model", "gate", "mode", "top_k", "val_bpc", "rel_to_full", "balance", "pair_fraction",
           "trainable_params", "train_steps", "train_s"]
#: How the markdown table shows a stored column (the CSV and JSON files keep the fraction
#: ``rel_to_full`` = val_bpc / val_bpc of (a) - 1): as the signed percentage the summary quotes.
DISPLAY = {"rel_to_full": ("vs full (%)", lambda v: f"{100 * v:+.2f}")}


@dataclass
class LMConfig:
    """The settings of one run of this experiment (stored with the results); the default is
    sized for a two-core CPU. The targets of the summary refer to the ``'additive'`` rows
    (to the first gate of ``gates`` when it is absent)."""

    block_size: int = 128
    n_layer: int = 3
    n_head: int = 4
    n_embd: int = 96
    num_groups: int = 4
    top_k: int = 2
    window: int = 32
    group_dim: int = 16
    gates: tuple[str, ...] = GATES
    batch_size: int = 16
    steps_full: int = 600
    steps_focus: int = 600
    steps_router: int = 200
    lr: float = 2e-3
    router_lr: float = 3e-3
    eval_batches: int = 16
    seed: int = 0

    @classmethod
    def quick(cls) -> "LMConfig":
        """A few-minute smoke setting."""
        return cls(block_size=64, n_layer=2, n_head=2, n_embd=48, window=16, batch_size=8,
                   steps_full=60, steps_focus=60, steps_router=30, eval_batches=4)


def _focus_modules(model: nn.Module) -> list[nn.Module]:
    from quest_geometric.nn.focus import FocusAttention

    return [m for m in model.modules() if isinstance(m, FocusAttention)]


@contextlib.contextmanager
def _mode(model: nn.Module, soft: bool, top_k: Optional[int]) -> Iterator[None]:
    """Evaluate ``model`` (eval mode) with Focus soft (gated, all pairs) or hard at ``top_k``."""
    from quest_geometric.nn.focus import set_focus_options

    layers = _focus_modules(model)
    old_k = [f.router.top_k for f in layers]
    model.eval()
    try:
        if top_k is not None:
            set_focus_options(model, top_k=top_k)
        for f in layers:
            f.train(soft)  # FocusAttention picks soft gates in training mode
        yield
    finally:
        for f, k in zip(layers, old_k):
            f.top_k = f.router.top_k = k
        model.eval()


@torch.no_grad()
def evaluate(model: nn.Module, batches: list, window: int, num_groups: int) -> dict[str, float]:
    """Bits per character over ``batches``, and (for Focus models) the mean largest group
    share and the mean fraction of causal pairs the hard pattern keeps."""
    from quest_geometric.nn.focus import FocusRouter, focus_pair_share, group_balance

    captured: list[torch.Tensor] = []
    shape: list[int] = []
    hooks = [m.register_forward_hook(
        lambda _m, _i, out: captured.append(out.groups.reshape(*shape, -1)))
        for m in model.modules() if isinstance(m, FocusRouter)]
    nll, count = 0.0, 0
    try:
        for x, y in batches:
            shape[:] = list(x.shape)  # routers may see [B * T, C] with a batch vector
            _, loss = model(x, y)
            nll += float(loss) * y.numel()
            count += y.numel()
    finally:
        for h in hooks:
            h.remove()
    out = {"val_bpc": nll / count / math.log(2.0), "balance": math.nan, "pair_fraction": math.nan}
    if captured:
        out["balance"] = float(torch.stack([group_balance(g, num_groups) for g in captured])
                               .mean())
        fr = []
        for g in captured:  # [B, T, k]: B sequences of T tokens
            seq = torch.arange(g.size(0)).repeat_interleave(g.size(1))
            fr.append(focus_pair_share(g.reshape(-1, g.size(-1)), window, seq))
        out["pair_fraction"] = sum(fr) / len(fr)
    return out


def _checked_gates(gates: Sequence[str] | str) -> tuple[str, ...]:
    if isinstance(gates, str):
        gates = (gates,)
    gates = tuple(gates)
    if not gates or any(g not in GATES for g in gates) or len(set(gates)) != len(gates):
        raise ValueError(f"'gates' must be a non-empty sequence of distinct values from "
                         f"{GATES}, got {gates!r}")
    return gates


def _reusable(model: nn.Module, tc: Any, run_dir: Path, setup: dict[str, Any]
              ) -> tuple[bool, Optional[float]]:
    """Whether ``run_dir`` holds a checkpoint of this very setting (its setup file equals
    ``setup``; without the file, the checkpoint's training configuration and weight shapes
    match), and the training seconds stored for it when that run finished."""
    from quest_geometric.training.checkpoint import CheckpointError, read_checkpoint
    from quest_geometric.training.config import TrainConfig

    ckpt = run_dir / "checkpoint.pt"
    if not ckpt.is_file():
        return False, None
    rec = run_dir / SETUP_NAME
    if rec.is_file():
        try:
            stored = json.loads(rec.read_text())
        except (OSError, ValueError):
            return False, None
        if stored.get("setup") != setup:
            return False, None
        return True, stored.get("train_s")
    try:
        payload = read_checkpoint(ckpt)
        saved = TrainConfig.from_dict(payload["config"])
        if tc.trajectory_diff(saved) or saved.max_steps != tc.max_steps:
            return False, None
    except (CheckpointError, KeyError, TypeError, ValueError):
        return False, None
    mine = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    if mine != {k: tuple(v.shape) for k, v in payload["model"].items()}:
        return False, None
    history = payload.get("history") or [{}]
    done = int(payload.get("step", 0)) >= tc.max_steps
    return True, (history[-1].get("time_s") if done else None)


def _train(model: nn.Module, corpus: Any, steps: int, lr: float, cfg: LMConfig, run_dir: Path,
           progress: bool, device: str, setup: dict[str, Any], reuse: bool = True,
           label: Optional[str] = None) -> tuple[float, bool]:
    """Train ``model`` with its checkpoint and metrics in ``run_dir``, resuming a checkpoint
    of the same ``setup`` when ``reuse`` (else a stale one is removed); ``label`` names the
    progress bar. Returns the training seconds (those stored, for a reloaded finished run)
    and whether a checkpoint was reused."""
    from quest_geometric.training.config import TrainConfig
    from quest_geometric.training.tasks import LanguageModelTask
    from quest_geometric.training.trainer import Trainer

    tc = TrainConfig(max_steps=steps, batch_size=cfg.batch_size, lr=lr, min_lr=lr / 10,
                     warmup_steps=max(1, steps // 20), grad_clip=1.0, weight_decay=0.01,
                     eval_every=0, eval_batches=cfg.eval_batches, checkpoint_every=0,
                     log_every=max(1, steps // 20), out_dir=str(run_dir), progress=progress,
                     seed=cfg.seed, device=device, amp="off")
    setup = {**setup, "train": {k: v for k, v in tc.to_dict().items()
                                if k not in ("out_dir", "progress", "device")}}
    setup = json.loads(json.dumps(setup))  # tuples -> lists, as stored
    resumed, prior_s = _reusable(model, tc, run_dir, setup) if reuse else (False, None)
    run_dir.mkdir(parents=True, exist_ok=True)
    if not resumed and (run_dir / "checkpoint.pt").is_file():
        (run_dir / "checkpoint.pt").unlink()  # another setting's (or reuse is off)
    rec = run_dir / SETUP_NAME
    atomic_write_text(rec, json.dumps({"setup": setup, "train_s": prior_s}, indent=1))
    t0 = time.perf_counter()
    Trainer(model, LanguageModelTask(), tc, corpus.get_batch, corpus.get_batch).fit(
        resume=True if resumed else False, desc=label or run_dir.name)
    secs = prior_s if prior_s is not None else time.perf_counter() - t0
    atomic_write_text(rec, json.dumps({"setup": setup, "train_s": secs}, indent=1))
    return secs, resumed


def run(quick: bool = False, device: str = "cpu", out_dir: str | Path = "benchmarks/focus/results",
        progress: bool = True, data: Optional[str] = None, run_dir: Optional[str | Path] = None,
        config: Optional[LMConfig] = None, name: str = "focus_lm", reuse: bool = True,
        **overrides: Any) -> dict[str, Any]:
    """Train (a), (b) and (c) (the latter two once per gate), evaluate them and write
    ``<name>.{csv,json,md}`` to ``out_dir``.

    Args:
        quick (bool): use :meth:`LMConfig.quick` (default: :obj:`False`).
        device (str): training device (default: ``'cpu'``).
        out_dir (str): result folder (default: ``'benchmarks/focus/results'``).
        progress (bool): progress bars (default: :obj:`True`).
        data (str, optional): a text file or WikiText-103 raw directory (default: the
            embedded Python reference).
        run_dir (str, optional): folder for checkpoints and metrics, one sub-folder per
            model and gate (default: ``runs/focus_lm``).
        config (LMConfig, optional): the full setting (default: :obj:`None`).
        name (str): file stem (default: ``'focus_lm'``).
        reuse (bool): resume (or just reload) a run sub-folder that holds a checkpoint of the
            same setting instead of retraining it (default: :obj:`True`).
        **overrides: :class:`LMConfig` fields to override (e.g. ``steps_full=5``,
            ``gates=('multiplicative',)``).

    Returns:
        dict: ``rows``, ``markdown``, ``summary`` (the targets; a smoke run, ``quick`` or
        fewer steps than the full setting, gives the numbers without verdicts),
        ``gate_summary`` (soft against hard per gate), ``config``, ``paths``.

    Raises:
        ValueError: ``gates`` is empty, repeats a gate or names an unknown one.
    """
    from quest_geometric.datasets.char_corpus import CharCorpus
    from quest_geometric.models.char_gpt import CharGPT, GPTConfig
    from quest_geometric.nn.focus import compose_focus
    from quest_geometric.training.seed import seed_everything

    cfg = config or (LMConfig.quick() if quick else LMConfig())
    cfg = replace(cfg, **overrides)
    cfg = replace(cfg, gates=_checked_gates(cfg.gates))
    run_dir = Path(run_dir or os.path.join("runs", name))
    out_dir = Path(out_dir)
    corpus = CharCorpus(data or "python-reference", block_size=cfg.block_size)
    gen = torch.Generator().manual_seed(cfg.seed + 12345)
    val = [corpus.get_batch("val", cfg.batch_size, generator=gen) for _ in range(cfg.eval_batches)]
    base = dict(vocab_size=corpus.vocab_size, block_size=cfg.block_size, n_layer=cfg.n_layer,
                n_head=cfg.n_head, n_embd=cfg.n_embd)
    focus_base = dict(num_groups=cfg.num_groups, top_k=cfg.top_k, window=cfg.window,
                      group_dim=cfg.group_dim)
    data_setup = {"data": corpus.source, "vocab_size": corpus.vocab_size}
    rows: list[dict[str, Any]] = []
    reused: list[str] = []
    K = cfg.num_groups
    ks = sorted({1, min(2, K), K})

    def trainable(m: nn.Module) -> int:
        return sum(p.numel() for p in m.parameters() if p.requires_grad)

    def train(model: nn.Module, steps: int, lr: float, sub: str, setup: dict[str, Any],
              reuse_ok: bool = True) -> float:
        label = {"a": "(a) full attention", "b": "(b) Focus from scratch",
                 "c": "(c) routers on frozen (a)"}[setup["model"]]
        if "focus" in setup:
            label += f", {setup['focus']['gate']} gate"
        secs, was = _train(model, corpus, steps, lr, cfg, run_dir / sub, progress, device,
                           {**data_setup, **setup}, reuse and reuse_ok, label=f"focus_lm {label}")
        if was:
            reused.append(sub)
        return secs

    # (a) full attention
    seed_everything(cfg.seed)
    full = CharGPT(GPTConfig(**base))
    n_full = trainable(full)
    t_a = train(full, cfg.steps_full, cfg.lr, "a_full", {"model": "a", "gpt": base})
    full = full.cpu().eval()
    ref = evaluate(full, val, cfg.window, K)["val_bpc"]
    rows.append({"model": "(a) full attention", "gate": "", "mode": "full", "top_k": "",
                 "val_bpc": ref, "balance": math.nan, "pair_fraction": 1.0,
                 "trainable_params": n_full, "train_steps": cfg.steps_full, "train_s": t_a})

    def focus_rows(model: nn.Module, label: str, gate: str, n_params: int, steps: int,
                   secs: float) -> None:
        for soft in (True, False):
            for k in ([cfg.top_k] if soft else ks):
                with _mode(model, soft, k):
                    r = evaluate(model, val, cfg.window, K)
                rows.append({"model": label, "gate": gate, "mode": "soft" if soft else "hard",
                             "top_k": k, **r, "trainable_params": n_params,
                             "train_steps": steps, "train_s": secs})
                if soft:
                    rows[-1]["pair_fraction"] = 1.0  # soft mode computes every pair

    for gate in cfg.gates:  # (b) Focus from scratch
        focus_kw = {**focus_base, "gate": gate}
        seed_everything(cfg.seed)
        scratch = CharGPT(GPTConfig(**base, attention="focus", focus=focus_kw))
        n_b = trainable(scratch)
        t_b = train(scratch, cfg.steps_focus, cfg.lr, f"b_focus_scratch_{gate}",
                    {"model": "b", "gpt": base, "focus": focus_kw})
        focus_rows(scratch.cpu(), "(b) Focus from scratch", gate, n_b, cfg.steps_focus, t_b)

    for gate in cfg.gates:  # (c) centroid-only composition on the frozen model (a)
        focus_kw = {**focus_base, "gate": gate}
        seed_everything(cfg.seed + 1)
        composed = compose_focus(copy.deepcopy(full), **focus_kw)
        n_c = trainable(composed)
        # reuse (c) only on top of a reused (a): a retrained base invalidates it
        t_c = train(composed, cfg.steps_router, cfg.router_lr, f"c_compose_routers_{gate}",
                    {"model": "c", "gpt": base, "focus": focus_kw,
                     "base_steps": cfg.steps_full, "base_lr": cfg.lr},
                    reuse_ok="a_full" in reused)
        focus_rows(composed.cpu(), "(c) routers on frozen (a)", gate, n_c, cfg.steps_router, t_c)

    for r in rows:
        r["rel_to_full"] = r["val_bpc"] / ref - 1.0

    meta = {"config": vars(cfg), "data": corpus.source, "vocab_size": corpus.vocab_size,
            "device": device, "quick": quick, "targets_tested": not _smoke(cfg, quick),
            "seeds": {"train": cfg.seed, "val_batches": cfg.seed + 12345, "compose": cfg.seed + 1},
            "run_dir": str(run_dir), "reused_runs": reused}
    return write_tables(rows, meta, name, out_dir)


def _smoke(cfg: LMConfig, quick: bool) -> bool:
    """Whether a run is a smoke run (``quick`` or fewer steps than the full setting): too
    short to test the targets, so it reports the numbers without verdicts."""
    return quick or cfg.steps_focus < LMConfig.steps_focus or cfg.steps_full < LMConfig.steps_full


def write_tables(rows: list[dict[str, Any]], meta: dict[str, Any], name: str, out_dir: Path
           ) -> dict[str, Any]:
    """Write the rows as ``<name>.{csv,json,md}`` with the targets and notes, all derived
    from the rows and ``meta`` (:func:`run` passes its own, the benchmark's ``--rewrite`` the
    stored one).

    Returns:
        dict: as :func:`run` (``rows``, ``markdown``, ``summary``, ``gate_summary``,
        ``config``, ``paths``).
    """
    cfg = LMConfig(**{**meta["config"], "gates": tuple(meta["config"]["gates"])})
    ref = _find(rows, "(a)", "", "full", "")["val_bpc"]
    vocab_size = meta.get("vocab_size")
    if vocab_size is None:  # results written before the vocabulary was recorded
        from quest_geometric.datasets.char_corpus import CharCorpus

        vocab_size = CharCorpus(meta["data"], block_size=cfg.block_size).vocab_size
    main_gate = "additive" if "additive" in cfg.gates else cfg.gates[0]
    smoke = _smoke(cfg, bool(meta.get("quick")))
    summary = _target_lines(rows, cfg, ref, main_gate, smoke)
    gate_summary = _gate_lines(rows, cfg)
    notes = _notes(cfg, meta["data"], vocab_size, main_gate, meta.get("reused_runs", []),
                   smoke, summary, gate_summary)
    paths = write_results(name, rows, out_dir, meta=meta, columns=COLUMNS, notes=notes,
                          title="Focus language-model quality (validation bits per character)",
                          display=DISPLAY)
    return {"rows": rows, "markdown": paths["md"].read_text(), "summary": summary,
            "gate_summary": gate_summary, "config": vars(cfg),
            "paths": {k: str(v) for k, v in paths.items()}}


def _find(rows: Sequence[dict[str, Any]], model: str, gate: str, mode: str, k: Any
          ) -> dict[str, Any]:
    """The row of ``model`` (its label's prefix, e.g. ``'(b)'``), ``gate``, ``mode``, top-k."""
    return next(r for r in rows if r["model"].startswith(model) and r["gate"] == gate
                and r["mode"] == mode and r["top_k"] == k)


def _target_lines(rows: Sequence[dict[str, Any]], cfg: LMConfig, ref: float, main_gate: str,
                  smoke: bool) -> list[str]:
    """The targets, one line each, with a verdict (none for a smoke run)."""
    K = cfg.num_groups
    b_hard = _find(rows, "(b)", main_gate, "hard", cfg.top_k)
    c_soft = _find(rows, "(c)", main_gate, "soft", cfg.top_k)
    c_hard2 = _find(rows, "(c)", main_gate, "hard", min(2, K))

    def verdict(ok: bool) -> str:
        if smoke:
            return "not tested (smoke run)"
        return "met" if ok else "MISSED"

    return [
        f"(a) full attention: {ref:.4f} bpc",
        f"(b) Focus from scratch ({main_gate} gate), hard top-{cfg.top_k}: "
        f"{b_hard['val_bpc']:.4f} bpc ({100 * b_hard['rel_to_full']:+.2f}% vs (a); target "
        f"within 2%: {verdict(abs(b_hard['rel_to_full']) <= 0.02 or b_hard['rel_to_full'] < 0)})",
        f"(c) routers on frozen (a) ({main_gate} gate), soft: {c_soft['val_bpc']:.4f} bpc "
        f"({100 * c_soft['rel_to_full']:+.2f}%; target no worse than (a): "
        f"{verdict(c_soft['rel_to_full'] <= 0)})",
        f"(c) ({main_gate} gate) hard top-{min(2, K)} of K = {K}: {c_hard2['val_bpc']:.4f} bpc "
        f"({100 * c_hard2['rel_to_full']:+.2f}%, keeps {100 * c_hard2['pair_fraction']:.0f}% "
        f"of causal pairs; target within 3%: {verdict(c_hard2['rel_to_full'] <= 0.03)})",
    ]


def _gate_lines(rows: Sequence[dict[str, Any]], cfg: LMConfig) -> list[str]:
    """Soft against hard bits per character at the training top-k, one line per gate."""
    def gap(model: str, gate: str) -> str:
        soft = _find(rows, model, gate, "soft", cfg.top_k)["val_bpc"]
        hard = _find(rows, model, gate, "hard", cfg.top_k)["val_bpc"]
        return (f"{model} soft {soft:.4f} vs hard {hard:.4f} bpc, hard - soft "
                f"{hard - soft:+.4f} ({100 * (hard / soft - 1):+.2f}%)")

    return [f"{gate} gate, top-{cfg.top_k}: {gap('(b)', gate)}; {gap('(c)', gate)}"
            for gate in cfg.gates]


def _notes(cfg: LMConfig, source: str, vocab_size: int, main_gate: str, reused: Sequence[str],
           smoke: bool, summary: Sequence[str], gate_summary: Sequence[str]) -> str:
    """The notes under the table: the setting, the columns, the targets and the
    soft-against-hard lines."""
    K = cfg.num_groups
    return (
        f"Corpus: {source} (vocabulary {vocab_size}); CharGPT {cfg.n_layer} layers x {cfg.n_embd} "
        f"wide, {cfg.n_head} heads, blocks of {cfg.block_size} characters; Focus K = {K}, "
        f"training top-k = {cfg.top_k}, window {cfg.window}, d_g = {cfg.group_dim}, prefix-causal "
        "routing; (b) and (c) trained once per soft gate "
        f"({', '.join(repr(g) for g in cfg.gates)}; `additive` adds log sigmoid(lambda (g_i.g_j - "
        "b)), `multiplicative` is the paper's s_ij sigmoid(lambda g_i.g_j); lambda = 10, b = "
        f"0.5). AdamW, batch {cfg.batch_size}, warmup + cosine, grad clip 1; (a) and (b) "
        f"{cfg.steps_full}/{cfg.steps_focus} steps at lr {cfg.lr}, (c) {cfg.steps_router} steps "
        f"at lr {cfg.router_lr} on the routers only. Validation: the same {cfg.eval_batches} x "
        f"{cfg.batch_size} random blocks for every row (seed {cfg.seed + 12345}); training seed "
        f"{cfg.seed}. `soft` computes every pair with the gate (training mode); `hard` keeps "
        "causal pairs within the window or sharing a hard group. `balance` is the mean over "
        "layers of the largest group share (1/K = perfect), `pair_fraction` the share of causal "
        "pairs kept, `vs full (%)` 100 (val_bpc / val_bpc of (a) - 1), the change the targets "
        "below quote (stored as the fraction `rel_to_full` in the CSV and JSON files)."
        + (f" Reloaded from earlier checkpoints of the same setting (train_s as stored): "
           f"{', '.join(reused)}." if reused else "")
        + (f"\n\nSmoke run ({cfg.steps_full} steps): the models are far from trained, so "
           f"these numbers test the pipeline, not the targets; the full run's are in "
           f"`benchmarks/focus/results/focus_lm.md`." if smoke else "")
        + f"\n\nTargets ({main_gate} gate):\n\n"
        + "\n".join(f"- {s}" for s in summary)
        + "\n\nSoft training against hard inference, per gate (the paper's multiplicative "
          "gate does not prune, so its soft and hard models can disagree):\n\n"
        + "\n".join(f"- {s}" for s in gate_summary))


def rewrite(results: str | Path, out_dir: str | Path | None = None) -> dict[str, Any]:
    """Rewrite a committed table from its JSON file (read as data), training nothing: the
    rows and the metadata are kept; the table, targets and notes are rendered again.

    Args:
        results (path): ``<name>.json`` written by :func:`run`.
        out_dir (path, optional): where to write ``<name>.{csv,json,md}`` (default: beside
            ``results``).

    Returns:
        dict: as :func:`run` (``rows``, ``markdown``, ``summary``, ``gate_summary``,
        ``config``, ``paths``).
    """
    path = Path(results)
    doc = json.loads(path.read_text())
    meta = doc["meta"]
    # the run stored its setting's gates as a tuple (JSON reads a list): the same metadata text
    meta["config"] = {**meta["config"], "gates": tuple(meta["config"]["gates"])}
    return write_tables(doc["rows"], meta, path.stem,
                  Path(out_dir) if out_dir is not None else path.parent)


def main(argv: Optional[list[str]] = None) -> None:
    """Command-line entry of ``python -m benchmarks.focus.lm``."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a few-minute smoke run")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--data", default=None,
                        help="text file or WikiText-103 raw directory (default: embedded)")
    parser.add_argument("--run-dir", default=None)
    parser.add_argument("--steps", type=int, default=None,
                        help="override the steps of (a) and (b) (and a third of it for (c))")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--out", default="benchmarks/focus/results")
    parser.add_argument("--gates", nargs="+", choices=GATES, default=list(GATES),
                        help="soft gates to train (b) and (c) with (default: both)")
    parser.add_argument("--name", default="focus_lm", help="file stem of the results")
    parser.add_argument("--no-reuse", action="store_true",
                        help="retrain even where the run folder holds a matching checkpoint")
    parser.add_argument("--rewrite", default=None, metavar="JSON",
                        help="train nothing: rewrite the table of this results file (rows, "
                             "date, machine and versions kept) into --out")
    args = parser.parse_args(argv)
    if args.rewrite:
        print(rewrite(args.rewrite, args.out)["markdown"])
        return
    over: dict[str, Any] = {}
    if args.steps is not None:
        over.update(steps_full=args.steps, steps_focus=args.steps,
                    steps_router=max(1, args.steps // 3))
    if args.seed is not None:
        over["seed"] = args.seed
    result = run(quick=args.quick, device=args.device, out_dir=args.out, data=args.data,
                 run_dir=args.run_dir, reuse=not args.no_reuse, gates=tuple(args.gates),
                 name=args.name, **over)
    print(result["markdown"])


__all__ = ["GATES", "LMConfig", "run", "write_tables", "evaluate", "rewrite", "main"]


if __name__ == "__main__":
    main()
