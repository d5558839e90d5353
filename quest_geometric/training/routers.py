"""Training the routers of a Focus-composed model (every other weight frozen): resumable,
with a seeded block order, an optional pair budget, and the checkpoint format of the runs."""
from __future__ import annotations

import contextlib
import math
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import torch

from quest_geometric._utils.checks import check_choice, check_int, fail

__all__ = ["train_routers", "router_loss", "distillation_loss", "OBJECTIVES", "block_order",
           "router_outputs", "read_router_checkpoint", "write_router_checkpoint",
           "set_router_params", "check_objective", "ORDER_CHUNK_PASSES"]

#: The router objectives: next-token loss on the data, or distillation from the model itself.
OBJECTIVES = ("lm", "distill")

#: Passes over the training blocks per seeded chunk of :func:`block_order`.
ORDER_CHUNK_PASSES = 4


@contextlib.contextmanager
def router_outputs(model: Any, enabled: bool = True) -> Iterator[List[Tuple[Any, Any]]]:
    """While open, collect ``(layer, RouterOutput)`` of every Focus layer's router call, in
    call order (nothing when not ``enabled``); the hooks are removed on any exit.

    A router shared by several layers (a content-free one passed to
    :func:`~quest_geometric.nn.focus.compose_focus`) is hooked once, and each of its calls is
    attributed to the Focus layer running at the time."""
    from quest_geometric.nn.focus import focus_layers

    captured: List[Tuple[Any, Any]] = []
    running: List[Any] = [None]
    hooks, wrapped = [], []
    if enabled:
        layers = focus_layers(model)
        for f in layers:  # every path into a layer's routing goes through its attend()
            def attend(*args: Any, _f: Any = f, _attend: Any = f.attend, **kw: Any) -> Any:
                running[0] = _f
                return _attend(*args, **kw)
            f.attend = attend
            wrapped.append(f)
        for r in {id(f.router): f.router for f in layers}.values():
            hooks.append(r.register_forward_hook(
                lambda _m, _i, out: captured.append((running[0], out))))
    try:
        yield captured
    finally:
        for h in hooks:
            h.remove()
        for f in wrapped:
            del f.attend


def check_objective(objective: Any, where: str) -> str:
    """``objective`` if it is one of :data:`OBJECTIVES`: ``'<where>: 'objective' must be
    ..., got ...'``, a :class:`TypeError` for a non-string, a :class:`ValueError` for
    another string."""
    return check_choice(objective, "objective", OBJECTIVES, where=where)


def _valid_ids(input_ids: Any, attention_mask: Any, where: str) -> None:
    if not isinstance(input_ids, torch.Tensor) or input_ids.dtype not in (torch.long,
                                                                           torch.int32):
        raise fail(TypeError, where, "input_ids", "a [batch, length] integer tensor",
                   input_ids)
    if input_ids.dim() != 2:
        raise fail(ValueError, where, "input_ids", "a [batch, length] integer tensor",
                   input_ids)
    if input_ids.size(1) < 2:
        raise fail(ValueError, where, "input_ids", "a tensor of at least 2 tokens per row",
                   input_ids)
    if attention_mask is not None and not isinstance(attention_mask, torch.Tensor):
        raise fail(TypeError, where, "attention_mask", "a tensor (or None)", attention_mask)
    if attention_mask is not None and attention_mask.shape != input_ids.shape:
        raise fail(ValueError, where, "attention_mask",
                   f"of the shape of 'input_ids' {list(input_ids.shape)}", attention_mask)


def distillation_loss(model: Any, input_ids: torch.Tensor,
                      attention_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    r"""The KL divergence from a Focus-composed model's own full-attention next-token
    distribution to its Focus distribution, on the same tokens (no labels):

    .. math::
        \mathcal{L} = \frac{1}{|\mathcal{P}|} \sum_{t \in \mathcal{P}} \sum_{v}
        p_t(v) \left(\log p_t(v) - \log q_t(v)\right),

    :math:`p_t` the next-token distribution at position :math:`t` with Focus disabled
    (:func:`~quest_geometric.nn.focus.focus_disabled`, the frozen original model, no
    gradient), :math:`q_t` the one with Focus, :math:`\mathcal{P}` the positions that the
    ``attention_mask`` keeps (every position without one). The routers learn to preserve the
    model rather than to adapt it to the data, as SeerAttention trains its gates. Both
    distributions are taken in float32.

    Args:
        model: a Hugging Face causal LM composed with
            :func:`~quest_geometric.nn.focus.compose_focus`.
        input_ids (Tensor): ``[batch, length]`` token ids, ``length >= 2``.
        attention_mask (Tensor, optional): ``[batch, length]``, 1 for real tokens.

    Returns:
        Tensor: the scalar loss (0 exactly when Focus keeps every causal pair).
    """
    from quest_geometric.nn.focus import focus_disabled

    _valid_ids(input_ids, attention_mask, "distillation_loss")
    with torch.no_grad(), focus_disabled(model):
        teacher = model(input_ids, attention_mask=attention_mask, use_cache=False).logits
    student = model(input_ids, attention_mask=attention_mask, use_cache=False).logits
    log_p = torch.log_softmax(teacher.float(), dim=-1)
    log_q = torch.log_softmax(student.float(), dim=-1)
    kl = (log_p.exp() * (log_p - log_q)).sum(-1)
    if attention_mask is None:
        return kl.mean()
    keep = attention_mask.to(kl.dtype)
    return (kl * keep).sum() / keep.sum().clamp_min(1.0)


def router_loss(model: Any, input_ids: torch.Tensor, objective: str = "lm",
                attention_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    r"""The loss the routers of a Focus-composed ``model`` are trained on, for one batch.

    * ``'lm'``: the model's next-token loss with ``labels = input_ids`` (every position but
      the first predicted; Hugging Face's mean over the predicted tokens);
    * ``'distill'``: :func:`distillation_loss`.

    Args:
        model: a Hugging Face causal LM composed with Focus.
        input_ids (Tensor): ``[batch, length]`` token ids.
        objective (str): one of :data:`OBJECTIVES`. (default: :obj:`'lm'`)
        attention_mask (Tensor, optional): ``[batch, length]``, 1 for real tokens.

    Returns:
        Tensor: the scalar loss.
    """
    check_objective(objective, "router_loss")
    if objective == "distill":
        return distillation_loss(model, input_ids, attention_mask)
    _valid_ids(input_ids, attention_mask, "router_loss")
    labels = input_ids if attention_mask is None else input_ids.masked_fill(
        attention_mask == 0, -100)
    return model(input_ids, attention_mask=attention_mask, labels=labels,
                 use_cache=False).loss


def read_router_checkpoint(path: Path) -> Dict[str, Any]:
    """A :func:`train_routers` checkpoint (``routers.pt``: ``params``, ``opt``, ``state``),
    read as data only (``torch.load(weights_only=True)``; anything else is refused with a
    ValueError)."""
    from quest_geometric._utils.untrusted import load_tensors

    return load_tensors(path, "read_router_checkpoint")


def write_router_checkpoint(path: Path, params: List[torch.Tensor], opt: Any,
                            state: Dict[str, Any]) -> None:
    """Write a training checkpoint atomically (read back by :func:`read_router_checkpoint`):
    tensors, numbers, strings and plain containers only, so ``weights_only=True`` reads
    it."""
    from quest_geometric.training.checkpoint import atomic_torch_save

    atomic_torch_save({"params": [p.detach().clone() for p in params],
                       "opt": opt.state_dict(), "state": state}, path)


def set_router_params(params: List[torch.Tensor], blob: Any, source: Any, who: str) -> None:
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
                  init_from: Optional[str | Path] = None,
                  objective: str = "lm") -> Dict[str, Any]:
    r"""Train the routers of a composed model (every other weight frozen) on blocks drawn
    from ``train`` with a seeded permutation (:func:`block_order`, one block per step, AdamW),
    resuming from ``run_dir/routers.pt``. Returns the loss curve, steps done, seconds and
    whether it finished (``max_minutes`` may stop it early; rerun to continue).

    ``objective`` chooses the loss (:func:`router_loss`): ``'lm'``, the next-token loss on
    the block, or ``'distill'``, the KL divergence from the model's own full-attention
    distribution (:func:`distillation_loss`). It is recorded in the checkpoint: resuming
    with another objective is refused.

    With ``pair_budget = (r, mu)`` the loss is the objective's loss plus

    .. math::
        \mu \cdot \frac{1}{L} \sum_{l=1}^{L} \max(0,\ r_l - r),

    :math:`r_l` the share of far causal pairs (beyond the window) that layer :math:`l`'s
    hard groups keep (:func:`~quest_geometric.nn.focus.straight_through_pair_share`,
    straight-through gradient): a charge for every kept far pair above the budget
    :math:`r`. ``curve`` stays the objective's loss; ``share_curve`` records
    :math:`\bar r_l` per step. ``init_from`` (a :func:`~quest_geometric.nn.focus.
    save_routers` folder) sets the routers before the first step of a new run, as initial
    values: its tensors must match the model's Focus layers, but the model keeps the window
    and sinks it was composed with (``load_routers(..., strict=False)``), so routers trained
    without sinks can start a training with them."""
    from tqdm.auto import tqdm

    from quest_geometric.nn.focus import (
        focus_layers,
        load_routers,
        router_parameters,
        straight_through_pair_share,
    )
    check_objective(objective, "train_routers")
    budget_text = "a pair (share in [0, 1], finite weight >= 0) or None"
    budget = None
    if pair_budget is not None:
        try:
            budget = [float(v) for v in pair_budget]
        except (TypeError, ValueError):
            raise fail(TypeError, "train_routers", "pair_budget", budget_text,
                       pair_budget) from None
        if len(budget) != 2:
            raise fail(ValueError, "train_routers", "pair_budget", budget_text, pair_budget)
        r_max, mu = budget
        if not (0.0 <= r_max <= 1.0) or not (mu >= 0.0 and math.isfinite(mu)):
            raise fail(ValueError, "train_routers", "pair_budget", budget_text, pair_budget)
    record = {"loss": objective, "pair_budget": budget,
                 "init_from": None if init_from is None else str(init_from),
                 "gate": sorted({str(f.gate) for f in focus_layers(model)}),
                 "gate_bias": sorted({f.gate_bias for f in focus_layers(model)})}
    params = list(router_parameters(model))
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    run_dir.mkdir(parents=True, exist_ok=True)
    ck = run_dir / "routers.pt"
    state: Dict[str, Any] = {"step": 0, "curve": [], "seconds": 0.0, "objective": record}
    if ck.is_file():
        blob = read_router_checkpoint(ck)
        saved = blob["state"].get("objective")
        if saved is not None:  # older checkpoints: gate_bias 0.5, the 'lm' loss
            saved = {"gate_bias": [0.5], "loss": "lm", **saved}
        if saved is not None and saved != record:
            raise ValueError(f"train_routers: {ck} was trained with {saved}, not {record}; "
                             f"use another run_dir")
        set_router_params(params, blob, ck, "train_routers")
        opt.load_state_dict(blob["opt"])
        state = blob["state"]
    elif init_from is not None:  # initial values: the model keeps its own window and sinks
        load_routers(model, str(init_from), strict=False)
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
    with router_outputs(model, enabled=budget is not None) as captured:
        model.train()
        t_start = time.perf_counter()
        base_s = state["seconds"]
        bar = tqdm(total=steps, initial=state["step"], desc=desc, disable=not progress)
        while state["step"] < steps:
            x = train[order[state["step"]]].unsqueeze(0)
            captured.clear()
            loss = router_loss(model, x, objective)
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
                write_router_checkpoint(ck, params, opt, state)
            if late:
                break
        bar.close()
    model.eval()
    return {**state, "finished": state["step"] >= steps}


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
    num_blocks = check_int(num_blocks, "num_blocks", 1, where="block_order")
    steps = check_int(steps, "steps", 0, where="block_order")
    chunk_passes = check_int(chunk_passes, "chunk_passes", 1, where="block_order")
    size = num_blocks * chunk_passes
    chunks = max(1, math.ceil(steps / size))
    gen = torch.Generator().manual_seed(seed)
    return torch.cat([torch.randperm(size, generator=gen) % num_blocks for _ in range(chunks)])

