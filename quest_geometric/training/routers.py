"""Training the routers of a Focus-composed model (every other weight frozen): resumable,
with a seeded block order, an optional pair budget, and the checkpoint of the runs (digested
safetensors and JSON, the seed and data recorded, the folder locked while a run trains)."""
from __future__ import annotations

import contextlib
import functools
import math
import os
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import torch

from quest_geometric._utils.checks import check_choice, check_int, fail

__all__ = ["train_routers", "router_loss", "distillation_loss", "OBJECTIVES", "block_order",
           "decoder_checkpointing", "check_loss_chunk", "chunked_lm_loss",
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
    call order (nothing when not ``enabled``); the hooks are removed on any exit. A router
    shared by several layers is hooked once, each call attributed to the layer running."""
    from quest_geometric.nn.focus import focus_layers

    captured: List[Tuple[Any, Any]] = []
    running: List[Any] = [None]
    hooks, layers = [], focus_layers(model) if enabled else []
    for f in layers:  # every path into a layer's routing goes through its attend()
        def attend(*args: Any, _f: Any = f, _attend: Any = f.attend, **kw: Any) -> Any:
            running[0] = _f
            return _attend(*args, **kw)
        f.attend = attend
    for r in {id(f.router): f.router for f in layers}.values():
        hooks.append(r.register_forward_hook(
            lambda _m, _i, out: captured.append((running[0], out))))
    try:
        yield captured
    finally:
        for h in hooks:
            h.remove()
        for f in layers:
            del f.attend


def check_objective(objective: Any, where: str) -> str:
    """``objective`` if it is one of :data:`OBJECTIVES`, else a :class:`TypeError` (not a
    string) or :class:`ValueError` naming ``where``."""
    return check_choice(objective, "objective", OBJECTIVES, where=where)


def _valid_ids(input_ids: Any, attention_mask: Any, where: str) -> None:
    what = "a [batch, length] integer tensor"
    if not isinstance(input_ids, torch.Tensor) or input_ids.dtype not in (torch.long,
                                                                           torch.int32):
        raise fail(TypeError, where, "input_ids", what, input_ids)
    if input_ids.dim() != 2:
        raise fail(ValueError, where, "input_ids", what, input_ids)
    if input_ids.size(1) < 2:
        raise fail(ValueError, where, "input_ids", "a tensor of at least 2 tokens per row",
                   input_ids)
    if attention_mask is not None and not isinstance(attention_mask, torch.Tensor):
        raise fail(TypeError, where, "attention_mask", "a tensor (or None)", attention_mask)
    if attention_mask is not None and attention_mask.shape != input_ids.shape:
        raise fail(ValueError, where, "attention_mask",
                   f"of the shape of 'input_ids' {list(input_ids.shape)}", attention_mask)


def check_loss_chunk(loss_chunk: Any, where: str, model: Any = None) -> Optional[int]:
    """``loss_chunk`` if it is :obj:`None` or an int >= 1 (else a :class:`TypeError` or
    :class:`ValueError` naming ``where``); with a ``model`` and a chunk, also that the model's
    logits are its output embedding of its decoder's last hidden states, as the chunked
    losses compute them."""
    if loss_chunk is None:
        return None
    loss_chunk = check_int(loss_chunk, "loss_chunk", 1, where=where)
    if model is not None:
        _decoder_and_head(model, where)
    return loss_chunk


#: Configuration entries of a causal LM whose logits are not just the output embedding of
#: the last hidden states (a soft-cap or a scale); the chunked losses refuse such a model.
_HEAD_EXTRAS = ("final_logit_softcapping", "logit_scale", "logits_scaling")


def _decoder_and_head(model: Any, where: str) -> Tuple[Any, Any]:
    """``(decoder, head)`` of a Hugging Face causal LM (``base_model`` and
    ``get_output_embeddings()``), so that ``logits = head(decoder(...).last_hidden_state)``;
    a model where that does not hold is refused, naming ``loss_chunk``."""
    decoder = getattr(model, "base_model", None)
    get_head = getattr(model, "get_output_embeddings", None)
    head = get_head() if callable(get_head) else None
    config = getattr(model, "config", None)
    extra = [a for a in _HEAD_EXTRAS if getattr(config, a, None) not in (None, 1, 1.0)]
    if decoder is None or decoder is model or head is None or extra:
        why = (f"its logits are not the output embedding of the last hidden states "
               f"({', '.join(extra)} in its config)" if extra else
               "it has no separate decoder (base_model) and output embedding "
               "(get_output_embeddings())")
        raise fail(ValueError, where, "loss_chunk", "None for this model",
                   got_text=f"{type(model).__name__} with a chunk, but {why}")
    return decoder, head


def _last_hidden(decoder: Any, input_ids: torch.Tensor,
                 attention_mask: Optional[torch.Tensor]) -> torch.Tensor:
    """``[batch, length, C]``: the hidden states the LM head reads."""
    return decoder(input_ids=input_ids, attention_mask=attention_mask,
                   use_cache=False).last_hidden_state


def _kl(teacher: torch.Tensor, student: torch.Tensor) -> torch.Tensor:
    """``[batch, t]``: the KL of :func:`distillation_loss` per position, in float32."""
    log_p = torch.log_softmax(teacher.float(), dim=-1)
    log_q = torch.log_softmax(student.float(), dim=-1)
    return (log_p.exp() * (log_p - log_q)).sum(-1)


def _kl_rows(head: Any, h_q: torch.Tensor, h_p: torch.Tensor,
             keep: torch.Tensor) -> torch.Tensor:
    """The summed KL over one chunk: ``h_q`` (Focus), ``h_p`` (full) ``[batch, c, C]``."""
    return (_kl(head(h_p), head(h_q)) * keep).sum()


def _ce_rows(head: Any, h: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The summed cross-entropy over one chunk: ``h`` ``[batch, c, C]``, ``targets``
    ``[batch, c]`` (-100 left out)."""
    logits = head(h).float()
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)),
                                             targets.reshape(-1), ignore_index=-100,
                                             reduction="sum")


def _chunk_sum(fn: Any, chunk: int, *rows: torch.Tensor) -> torch.Tensor:
    r"""``sum_j fn(*(r[:, j*chunk:(j+1)*chunk] for r in rows))``, each chunk checkpointed
    (non-reentrant) when it needs a gradient, so that the backward recomputes its logits and
    one ``[batch, chunk, vocab]`` block is the largest tensor alive."""
    from torch.utils.checkpoint import checkpoint

    grad = torch.is_grad_enabled() and any(r.requires_grad for r in rows)
    parts = (tuple(r[:, a:a + chunk] for r in rows) for a in range(0, rows[0].size(1), chunk))
    return sum(checkpoint(fn, *p, use_reentrant=False) if grad else fn(*p) for p in parts)


def distillation_loss(model: Any, input_ids: torch.Tensor,
                      attention_mask: Optional[torch.Tensor] = None,
                      loss_chunk: Optional[int] = None) -> torch.Tensor:
    r"""The KL divergence from a Focus-composed model's own full-attention next-token
    distribution to its Focus distribution, on the same tokens (no labels):

    .. math::
        \mathcal{L} = \frac{1}{|\mathcal{P}|} \sum_{t \in \mathcal{P}} \sum_{v}
        p_t(v) \left(\log p_t(v) - \log q_t(v)\right),

    :math:`p_t` (float32) with Focus disabled and no gradient, :math:`q_t` with Focus,
    :math:`\mathcal{P}` the positions the ``attention_mask`` keeps. The routers learn to
    preserve the model rather than to adapt it to the data, as SeerAttention trains its gates.

    Args:
        model: a Hugging Face causal LM composed with
            :func:`~quest_geometric.nn.focus.compose_focus`.
        input_ids (Tensor): ``[batch, length]`` token ids, ``length >= 2``.
        attention_mask (Tensor, optional): ``[batch, length]``, 1 for real tokens.
        loss_chunk (int, optional): positions per chunk (as in :func:`chunked_lm_loss`), or
            :obj:`None` for the plain form. (default: :obj:`None`)

    Returns:
        Tensor: the scalar loss (0 exactly when Focus keeps every causal pair).
    """
    from quest_geometric.nn.focus import focus_disabled

    _valid_ids(input_ids, attention_mask, "distillation_loss")
    loss_chunk = check_loss_chunk(loss_chunk, "distillation_loss")
    if loss_chunk is not None:
        decoder, head = _decoder_and_head(model, "distillation_loss")
        with torch.no_grad(), focus_disabled(model):
            h_p = _last_hidden(decoder, input_ids, attention_mask)
        h_q = _last_hidden(decoder, input_ids, attention_mask)
        keep = (torch.ones(input_ids.shape, dtype=torch.float32, device=h_q.device)
                if attention_mask is None else attention_mask.to(h_q.device, torch.float32))
        total = _chunk_sum(functools.partial(_kl_rows, head), loss_chunk, h_q, h_p, keep)
        return total / keep.sum().clamp_min(1.0)
    with torch.no_grad(), focus_disabled(model):
        teacher = model(input_ids, attention_mask=attention_mask, use_cache=False).logits
    student = model(input_ids, attention_mask=attention_mask, use_cache=False).logits
    kl = _kl(teacher, student)
    if attention_mask is None:
        return kl.mean()
    keep = attention_mask.to(kl.dtype)
    return (kl * keep).sum() / keep.sum().clamp_min(1.0)


def chunked_lm_loss(model: Any, input_ids: torch.Tensor, labels: torch.Tensor,
                    loss_chunk: int, attention_mask: Optional[torch.Tensor] = None,
                    num_items: Optional[Any] = None) -> torch.Tensor:
    """A causal LM's next-token loss as Hugging Face computes it (``labels[t + 1]`` predicted at
    :math:`t`, ``-100`` left out, the float32 cross-entropy summed and divided by the number of
    predicted tokens or by ``num_items``), by chunks of ``loss_chunk`` positions of the
    decoder's last hidden states, each chunk's LM head and loss checkpointed, so that the
    ``[batch, length, vocab]`` logits are never all alive. Equal to the plain loss up to
    rounding.

    Args:
        model: a Hugging Face causal LM.
        input_ids (Tensor): ``[batch, length]`` token ids.
        labels (Tensor): ``[batch, length]`` (unshifted, as Hugging Face takes them).
        loss_chunk (int): positions per chunk, >= 1.
        attention_mask (Tensor, optional): ``[batch, length]``, 1 for real tokens.
        num_items (int or Tensor, optional): the divisor instead of the count of predicted
            tokens. (default: :obj:`None`)

    Returns:
        Tensor: the scalar loss.
    """
    where = "chunked_lm_loss"
    _valid_ids(input_ids, attention_mask, where)
    loss_chunk = check_int(loss_chunk, "loss_chunk", 1, where=where)
    if not isinstance(labels, torch.Tensor) or labels.shape != input_ids.shape:
        raise fail(ValueError, where, "labels",
                   f"a tensor of the shape of 'input_ids' {list(input_ids.shape)}", labels)
    decoder, head = _decoder_and_head(model, where)
    h = _last_hidden(decoder, input_ids, attention_mask)
    targets = torch.nn.functional.pad(labels, (0, 1), value=-100)[:, 1:].to(h.device)
    total = _chunk_sum(functools.partial(_ce_rows, head), loss_chunk, h, targets)
    if num_items is None:
        num_items = (targets != -100).sum()
    if torch.is_tensor(num_items):
        num_items = num_items.to(total.device)
    return total / num_items


def router_loss(model: Any, input_ids: torch.Tensor, objective: str = "lm",
                attention_mask: Optional[torch.Tensor] = None,
                loss_chunk: Optional[int] = None) -> torch.Tensor:
    """The loss the routers of a Focus-composed ``model`` are trained on, for one batch:
    ``'lm'``, the model's next-token loss with ``labels = input_ids`` (Hugging Face's mean over
    the predicted tokens), or ``'distill'``, :func:`distillation_loss`.

    Args:
        model: a Hugging Face causal LM composed with Focus.
        input_ids (Tensor): ``[batch, length]`` token ids.
        objective (str): one of :data:`OBJECTIVES`. (default: :obj:`'lm'`)
        attention_mask (Tensor, optional): ``[batch, length]``, 1 for real tokens.
        loss_chunk (int, optional): compute the loss by chunks of this many positions
            (:func:`chunked_lm_loss`); :obj:`None` for the plain form. (default: :obj:`None`)

    Returns:
        Tensor: the scalar loss.
    """
    check_objective(objective, "router_loss")
    loss_chunk = check_loss_chunk(loss_chunk, "router_loss")
    if objective == "distill":
        return distillation_loss(model, input_ids, attention_mask, loss_chunk=loss_chunk)
    _valid_ids(input_ids, attention_mask, "router_loss")
    labels = input_ids if attention_mask is None else input_ids.masked_fill(
        attention_mask == 0, -100)
    if loss_chunk is not None:
        return chunked_lm_loss(model, input_ids, labels, loss_chunk, attention_mask)
    return model(input_ids, attention_mask=attention_mask, labels=labels,
                 use_cache=False).loss


@contextlib.contextmanager
def decoder_checkpointing(model: Any, enabled: bool = True,
                          where: str = "decoder_checkpointing") -> Iterator[None]:
    """While open, non-reentrant Hugging Face gradient checkpointing of ``model``'s decoder
    layers (one layer's activations alive at a time, the same values and gradients); then the
    model is left as it was. Non-reentrant because a reentrant checkpoint passes gradients into
    a layer only when its (here frozen) input needs one.

    Args:
        model: a Hugging Face model (``supports_gradient_checkpointing``).
        enabled (bool): :obj:`False` opens a context that does nothing. (default: :obj:`True`)
        where (str): the caller named in an error.

    Raises:
        ValueError: for a model without Hugging Face gradient checkpointing, naming
            ``gradient_checkpointing``.
    """
    if not enabled:
        yield
        return
    _check_checkpointing(model, where)
    if any(getattr(m, "gradient_checkpointing", False) is True for m in model.modules()):
        yield  # already checkpointing: the caller's settings stay
        return
    had_hooks = bool(getattr(model, "_require_grads_hooks", None)
                     or getattr(model, "_require_grads_hook", None))
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    try:
        yield
    finally:
        if hasattr(model, "activation_checkpointing_disable"):
            model.activation_checkpointing_disable()
        else:
            model.gradient_checkpointing_disable()
        # Hugging Face's enable may hook the input embeddings to make their output require a
        # gradient (for the reentrant form); a hook this context added is removed, so that a
        # later forward builds no graph the model did not build before
        if not had_hooks and hasattr(model, "disable_input_require_grads"):
            model.disable_input_require_grads()


def _check_checkpointing(model: Any, where: str) -> None:
    if not getattr(model, "supports_gradient_checkpointing", False) or not hasattr(
            model, "gradient_checkpointing_enable"):
        raise fail(ValueError, where, "gradient_checkpointing",
                   "False for a model without Hugging Face gradient checkpointing",
                   got_text=f"True for a {type(model).__name__}")


#: The files of a :func:`train_routers` checkpoint in its ``run_dir``: the router parameters
#: and the optimiser's tensors (safetensors), and the run's record (JSON) with the SHA-256
#: digest of both (as :func:`~quest_geometric.nn.focus.save_routers` writes its files).
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
    optimiser's state dict), ``state``, ``seed`` and ``data``, from the run folder or one of
    its two files. Both files are checked against their digest, every tensor to be floating
    and finite; nothing is unpickled.

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
    entries = [(n[len("opt."):], t) for n, t in tensors.items() if n.startswith("opt.")]
    for name, v in entries + list(opt["scalars"].items()):
        idx, key = name.split(".", 1)
        state.setdefault(int(idx), {})[key] = v
    return {"params": [tensors[f"param.{i}"] for i in range(record["num_params"])],
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

    tensors, opt_record = _pack(params, opt)
    write_pair(*_checkpoint_files(run_dir), tensors, {
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
    if not (0.0 <= budget[0] <= 1.0) or not (budget[1] >= 0.0 and math.isfinite(budget[1])):
        raise fail(ValueError, "train_routers", "pair_budget", text, pair_budget)
    return budget


def _resume(run_dir: Path, params: List[torch.Tensor], opt: Any, record: Dict[str, Any],
            seed: int, data: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The state of the checkpoint in :obj:`run_dir` after loading its parameters and
    optimiser state, or :obj:`None` for a new run; a checkpoint of another objective, seed
    or data is refused."""
    where = "train_routers"
    if not (run_dir / CHECKPOINT_RECORD).is_file():
        return None
    blob, ck = read_router_checkpoint(run_dir), run_dir / CHECKPOINT_RECORD
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
                  objective: str = "lm", gradient_checkpointing: bool = False,
                  loss_chunk: Optional[int] = None) -> Dict[str, Any]:
    r"""Train the routers of a composed model (every other weight frozen, AdamW) on one block of
    ``train`` per step (:func:`block_order`), resuming from the checkpoint in ``run_dir``, which
    is locked while the run trains (:data:`LOCK_NAME`). The checkpoint records the objective,
    the seed and :func:`data_fingerprint` of ``train``: resuming with others is refused rather
    than continuing the first run's routers. ``max_minutes`` may stop the run early (rerun to
    continue). With ``pair_budget = (r, mu)`` the loss is the objective's plus

    .. math::
        \mu \cdot \frac{1}{L} \sum_{l=1}^{L} \max(0,\ r_l - r),

    :math:`r_l` the share of far causal pairs (beyond the window) that layer :math:`l`'s hard
    groups keep (:func:`~quest_geometric.nn.focus.straight_through_pair_share`); ``curve``
    stays the objective's loss, ``share_curve`` records :math:`\bar r_l`. ``init_from`` (a
    :func:`~quest_geometric.nn.focus.save_routers` folder) gives a new run its initial routers
    (``load_routers(..., strict=False)``: the model keeps its window and sinks).

    Args:
        run_dir (str or os.PathLike): the run's folder (created if missing).
        gradient_checkpointing (bool): checkpoint the decoder layers
            (:func:`decoder_checkpointing`). (default: :obj:`False`)
        loss_chunk (int, optional): positions per chunk of the loss (:func:`router_loss`), or
            :obj:`None` for the plain loss. (default: :obj:`None`)

    Returns:
        dict: the state (``curve``, ``step``, ``seconds``, ``memory``...) and ``finished``.

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
    if not isinstance(gradient_checkpointing, bool):
        raise fail(TypeError, "train_routers", "gradient_checkpointing", "a bool",
                   gradient_checkpointing)
    if gradient_checkpointing:
        _check_checkpointing(model, "train_routers")
    loss_chunk = check_loss_chunk(loss_chunk, "train_routers", model)
    memory = {"gradient_checkpointing": gradient_checkpointing, "loss_chunk": loss_chunk}
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
        state["memory"] = memory
        order = block_order(train.size(0), steps, seed)
        with decoder_checkpointing(model, gradient_checkpointing, "train_routers"):
            _steps(model, train, order, steps, params, opt, state, budget, objective,
                   lambda: write_router_checkpoint(run_dir, params, opt, state, seed, data),
                   ckpt_every, max_minutes, progress, desc, loss_chunk)
    model.eval()
    return {**state, "finished": state["step"] >= steps}


def _steps(model: Any, train: torch.Tensor, order: torch.Tensor, steps: int,
           params: List[torch.Tensor], opt: Any, state: Dict[str, Any],
           budget: Optional[List[float]], objective: str, save: Any, ckpt_every: int,
           max_minutes: Optional[float], progress: bool, desc: str,
           loss_chunk: Optional[int] = None) -> None:
    """The loop of :func:`train_routers` from ``state['step']`` to ``steps``; ``save()``
    runs every ``ckpt_every`` steps, at the end and after ``max_minutes`` (then it stops).
    The captured router calls are cleared each step: decoder checkpointing adds the
    backward's recomputed calls after the pair budget has read the forward's."""
    from tqdm.auto import tqdm

    from quest_geometric.nn.focus import straight_through_pair_share

    with router_outputs(model, enabled=budget is not None) as captured:
        model.train()
        t_start, base_s = time.perf_counter(), state["seconds"]
        bar = tqdm(total=steps, initial=state["step"], desc=desc, disable=not progress)
        while state["step"] < steps:
            x = train[order[state["step"]]].unsqueeze(0)
            captured.clear()
            loss = router_loss(model, x, objective, loss_chunk=loss_chunk)
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
    """The training block of each router step: chunk :math:`j` is a seeded permutation
    (``torch.randperm``, one generator seeded with ``seed``) of ``chunk_passes`` copies of the
    :math:`n` block indices, so every block is drawn equally often per chunk and a run resumed
    with more ``steps`` keeps every step it has done.

    Args:
        num_blocks (int): training blocks :math:`n`.
        steps (int): router steps.
        seed (int): permutation seed. (default: :obj:`0`)
        chunk_passes (int): passes per chunk. (default: :data:`ORDER_CHUNK_PASSES`)

    Returns:
        Tensor: ``[chunk_passes * n * ceil(steps / (chunk_passes * n))]`` long block indices
        (at least one chunk); step :math:`s` (from 0) uses entry :math:`s`.
    """
    num_blocks = check_int(num_blocks, "num_blocks", 1, where="block_order")
    steps = check_int(steps, "steps", 0, where="block_order")
    chunk_passes = check_int(chunk_passes, "chunk_passes", 1, where="block_order")
    size = num_blocks * chunk_passes
    chunks = max(1, math.ceil(steps / size))
    gen = torch.Generator().manual_seed(seed)
    return torch.cat([torch.randperm(size, generator=gen) % num_blocks for _ in range(chunks)])

