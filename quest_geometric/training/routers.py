"""Training the routers of a Focus-composed model (every other weight frozen): resumable,
with a seeded block order, an optional pair budget, and the checkpoint of the runs (digested
safetensors and JSON, the seed and data recorded, the folder locked while a run trains)."""
from __future__ import annotations

import contextlib
import math
import os
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import torch

from quest_geometric._utils.checks import check_choice, check_int, fail

__all__ = ["train_routers", "router_loss", "distillation_loss", "OBJECTIVES", "block_order",
           "router_outputs", "read_router_checkpoint", "write_router_checkpoint",
           "set_router_params", "check_objective", "data_fingerprint", "ORDER_CHUNK_PASSES",
           "CHECKPOINT_TENSORS", "CHECKPOINT_RECORD", "LOCK_NAME"]

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


#: The files of a :func:`train_routers` checkpoint in its ``run_dir``: the router parameters
#: and the optimiser's tensors (safetensors), and the record of the run (JSON: its step, loss
#: curve, objective, seed, data and the optimiser's settings) with the SHA-256 digest of
#: both (:mod:`quest_geometric._utils.digested`, as the router files of
#: :func:`~quest_geometric.nn.focus.save_routers`).
CHECKPOINT_TENSORS = "routers.safetensors"
CHECKPOINT_RECORD = "routers.json"
#: The lock a running :func:`train_routers` holds on its ``run_dir``.
LOCK_NAME = ".train_routers.lock"
_FORMAT = "quest_geometric.router_training"
_VERSION = 1


def data_fingerprint(train: torch.Tensor) -> Dict[str, Any]:
    """What a checkpoint records of its training data: shape, dtype and the SHA-256 of the
    bytes, so that a run resumed on other data is refused."""
    import hashlib

    t = train.detach().cpu().contiguous()
    raw = t.reshape(-1).view(torch.uint8) if t.numel() else t.new_empty(0, dtype=torch.uint8)
    return {"shape": list(t.shape), "dtype": str(t.dtype),
            "sha256": hashlib.sha256(raw.numpy().tobytes()).hexdigest()}


def _checkpoint_files(path: str | os.PathLike) -> Tuple[Path, Path]:
    p = Path(os.fspath(path))
    if p.name in (CHECKPOINT_TENSORS, CHECKPOINT_RECORD):
        p = p.parent
    return p / CHECKPOINT_TENSORS, p / CHECKPOINT_RECORD


def read_router_checkpoint(path: str | os.PathLike) -> Dict[str, Any]:
    """A :func:`train_routers` checkpoint: ``params`` (list of tensors), ``opt`` (the
    optimiser's state dict), ``state``, ``seed`` and ``data``. :obj:`path` is the run folder
    or one of its two files. Both files are checked against their digest, every tensor to be
    floating and finite; nothing is unpickled.

    Raises:
        FileNotFoundError: if the run folder holds no checkpoint.
        ValueError: a one-line refusal naming the file and what is wrong.
    """
    from quest_geometric._utils.digested import read_record, read_tensors
    from quest_geometric._utils.untrusted import refused

    where = "read_router_checkpoint"
    tensors_file, record_file = _checkpoint_files(path)
    if not record_file.is_file() or not tensors_file.is_file():
        raise FileNotFoundError(f"{where}: no train_routers checkpoint ({CHECKPOINT_RECORD} "
                                f"and {CHECKPOINT_TENSORS}) in {str(record_file.parent)!r}")
    record = read_record(where, record_file)
    if record.get("format") != _FORMAT or record.get("version") != _VERSION:
        raise refused(where, record_file, f"it is not a train_routers checkpoint (format "
                      f"{_FORMAT!r}, version {_VERSION})")
    tensors = read_tensors(where, tensors_file, record, record_file)
    try:
        return _unpack(record, tensors)
    except (KeyError, TypeError, ValueError) as e:
        raise refused(where, record_file, "its record is incomplete", e) from None


def _unpack(record: Dict[str, Any], tensors: Dict[str, torch.Tensor]) -> Dict[str, Any]:
    """The checkpoint of a checked record and its tensors (the inverse of :func:`_pack`)."""
    opt = record["opt"]
    state: Dict[int, Dict[str, Any]] = {}
    for name, t in tensors.items():
        if name.startswith("opt."):
            _, idx, key = name.split(".", 2)
            state.setdefault(int(idx), {})[key] = t
    for name, v in opt["scalars"].items():
        idx, key = name.split(".", 1)
        state.setdefault(int(idx), {})[key] = v
    n = record["num_params"]
    return {"params": [tensors[f"param.{i}"] for i in range(n)],
            "opt": {"state": state, "param_groups": opt["param_groups"]},
            "state": record["state"], "seed": record["seed"], "data": record["data"]}


def _pack(params: List[torch.Tensor], opt: Any) -> Tuple[Dict[str, torch.Tensor],
                                                           Dict[str, Any]]:
    """The tensors and the JSON part of a checkpoint's parameters and optimiser state."""
    sd = opt.state_dict()
    tensors = {f"param.{i}": p.detach() for i, p in enumerate(params)}
    scalars = {}
    for idx, entries in sd["state"].items():
        for key, v in entries.items():
            if isinstance(v, torch.Tensor):
                tensors[f"opt.{idx}.{key}"] = v
            else:
                scalars[f"{idx}.{key}"] = v
    return tensors, {"param_groups": sd["param_groups"], "scalars": scalars}


def write_router_checkpoint(run_dir: str | os.PathLike, params: List[torch.Tensor],
                            opt: Any, state: Dict[str, Any], seed: int,
                            data: Dict[str, Any]) -> None:
    """Write a :func:`train_routers` checkpoint into :obj:`run_dir` (read back by
    :func:`read_router_checkpoint`): :data:`CHECKPOINT_TENSORS` then
    :data:`CHECKPOINT_RECORD` with the digest of both, each atomically."""
    from quest_geometric._utils.digested import write_pair

    tensors_file, record_file = _checkpoint_files(run_dir)
    tensors, opt_record = _pack(params, opt)
    write_pair(tensors_file, record_file, tensors, {
        "format": _FORMAT, "version": _VERSION, "num_params": len(params), "opt": opt_record,
        "state": state, "seed": seed, "data": data})


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


def _check_budget(pair_budget: Any) -> Optional[List[float]]:
    """``[r, mu]`` of a checked ``pair_budget`` (or :obj:`None`)."""
    if pair_budget is None:
        return None
    text = "a pair (share in [0, 1], finite weight >= 0) or None"
    try:
        budget = [float(v) for v in pair_budget]
    except (TypeError, ValueError):
        raise fail(TypeError, "train_routers", "pair_budget", text, pair_budget) from None
    if len(budget) != 2:
        raise fail(ValueError, "train_routers", "pair_budget", text, pair_budget)
    r_max, mu = budget
    if not (0.0 <= r_max <= 1.0) or not (mu >= 0.0 and math.isfinite(mu)):
        raise fail(ValueError, "train_routers", "pair_budget", text, pair_budget)
    return budget


def _resume(run_dir: Path, params: List[torch.Tensor], opt: Any, record: Dict[str, Any],
            seed: int, data: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The state of the checkpoint in :obj:`run_dir` after loading its parameters and
    optimiser state, or :obj:`None` for a new run; a checkpoint of another objective, seed
    or data is refused."""
    where = "train_routers"
    if (run_dir / "routers.pt").is_file():
        raise ValueError(f"{where}: {str(run_dir)!r} holds a routers.pt of an earlier version "
                         f"(no digest, seed or data record), which this version does not "
                         f"resume; use another run_dir")
    if not (run_dir / CHECKPOINT_RECORD).is_file():
        return None
    blob = read_router_checkpoint(run_dir)
    ck = run_dir / CHECKPOINT_RECORD
    saved = blob["state"].get("objective")
    if saved != record:
        raise ValueError(f"{where}: {ck} was trained with {saved}, not {record}; use another "
                         f"run_dir")
    if blob["seed"] != seed:
        raise ValueError(f"{where}: {ck} was trained with seed={blob['seed']}, not "
                         f"seed={seed}; resume with the same seed or use another run_dir")
    if blob["data"] != data:
        raise ValueError(f"{where}: {ck} was trained on other data ({blob['data']}, not "
                         f"{data}); resume with the same 'train' or use another run_dir")
    set_router_params(params, blob, ck, where)
    opt.load_state_dict(blob["opt"])
    return blob["state"]


def train_routers(model: Any, train: torch.Tensor, steps: int, lr: float,
                  run_dir: str | os.PathLike, seed: int = 0, ckpt_every: int = 10,
                  progress: bool = True, max_minutes: Optional[float] = None,
                  desc: str = "routers", pair_budget: Optional[Tuple[float, float]] = None,
                  init_from: Optional[str | os.PathLike] = None,
                  objective: str = "lm") -> Dict[str, Any]:
    r"""Train the routers of a composed model (every other weight frozen) on blocks drawn
    from ``train`` with a seeded permutation (:func:`block_order`, one block per step, AdamW),
    resuming from the checkpoint in ``run_dir`` (:data:`CHECKPOINT_TENSORS` and
    :data:`CHECKPOINT_RECORD`, safetensors and JSON with a digest of both). Returns the loss
    curve, steps done, seconds and whether it finished (``max_minutes`` may stop it early;
    rerun to continue).

    The run holds a lock on ``run_dir`` (:data:`LOCK_NAME`) while it trains, so a second
    process on the same folder is refused. The checkpoint records the objective, the seed
    and a fingerprint of ``train`` (:func:`data_fingerprint`): resuming with another
    objective, seed or data is refused instead of continuing the first run's routers.

    ``objective`` chooses the loss (:func:`router_loss`): ``'lm'``, the next-token loss on
    the block, or ``'distill'``, the KL divergence from the model's own full-attention
    distribution (:func:`distillation_loss`).

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
    without sinks can start a training with them.

    Args:
        run_dir (str or os.PathLike): the run's folder (created if missing).

    Raises:
        ValueError: for a bad argument, a checkpoint of another objective, seed or data, a
            damaged checkpoint, or a non-finite loss.
        quest_geometric._utils.lock.FolderInUseError: if another run holds ``run_dir``.
    """
    from quest_geometric._utils.lock import FolderLock
    from quest_geometric.nn.focus import focus_layers, load_routers, router_parameters

    check_objective(objective, "train_routers")
    budget = _check_budget(pair_budget)
    if not isinstance(train, torch.Tensor) or train.dim() != 2:
        raise fail(TypeError if not isinstance(train, torch.Tensor) else ValueError,
                   "train_routers", "train", "a [blocks, length] tensor of token ids", train)
    check_int(seed, "seed", 0, where="train_routers")
    run_dir = Path(os.fspath(run_dir))
    record = {"loss": objective, "pair_budget": budget,
              "init_from": None if init_from is None else os.fspath(init_from),
              "gate": sorted({str(f.gate) for f in focus_layers(model)}),
              "gate_bias": sorted({f.gate_bias for f in focus_layers(model)})}
    params = list(router_parameters(model))
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    data = data_fingerprint(train)
    with FolderLock(run_dir, LOCK_NAME, "train_routers"):
        state = _resume(run_dir, params, opt, record, seed, data)
        if state is None:
            state = {"step": 0, "curve": [], "seconds": 0.0, "objective": record,
                     "order": "chunks"}
            if init_from is not None:  # initial values: the model keeps its window, sinks
                load_routers(model, os.fspath(init_from), strict=False)
        if budget is not None:
            state.setdefault("share_curve", [])
        order = block_order(train.size(0), steps, seed)
        _steps(model, train, order, steps, params, opt, state, budget, objective,
               lambda: write_router_checkpoint(run_dir, params, opt, state, seed, data),
               ckpt_every, max_minutes, progress, desc)
    model.eval()
    return {**state, "finished": state["step"] >= steps}


def _steps(model: Any, train: torch.Tensor, order: torch.Tensor, steps: int,
           params: List[torch.Tensor], opt: Any, state: Dict[str, Any],
           budget: Optional[List[float]], objective: str, save: Any, ckpt_every: int,
           max_minutes: Optional[float], progress: bool, desc: str) -> None:
    """The training loop of :func:`train_routers`, from ``state['step']`` to ``steps``;
    ``save()`` writes the checkpoint every ``ckpt_every`` steps, at the end and when
    ``max_minutes`` have passed (then the loop stops)."""
    from tqdm.auto import tqdm

    from quest_geometric.nn.focus import straight_through_pair_share

    with router_outputs(model, enabled=budget is not None) as captured:
        model.train()
        t_start = time.perf_counter()
        base_s = state["seconds"]
        bar = tqdm(total=steps, initial=state["step"], desc=desc, disable=not progress)
        while state["step"] < steps:
            x = train[order[state["step"]]].unsqueeze(0)
            captured.clear()
            loss = router_loss(model, x, objective)
            if not math.isfinite(float(loss.detach())):
                raise ValueError(f"train_routers: the loss is {float(loss)} at step "
                                 f"{state['step']}; lower the learning rate (the checkpoint "
                                 f"holds the last saved step)")
            total = loss
            if budget is not None:
                shares = torch.stack([straight_through_pair_share(
                    out.soft.reshape(-1, out.soft.size(-1)),
                    out.groups.reshape(-1, out.groups.size(-1)), f.window, causal=f.causal)
                    for f, out in captured])
                total = loss + budget[1] * (shares - budget[0]).clamp_min(0.0).mean()
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
            late = max_minutes is not None and (time.perf_counter() - t_start) > 60 * max_minutes
            if state["step"] >= steps or late or state["step"] % ckpt_every == 0:
                save()
            if late:
                break
        bar.close()


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

