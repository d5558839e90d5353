r"""Focus composed onto a real pretrained model, SmolLM2-135M (4-bit weights, offline).

Question: does Focus composed onto a frozen pretrained model, training only the routers,
keep its quality, and how many causal pairs does hard top-:math:`k` keep? And does cached
decoding with Focus run faster than full attention at long contexts?

* **Data.** The Python language reference (``pydoc_data.topics``), split by topic into train
  and validation (:func:`~quest_geometric.datasets.pydoc_topic_split`, no topic in both), cut
  into blocks of ``block`` tokens (:func:`~quest_geometric.datasets.token_blocks`); a fixed
  validation set (the first ``val_blocks`` validation blocks).
* **Rows.** Full attention; for each soft gate, Focus composed with :math:`K` groups and a
  window :math:`w`, routers trained only (every original weight frozen, AdamW, one block per
  step), evaluated soft and hard with top-:math:`k` = 1, 2 and :math:`K`.
* **Speed.** Tokens per second of greedy decoding with the KV cache after a prompt of
  1K, 4K and 8K tokens, full attention against Focus hard top-1 and top-2, in alternation.

Training is resumable: each gate's routers, optimiser, step and loss curve are checkpointed
atomically every ``ckpt_every`` steps in ``run_dir``; rerunning the same command continues.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import torch

from quest_geometric._utils.plotting import optional_pyplot

__all__ = ["run", "run_speed", "train_routers", "evaluate_lm", "block_order", "revisit_drop",
           "load_router_weights", "paired_block_delta", "evaluate_saved",
           "decode_bounds", "write_decode_bounds",
           "main"]


def _data(tok: Any, block: int, val_blocks: int, max_train: Optional[int] = None):
    from quest_geometric.datasets import pydoc_topic_split, token_blocks

    tr_names, va_names = pydoc_topic_split()
    train = token_blocks(tok, tr_names, block_size=block, max_blocks=max_train)
    val = token_blocks(tok, va_names, block_size=block, max_blocks=val_blocks)
    return train, val, tr_names, va_names


@contextlib.contextmanager
def _router_outputs(model: Any, enabled: bool = True) -> Iterator[List[Tuple[Any, Any]]]:
    """While open, collect ``(layer, RouterOutput)`` of every Focus layer's router call
    (nothing when not ``enabled``); the hooks are removed on any exit."""
    from quest_geometric.nn.focus import focus_layers

    captured: List[Tuple[Any, Any]] = []
    hooks = [f.router.register_forward_hook(
        lambda _m, _i, out, f=f: captured.append((f, out))) for f in focus_layers(model)
        ] if enabled else []
    try:
        yield captured
    finally:
        for h in hooks:
            h.remove()


@torch.no_grad()
def evaluate_lm(model: Any, blocks: torch.Tensor, window: Optional[int] = None,
                num_groups: Optional[int] = None, progress: bool = False,
                desc: str = "eval") -> Dict[str, float]:
    r"""Validation perplexity :math:`\exp(\bar\ell)` over ``blocks`` (next-token loss of
    every position but the first of each block) and, when Focus is on and hard, the mean
    share of causal pairs kept and the mean largest group share over layers and blocks;
    when the soft additive gate is on (training mode), ``soft_keep``, the mean over layers
    and blocks of :func:`~quest_geometric.nn.focus.additive_gate_share` (how much of the
    causal pairs' weight the gate keeps; NaN otherwise). ``block_loss`` lists each block's
    mean loss, for paired comparisons (:func:`paired_block_delta`)."""
    from tqdm.auto import tqdm

    from quest_geometric.experiments.focus_lm import causal_pair_share
    from quest_geometric.nn.focus import additive_gate_share, group_balance

    nll, count, per_block = 0.0, 0, []
    with _router_outputs(model) as routed:
        for x in tqdm(blocks, desc=desc, disable=not progress, leave=False):
            x = x.unsqueeze(0)
            out = model(x, labels=x, use_cache=False)
            n = x.size(1) - 1
            per_block.append(float(out.loss))
            nll += per_block[-1] * n
            count += n
    captured = [r.groups for _, r in routed]
    soft = [float(additive_gate_share(r.soft.reshape(-1, r.soft.size(-1)), f.window,
                                      f.gate_scale, f.gate_bias, causal=f.causal))
            for f, r in routed if f.training and f.gate == "additive"]
    res = {"val_ppl": math.exp(nll / count), "val_loss": nll / count,
           "block_loss": per_block, "pairs_kept": math.nan, "balance": math.nan,
           "soft_keep": sum(soft) / len(soft) if soft else math.nan}
    if captured and window is not None and num_groups is not None:
        res["pairs_kept"] = sum(causal_pair_share(g, window, num_groups)
                                for g in captured) / len(captured)
        res["balance"] = float(torch.stack([group_balance(g, num_groups) for g in captured])
                               .mean())
    return res


def paired_block_delta(reference: Sequence[float], other: Sequence[float]
                       ) -> Dict[str, float]:
    r"""The spread of a perplexity change over validation blocks, paired by block: with
    :math:`\ell_b` and :math:`\ell'_b` the mean losses of block :math:`b` under the reference
    (full attention) and the other model, the per-block change is
    :math:`d_b = 100\,(e^{\ell'_b - \ell_b} - 1)` percent.

    Returns:
        dict: ``delta_block_mean`` (mean of :math:`d_b`), ``delta_sem`` (its standard error,
        :math:`s_d / \sqrt{B}`; NaN for one block) and ``blocks_worse`` (blocks with
        :math:`\ell'_b > \ell_b`).
    """
    if len(reference) != len(other) or len(reference) < 1:
        raise ValueError(f"paired_block_delta: needs the same number (>= 1) of blocks, got "
                         f"{len(reference)} and {len(other)}")
    d = [100.0 * math.expm1(b - a) for a, b in zip(reference, other)]
    n = len(d)
    mean = sum(d) / n
    sem = (math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1) / n) if n > 1 else math.nan)
    return {"delta_block_mean": mean, "delta_sem": sem,
            "blocks_worse": sum(b > a for a, b in zip(reference, other))}


def _set_router_params(params: List[torch.Tensor], blob: Any, source: Any, who: str) -> None:
    """Copy a :func:`train_routers` checkpoint's ``params`` into ``params`` (the model's
    :func:`~quest_geometric.nn.focus.router_parameters`), refusing one of other shapes."""
    saved = blob.get("params") if isinstance(blob, dict) else None
    if saved is None or len(saved) != len(params) or any(
            p.shape != t.shape for p, t in zip(params, saved)):
        raise ValueError(f"{who}: {str(source)!r} is not a train_routers checkpoint for this "
                         f"model's {len(params)} router tensors")
    with torch.no_grad():
        for p, t in zip(params, saved):
            p.copy_(t)


def train_routers(model: Any, train: torch.Tensor, steps: int, lr: float, run_dir: Path,
                  seed: int = 0, ckpt_every: int = 10, progress: bool = True,
                  max_minutes: Optional[float] = None, desc: str = "routers",
                  pair_budget: Optional[Tuple[float, float]] = None,
                  init_from: Optional[str | Path] = None) -> Dict[str, Any]:
    r"""Train the routers of a composed model (every other weight frozen) on blocks drawn
    from ``train`` with a seeded permutation, resuming from ``run_dir/routers.pt``. Returns
    the loss curve, steps done, seconds and whether it finished (``max_minutes`` may stop
    it early; rerun to continue).

    With ``pair_budget = (r, mu)`` the loss is the language-model loss plus

    .. math::
        \mu \cdot \frac{1}{L} \sum_{l=1}^{L} \max(0,\ r_l - r),

    :math:`r_l` the share of far causal pairs (beyond the window) that layer :math:`l`'s
    hard groups keep (:func:`~quest_geometric.nn.focus.straight_through_pair_share`,
    straight-through gradient): a charge for every kept far pair above the budget
    :math:`r`. ``curve`` stays the language-model loss; ``share_curve`` records
    :math:`\bar r_l` per step. ``init_from`` (a :func:`~quest_geometric.nn.focus.
    save_routers` folder) sets the routers before the first step of a new run."""
    from tqdm.auto import tqdm

    from quest_geometric.nn.focus import (
        focus_layers,
        load_routers,
        router_parameters,
        straight_through_pair_share,
    )
    from quest_geometric.training.checkpoint import atomic_torch_save

    budget = None if pair_budget is None else [float(v) for v in pair_budget]
    if budget is not None:
        r_max, mu = budget
        if not (0.0 <= r_max <= 1.0) or not (mu >= 0.0 and math.isfinite(mu)):
            raise ValueError(f"train_routers: pair_budget must be (share in [0, 1], weight "
                             f">= 0), got {pair_budget!r}")
    objective = {"pair_budget": budget,
                 "init_from": None if init_from is None else str(init_from),
                 "gate": sorted({str(f.gate) for f in focus_layers(model)}),
                 "gate_bias": sorted({f.gate_bias for f in focus_layers(model)})}
    params = list(router_parameters(model))
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    run_dir.mkdir(parents=True, exist_ok=True)
    ck = run_dir / "routers.pt"
    state: Dict[str, Any] = {"step": 0, "curve": [], "seconds": 0.0, "objective": objective}
    if ck.is_file():
        blob = torch.load(ck, map_location="cpu", weights_only=False)
        saved = blob["state"].get("objective")
        if saved is not None:  # checkpoints from before gate_bias was recorded used 0.5
            saved = {"gate_bias": [0.5], **saved}
        if saved is not None and saved != objective:
            raise ValueError(f"train_routers: {ck} was trained with {saved}, not {objective}; "
                             f"use another run_dir")
        _set_router_params(params, blob, ck, "train_routers")
        opt.load_state_dict(blob["opt"])
        state = blob["state"]
    elif init_from is not None:
        load_routers(model, str(init_from))
    order = block_order(train.size(0), steps, seed)
    # Checkpoints from before the chunked order record the passes their order was drawn
    # with; only a four-pass one is the first chunk of today's order.
    legacy = state.get("passes")
    if state.get("order") != "chunks" and legacy not in (None, ORDER_CHUNK_PASSES):
        raise ValueError(
            f"train_routers: {ck} was trained with an older block order ({legacy} passes "
            f"over the {train.size(0)} blocks drawn at once), which the resumed run would "
            f"change; start a new run_dir")
    state["order"] = "chunks"
    if budget is not None:
        state.setdefault("share_curve", [])
    with _router_outputs(model, enabled=budget is not None) as captured:
        model.train()
        t_start = time.perf_counter()
        base_s = state["seconds"]
        bar = tqdm(total=steps, initial=state["step"], desc=desc, disable=not progress)
        while state["step"] < steps:
            x = train[order[state["step"]]].unsqueeze(0)
            captured.clear()
            loss = model(x, labels=x, use_cache=False).loss
            total = loss
            if budget is not None:
                shares = torch.stack([straight_through_pair_share(
                    out.soft.reshape(-1, out.soft.size(-1)),
                    out.groups.reshape(-1, out.groups.size(-1)), f.window, causal=f.causal)
                    for f, out in captured])
                total = loss + mu * (shares - r_max).clamp_min(0.0).mean()
                state["share_curve"].append(float(shares.detach().mean()))
            opt.zero_grad(set_to_none=True)
            total.backward()
            opt.step()
            state["step"] += 1
            state["curve"].append(float(loss.detach()))
            state["seconds"] = base_s + time.perf_counter() - t_start
            bar.update(1)
            bar.set_postfix(loss=f"{state['curve'][-1]:.3f}", **(
                {"far_share": f"{state['share_curve'][-1]:.3f}"} if budget is not None
                else {}))
            done = state["step"] >= steps
            late = max_minutes is not None and (time.perf_counter() - t_start) > 60 * max_minutes
            if done or late or state["step"] % ckpt_every == 0:
                atomic_torch_save({"params": [p.detach().clone() for p in params],
                                   "opt": opt.state_dict(), "state": state}, ck)
            if late:
                break
        bar.close()
    model.eval()
    return {**state, "finished": state["step"] >= steps}


#: Passes over the training blocks per seeded chunk of :func:`block_order`.
ORDER_CHUNK_PASSES = 4


def block_order(num_blocks: int, steps: int, seed: int = 0,
                chunk_passes: int = ORDER_CHUNK_PASSES) -> torch.Tensor:
    r"""The training block of each router step, in chunks: chunk :math:`j` is a seeded
    permutation of ``chunk_passes`` copies of the :math:`n` block indices, so every block is
    drawn equally often within each chunk.

    The chunks are successive ``torch.randperm(chunk_passes * n)`` draws (taken modulo
    :math:`n`) from one generator seeded with ``seed``, so chunk :math:`j` depends only on
    ``seed`` and :math:`j`, and the order of a longer run starts with the order of a
    shorter one: a run resumed with more ``steps`` keeps every step it has done.

    Args:
        num_blocks (int): training blocks :math:`n`.
        steps (int): router steps.
        seed (int): permutation seed. (default: :obj:`0`)
        chunk_passes (int): passes per chunk. (default: :data:`ORDER_CHUNK_PASSES`)

    Returns:
        Tensor: ``[chunk_passes * n * ceil(steps / (chunk_passes * n))]`` long block
        indices (at least one chunk); step :math:`s` (from 0) uses entry :math:`s`.
    """
    if num_blocks < 1:
        raise ValueError(f"block_order: num_blocks must be >= 1, got {num_blocks}")
    if chunk_passes < 1:
        raise ValueError(f"block_order: chunk_passes must be >= 1, got {chunk_passes}")
    size = num_blocks * chunk_passes
    chunks = max(1, math.ceil(steps / size))
    gen = torch.Generator().manual_seed(seed)
    return torch.cat([torch.randperm(size, generator=gen) % num_blocks for _ in range(chunks)])


def revisit_drop(curve: Sequence[float], order: Sequence[int], after: int = 0
                 ) -> Dict[str, float]:
    r"""A paired test of whether the router loss still falls: for every training block
    drawn at two consecutive steps :math:`s < s'` (both at least ``after``), the change
    :math:`\ell_{s'} - \ell_s` of its training loss between the two visits.

    The same block at two times removes the block-to-block spread that dominates a noisy
    one-block-per-step curve: a model at a plateau has a mean change near zero, a still
    learning one a negative mean.

    Args:
        curve (sequence of float): training loss per step.
        order (sequence of int): the block of each step (:func:`block_order`).
        after (int): ignore visits before this step (0-based). (default: :obj:`0`)

    Returns:
        dict: ``n`` (pairs), ``mean`` and ``sem`` (standard error) of the change in nats,
        ``share_lower`` (pairs whose later loss is lower) and ``sign_p`` (two-sided exact
        sign test); NaN where there are no pairs.
    """
    from quest_geometric.analysis.stats import sign_test

    order = [int(o) for o in order]
    if len(order) < len(curve):
        raise ValueError(f"revisit_drop: order has {len(order)} entries for {len(curve)} "
                         "steps")
    last: Dict[int, int] = {}
    diffs: List[float] = []
    for step in range(after, len(curve)):
        blk = order[step]
        if blk in last:
            diffs.append(float(curve[step]) - float(curve[last[blk]]))
        last[blk] = step
    n = len(diffs)
    if n == 0:
        return {"n": 0, "mean": math.nan, "sem": math.nan, "share_lower": math.nan,
                "sign_p": math.nan}
    mean = sum(diffs) / n
    sem = (math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1) / n) if n > 1
           else math.nan)
    lower = sum(d < 0 for d in diffs)
    return {"n": n, "mean": mean, "sem": sem, "share_lower": lower / n,
            "sign_p": sign_test(lower, sum(d > 0 for d in diffs))}


def _revisit(curve: Sequence[float], order: Sequence[int]) -> Dict[str, float]:
    """:func:`revisit_drop` over the second half of the curve, as table columns."""
    r = revisit_drop(curve, order, after=len(curve) // 2)
    return {"revisit_n": r["n"], "revisit_mean": r["mean"], "revisit_sem": r["sem"]}


def _plateau(curve: Sequence[float]) -> Dict[str, float]:
    """Mean training loss over the first and the second half of the last 40% of steps: a
    flat curve has a small drop."""
    n = len(curve)
    if n < 10:
        return {"loss_last_a": math.nan, "loss_last_b": math.nan}
    tail = curve[int(0.6 * n):]
    h = len(tail) // 2
    return {"loss_last_a": sum(tail[:h]) / h, "loss_last_b": sum(tail[h:]) / (len(tail) - h)}


def _evaluate_modes(model: Any, val: torch.Tensor, base: Mapping[str, Any],
                    gate: Optional[str], window: int, num_groups: int, progress: bool,
                    desc: str) -> Iterator[Dict[str, Any]]:
    """Evaluate a composed model as the tables report it: its soft gate (not for
    ``straight_through``, which trains the hard pattern), then hard top-1, top-2 and
    top-:math:`K`. Yields each row's measured columns (``eval``, ``val_ppl``, ``delta_pct``
    and the :func:`paired_block_delta` columns against ``base``, full attention's
    :func:`evaluate_lm` result, then ``pairs_kept``, ``soft_keep`` and ``balance``)."""
    from quest_geometric.nn.focus import set_focus_options

    evals = ([] if gate == "straight_through" else [("soft", None)]) \
        + [(f"hard top-{k}", k) for k in (1, 2, num_groups)]
    for label, k in evals:
        if k is None:
            model.train()  # the soft gate (SmolLM2 has no dropout)
            r = evaluate_lm(model, val, progress=progress, desc=f"{desc} {label}")
            model.eval()
        else:
            set_focus_options(model, top_k=k)
            r = evaluate_lm(model, val, window, num_groups, progress=progress,
                            desc=f"{desc} {label}")
        yield {"eval": label, "val_ppl": r["val_ppl"],
               "delta_pct": 100 * (r["val_ppl"] / base["val_ppl"] - 1),
               **paired_block_delta(base["block_loss"], r["block_loss"]),
               "pairs_kept": 1.0 if k == num_groups else r["pairs_kept"],
               "soft_keep": r["soft_keep"], "balance": r["balance"]}


def run(quick: bool = False, out_dir: str | Path = "benchmarks/results",
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
    from quest_geometric.experiments.common import write_results
    from quest_geometric.models.smollm2 import load_smollm2
    from quest_geometric.nn.focus import (
        compose_focus,
        decompose,
        router_parameters,
        save_routers,
    )

    steps = steps if steps is not None else (6 if quick else 300)
    block = block if block is not None else (256 if quick else 1024)
    val_blocks = val_blocks if val_blocks is not None else (2 if quick else 8)
    torch.manual_seed(seed)
    model, tok = load_smollm2()
    train, val, tr_names, va_names = _data(tok, block, val_blocks)
    if eval_block is not None:
        if eval_block < 2 or (val_blocks * block) // eval_block < 1:
            raise ValueError(f"run: eval_block must be in 2..{val_blocks * block} (the "
                             f"validation tokens), got {eval_block}")
        from quest_geometric.datasets import token_blocks

        val = token_blocks(tok, va_names, block_size=eval_block,
                           max_blocks=(val_blocks * block) // eval_block)
    rows: List[Dict[str, Any]] = []
    if not train_only:
        base = evaluate_lm(model, val, progress=progress, desc="full attention")
    full_ppl = base["val_ppl"] if not train_only else math.nan
    rows.append({"model": "full attention", "gate": "-", "eval": "-", "val_ppl": full_ppl,
                 "delta_pct": 0.0, "pairs_kept": 1.0, "balance": math.nan, "trainable": 0,
                 "steps": 0, "train_s": 0.0})
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
            save_routers(model, str(Path(out_dir) / f"{name}_routers_{gate}{tag}"))
        if train_only:
            decompose(model)
            continue
        share = tr.get("share_curve") or []
        far_share = sum(share[-20:]) / len(share[-20:]) if share else math.nan
        for measured in _evaluate_modes(model, val, base, gate, window, num_groups, progress,
                                        gate):
            rows.append({"model": f"Focus K={num_groups} w={window}{tag}", "gate": gate,
                         **measured, "trainable": n_train, "steps": tr["step"],
                         "train_s": tr["seconds"], "finished": tr["finished"],
                         **_plateau(tr["curve"]), **_revisit(tr["curve"], order),
                         "train_far_share": far_share})
        decompose(model)
    if train_only:
        return {"rows": [], "paths": {}, "curves": curves}
    meta = {"model": "SmolLM2-135M-Instruct, Q4_1 (4-bit) weights dequantised to float32",
            "block": block, "eval_block": int(val.size(1)), "val_blocks": int(val.size(0)),
            "train_blocks": int(train.size(0)),
            "val_topics": len(va_names), "train_topics": len(tr_names), "K": num_groups,
            "window": window, "lr": lr, "seed": seed, "steps": steps, "quick": quick,
            "pair_budget": None if pair_budget is None else list(pair_budget),
            "init_from": None if init_from is None else str(init_from), "tag": tag,
            "gate_bias": 0.5 if gate_bias is None else gate_bias,
            "load": open("/proc/loadavg").read().strip() if os.path.exists("/proc/loadavg")
            else None}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    heads = []
    for gate in gates:
        by = {r["eval"]: r for r in rows if r["gate"] == gate}
        if not by:
            continue
        first = next(iter(by.values()))
        fin = "" if first.get("finished") else " (training not finished: a cost, not a verdict)"
        if first["revisit_n"] and first["revisit_mean"] + 2 * first["revisit_sem"] < 0:
            fin += (f" (not at a plateau: a block's loss is {-first['revisit_mean']:.3f} +- "
                    f"{first['revisit_sem']:.3f} nats lower at its next visit, "
                    f"{first['revisit_n']} revisits in the second half)")
        soft_txt = ""
        if "soft" in by:
            keep = by["soft"].get("soft_keep", math.nan)
            soft_txt = (f"soft {by['soft']['delta_pct']:+.2f}% perplexity against full "
                        f"attention" + ("" if math.isnan(keep) else
                                        f" (the gate keeps {100 * keep:.1f}% of the causal "
                                        f"pairs' weight)") + "; ")
        heads.append(
            f"- headline ({gate} gate{tag}, {first['steps']} router steps{fin}): {soft_txt}"
            f"hard top-2 "
            f"{by['hard top-2']['delta_pct']:+.2f}% (+- {by['hard top-2']['delta_sem']:.2f} "
            f"over the {len(val)} blocks, worse on {by['hard top-2']['blocks_worse']}) keeping "
            f"{100 * by['hard top-2']['pairs_kept']:.1f}% "
            f"of the causal pairs; hard top-1 {by['hard top-1']['delta_pct']:+.2f}% keeping "
            f"{100 * by['hard top-1']['pairs_kept']:.1f}%")
    heads.append(
        "- `loss_last_a`, `loss_last_b`: mean router training loss over the first and second "
        "half of the last 40% of steps; `revisit_mean` +- `revisit_sem`: mean change of a "
        "training block's loss from one visit to its next, over the `revisit_n` revisits in "
        "the second half of training (`revisit_drop`; near 0 at a plateau, negative while the "
        "routers still learn); `delta_sem`: standard error over the validation blocks of the "
        "per-block perplexity change, `blocks_worse`: blocks on which it is positive "
        "(`paired_block_delta`); `soft_keep` (soft additive rows): the mean factor by which "
        "the gate scales a causal pair's unnormalised attention weight "
        "(`additive_gate_share`; 1 for full attention, the share of pairs kept for a 0/1 "
        "gate), comparable with the hard rows' `pairs_kept`")
    paths = write_results(name, rows, out, meta=meta, notes="\n".join(heads), columns=[
        "model", "gate", "eval", "val_ppl", "delta_pct", "delta_sem", "blocks_worse",
        "pairs_kept", "soft_keep", "balance", "trainable",
        "steps", "train_s", "loss_last_a", "loss_last_b", "revisit_n", "revisit_mean",
        "revisit_sem"] + (["train_far_share"] if pair_budget is not None else []),
        title="Focus composed onto SmolLM2-135M (routers trained only)")
    (out / f"{name}_curves.json").write_text(json.dumps(curves))
    _plot_curves(curves, out / f"{name}_curves.png")
    return {"rows": rows, "paths": paths, "curves": curves}


def evaluate_saved(folders: Sequence[str | Path], quick: bool = False,
                   out_dir: str | Path = "benchmarks/results",
                   name: str = "focus_pretrained_reeval", block: Optional[int] = None,
                   val_blocks: Optional[int] = None, progress: bool = True,
                   gate_bias: Optional[float] = None) -> Dict[str, Any]:
    """Evaluate routers saved by :func:`~quest_geometric.nn.focus.save_routers` (such as
    the committed ``benchmarks/results/<name>_routers_<gate><tag>`` folders) on the fixed
    validation blocks, without training: full attention, then for each folder its soft gate
    (not for ``straight_through``) and hard top-1, top-2 and top-:math:`K`, each with the
    per-block paired change against full attention (:func:`paired_block_delta`). The
    composition (gate, window, :math:`K`, the additive gate's bias :math:`b`) is the one the
    folder records; ``gate_bias`` evaluates the soft rows with another :math:`b` instead (the
    hard rows do not depend on it), e.g. routers trained with :math:`b = 1/2` under the
    top-2 relaxation :math:`b = 1/8`.

    Where the folder sits beside the table of the run that trained it (``<name>.json``), its
    rows gain that table's ``steps`` and perplexity (``trained_val_ppl``), so the
    re-evaluation is checked against the original one.

    Raises:
        FileNotFoundError: if a folder holds no saved routers.
    """
    from quest_geometric.experiments.common import write_results
    from quest_geometric.models.smollm2 import load_smollm2
    from quest_geometric.nn.focus import decompose, focus_layers, load_routers
    from quest_geometric.nn.focus.compose import ROUTERS_FILE

    folders = [Path(f) for f in folders]
    for f in folders:
        if not (f / ROUTERS_FILE).is_file():
            raise FileNotFoundError(f"evaluate_saved: no {ROUTERS_FILE} in {str(f)!r} (a "
                                    f"save_routers folder was expected)")
    block = block if block is not None else (256 if quick else 1024)
    val_blocks = val_blocks if val_blocks is not None else (2 if quick else 8)
    model, tok = load_smollm2()
    _, val, _, _ = _data(tok, block, val_blocks)
    base = evaluate_lm(model, val, progress=progress, desc="full attention")
    rows: List[Dict[str, Any]] = [{"routers": "-", "gate": "-", "eval": "-",
                                   "val_ppl": base["val_ppl"], "delta_pct": 0.0,
                                   "pairs_kept": 1.0}]
    for f in folders:
        load_routers(model, str(f))  # composed as the folder records
        model.eval()
        saved_bias = focus_layers(model)[0].gate_bias
        if gate_bias is not None:
            for layer in focus_layers(model):
                layer.gate_bias = gate_bias
        layer = focus_layers(model)[0]
        gate, window, k_groups = layer.gate, layer.window, layer.num_groups
        # the rows of the run that saved the folder: <stem>.json beside <stem>_routers_<gate><tag>
        trained: Dict[str, Dict[str, Any]] = {}
        stem = f.name.split("_routers_")[0]
        table = f.parent / f"{stem}.json"
        if table.is_file():
            blob = json.loads(table.read_text())
            if f.name == f"{stem}_routers_{gate}{blob.get('meta', {}).get('tag', '')}":
                trained = {r["eval"]: r for r in blob.get("rows", []) if r.get("gate") == gate}
        for measured in _evaluate_modes(model, val, base, gate, window, k_groups, progress,
                                        f.name):
            old = trained.get(measured["eval"], {})
            if measured["eval"] == "soft" and layer.gate_bias != saved_bias:
                old = {**old, "val_ppl": math.nan}  # another gate than the one trained
            rows.append({"routers": f.name, "gate": gate, "gate_bias": layer.gate_bias,
                         **measured,
                         "steps": old.get("steps", math.nan),
                         "trained_val_ppl": old.get("val_ppl", math.nan)})
        decompose(model)
    meta = {"model": "SmolLM2-135M-Instruct, Q4_1 (4-bit) weights dequantised to float32",
            "block": block, "val_blocks": int(val.size(0)), "quick": quick,
            "folders": [str(f) for f in folders], "gate_bias": gate_bias,
            "load": open("/proc/loadavg").read().strip() if os.path.exists("/proc/loadavg")
            else None}
    notes = ("Saved routers evaluated again, without training (`evaluate_saved`). "
             "`delta_sem`: standard error over the validation blocks of the per-block "
             "perplexity change, `blocks_worse`: blocks on which it is positive "
             "(`paired_block_delta`); `soft_keep` (soft additive rows): the mean factor by "
             "which the gate scales a causal pair's attention weight (`additive_gate_share`, "
             "comparable with `pairs_kept`); `steps` and `trained_val_ppl`: from the table of the "
             "run that trained the routers (the re-evaluation should reproduce its "
             "perplexity up to rounding; empty for a soft row evaluated with another "
             "`gate_bias` than the one trained).")
    paths = write_results(name, rows, out_dir, meta=meta, notes=notes, columns=[
        "routers", "gate", "gate_bias", "eval", "val_ppl", "delta_pct", "delta_sem",
        "blocks_worse", "pairs_kept", "soft_keep", "balance", "steps", "trained_val_ppl"],
        title="Saved Focus routers on SmolLM2-135M, evaluated again")
    return {"rows": rows, "paths": paths}


def _plot_curves(curves: Dict[str, List[float]], path: Path) -> None:
    plt = optional_pyplot()
    if plt is None:  # pragma: no cover - matplotlib is optional (the bench extra)
        return
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    for gate, c in curves.items():
        if not c:
            continue
        k = max(1, len(c) // 20)
        sm = [sum(c[max(0, i - k + 1):i + 1]) / len(c[max(0, i - k + 1):i + 1])
              for i in range(len(c))]
        ax.plot(range(1, len(c) + 1), c, alpha=0.25)
        ax.plot(range(1, len(c) + 1), sm, label=f"{gate} gate (running mean of {k})")
    ax.set_xlabel("router training step (one 1,024-token block each)")
    ax.set_ylabel("training loss (nats / token)")
    ax.set_title("SmolLM2-135M + Focus: router training loss (all other weights frozen)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


class _Decoder:
    """Greedy cached decoding of one prompt in one mode (Focus off, or hard top-:math:`k`),
    keeping its own cache so that modes can be timed in alternation."""

    def __init__(self, model: Any, prompt: torch.Tensor, top_k: Optional[int],
                 static_len: Optional[int] = None) -> None:
        self.model, self.top_k = model, top_k
        kw: Dict[str, Any] = {}
        if static_len is not None:  # a preallocated cache: no concatenation per step
            from transformers import StaticCache

            kw["cache"] = StaticCache(config=model.config, max_cache_len=static_len)
        with torch.no_grad(), self._mode():
            out = model(prompt, use_cache=True, **kw)
        self.cache = out.past_key_values
        self.nxt = out.logits[:, -1:].argmax(-1)

    def _mode(self):
        from quest_geometric.nn.focus import focus_disabled, set_focus_options

        if self.top_k is None:
            return focus_disabled(self.model)
        set_focus_options(self.model, top_k=self.top_k)
        return contextlib.nullcontext()

    def tokens_per_second(self, n: int) -> float:
        with torch.no_grad(), self._mode():
            t0 = time.perf_counter()
            for _ in range(n):
                out = self.model(self.nxt, cache=self.cache, use_cache=True)
                self.nxt = out.logits[:, -1:].argmax(-1)
            return n / (time.perf_counter() - t0)


def load_router_weights(model: Any, path: str | Path) -> Any:
    r"""Set the routers of a composed ``model`` from ``path``: either a training checkpoint
    (``routers.pt`` written by :func:`train_routers`, router parameters in
    :func:`~quest_geometric.nn.focus.router_parameters` order) or a
    :func:`~quest_geometric.nn.focus.save_routers` folder (or its file,
    :data:`~quest_geometric.nn.focus.compose.ROUTERS_FILE`), such as the routers committed
    under ``benchmarks/results/``, so a fresh clone can time the committed routers without
    retraining them.

    A :func:`~quest_geometric.nn.focus.save_routers` file goes to
    :func:`~quest_geometric.nn.focus.load_routers`, which refuses a model composed with
    another ``window`` or ``num_groups`` than the recorded one (the routers would run with
    another pattern than the one they were trained for).

    Raises:
        FileNotFoundError: if ``path`` is neither.
        ValueError: if the checkpoint's routers do not fit the model, or the model is
            composed with another ``window`` / ``num_groups`` than the saved routers.
    """
    from quest_geometric.nn.focus import load_routers, router_parameters
    from quest_geometric.nn.focus.compose import ROUTERS_FILE

    path = Path(path)
    file = path / ROUTERS_FILE if path.is_dir() else path
    if not file.is_file():
        raise FileNotFoundError(f"load_router_weights: no routers at {str(path)!r} (expected "
                                f"a train_routers routers.pt or a save_routers folder)")
    if file.name == ROUTERS_FILE:
        return load_routers(model, str(file))
    blob = torch.load(file, map_location="cpu", weights_only=False)
    if isinstance(blob, dict) and blob.get("format") == 1:  # a renamed save_routers file
        return load_routers(model, str(file))
    _set_router_params(list(router_parameters(model)), blob, file, "load_router_weights")
    return model


def run_speed(contexts: Sequence[int] = (1024, 4096, 8000), new_tokens: int = 16,
              rounds: int = 3, window: int = 64, num_groups: int = 4,
              routers: Optional[str] = None, out_dir: str | Path = "benchmarks/results",
              name: str = "focus_pretrained_speed", progress: bool = True,
              cache: str = "dynamic") -> Dict[str, Any]:
    """Greedy cached decoding, tokens per second after a prompt of each length, full
    attention against Focus hard top-1 and top-2 (the routers in ``routers``, a
    ``routers.pt`` written by :func:`train_routers` or a committed
    :func:`~quest_geometric.nn.focus.save_routers` folder, see
    :func:`load_router_weights`; else fresh ones). Each mode prefills
    once (not timed) and keeps its own cache; the modes then decode ``new_tokens`` tokens in
    alternation for ``rounds`` rounds, and the ratio against full attention is the median of
    the per-round ratios. ``cache='dynamic'`` is Hugging Face's default ``DynamicCache``
    (keys and values concatenated at every step, a cost both modes pay);
    ``cache='static'`` a preallocated ``StaticCache`` (written in place; full attention
    then reads the whole buffer, Focus only the keys it selects); ``cache='both'`` times
    the six decoders (two caches x three modes) in alternation in one process, each row's
    ``vs_full`` against full attention with the same cache and ``vs_full_dynamic`` against
    full attention with the dynamic one (the peer a user of either cache would compare
    with)."""
    from quest_geometric.datasets import pydoc_topic_split, token_blocks
    from quest_geometric.experiments.common import write_results
    from quest_geometric.models.smollm2 import load_smollm2
    from quest_geometric.nn.focus import compose_focus

    model, tok = load_smollm2()
    compose_focus(model, num_groups=num_groups, top_k=2, window=window, backend="blocks")
    if routers:
        load_router_weights(model, routers)
    model.eval()
    tr, va = pydoc_topic_split()
    stream = token_blocks(tok, sorted(tr + va), block_size=max(contexts))[0:1]
    caches = ("dynamic", "static") if cache == "both" else (cache,)
    if any(c not in ("dynamic", "static") for c in caches):
        raise ValueError(f"run_speed: cache must be 'dynamic', 'static' or 'both', got {cache!r}")
    rows = []
    modes = {"full": None, "top-1": 1, "top-2": 2}
    keys = [(c, m) for c in caches for m in modes]
    for ctx in contexts:
        cap = ctx + rounds * new_tokens + 1
        dec = {(c, m): _Decoder(model, stream[:, :ctx], modes[m], cap if c == "static" else None)
               for c, m in keys}
        times: Dict[Any, List[float]] = {key: [] for key in keys}
        for _ in range(rounds):
            for key in keys:
                times[key].append(dec[key].tokens_per_second(new_tokens))
        for c, m in keys:
            ratios = sorted(a / b for a, b in zip(times[(c, m)], times[(c, "full")]))
            row = {"context": ctx, "mode": m,
                   "tok_per_s": sorted(times[(c, m)])[len(times[(c, m)]) // 2],
                   "vs_full": ratios[len(ratios) // 2],
                   "min_ratio": ratios[0], "max_ratio": ratios[-1]}
            if len(caches) > 1:
                base = sorted(a / b for a, b in zip(times[(c, m)], times[(caches[0], "full")]))
                row = {"cache": c, **row, f"vs_full_{caches[0]}": base[len(base) // 2]}
            rows.append(row)
        del dec
        if progress:
            print(f"[speed] context {ctx}: " + ", ".join(
                f"{r.get('cache', cache)} {r['mode']} {r['tok_per_s']:.2f} tok/s "
                f"({r['vs_full']:.2f}x)" for r in rows[-len(keys):]), flush=True)
    meta = {"cache": cache, "new_tokens_per_round": new_tokens, "rounds": rounds,
            "window": window,
            "K": num_groups, "routers": routers or "fresh (untrained)",
            "load": open("/proc/loadavg").read().strip() if os.path.exists("/proc/loadavg")
            else None}
    paths = write_results(name, rows, out_dir, meta=meta,
                          title="SmolLM2-135M: greedy cached decoding, tokens per second")
    bounds = write_decode_bounds(paths["json"]) if len(contexts) > 1 else None
    return {"rows": rows, "paths": paths, "bounds": bounds}


def decode_bounds(rows: Sequence[Mapping[str, Any]], target: float = 1.3
                  ) -> List[Dict[str, Any]]:
    r"""What the context costs a decoding step, from the full-attention rows of
    :func:`run_speed`, and the best speed-up any sparse attention could reach.

    The time per token of full attention is fitted by least squares as
    :math:`t(L) = a + bL` over the measured contexts :math:`L`: :math:`a` is what a step
    costs whatever the context (every weight read once, the MLPs, the vocabulary head,
    Python), :math:`bL` what grows with it (attention over the cache, the cache update). A
    method that keeps a share :math:`s` of the context cost and adds no overhead of its own
    takes :math:`a + sbL`, so

    .. math::
        \text{bound}(L) = \frac{t(L)}{a}, \qquad
        s_{\max}(L) = \frac{t(L)/\text{target} - a}{bL}

    are the speed-up of a method with no context cost at all, and the largest share of the
    context cost a method may keep to reach ``target`` (above 1: any method; below 0: none).
    For scale: hard top-1 of :math:`K` balanced groups reads about :math:`1/K` of the keys
    (plus the window), top-2 about :math:`1 - \binom{K-2}{2}/\binom{K}{2}` (5/6 for
    :math:`K = 4`), and both add their routing.

    Args:
        rows (sequence of dict): ``context``, ``mode`` and ``tok_per_s`` per row, with at
            least two contexts of ``mode == 'full'`` (per ``cache`` when the rows have one:
            then each cache is fitted on its own and the rows start with ``cache``).
        target (float): the speed-up asked for. (default: :obj:`1.3`)

    Returns:
        list of dict: one per context: ``context``, ``full_ms``, ``fixed_ms`` (:math:`a`),
        ``context_ms`` (:math:`bL`), ``residual_ms`` (measured minus fitted: how well a line
        describes the contexts; the split is only as good as the fit), ``bound_vs_full``,
        ``max_share_for_target``, and per Focus mode ``<mode>_ms`` and ``<mode>_vs_full``.
    """
    if any("cache" in r for r in rows):  # several caches in one table: one fit each
        caches = list(dict.fromkeys(r.get("cache") for r in rows))
        return [{"cache": c, **b} for c in caches for b in decode_bounds(
            [{k: v for k, v in r.items() if k != "cache"} for r in rows if r.get("cache") == c],
            target)]
    full = sorted((int(r["context"]), 1e3 / float(r["tok_per_s"]))
                  for r in rows if r["mode"] == "full")
    if len({c for c, _ in full}) < 2:
        raise ValueError("decode_bounds: need full-attention rows at two contexts or more "
                         f"(got {[c for c, _ in full]})")
    if target <= 0:
        raise ValueError(f"decode_bounds: target must be > 0, got {target}")
    b, a = statistics.linear_regression([c for c, _ in full], [t for _, t in full])
    out = []
    for ctx, t in full:
        row: Dict[str, Any] = {"context": ctx, "full_ms": t, "fixed_ms": a,
                               "context_ms": b * ctx, "residual_ms": t - a - b * ctx,
                               "bound_vs_full": t / a,
                               "max_share_for_target": (t / target - a) / (b * ctx)}
        for r in rows:
            if int(r["context"]) == ctx and r["mode"] != "full":
                row[f"{r['mode']}_ms"] = 1e3 / float(r["tok_per_s"])
                row[f"{r['mode']}_vs_full"] = float(r["vs_full"])
        out.append(row)
    return out


def write_decode_bounds(json_path: str | Path, target: float = 1.3,
                        out_dir: Optional[str | Path] = None) -> Dict[str, Any]:
    """:func:`decode_bounds` of a committed speed table (``<name>.json``), written as
    ``<name>_bounds.{csv,json,md}`` beside it (or in ``out_dir``)."""
    from quest_geometric.experiments.common import write_results

    json_path = Path(json_path)
    if not json_path.is_file():
        raise FileNotFoundError(f"write_decode_bounds: no speed table {json_path}; run "
                                f"`python benchmarks/focus_pretrained.py --speed` first")
    blob = json.loads(json_path.read_text())
    rows = decode_bounds(blob["rows"], target)
    src = blob.get("meta", {})
    meta = {"source": json_path.name, "source_date": src.get("date"),
            "source_threads": src.get("torch_threads"), "source_cache": src.get("cache"),
            "source_load": src.get("load"), "target": target}
    notes = (f"Per-token time of full attention fitted as `fixed_ms + context_ms` (least squares "
             f"over the contexts, `decode_bounds`); `bound_vs_full`: the speed-up of a method "
             f"whose step costs no more than `fixed_ms` (no context cost, no overhead); "
             f"`max_share_for_target`: the largest share of `context_ms` such a method may keep "
             f"to be {target:g}x full attention; `residual_ms`: measured minus fitted (a line "
             f"through a few contexts is a rough split: read the bounds only where the "
             f"residuals are small). Measured in `{json_path.name}` "
             f"({src.get('torch_threads')} thread(s), {src.get('cache', 'dynamic')} cache, "
             f"{src.get('date')}).")
    paths = write_results(json_path.stem + "_bounds", rows, out_dir or json_path.parent,
                          meta=meta, notes=notes,
                          title="SmolLM2-135M decoding: what the context costs a step")
    return {"rows": rows, "paths": paths}


def main(argv: Optional[List[str]] = None) -> None:
    """Command line of ``benchmarks/focus_pretrained.py``."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny smoke run (minutes)")
    p.add_argument("--gates", nargs="+", default=["additive", "multiplicative"],
                   choices=["additive", "multiplicative", "straight_through"],
                   help="training gates (default: the two soft gates)")
    p.add_argument("--pair-budget", nargs=2, type=float, default=None, metavar=("R", "MU"),
                   help="charge MU per unit of far-pair share kept above R (train_routers)")
    p.add_argument("--init-from", default=None,
                   help="a save_routers folder the routers of a new run start from")
    p.add_argument("--gate-bias", type=float, default=None, metavar="B",
                   help="the additive gate's b (default 0.5, the top-1 relaxation; 0.125 "
                        "relaxes the top-2 pattern); with --eval-saved, the b of the soft "
                        "rows instead of the recorded one")
    p.add_argument("--tag", default="", help="variant name, appended to run folders and rows")
    p.add_argument("--steps", type=int, default=None, help="router steps (default 300)")
    p.add_argument("--window", type=int, default=64, help="local window w (default 64)")
    p.add_argument("--block", type=int, default=None, help="tokens per block (default 1024)")
    p.add_argument("--eval-block", type=int, default=None,
                   help="evaluate the routers trained on --block blocks on blocks of this "
                        "many tokens (same validation tokens)")
    p.add_argument("--max-minutes", type=float, default=None,
                   help="stop training after this long (checkpointed; rerun to continue)")
    p.add_argument("--train-only", action="store_true",
                   help="train (or resume) the routers and stop; a later run evaluates")
    p.add_argument("--speed", action="store_true", help="only the decoding-speed part")
    p.add_argument("--routers", default=None, help="routers for --speed: a train_routers "
                   "routers.pt or a save_routers folder (such as the committed ones)")
    p.add_argument("--cache", choices=["dynamic", "static", "both"], default="dynamic",
                   help="KV cache of --speed (default: dynamic, Hugging Face's default)")
    p.add_argument("--contexts", nargs="+", type=int, default=None, metavar="L",
                   help="--speed: prompt lengths (default 1024 4096 8000)")
    p.add_argument("--rounds", type=int, default=None,
                   help="--speed: rounds of alternating decoding (default 3)")
    p.add_argument("--new-tokens", type=int, default=None,
                   help="--speed: tokens each mode decodes per round (default 16)")
    p.add_argument("--name", default=None, help="result file stem")
    p.add_argument("--out", default="benchmarks/results", help="result folder")
    p.add_argument("--run-dir", default="runs/focus_pretrained", help="checkpoint folder")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--eval-saved", nargs="+", default=None, metavar="ROUTERS_DIR",
                   help="only evaluate these save_routers folders (no training), with "
                        "per-block spreads (evaluate_saved)")
    p.add_argument("--bounds-only", nargs="+", default=None, metavar="SPEED_JSON",
                   help="write <name>_bounds.* (decode_bounds) for committed speed tables")
    a = p.parse_args(argv)
    if a.bounds_only:
        for path in a.bounds_only:
            print(write_decode_bounds(path)["paths"]["md"].read_text())
        return
    if a.eval_saved:
        evaluate_saved(a.eval_saved, quick=a.quick, out_dir=a.out, progress=not a.no_progress,
                       gate_bias=a.gate_bias,
                       name=a.name or "focus_pretrained_reeval" + ("_quick" if a.quick else ""))
        return
    if a.speed:
        speed = {"contexts": (256, 512), "new_tokens": 4, "rounds": 2} if a.quick else {}
        speed.update({k: v for k, v in (("contexts", a.contexts), ("rounds", a.rounds),
                                        ("new_tokens", a.new_tokens)) if v is not None})
        run_speed(routers=a.routers, out_dir=a.out, progress=not a.no_progress, cache=a.cache,
                  **speed,
                  name=a.name or "focus_pretrained_speed" + {"dynamic": "", "static": "_static",
                                                             "both": "_caches"}[a.cache]
                  + ("_quick" if a.quick else ""))
        return
    run(quick=a.quick, out_dir=a.out, run_dir=a.run_dir, gates=a.gates, steps=a.steps,
        block=a.block, window=a.window, progress=not a.no_progress, max_minutes=a.max_minutes,
        train_only=a.train_only, eval_block=a.eval_block,
        pair_budget=tuple(a.pair_budget) if a.pair_budget else None, init_from=a.init_from,
        tag=a.tag, gate_bias=a.gate_bias,
        name=a.name or "focus_pretrained" + ("_quick" if a.quick else "")
        + (f"_eval{a.eval_block}" if a.eval_block else ""))
