r"""The router file format: :func:`save_routers` / :func:`load_routers` and :func:`read_routers`
(read and check without a model).

A folder holds :data:`ROUTERS_FILE`, the tensors (safetensors), each named
``"{layer module path}.{router state dict key}"``, and :data:`ROUTERS_CONFIG`, a JSON record
of the :func:`~quest_geometric.nn.focus.compose.compose_focus` arguments (``"config"``, a
given router under ``"router"`` by its registered name and ``config()``), the layers, the
versions, and a SHA-256 digest covering the record and the tensors
(:mod:`quest_geometric._utils.digested`): editing either file is refused on reading. Every
size the record configures is checked against
:data:`~quest_geometric.nn.focus.router.CONFIG_LIMITS` before anything is built. Nothing is
unpickled: a file of any other format or version is refused.
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, Optional, Tuple

import torch
from torch import Tensor, nn

from quest_geometric._utils.checks import check_int, check_real, fail
from quest_geometric._utils.digested import read_record, read_tensors, write_pair
from quest_geometric._utils.untrusted import refused
from quest_geometric.nn.focus.compose import _STATE_ATTR, compose_focus, decompose
from quest_geometric.nn.focus.composed import FocusComposed
from quest_geometric.nn.focus.router import (CONFIG_LIMITS, registered_routers, router_class,
                                             router_name)

__all__ = ["save_routers", "load_routers", "read_routers",
           "router_record", "router_from_record", "ROUTERS_FILE", "ROUTERS_CONFIG"]

#: File :func:`save_routers` writes the router tensors to (safetensors, no pickle).
ROUTERS_FILE = "focus_routers.safetensors"
#: File :func:`save_routers` writes the composition, versions and digest to.
ROUTERS_CONFIG = "focus_routers.json"

_FORMAT = "quest_geometric.focus_routers"
_VERSION = 3
# What :func:`save_routers` reads off the running layers (FocusAttention first, then router).
# A record without ``num_sinks`` composes with compose_focus's default, 0 sinks.
_OPTIONS = ("num_groups", "top_k", "window", "group_dim", "tau", "sinkhorn_iters", "gate",
            "backend", "gate_scale", "gate_bias", "num_sinks")
_CONFIG_KEYS = frozenset(_OPTIONS + ("causal", "router"))
# The integer options and their least value; their greatest is CONFIG_LIMITS[name].
_INT_OPTIONS = {"num_groups": 1, "top_k": 0, "window": 0, "num_sinks": 0, "group_dim": 1,
                "sinkhorn_iters": 0}


def router_record(router: Any) -> Optional[Dict[str, Any]]:
    r"""The JSON record of a router, ``{"type": name, **router.config()}``, or :obj:`None` for a
    router whose exact class is not registered."""
    name = router_name(router)
    return None if name is None else {"type": name, **router.config()}


def router_from_record(record: Any) -> nn.Module:
    r"""The router :obj:`record` (:func:`router_record`) describes, built by its registered
    class's ``from_config`` (which bounds every size before allocating).

    Raises:
        ValueError: if :obj:`record` names no registered router, or its options are refused.
        TypeError: for an option of the wrong type.
    """
    if not isinstance(record, dict) or router_class(record.get("type")) is None:
        raise fail(ValueError, "router_from_record", "record", "a dict whose 'type' names a "
                   f"registered router (one of {list(registered_routers())})", record)
    options = {k: v for k, v in record.items() if k != "type"}
    return router_class(record["type"]).from_config(options)


def _running_config(state: Dict[str, Any]) -> Dict[str, Any]:
    """The composition arguments the layers actually run with (after set_focus_options)."""
    config = {k: v for k, v in state["config"].items() if k in _CONFIG_KEYS and k != "router"}
    keys = _OPTIONS + (("router",) if state["config"].get("router") is not None else ())
    for key in keys:
        values = []
        for _, _, w in state["wrappers"]:
            f = w.focus
            if key == "router":
                v = router_record(f.router)
            elif hasattr(f, key):
                v = getattr(f, key)
            else:  # a content-free router has no group_dim, tau, sinkhorn_iters
                v = getattr(f.router, key, state["config"].get(key))
            if v not in values:
                values.append(v)
        if len(values) > 1:
            raise ValueError(f"save_routers: the Focus layers run with different {key!r} "
                             f"({values}); give them one value (set_focus_options) first")
        config[key] = values[0]
    return json.loads(json.dumps(config))


def _versions() -> Dict[str, Optional[str]]:
    from importlib import metadata

    out: Dict[str, Optional[str]] = {"torch": torch.__version__}
    for dist in ("quest_geometric", "transformers"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def save_routers(model: nn.Module, path: str | os.PathLike) -> str:
    r"""Save the routers of a composed model into the folder :obj:`path` (e.g. that of
    ``model.save_pretrained``): the tensors in :data:`ROUTERS_FILE`, and in
    :data:`ROUTERS_CONFIG` the composition arguments the layers run with (after
    :func:`~quest_geometric.nn.focus.compose.set_focus_options`), the versions and the digest,
    each file written atomically.

    Args:
        model (torch.nn.Module): a model returned by
            :func:`~quest_geometric.nn.focus.compose.compose_focus`.
        path (str or os.PathLike): a folder (created if missing).

    Returns:
        str: the path of the written tensors file.

    Raises:
        ValueError: if :obj:`model` was not composed with ``compose_focus`` (with the default
            routers or a registered one), or its layers run with different options.
    """
    state = getattr(model, _STATE_ATTR, None)
    if state is None:
        raise fail(ValueError, "save_routers", "model", "a model composed with compose_focus",
                   got_text=f"a {type(model).__name__} that is not composed")
    if state["config"].get("router") is not None and any(
            router_name(w.focus.router) is None for _, _, w in state["wrappers"]):
        raise ValueError(f"save_routers: the model was composed with a given 'router' whose "
                         f"class is not registered; only the default learned routers and "
                         f"registered ones (register_router: {list(registered_routers())}) "
                         f"can be saved and recomposed")
    config = _running_config(state)
    names = {id(m): n for n, m in model.named_modules()}
    layers = [names[id(w)] for _, _, w in state["wrappers"]]
    tensors = {f"{n}.{k}": t for n, (_, _, w) in zip(layers, state["wrappers"])
               for k, t in w.router.state_dict().items()}
    folder = os.fspath(path)
    os.makedirs(folder, exist_ok=True)
    write_pair(os.path.join(folder, ROUTERS_FILE), os.path.join(folder, ROUTERS_CONFIG),
               tensors, {"format": _FORMAT, "version": _VERSION, "config": config,
                         "layers": layers, "versions": _versions()})
    return os.path.join(folder, ROUTERS_FILE)


def _check_options(where: str, file: str, config: Dict[str, Any]) -> None:
    """Bound every size, count and scale :obj:`config` sets, before anything is built."""
    try:
        for name, least in _INT_OPTIONS.items():
            if name in config:
                check_int(config[name], name, least, maximum=CONFIG_LIMITS[name])
        if "tau" in config:
            check_real(config["tau"], "tau", positive=True)
        for name in ("gate_scale", "gate_bias"):
            if config.get(name) is not None:
                check_real(config[name], name)
        for name in ("gate", "backend"):
            if config.get(name) is not None and not isinstance(config[name], str):
                raise fail(TypeError, None, name, "a str or None", config[name])
        if config.get("causal") is not None and not isinstance(config["causal"], bool):
            raise fail(TypeError, None, "causal", "a bool or None", config["causal"])
    except (TypeError, ValueError) as e:
        raise refused(where, file, "its composition arguments are out of bounds "
                      "(quest_geometric.nn.focus.router.CONFIG_LIMITS)", e) from None


def _check_config(where: str, file: str, config: Any) -> Dict[str, Any]:
    """The composition arguments of a file, checked: known keys, bounded values, and a
    ``"router"`` record that its registered class rebuilds."""
    if not isinstance(config, dict) or not config:
        raise refused(where, file, "it records no composition arguments ('config')")
    unknown = sorted(set(config) - _CONFIG_KEYS)
    if unknown:
        raise refused(where, file, f"its config has unknown composition arguments {unknown}")
    _check_options(where, file, config)
    if config.get("router") is not None:
        try:
            router_from_record(config["router"])
        except (TypeError, ValueError) as e:
            raise refused(where, file, f"its 'router' record {config['router']!r} is "
                          f"refused", e) from None
    return dict(config)


def _read_pair(where: str, tensors_file: str, config_file: str
               ) -> Tuple[Dict[str, Any], Dict[str, Tensor]]:
    r"""``(config, tensors)`` of a :func:`save_routers` folder's two files, each checked."""
    if not os.path.isfile(config_file):
        raise refused(where, tensors_file, f"its config {os.path.basename(config_file)!r} "
                      f"is missing (save_routers writes both files)")
    if not os.path.isfile(tensors_file):
        raise refused(where, config_file, f"its tensors file "
                      f"{os.path.basename(tensors_file)!r} is missing")
    meta = read_record(where, config_file)
    if meta.get("format") != _FORMAT:
        raise refused(where, config_file, "it is not a router config of quest_geometric "
                      f"(no 'format': {_FORMAT!r})")
    version = meta.get("version")
    if version != _VERSION or isinstance(version, bool):
        raise refused(where, config_file, f"it has version {version!r}, this library reads "
                      f"version {_VERSION}")
    cfg = meta.get("config")
    tensors = read_tensors(where, tensors_file, meta, config_file,
                           allow_empty=isinstance(cfg, dict) and cfg.get("router") is not None)
    return _check_config(where, config_file, cfg), tensors


def _pair_at(path: str) -> Optional[Tuple[str, str]]:
    r"""The ``(tensors, config)`` files a folder or one of the two files names, or :obj:`None`."""
    if os.path.isdir(path):
        pair = (os.path.join(path, ROUTERS_FILE), os.path.join(path, ROUTERS_CONFIG))
        return pair if any(os.path.isfile(f) for f in pair) else None
    for ext in (".safetensors", ".json"):
        if path.endswith(ext):
            stem = path[:-len(ext)]
            return stem + ".safetensors", stem + ".json"
    return None


def read_routers(path: str | os.PathLike, where: str = "read_routers"
                 ) -> Tuple[str, Dict[str, Any], Dict[str, Tensor]]:
    r"""Read and check router files without a model: ``(file, config, tensors)`` of a
    :func:`save_routers` folder or one of its files; every tensor finite and floating, both
    files matching their digest, the configuration within
    :data:`~quest_geometric.nn.focus.router.CONFIG_LIMITS`.

    Raises:
        FileNotFoundError: if nothing is at :obj:`path`.
        ValueError: a one-line refusal naming the file and what is wrong.
    """
    path = os.fspath(path)
    pair = _pair_at(path)
    if pair is not None:
        config, tensors = _read_pair(where, *pair)
        return pair[0], config, tensors
    if os.path.isdir(path):
        raise FileNotFoundError(f"{where}: no {ROUTERS_FILE} in {path!r} (write it with "
                                f"save_routers(model, {path!r}))")
    raise FileNotFoundError(f"{where}: no router files at {path!r} (write them with "
                            f"save_routers(model, folder))")


def _compose_as_saved(model: nn.Module, file: str, config: Dict[str, Any]) -> None:
    """Compose an uncomposed :obj:`model` with a file's checked arguments."""
    try:
        if config.get("router") is not None:  # one router per layer, by its record
            record = config["router"]
            config = dict(config, router=lambda embed_dim: router_from_record(record))
        compose_focus(model, **config)
    except (TypeError, ValueError) as e:
        raise refused("load_routers", file, "its composition arguments do not compose this "
                      "model", e) from None


def _check_same_pattern(file: str, config: Dict[str, Any], state: Dict[str, Any]) -> None:
    for key in ("num_groups", "window", "num_sinks"):
        saved_v = config.get(key, 0 if key == "num_sinks" else None)  # unrecorded: 0 sinks
        have = state["config"].get(key)
        if saved_v is not None and saved_v != have:
            raise ValueError(
                f"load_routers: {file!r} holds routers trained with {key}={saved_v}, but the "
                f"model is composed with {key}={have}; compose it as saved (or pass an "
                f"uncomposed model), or load anyway with strict=False")


def _match_tensors(model: nn.Module, file: str, tensors: Dict[str, Tensor], strict: bool
                   ) -> Tuple[Dict[str, nn.Module], Dict[str, Dict[str, Tensor]]]:
    r"""The routers of :obj:`model`'s Focus layers by path, and the state dict each gets from
    :obj:`tensors` (names, shapes and completeness checked)."""
    where = "load_routers"
    layers = {n: m.router for n, m in model.named_modules() if isinstance(m, FocusComposed)}
    expected = {f"{n}.{k}": (n, k, t) for n, r in layers.items()
                for k, t in r.state_dict().items()}
    missing = sorted(set(expected) - set(tensors))
    extra = sorted(set(tensors) - set(expected))
    if strict and (missing or extra):
        raise refused(where, file, f"its tensors do not match the model's Focus layers "
                      f"(missing {missing[:3]}{'...' if len(missing) > 3 else ''}, "
                      f"unexpected {extra[:3]}{'...' if len(extra) > 3 else ''})")
    new: Dict[str, Dict[str, Tensor]] = {}
    for name, (layer, key, ref) in expected.items():
        if name not in tensors:
            continue
        t = tensors[name]
        if t.shape != ref.shape:
            raise refused(where, file, f"tensor {name!r} has shape {tuple(t.shape)}, the "
                          f"model's router expects {tuple(ref.shape)}")
        new.setdefault(layer, {})[key] = t.to(device=ref.device, dtype=ref.dtype)
    for layer, sd in new.items():
        if set(sd) != set(layers[layer].state_dict()):
            raise refused(where, file, f"layer {layer!r} has only part of its router "
                          f"tensors ({sorted(sd)})")
    return layers, new


def load_routers(model: nn.Module, path: str | os.PathLike, strict: bool = True
                 ) -> nn.Module:
    r"""Restore routers saved by :func:`save_routers`, composing :obj:`model` first (if it is not
    composed) with the recorded arguments::

        model.save_pretrained(folder); save_routers(model, folder)
        base = AutoModelForCausalLM.from_pretrained(folder)  # the original weights, exactly
        load_routers(base, folder)  # the composed model again, bitwise

    Nothing is unpickled. All or nothing: the files and every tensor's name and shape are
    checked before any router is written, and a failed load leaves :obj:`model` as it was.

    Args:
        model (torch.nn.Module): a base model (or one already composed the same way).
        path (str or os.PathLike): the folder given to :func:`save_routers` (or one of its
            files).
        strict (bool): require exactly the saved layers and, for a composed model, the saved
            number of groups, window and sinks (default: :obj:`True`).

    Returns:
        torch.nn.Module: :obj:`model`, composed, with the saved routers.

    Raises:
        FileNotFoundError: if no router file exists at :obj:`path`.
        ValueError: if a file is refused (damaged, changed, non-finite, out of bounds, not a
            router file), the tensors do not match the model's Focus layers, or (with
            :obj:`strict`) the model is composed with another pattern.
    """
    file, config, tensors = read_routers(path, "load_routers")
    state = getattr(model, _STATE_ATTR, None)
    composed_here = state is None
    if composed_here:
        _compose_as_saved(model, file, config)
    try:
        if not composed_here and strict:
            _check_same_pattern(file, config, state)
        layers, new = _match_tensors(model, file, tensors, strict)
        with torch.no_grad():
            for layer, sd in new.items():
                layers[layer].load_state_dict(sd)
    except BaseException:
        if composed_here:
            decompose(model)
        raise
    return model
