"""Does Focus keep a frozen model's quality, and does it beat content-free sparsity that keeps
as many pairs? A smoke run of the question on a tiny model, short enough for the tour.

A full-attention :class:`~quest_geometric.models.CharGPT` is trained briefly on the embedded
Python language reference (:class:`~quest_geometric.datasets.CharCorpus`) with the library's
:class:`~quest_geometric.training.Trainer`. Focus is composed onto a copy
(:func:`~quest_geometric.nn.focus.compose_focus`: every weight of the model frozen, a small
router per layer) and only the routers are trained. Each model is evaluated on the same
validation blocks (:func:`~quest_geometric.training.evaluate_lm`): full attention, Focus
hard top-2 with its routers as initialised and as trained, and the content-free baseline,
the sliding window plus attention sinks whose window is the smallest keeping at least the
share of causal pairs the trained Focus kept
(:func:`~quest_geometric.nn.focus.window_for_share`). Sparsity here saves no time: the tour
times nothing (``benchmarks/focus/speed.py`` does).

The full study (three models, two gates, several top-k) is ``python -m benchmarks.focus.lm``.
"""
from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import torch

from quest_geometric._utils.checks import check_int, fail
from quest_geometric._utils.device import resolve_device
from quest_geometric.datasets import CharCorpus
from quest_geometric.models import CharGPT, GPTConfig
from quest_geometric.nn.focus import WindowOnlyRouter, compose_focus, window_for_share
from quest_geometric.profile import write_results
from quest_geometric.training import (LanguageModelTask, TrainConfig, Trainer, evaluate_lm,
                                      seed_everything)

__all__ = ["run", "char_loss"]

#: The context length of the model and of every validation block.
BLOCK = 64
#: The CharGPT's shape.
MODEL = {"n_layer": 2, "n_head": 4, "n_embd": 96}
#: The Focus pattern composed onto it: K groups, hard top-k per token, the local window.
FOCUS = {"num_groups": 8, "top_k": 2, "window": 8}
#: Attention sinks of the window baseline (the first tokens every query sees).
NUM_SINKS = 4
#: Blocks per training step, learning rate (both trainings), validation blocks, seed.
BATCH, LR, VAL_BLOCKS, SEED = 16, 3e-3, 96, 0
COLUMNS = ["model", "trained", "pairs_kept", "val_bpc", "vs_full"]
DISPLAY = {"pairs_kept": ("causal pairs kept (%)", lambda v: f"{100 * v:.1f}"),
           "val_bpc": ("val bpc", lambda v: f"{v:.3f}"),
           "vs_full": ("vs full (%)", lambda v: f"{v:+.2f}")}


def char_loss(model: Any, x: torch.Tensor) -> torch.Tensor:
    """The mean next-token loss of :class:`~quest_geometric.models.CharGPT` on the
    ``length - 1`` predicted tokens of ``x`` ``[B, length]`` (``loss_fn`` of
    :func:`~quest_geometric.training.evaluate_lm`)."""
    return model(x[:, :-1], x[:, 1:])[1]


def _fit(model: torch.nn.Module, corpus: Any, steps: int, device: torch.device,
         progress: bool, desc: str) -> torch.nn.Module:
    cfg = TrainConfig(max_steps=steps, batch_size=BATCH, lr=LR, min_lr=LR / 10,
                      warmup_steps=max(1, steps // 20), grad_clip=1.0, eval_every=0,
                      checkpoint_every=0, device=str(device), amp="off", progress=progress,
                      seed=SEED)
    Trainer(model, LanguageModelTask(), cfg, corpus.get_batch).fit(desc=desc)
    return model.eval()


def _row(name: str, trained: str, model: torch.nn.Module, val: torch.Tensor) -> dict:
    r = evaluate_lm(model, val, loss_fn=char_loss)
    kept = 1.0 if math.isnan(r["pairs_kept"]) else r["pairs_kept"]  # NaN: no Focus layer
    return {"model": name, "trained": trained, "pairs_kept": kept,
            "val_bpc": r["val_loss"] / math.log(2.0)}


def _notes(val_blocks: int) -> str:
    """The table's notes: the setting, what each column means, and that one seed decides
    nothing."""
    k, K, w = FOCUS["top_k"], FOCUS["num_groups"], FOCUS["window"]
    return (
        f"CharGPT {MODEL['n_layer']} layers x {MODEL['n_embd']} wide, {MODEL['n_head']} heads, "
        f"blocks of {BLOCK} characters of the Python language reference; AdamW, batch {BATCH}, "
        f"lr {LR}, seed {SEED}. Focus: K = {K} groups, hard top-{k}, window {w}, trained with "
        "its soft additive gate, every weight of the model frozen. Validation: the first "
        f"{val_blocks} non-overlapping blocks of the validation split, the same for every row. "
        "`causal pairs kept`: the share of causal (query, key) pairs the attention pattern "
        "keeps, averaged over layers and blocks; the window row's window is the smallest whose "
        "window plus sinks keeps at least the share of the trained Focus row. One seed of a "
        "short run: it shows the pipeline, not a verdict.")


def run(out_dir: str | Path, device: str | torch.device = "cpu", progress: bool = True,
        steps: int = 1000, router_steps: int = 100) -> dict[str, Any]:
    """Train, compose, train the routers, evaluate; write ``focus.{csv,json,md}``.

    Args:
        out_dir (str or Path): folder of the result files (created if missing).
        device (str or torch.device): where to train and evaluate (default: ``'cpu'``).
        progress (bool): progress bars (default: :obj:`True`).
        steps (int): training steps of the full-attention model (default: ``1000``).
        router_steps (int): training steps of the routers (default: ``100``).

    Returns:
        dict: ``rows`` (``model``, ``trained``, ``pairs_kept``: the share of causal pairs
        kept, ``val_bpc``: validation bits per character, ``vs_full``: its change in %),
        ``markdown`` (the table with its notes), ``summary`` (one-line strings),
        ``models`` (``'full'``, ``'focus'``, ``'window'``: the evaluated models, the Focus
        one with trained routers), ``val_blocks`` (``[VAL_BLOCKS, BLOCK + 1]`` token ids),
        ``paths``.
    """
    steps = check_int(steps, "steps", 1, where="focus.run")
    router_steps = check_int(router_steps, "router_steps", 1, where="focus.run")
    if not isinstance(progress, bool):
        raise fail(TypeError, "focus.run", "progress", "a bool", progress)
    device = resolve_device(device, "device")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    corpus = CharCorpus(block_size=BLOCK)
    val = torch.cat([x for x, _ in corpus.iter_blocks("val", block_size=BLOCK + 1,
                                                      max_blocks=VAL_BLOCKS)]).to(device)
    seed_everything(SEED)
    full = CharGPT(GPTConfig(vocab_size=corpus.vocab_size, block_size=BLOCK, **MODEL))
    n_full = sum(p.numel() for p in full.parameters())
    _fit(full, corpus, steps, device, progress, "focus: full attention")
    seed_everything(SEED + 1)
    focus = compose_focus(copy.deepcopy(full), **FOCUS)
    n_routers = sum(p.numel() for p in focus.parameters() if p.requires_grad)
    rows = [_row("full attention", f"all {n_full:,} weights, {steps} steps", full, val),
            _row(f"Focus hard top-{FOCUS['top_k']}, routers untrained", "nothing",
                 focus.eval(), val)]
    _fit(focus, corpus, router_steps, device, progress, "focus: routers")
    rows.append(_row(f"Focus hard top-{FOCUS['top_k']}, routers trained",
                     f"routers only ({n_routers:,} weights), {router_steps} steps", focus, val))
    window = window_for_share(BLOCK, rows[-1]["pairs_kept"], num_sinks=NUM_SINKS)
    sinks = compose_focus(copy.deepcopy(full), num_groups=1, top_k=0, window=window,
                          num_sinks=NUM_SINKS, router=WindowOnlyRouter()).eval()
    rows.append(_row(f"window {window} + {NUM_SINKS} sinks (content-free)", "nothing",
                     sinks, val))
    for r in rows:
        r["vs_full"] = 100 * (r["val_bpc"] / rows[0]["val_bpc"] - 1)
    notes = _notes(len(val))
    meta = {"block": BLOCK, "model": MODEL, "focus": FOCUS, "num_sinks": NUM_SINKS,
            "window_baseline": window, "batch": BATCH, "lr": LR, "steps": steps,
            "router_steps": router_steps, "val_blocks": len(val), "seed": SEED,
            "device": str(device)}
    paths = write_results("focus", rows, out_dir, meta=meta, columns=COLUMNS, notes=notes,
                          title="Focus on a frozen CharGPT (validation bits per character)",
                          display=DISPLAY)
    summary = [f"full attention: {rows[0]['val_bpc']:.3f} bpc"] + [
        f"{r['model']}: {r['val_bpc']:.3f} bpc ({r['vs_full']:+.2f}% vs full), keeping "
        f"{100 * r['pairs_kept']:.0f}% of causal pairs" for r in rows[1:]]
    return {"rows": rows, "markdown": paths["md"].read_text(), "summary": summary,
            "models": {"full": full, "focus": focus, "window": sinks}, "val_blocks": val,
            "paths": {key: str(p) for key, p in paths.items()}}
