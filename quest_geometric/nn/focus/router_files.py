r"""The router file format: :func:`save_routers` / :func:`load_routers` (the tensors as
safetensors, the composition and the digest as JSON), :func:`read_routers` (read and check
without a model) and the reader of the pickle-based files of earlier versions
(:func:`read_legacy_routers`, used by :mod:`~quest_geometric.nn.focus.convert_routers`)."""
from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch import Tensor, nn

from quest_geometric._utils.checks import all_finite, fail
from quest_geometric.nn.focus.compose import (
    _ROUTER_SPECS,
    _STATE_ATTR,
    _router_from_spec,
    _router_spec,
    compose_focus,
    decompose,
)
from quest_geometric.nn.focus.composed import FocusComposed

__all__ = ["save_routers", "load_routers", "read_routers", "read_legacy_routers",
           "ROUTERS_FILE", "ROUTERS_CONFIG", "LEGACY_ROUTERS_FILE"]

#: File :func:`save_routers` writes the router tensors to (safetensors, no pickle).
ROUTERS_FILE = "focus_routers.safetensors"
#: File :func:`save_routers` writes the composition, versions and tensor digest to.
ROUTERS_CONFIG = "focus_routers.json"
#: The pickle-based file of earlier versions (read with ``weights_only=True`` or refused).
LEGACY_ROUTERS_FILE = "focus_routers.pt"

_FORMAT = "quest_geometric.focus_routers"
_VERSION = 2
# What :func:`save_routers` reads off the running layers (FocusAttention first, then router).
# Files written before ``num_sinks`` existed do not record it: they compose with 0 sinks.
_OPTIONS = ("num_groups", "top_k", "window", "group_dim", "tau", "sinkhorn_iters", "gate",
            "backend", "gate_scale", "gate_bias", "num_sinks")
_CONFIG_KEYS = frozenset(_OPTIONS + ("causal", "router"))
_CONVERT = "python -m quest_geometric.nn.focus.convert_routers"


def _running_config(state: Dict[str, Any]) -> Dict[str, Any]:
    """The composition arguments the layers actually run with (after set_focus_options)."""
    config = {k: v for k, v in state["config"].items() if k in _CONFIG_KEYS and k != "router"}
    keys = _OPTIONS + (("router",) if state["config"].get("router") is not None else ())
    for key in keys:
        values = []
        for _, _, w in state["wrappers"]:
            f = w.focus
            if key == "router":
                v = _router_spec(f.router)
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


def _write_router_files(folder: str, config: Dict[str, Any], layers: List[str],
                        tensors: Dict[str, Tensor]) -> str:
    """Write :data:`ROUTERS_FILE` then :data:`ROUTERS_CONFIG` (with the tensors' digest),
    each atomically; returns the folder."""
    import hashlib

    from safetensors.torch import save as st_save

    from quest_geometric._utils import atomic_write_bytes, atomic_write_json

    data = st_save({k: t.detach().cpu().contiguous() for k, t in tensors.items()})
    os.makedirs(folder, exist_ok=True)
    atomic_write_bytes(os.path.join(folder, ROUTERS_FILE), data)
    atomic_write_json(os.path.join(folder, ROUTERS_CONFIG), {
        "format": _FORMAT, "version": _VERSION, "config": config, "layers": list(layers),
        "versions": _versions(), "sha256": hashlib.sha256(data).hexdigest()}, indent=1,
        sort_keys=True)
    return folder


def save_routers(model: nn.Module, path: str) -> str:
    r"""Save the routers of a composed model into the folder :obj:`path` (e.g. the folder of
    ``model.save_pretrained(path)``), as a shareable adapter: the tensors in
    :data:`ROUTERS_FILE` (safetensors, no pickle) and, in :data:`ROUTERS_CONFIG`, the
    :func:`compose_focus` arguments the layers run with (read off the layers, so options
    changed by :func:`set_focus_options` are the ones recorded; a content-free router,
    :class:`~quest_geometric.nn.focus.window_router.WindowOnlyRouter`,
    :class:`~quest_geometric.nn.focus.random_router.RandomGroupsRouter` or
    :class:`~quest_geometric.nn.focus.far_bias_router.FarBiasRouter`, is recorded by
    type and options under ``"router"``, with its parameters if any), the versions of
    quest_geometric, torch and transformers, and the SHA-256 digest of the tensors file.

    Each tensor is named ``"{layer module path}.{router state dict key}"``;
    :func:`load_routers` recomposes a freshly loaded base model with them. Each file is
    written atomically (a temporary file in the same folder, renamed into place).

    Args:
        model (torch.nn.Module): a model returned by :func:`compose_focus`.
        path (str): a folder (created if missing).

    Returns:
        str: the path of the written tensors file.

    Raises:
        ValueError: if :obj:`model` was not composed with :func:`compose_focus` (with the
            default learned routers or a content-free one), or its layers run with different
            options.
    """
    state = getattr(model, _STATE_ATTR, None)
    if state is None:
        raise fail(ValueError, "save_routers", "model", "a model composed with compose_focus",
                   got_text=f"a {type(model).__name__} that is not composed")
    if state["config"].get("router") is not None and any(
            _router_spec(w.focus.router) is None for _, _, w in state["wrappers"]):
        raise ValueError("save_routers: the model was composed with a given 'router'; only "
                         "the default learned routers and the content-free WindowOnlyRouter, "
                         "RandomGroupsRouter and FarBiasRouter can be saved and recomposed")
    config = _running_config(state)
    names = {id(m): n for n, m in model.named_modules()}
    layers = [names[id(w)] for _, _, w in state["wrappers"]]
    tensors = {f"{n}.{k}": t for n, (_, _, w) in zip(layers, state["wrappers"])
               for k, t in w.router.state_dict().items()}
    _write_router_files(os.fspath(path), config, layers, tensors)
    return os.path.join(os.fspath(path), ROUTERS_FILE)


def _check_config(where: str, file: str, config: Any) -> Dict[str, Any]:
    from quest_geometric._utils.untrusted import refused

    if not isinstance(config, dict) or not config:
        raise refused(where, file, "it records no composition arguments ('config')")
    unknown = sorted(set(config) - _CONFIG_KEYS)
    if unknown:
        raise refused(where, file, f"its config has unknown composition arguments {unknown}")
    spec = config.get("router")
    if spec is not None:
        if not isinstance(spec, dict) or spec.get("type") not in _ROUTER_SPECS \
                or set(spec) != _ROUTER_SPECS[spec["type"]] \
                or not isinstance(spec["causal"], bool):
            raise refused(where, file, f"its 'router' record {spec!r} names no content-free "
                          f"router (one of {sorted(_ROUTER_SPECS)} with its options)")
        try:
            _router_from_spec(spec)
        except (TypeError, ValueError) as e:
            raise refused(where, file, f"its 'router' record {spec!r} is invalid", e) from None
    return dict(config)


def _check_tensors(where: str, file: str, tensors: Any, allow_empty: bool = False
                   ) -> Dict[str, Tensor]:
    from quest_geometric._utils.untrusted import refused

    if not isinstance(tensors, dict) or (not tensors and not allow_empty):
        raise refused(where, file, "it holds no router tensors")
    for name, t in tensors.items():
        if not isinstance(name, str) or not isinstance(t, Tensor):
            raise refused(where, file, f"entry {name!r} is not a named tensor")
        if not t.is_floating_point():
            raise refused(where, file, f"tensor {name!r} has dtype {t.dtype}, a floating "
                          f"dtype was expected")
        if not all_finite(t):
            raise refused(where, file, f"tensor {name!r} holds NaN or infinite values")
    return tensors


def _read_new(where: str, tensors_file: str, config_file: str
              ) -> Tuple[str, Dict[str, Any], Dict[str, Tensor]]:
    import hashlib

    from safetensors.torch import load as st_load

    from quest_geometric._utils.untrusted import refused

    if not os.path.isfile(config_file):
        raise refused(where, tensors_file, f"its config {os.path.basename(config_file)!r} "
                      f"is missing (save_routers writes both files)")
    if not os.path.isfile(tensors_file):
        raise refused(where, config_file, f"its tensors file "
                      f"{os.path.basename(tensors_file)!r} is missing")
    try:
        with open(config_file, "rb") as fh:
            meta = json.loads(fh.read(1 << 20).decode("utf-8"))
    except BaseException as e:  # nothing read from the file may escape as success
        raise refused(where, config_file, "it is not a JSON router config", e) from None
    if not isinstance(meta, dict) or meta.get("format") != _FORMAT:
        raise refused(where, config_file, "it is not a router config of quest_geometric "
                      f"(no 'format': {_FORMAT!r})")
    if meta.get("version") != _VERSION:
        raise refused(where, config_file, f"it has version {meta.get('version')!r}, this "
                      f"library reads version {_VERSION}")
    config = _check_config(where, config_file, meta.get("config"))
    digest = meta.get("sha256")
    if not isinstance(digest, str):
        raise refused(where, config_file, "it records no 'sha256' digest of the tensors")
    try:
        with open(tensors_file, "rb") as fh:
            data = fh.read()
    except OSError as e:
        raise refused(where, tensors_file, "it cannot be read", e) from None
    if hashlib.sha256(data).hexdigest() != digest:
        raise refused(where, tensors_file, f"its SHA-256 digest does not match the one "
                      f"recorded in {os.path.basename(config_file)!r} (the file is damaged "
                      f"or was changed)")
    try:
        tensors = st_load(data)
    except BaseException as e:  # nothing read from the file may escape as success
        raise refused(where, tensors_file, "it is not a safetensors file", e) from None
    return tensors_file, config, _check_tensors(where, tensors_file, tensors,
                                                allow_empty=config.get("router") is not None)


def read_legacy_routers(path: str, where: str, allow_pickle: bool = False
                        ) -> Tuple[Dict[str, Any], Dict[str, Tensor]]:
    r"""Read a :data:`LEGACY_ROUTERS_FILE` of earlier versions as ``(config, tensors)`` with
    the tensors named as in :data:`ROUTERS_FILE`: with ``torch.load(weights_only=True)``, or
    refused with the one-line command that converts it. :obj:`allow_pickle` (for a file
    you wrote yourself, used by :mod:`~quest_geometric.nn.focus.convert_routers`) unpickles
    it in full: it can run code."""
    from quest_geometric._utils.untrusted import load_tensors, refused

    if allow_pickle:
        try:
            blob = torch.load(path, map_location="cpu", weights_only=False)
        except Exception as e:
            raise refused(where, path, "it is not a PyTorch file", e) from None
    else:
        try:
            blob = load_tensors(path, where)
        except ValueError as e:
            raise ValueError(f"{e}; if you wrote it yourself, convert it with `{_CONVERT} "
                             f"--allow-pickle {path} NEW_FOLDER`") from None
    if not isinstance(blob, dict) or blob.get("format") != 1 or not isinstance(
            blob.get("routers"), dict):
        raise refused(where, path, "it is not a router file of quest_geometric")
    config = _check_config(where, path, blob.get("config"))
    tensors: Dict[str, Any] = {}
    for layer, sd in blob["routers"].items():
        if not isinstance(sd, dict):
            raise refused(where, path, f"layer {layer!r} holds no state dict")
        tensors.update({f"{layer}.{k}": t for k, t in sd.items()})
    return config, _check_tensors(where, path, tensors)


def read_routers(path: str | os.PathLike, where: str = "read_routers"
                 ) -> Tuple[str, Dict[str, Any], Dict[str, Tensor]]:
    r"""Read and check router files without touching any model: ``(file, config,
    tensors)``. :obj:`path` is a :func:`save_routers` folder, its tensors or config file, or
    a :data:`LEGACY_ROUTERS_FILE` (read with ``weights_only=True``). Every tensor is checked
    to be floating and finite, and the tensors file against its recorded digest.

    Raises:
        FileNotFoundError: if nothing is at :obj:`path`.
        ValueError: a one-line refusal naming the file and what is wrong.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        new = [os.path.join(path, f) for f in (ROUTERS_FILE, ROUTERS_CONFIG)]
        if any(os.path.isfile(f) for f in new):
            return _read_new(where, *new)
        old = os.path.join(path, LEGACY_ROUTERS_FILE)
        if os.path.isfile(old):
            return (old, *read_legacy_routers(old, where))
        raise FileNotFoundError(f"{where}: no {ROUTERS_FILE} in {path!r} (write it with "
                                f"save_routers(model, {path!r}))")
    for ext in (".safetensors", ".json"):
        if path.endswith(ext):
            stem = path[:-len(ext)]
            return _read_new(where, stem + ".safetensors", stem + ".json")
    if os.path.isfile(path):
        return (path, *read_legacy_routers(path, where))
    raise FileNotFoundError(f"{where}: no router files at {path!r} (write them with "
                            f"save_routers(model, folder))")


def load_routers(model: nn.Module, path: str, strict: bool = True) -> nn.Module:
    r"""Restore routers saved by :func:`save_routers`: compose :obj:`model` (if it is not
    composed yet) with the recorded :func:`compose_focus` arguments, then load every router.

    The documented round trip::

        model.save_pretrained(folder); save_routers(model, folder)
        base = AutoModelForCausalLM.from_pretrained(folder)  # the original weights, exactly
        load_routers(base, folder)  # the composed model again, bitwise

    Nothing is unpickled (:data:`ROUTERS_FILE` is safetensors; a :data:`LEGACY_ROUTERS_FILE`
    is read with ``torch.load(weights_only=True)``). The load is all or nothing: the files
    (digest, finiteness) and every tensor's name, shape and dtype are checked before any
    router is written, and a failed load leaves :obj:`model` exactly as it was (a model
    this call composed is decomposed again).

    Args:
        model (torch.nn.Module): a base model (or one already composed the same way).
        path (str): the folder given to :func:`save_routers` (or one of its files).
        strict (bool): require exactly the saved layers and, for a model already
            composed, the saved number of groups, window and sinks (routers run with another
            pattern than the one they were trained for otherwise; default: :obj:`True`).

    Returns:
        torch.nn.Module: :obj:`model`, composed, with the saved routers.

    Raises:
        FileNotFoundError: if no router file exists at :obj:`path`.
        ValueError: if a file is refused (damaged, changed, non-finite, not a router file),
            the saved tensors do not match the model's Focus layers, or (with :obj:`strict`)
            the model is composed with another ``num_groups`` or ``window`` than the saved
            one.
    """
    from quest_geometric._utils.untrusted import refused

    where = "load_routers"
    file, config, tensors = read_routers(path, where)
    state = getattr(model, _STATE_ATTR, None)
    composed_here = state is None
    if composed_here:
        try:
            if config.get("router") is not None:  # a content-free router, by its record
                spec = config["router"]  # one router per layer (a factory)
                config = dict(config, router=lambda embed_dim: _router_from_spec(spec))
            compose_focus(model, **config)
        except (TypeError, ValueError) as e:
            raise refused(where, file, "its composition arguments do not compose this model",
                          e) from None
    try:
        if not composed_here and strict:
            for key in ("num_groups", "window", "num_sinks"):
                saved_v = config.get(key, 0 if key == "num_sinks" else None)  # old files: 0
                have = state["config"].get(key)
                if saved_v is not None and saved_v != have:
                    raise ValueError(
                        f"load_routers: {file!r} holds routers trained with {key}={saved_v}, "
                        f"but the model is composed with {key}={have}; compose it as saved "
                        f"(or pass an uncomposed model), or load anyway with strict=False")
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
        with torch.no_grad():
            for layer, sd in new.items():
                layers[layer].load_state_dict(sd)
    except BaseException:
        if composed_here:
            decompose(model)
        raise
    return model
