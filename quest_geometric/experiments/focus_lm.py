"""Does Focus keep language-model quality? Character-level bits per character.

Three models on the same corpus (the embedded Python reference by default, ``--data`` for a
text file or a WikiText-103 raw directory), trained with the shared
:class:`~quest_geometric.training.trainer.Trainer` (checkpoints and metrics in a run folder):

(a) a full-attention :class:`~quest_geometric.models.char_gpt.CharGPT`;
(b) the same architecture with :class:`~quest_geometric.nn.focus_attention.FocusAttention`
    trained from scratch (soft gates in training);
(c) model (a) frozen, with Focus routers composed onto it
    (:func:`~quest_geometric.nn.compose_focus.compose_focus`) and only the routers trained.

(b) and (c) are evaluated soft (all pairs, gated) and hard at top-k = 1, 2 and K, on the same
fixed validation batches, with the group balance (largest group share, 1/K is perfect) and
the fraction of causal pairs the hard pattern keeps.

Run ``python benchmarks/focus_lm.py`` (``--quick`` for a few-minute smoke run).
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import math
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterator, Optional

import torch
from torch import nn

from quest_geometric.experiments.common import write_results

COLUMNS = ["model", "mode", "top_k", "val_bpc", "rel_to_full", "balance", "pair_fraction",
           "trainable_params", "train_steps", "train_s"]


@dataclass
class LMConfig:
    """The settings of one run of this experiment (stored with the results).

    The default (full) setting was chosen to fit about 20 minutes on 2 CPU cores: a 3-layer,
    96-wide, 4-head CharGPT on 128-character blocks, window 32 (so Focus prunes every pair
    more than 32 characters apart unless the two tokens share a group), K = 4 groups.
    """

    block_size: int = 128
    n_layer: int = 3
    n_head: int = 4
    n_embd: int = 96
    num_groups: int = 4
    top_k: int = 2
    window: int = 32
    group_dim: int = 16
    gate: str = "additive"
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
    from quest_geometric.nn.focus_attention import FocusAttention

    return [m for m in model.modules() if isinstance(m, FocusAttention)]


@contextlib.contextmanager
def _mode(model: nn.Module, soft: bool, top_k: Optional[int]) -> Iterator[None]:
    """Evaluate ``model`` (eval mode) with Focus soft (gated, all pairs) or hard at ``top_k``."""
    from quest_geometric.nn.compose_focus import set_focus_options

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
def evaluate(model: nn.Module, batches: list, window: int, num_groups: int
             ) -> dict[str, float]:
    """Bits per character over ``batches``, and (for Focus models) the mean largest group
    share and the mean fraction of causal pairs the hard pattern keeps."""
    from quest_geometric.nn.focus_router import FocusRouter, group_balance

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
    out = {"val_bpc": nll / count / math.log(2.0), "balance": math.nan,
           "pair_fraction": math.nan}
    if captured:
        out["balance"] = float(torch.stack([group_balance(g, num_groups) for g in captured])
                               .mean())
        fr = []
        for g in captured:  # [B, T, k]
            t = g.size(1)
            member = torch.zeros(*g.shape[:2], num_groups).scatter_(-1, g, 1.0)
            shared = (member @ member.transpose(1, 2)) > 0
            i = torch.arange(t)
            dist = i.view(-1, 1) - i.view(1, -1)
            causal = dist >= 0
            kept = causal & ((dist <= window) | shared)
            fr.append(float(kept.sum()) / float(causal.sum() * g.size(0)))
        out["pair_fraction"] = sum(fr) / len(fr)
    return out


def _train(model: nn.Module, corpus: Any, steps: int, lr: float, cfg: LMConfig, run_dir: Path,
           progress: bool, device: str) -> float:
    from quest_geometric.training.config import TrainConfig
    from quest_geometric.training.tasks import LanguageModelTask
    from quest_geometric.training.trainer import Trainer

    tc = TrainConfig(max_steps=steps, batch_size=cfg.batch_size, lr=lr, min_lr=lr / 10,
                     warmup_steps=max(1, steps // 20), grad_clip=1.0, weight_decay=0.01,
                     eval_every=0, eval_batches=cfg.eval_batches, checkpoint_every=0,
                     log_every=max(1, steps // 20), out_dir=str(run_dir), progress=progress,
                     seed=cfg.seed, device=device, amp="off")
    t0 = time.perf_counter()
    Trainer(model, LanguageModelTask(), tc, corpus.get_batch, corpus.get_batch).fit()
    return time.perf_counter() - t0


def run(quick: bool = False, device: str = "cpu", out_dir: str | Path = "benchmarks/results",
        progress: bool = True, data: Optional[str] = None,
        run_dir: Optional[str | Path] = None, config: Optional[LMConfig] = None,
        name: str = "focus_lm", **overrides: Any) -> dict[str, Any]:
    """Train (a), (b), (c), evaluate them and write ``<name>.{csv,json,md}`` to ``out_dir``.

    Args:
        quick (bool): use :meth:`LMConfig.quick` (default: :obj:`False`).
        device (str): training device (default: ``'cpu'``).
        out_dir (str): result folder (default: ``'benchmarks/results'``).
        progress (bool): progress bars (default: :obj:`True`).
        data (str, optional): a text file or WikiText-103 raw directory (default: the
            embedded Python reference).
        run_dir (str, optional): folder for checkpoints and metrics (default:
            ``runs/focus_lm``).
        config (LMConfig, optional): the full setting (default: :obj:`None`).
        name (str): file stem (default: ``'focus_lm'``).
        **overrides: :class:`LMConfig` fields to override (e.g. ``steps_full=5``).

    Returns:
        dict: ``rows``, ``markdown``, ``summary``, ``config``.
    """
    from quest_geometric.datasets.char_corpus import CharCorpus
    from quest_geometric.models.char_gpt import CharGPT, GPTConfig
    from quest_geometric.nn.compose_focus import compose_focus
    from quest_geometric.training.seed import seed_everything

    cfg = config or (LMConfig.quick() if quick else LMConfig())
    cfg = replace(cfg, **overrides)
    run_dir = Path(run_dir or os.path.join("runs", name))
    out_dir = Path(out_dir)
    corpus = CharCorpus(data or "python-reference", block_size=cfg.block_size)
    gen = torch.Generator().manual_seed(cfg.seed + 12345)
    val = [corpus.get_batch("val", cfg.batch_size, generator=gen)
           for _ in range(cfg.eval_batches)]
    base = dict(vocab_size=corpus.vocab_size, block_size=cfg.block_size, n_layer=cfg.n_layer,
                n_head=cfg.n_head, n_embd=cfg.n_embd)
    focus_kw = dict(num_groups=cfg.num_groups, top_k=cfg.top_k, window=cfg.window,
                    group_dim=cfg.group_dim, gate=cfg.gate)
    rows: list[dict[str, Any]] = []
    K = cfg.num_groups
    ks = sorted({1, min(2, K), K})

    def trainable(m: nn.Module) -> int:
        return sum(p.numel() for p in m.parameters() if p.requires_grad)

    # (a) full attention
    seed_everything(cfg.seed)
    full = CharGPT(GPTConfig(**base))
    n_full = trainable(full)
    t_a = _train(full, corpus, cfg.steps_full, cfg.lr, cfg, run_dir / "a_full", progress, device)
    full = full.cpu().eval()
    ref = evaluate(full, val, cfg.window, K)["val_bpc"]
    rows.append({"model": "(a) full attention", "mode": "full", "top_k": "", "val_bpc": ref,
                 "balance": math.nan, "pair_fraction": 1.0, "trainable_params": n_full,
                 "train_steps": cfg.steps_full, "train_s": t_a})

    def focus_rows(model: nn.Module, label: str, n_params: int, steps: int, secs: float) -> None:
        for soft in (True, False):
            for k in ([cfg.top_k] if soft else ks):
                with _mode(model, soft, k):
                    r = evaluate(model, val, cfg.window, K)
                rows.append({"model": label, "mode": "soft" if soft else "hard",
                             "top_k": k, **r, "trainable_params": n_params,
                             "train_steps": steps, "train_s": secs})
                if soft:
                    rows[-1]["pair_fraction"] = 1.0  # soft mode computes every pair

    # (b) Focus from scratch
    seed_everything(cfg.seed)
    scratch = CharGPT(GPTConfig(**base, attention="focus", focus=focus_kw))
    n_b = trainable(scratch)
    t_b = _train(scratch, corpus, cfg.steps_focus, cfg.lr, cfg, run_dir / "b_focus_scratch",
                 progress, device)
    focus_rows(scratch.cpu(), "(b) Focus from scratch", n_b, cfg.steps_focus, t_b)

    # (c) centroid-only composition on the frozen model (a)
    seed_everything(cfg.seed + 1)
    composed = compose_focus(copy.deepcopy(full), **focus_kw)
    n_c = trainable(composed)
    t_c = _train(composed, corpus, cfg.steps_router, cfg.router_lr, cfg,
                 run_dir / "c_compose_routers", progress, device)
    focus_rows(composed.cpu(), "(c) routers on frozen (a)", n_c, cfg.steps_router, t_c)

    for r in rows:
        r["rel_to_full"] = r["val_bpc"] / ref - 1.0

    def find(model: str, mode: str, k: Any) -> dict[str, Any]:
        return next(r for r in rows if r["model"].startswith(model) and r["mode"] == mode
                    and r["top_k"] == k)

    b_hard = find("(b)", "hard", cfg.top_k)
    c_soft = find("(c)", "soft", cfg.top_k)
    c_hard2 = find("(c)", "hard", min(2, K))

    def verdict(ok: bool) -> str:
        return "met" if ok else "MISSED"

    summary = [
        f"(a) full attention: {ref:.4f} bpc",
        f"(b) Focus from scratch, hard top-{cfg.top_k}: {b_hard['val_bpc']:.4f} bpc "
        f"({100 * b_hard['rel_to_full']:+.2f}% vs (a); target within 2%: "
        f"{verdict(abs(b_hard['rel_to_full']) <= 0.02 or b_hard['rel_to_full'] < 0)})",
        f"(c) routers on frozen (a), soft: {c_soft['val_bpc']:.4f} bpc "
        f"({100 * c_soft['rel_to_full']:+.2f}%; target no worse than (a): "
        f"{verdict(c_soft['rel_to_full'] <= 0)})",
        f"(c) hard top-{min(2, K)} of K = {K}: {c_hard2['val_bpc']:.4f} bpc "
        f"({100 * c_hard2['rel_to_full']:+.2f}%, keeps {100 * c_hard2['pair_fraction']:.0f}% "
        f"of causal pairs; target within 3%: {verdict(c_hard2['rel_to_full'] <= 0.03)})",
    ]
    notes = (
        f"Corpus: {corpus.source} (vocabulary {corpus.vocab_size}); CharGPT "
        f"{cfg.n_layer} layers x {cfg.n_embd} wide, {cfg.n_head} heads, blocks of "
        f"{cfg.block_size} characters; Focus K = {K}, training top-k = {cfg.top_k}, window "
        f"{cfg.window}, d_g = {cfg.group_dim}, gate '{cfg.gate}', prefix-causal routing. "
        f"AdamW, batch {cfg.batch_size}, warmup + cosine, grad clip 1; (a) and (b) "
        f"{cfg.steps_full}/{cfg.steps_focus} steps at lr {cfg.lr}, (c) {cfg.steps_router} "
        f"steps at lr {cfg.router_lr} on the routers only. Validation: the same "
        f"{cfg.eval_batches} x {cfg.batch_size} random blocks for every row (seed "
        f"{cfg.seed + 12345}); training seed {cfg.seed}. `soft` computes every pair with the "
        f"gate (training mode); `hard` keeps causal pairs within the window or sharing a hard "
        f"group. `balance` is the mean over layers of the largest group share (1/K = "
        f"perfect), `pair_fraction` the share of causal pairs kept.\n\n"
        + "\n".join(f"- {s}" for s in summary))
    meta = {"config": vars(cfg), "data": corpus.source, "device": device, "quick": quick,
            "seeds": {"train": cfg.seed, "val_batches": cfg.seed + 12345,
                      "compose": cfg.seed + 1},
            "run_dir": str(run_dir)}
    paths = write_results(name, rows, out_dir, meta=meta, columns=COLUMNS, notes=notes,
                          title="Focus language-model quality (validation bits per character)")
    return {"rows": rows, "markdown": paths["md"].read_text(), "summary": summary,
            "config": vars(cfg), "paths": {k: str(v) for k, v in paths.items()}}


def main(argv: Optional[list[str]] = None) -> None:
    """Command-line entry of ``benchmarks/focus_lm.py``."""
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
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args(argv)
    over: dict[str, Any] = {}
    if args.steps is not None:
        over.update(steps_full=args.steps, steps_focus=args.steps,
                    steps_router=max(1, args.steps // 3))
    if args.seed is not None:
        over["seed"] = args.seed
    result = run(quick=args.quick, device=args.device, out_dir=args.out, data=args.data,
                 run_dir=args.run_dir, **over)
    print(result["markdown"])


__all__ = ["LMConfig", "run", "main", "evaluate"]
