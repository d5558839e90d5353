"""The experiment's main run: train the routers of each gate, evaluate every row, write the
table and the loss curves. :func:`run` only orchestrates the parts of the other modules."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from benchmarks.focus.pretrained.config import MODEL_NOTE, load_average, preset
from benchmarks.focus.pretrained.data import load_data, validation_blocks
from benchmarks.focus.pretrained.evaluate import evaluate_modes
from quest_geometric.training import evaluate_lm
from benchmarks.focus.pretrained.plots import plot_curves
from benchmarks.focus.pretrained.report import TITLE, columns, headlines
from benchmarks.focus.pretrained.routers import save_trained_routers
from benchmarks.focus.pretrained.summary import plateau_columns, revisit_columns
from quest_geometric.training.routers import block_order, train_routers


def _full_attention_row(val_ppl: float) -> Dict[str, Any]:
    """The table's first row: full attention, nothing trained."""
    return {"model": "full attention", "gate": "-", "eval": "-", "val_ppl": val_ppl,
            "delta_pct": 0.0, "pairs_kept": 1.0, "balance": math.nan, "trainable": 0,
            "steps": 0, "train_s": 0.0}


def _gate_rows(model: Any, val: torch.Tensor, base: Dict[str, Any], gate: str,
               trained: Dict[str, Any], order: torch.Tensor, *, label: str, window: int,
               num_groups: int, n_train: int, progress: bool) -> List[Dict[str, Any]]:
    """The rows of one trained gate: each evaluation mode with the training's columns."""
    share = trained.get("share_curve") or []
    far_share = sum(share[-20:]) / len(share[-20:]) if share else math.nan
    return [{"model": label, "gate": gate, **measured, "trainable": n_train,
             "steps": trained["step"], "train_s": trained["seconds"],
             "finished": trained["finished"], **plateau_columns(trained["curve"]),
             **revisit_columns(trained["curve"], order), "train_far_share": far_share}
            for measured in evaluate_modes(model, val, base, gate, num_groups,
                                           progress, gate)]


def run(quick: bool = False, out_dir: str | Path = "benchmarks/focus/results",
        run_dir: str | Path = "runs/focus_pretrained", gates: Sequence[str] = ("additive",
                                                                             "multiplicative"),
        steps: Optional[int] = None, block: Optional[int] = None, num_groups: int = 4,
        window: int = 64, lr: float = 2e-3, val_blocks: Optional[int] = None,
        seed: int = 0, progress: bool = True, max_minutes: Optional[float] = None,
        name: str = "focus_pretrained", train_only: bool = False,
        eval_block: Optional[int] = None, pair_budget: Optional[Tuple[float, float]] = None,
        init_from: Optional[str | Path] = None, tag: str = "",
        gate_bias: Optional[float] = None) -> Dict[str, Any]:
    r"""Train the routers for each gate, evaluate every row and write
    ``<name>.{csv,json,md}`` (and the loss curves, ``<name>_curves.png``).

    ``gates`` may include ``'straight_through'`` (training sees the hard top-2 pattern,
    :func:`~quest_geometric.nn.focus.focus_soft_attention`; no soft row is evaluated for
    it); ``pair_budget`` and ``init_from`` go to :func:`train_routers`; ``tag`` names the
    variant (appended to each gate's run folder and to the rows' model label).

    ``gate_bias`` is the additive gate's :math:`b` (:func:`~quest_geometric.nn.focus.
    focus_soft_attention`); :obj:`None` keeps the library default :math:`b = 1/2`, the
    relaxation of the *top-1* pattern (one-hot memberships). The hard rows are evaluated at
    top-2, whose relaxation is :math:`b = 1/(2 \cdot 2^2) = 1/8`: half the overlap
    :math:`1/k^2` of two tokens that share one of their :math:`k` groups at equal weights.

    ``eval_block`` evaluates the routers trained on ``block``-token blocks (the same run
    folders) on validation blocks of ``eval_block`` tokens instead, over the same number of
    validation tokens (``val_blocks * block // eval_block`` blocks); the routers are then not
    saved again."""
    from quest_geometric.profile import write_results
    from quest_geometric.models.smollm2 import load_smollm2
    from quest_geometric.nn.focus import compose_focus, decompose, router_parameters

    steps = steps if steps is not None else preset(quick)["steps"]
    block = block if block is not None else preset(quick)["block"]
    val_blocks = val_blocks if val_blocks is not None else preset(quick)["val_blocks"]
    torch.manual_seed(seed)
    model, tok = load_smollm2()
    train, val, tr_names, va_names = load_data(tok, block, val_blocks)
    if eval_block is not None:
        val = validation_blocks(tok, va_names, block, val_blocks, eval_block)
    base = None if train_only else evaluate_lm(model, val, progress=progress,
                                               desc="full attention")
    rows = [_full_attention_row(math.nan if base is None else base["val_ppl"])]
    curves: Dict[str, List[float]] = {}
    order = block_order(train.size(0), steps, seed)
    for gate in gates:
        compose_focus(model, num_groups=num_groups, top_k=2, window=window, gate=gate,
                      backend="blocks",
                      **({} if gate_bias is None else {"gate_bias": gate_bias}))
        n_train = sum(p.numel() for p in router_parameters(model))
        tr = train_routers(model, train, steps, lr,
                           Path(run_dir) / f"{gate}_w{window}_b{block}{tag}",
                           seed=seed, progress=progress, max_minutes=max_minutes,
                           desc=f"routers ({gate}{tag})", pair_budget=pair_budget,
                           init_from=init_from)
        curves[gate] = tr["curve"]
        if not train_only and eval_block is None:
            save_trained_routers(model, Path(out_dir) / f"{name}_routers_{gate}{tag}")
        if not train_only:
            rows += _gate_rows(model, val, base, gate, tr, order,
                               label=f"Focus K={num_groups} w={window}{tag}", window=window,
                               num_groups=num_groups, n_train=n_train, progress=progress)
        decompose(model)
    if train_only:
        return {"rows": [], "paths": {}, "curves": curves}
    meta = {"model": MODEL_NOTE,
            "block": block, "eval_block": int(val.size(1)), "val_blocks": int(val.size(0)),
            "train_blocks": int(train.size(0)),
            "val_topics": len(va_names), "train_topics": len(tr_names), "K": num_groups,
            "window": window, "lr": lr, "seed": seed, "steps": steps, "quick": quick,
            "pair_budget": None if pair_budget is None else list(pair_budget),
            "init_from": None if init_from is None else str(init_from), "tag": tag,
            "gate_bias": 0.5 if gate_bias is None else gate_bias,
            "load": load_average()}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = write_results(name, rows, out, meta=meta,
                          notes=headlines(rows, gates, tag, len(val)),
                          columns=columns(pair_budget is not None), title=TITLE)
    (out / f"{name}_curves.json").write_text(json.dumps(curves))
    plot_curves(curves, out / f"{name}_curves.png")
    return {"rows": rows, "paths": paths, "curves": curves}
