"""Router files as a shareable adapter: safetensors + JSON, never a pickle; loading is all or
nothing (a refused file leaves the model exactly as it was); what is saved is what runs."""
from __future__ import annotations

import json
import os

import pytest
import torch

from quest_geometric.models.char_gpt import CharGPT, GPTConfig
from quest_geometric.nn.focus.compose import (
    _STATE_ATTR,
    compose_focus,
    focus_layers,
    set_focus_options,
)
from quest_geometric.nn.focus.composed import FocusComposed
from quest_geometric.nn.focus.router_files import (
    ROUTERS_CONFIG,
    ROUTERS_FILE,
    load_routers,
    save_routers,
)

VOCAB = 40


def _base(seed: int = 0, layers: int = 2, embd: int = 16) -> CharGPT:
    torch.manual_seed(seed)
    return CharGPT(GPTConfig(vocab_size=VOCAB, block_size=32, n_layer=layers, n_head=2,
                             n_embd=embd)).eval()


def _trained(seed: int = 1, **kw) -> CharGPT:
    m = compose_focus(_base(), **{"num_groups": 4, "top_k": 2, "window": 3, **kw})
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # routers that differ from a fresh composition's
        for f in focus_layers(m):
            for p in f.router.parameters():
                p.copy_(torch.randn(p.shape, generator=g))
    return m.eval()


def _x() -> torch.Tensor:
    return torch.randint(0, VOCAB, (2, 20), generator=torch.Generator().manual_seed(3))


def _snapshot(m: torch.nn.Module):
    """Everything a load may change: the state dict bitwise, the module tree, the
    composition record and the requires_grad flags."""
    state = getattr(m, _STATE_ATTR, None)
    return ({k: v.clone() for k, v in m.state_dict().items()},
            [(n, type(x).__name__) for n, x in m.named_modules()],
            None if state is None else json.dumps(state["config"], sort_keys=True, default=str),
            [p.requires_grad for p in m.parameters()])


def _same(a, b) -> bool:
    sa, sb = a[0], b[0]
    return (sa.keys() == sb.keys() and all(
        sa[k].dtype == sb[k].dtype and torch.equal(sa[k], sb[k]) for k in sa)
        and a[1:] == b[1:])


def _digest(meta: dict, data: bytes) -> str:
    """The documented digest, computed here independently: SHA-256 of the record's canonical
    JSON (sorted keys, no spaces, without "sha256"), a zero byte and the tensors file."""
    import hashlib

    body = json.dumps({k: v for k, v in meta.items() if k != "sha256"}, sort_keys=True,
                      separators=(",", ":"))
    return hashlib.sha256(body.encode() + b"\0" + data).hexdigest()


def _rewrite(folder, meta: dict, data: bytes = None) -> None:
    """Write a consistent (digest matching) but changed pair, as a crafted file would be."""
    if data is not None:
        (folder / ROUTERS_FILE).write_bytes(data)
    data = (folder / ROUTERS_FILE).read_bytes()
    (folder / ROUTERS_CONFIG).write_text(json.dumps(dict(meta, sha256=_digest(meta, data))))


def test_files_and_round_trip_exact(tmp_path):
    m = _trained()
    out = save_routers(m, str(tmp_path))
    assert out == os.path.join(str(tmp_path), ROUTERS_FILE)
    assert sorted(os.listdir(tmp_path)) == sorted([ROUTERS_FILE, ROUTERS_CONFIG])
    meta = json.loads((tmp_path / ROUTERS_CONFIG).read_text())
    assert set(meta["versions"]) == {"quest_geometric", "torch", "transformers"}
    assert meta["versions"]["torch"] == torch.__version__
    assert meta["version"] == 3
    assert meta["sha256"] == _digest(meta, (tmp_path / ROUTERS_FILE).read_bytes())
    # the tensors file is plain safetensors, readable without this library
    from safetensors.torch import load_file
    st = load_file(str(tmp_path / ROUTERS_FILE))
    assert set(st) == {f"blocks.{i}.attn.{k}" for i in range(2)
                       for k in ("centroids", "lin.weight")}
    base = _base()
    assert load_routers(base, str(tmp_path)) is base
    with torch.no_grad():
        assert torch.equal(base(_x())[0], m(_x())[0])
    for a, b in zip(focus_layers(base), focus_layers(m)):
        for (ka, ta), (kb, tb) in zip(a.router.state_dict().items(),
                                      b.router.state_dict().items()):
            assert ka == kb and torch.equal(ta, tb)
    # into a model already composed the same way
    other = compose_focus(_base(), num_groups=4, top_k=2, window=3)
    load_routers(other, str(tmp_path / ROUTERS_FILE))
    with torch.no_grad():
        assert torch.equal(other(_x())[0], m(_x())[0])


def test_recorded_options_are_what_runs(tmp_path):
    m = _trained(top_k=2, backend="blocks")
    set_focus_options(m, top_k=1, backend="dense")
    save_routers(m, str(tmp_path))
    cfg = json.loads((tmp_path / ROUTERS_CONFIG).read_text())["config"]
    assert cfg["top_k"] == 1 and cfg["backend"] == "dense" and cfg["window"] == 3
    base = load_routers(_base(), str(tmp_path))
    assert all(f.top_k == 1 and f.backend == "dense" for f in focus_layers(base))
    with torch.no_grad():
        assert torch.equal(base(_x())[0], m(_x())[0])
    # layers run with different options: refused rather than one silently recorded
    focus_layers(m)[0].top_k = 2
    with pytest.raises(ValueError, match="save_routers: the Focus layers run with different"):
        save_routers(m, str(tmp_path / "mixed"))


def test_num_sinks_is_recorded_and_old_files_read_as_zero(tmp_path):
    m = _trained(num_sinks=2)
    assert all(f.num_sinks == 2 for f in focus_layers(m))
    set_focus_options(m, num_sinks=3)
    save_routers(m, str(tmp_path))
    meta = json.loads((tmp_path / ROUTERS_CONFIG).read_text())
    assert meta["config"]["num_sinks"] == 3
    base = load_routers(_base(), str(tmp_path))
    assert all(f.num_sinks == 3 for f in focus_layers(base))
    with torch.no_grad():
        assert torch.equal(base(_x())[0], m(_x())[0])
        # the sinks change the output (positions 0..2 are beyond the window of 3)
        set_focus_options(base, num_sinks=0)
        assert not torch.equal(base(_x())[0], m(_x())[0])
    # a file written before num_sinks existed (no such key, same digest rules): 0 sinks
    old = tmp_path / "old"
    save_routers(_trained(), str(old))
    meta = json.loads((old / ROUTERS_CONFIG).read_text())
    del meta["config"]["num_sinks"]
    _rewrite(old, meta)
    loaded = load_routers(_base(), str(old))
    assert all(f.num_sinks == 0 for f in focus_layers(loaded))
    # strict: an old file (0 sinks) into a model composed with sinks is refused
    with pytest.raises(ValueError, match="num_sinks=0"):
        load_routers(compose_focus(_base(), num_groups=4, top_k=2, window=3, num_sinks=2),
                     str(old))


@pytest.mark.parametrize("kind", ["window_only", "random_groups"])
def test_content_free_routers_are_saved_by_record(tmp_path, kind):
    from quest_geometric.nn.focus import RandomGroupsRouter, WindowOnlyRouter

    router = WindowOnlyRouter() if kind == "window_only" else RandomGroupsRouter(4, 2, seed=7)
    m = compose_focus(_base(), window=3, num_sinks=1, router=router).eval()
    if kind == "random_groups":
        set_focus_options(m, top_k=1)  # the running top_k is what is recorded
    save_routers(m, str(tmp_path))
    meta = json.loads((tmp_path / ROUTERS_CONFIG).read_text())
    want = {"type": "window_only", "causal": True} if kind == "window_only" else {
        "type": "random_groups", "causal": True, "num_groups": 4, "top_k": 1, "seed": 7}
    assert meta["config"]["router"] == want
    base = load_routers(_base(), str(tmp_path))
    assert all(type(f.router) is type(router) for f in focus_layers(base))
    with torch.no_grad():
        assert torch.equal(base(_x())[0], m(_x())[0])
    # a record that names no content-free router, or with other keys, is refused
    for bad in ({"type": "learned"}, dict(want, extra=1), dict(want, causal="yes")):
        meta["config"]["router"] = bad
        _rewrite(tmp_path, meta)
        before = _snapshot(fresh := _base())
        with pytest.raises(ValueError, match="refused to load.*'router' record"):
            load_routers(fresh, str(tmp_path))
        assert _same(before, _snapshot(fresh))


def test_a_custom_router_is_still_refused(tmp_path):
    from quest_geometric.nn.focus import RandomGroupsRouter

    class Custom(RandomGroupsRouter):  # a subclass may route differently
        pass

    m = compose_focus(_base(), window=3, router=Custom(4, 2))
    with pytest.raises(ValueError, match="save_routers: .*not registered"):
        save_routers(m, str(tmp_path))


class _Marker:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_a_pickle_is_never_read(tmp_path):
    """A ``.pt`` pickle (the format of no version of this library, crafted to write a file
    when unpickled) is not a router file: nothing is unpickled and the model is unchanged."""
    marker = tmp_path / "PWNED"
    torch.save({"format": 1, "config": {"num_groups": 4}, "routers": _Marker(str(marker))},
               tmp_path / "focus_routers.pt")
    for model in (_base(), _trained()):
        before = _snapshot(model)
        with pytest.raises(FileNotFoundError, match="no focus_routers.safetensors in"):
            load_routers(model, str(tmp_path))
        with pytest.raises(FileNotFoundError, match="no router files at .*focus_routers.pt"):
            load_routers(model, str(tmp_path / "focus_routers.pt"))
        assert not marker.exists()
        assert _same(before, _snapshot(model))


def _corrupt(folder, case: str) -> None:
    st, cf = folder / ROUTERS_FILE, folder / ROUTERS_CONFIG
    data = st.read_bytes()
    if case == "empty":
        st.write_bytes(b"")
    elif case == "truncated":
        st.write_bytes(data[: len(data) // 2])
    elif case == "no config":
        cf.unlink()
    elif case == "empty config":
        cf.write_text("")
    elif case == "config without composition":
        meta = json.loads(cf.read_text())
        del meta["config"]
        _rewrite(folder, meta)
    elif case.startswith("edited "):  # a hand edit of one option: the digest covers it
        meta = json.loads(cf.read_text())
        key = case.split()[1]
        meta["config"][key] = {"window": 1000, "top_k": 1, "num_sinks": 4,
                               "sinkhorn_iters": 3}[key]
        cf.write_text(json.dumps(meta, indent=1))
    elif case == "flipped bit":
        b = bytearray(data)
        b[-3] ^= 0x40  # a high exponent bit of the last float
        st.write_bytes(bytes(b))
    elif case in ("nan", "inf", "shape of the last layer", "missing tensor", "integer"):
        from safetensors.torch import load as st_load, save as st_save
        t = st_load(data)
        last = sorted(t)[-1]
        if case == "nan":
            t[last] = t[last].clone().view(-1).index_fill(0, torch.tensor([0]), float("nan")
                                                          ).view_as(t[last])
        elif case == "inf":
            t[last] = torch.full_like(t[last], float("inf"))
        elif case == "shape of the last layer":
            t[last] = torch.zeros(t[last].shape[0] + 1, *t[last].shape[1:])
        elif case == "missing tensor":
            del t[last]
        else:
            t[last] = t[last].to(torch.int32)
        _rewrite(folder, json.loads(cf.read_text()), st_save(t))  # consistent, but wrong
    else:
        raise AssertionError(case)


CASES = {"empty": "digest", "truncated": "digest", "no config": "config .* is missing",
         "empty config": "not a JSON record",
         "config without composition": "no composition arguments",
         "flipped bit": "SHA-256 digest .* does not match",
         "edited window": "SHA-256 digest .* does not match",
         "edited top_k": "SHA-256 digest .* does not match",
         "edited num_sinks": "SHA-256 digest .* does not match",
         "edited sinkhorn_iters": "SHA-256 digest .* does not match", "nan": "NaN or infinite",
         "inf": "NaN or infinite", "shape of the last layer": "has shape",
         "missing tensor": "missing", "integer": "floating dtype"}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("composed", [False, True])
def test_damaged_files_are_refused_and_the_model_is_unchanged(tmp_path, case, composed):
    save_routers(_trained(), str(tmp_path))
    _corrupt(tmp_path, case)
    model = compose_focus(_base(seed=5), num_groups=4, top_k=2, window=3) if composed \
        else _base(seed=5)
    before = _snapshot(model)
    with pytest.raises(ValueError, match=CASES[case]) as e:
        load_routers(model, str(tmp_path))
    msg = str(e.value)
    assert msg.startswith("load_routers: refused to load ") and "\n" not in msg
    assert str(tmp_path) in msg
    assert _same(before, _snapshot(model))
    assert any(isinstance(x, FocusComposed) for x in model.modules()) == composed


def test_wrong_model_is_refused_and_a_fresh_model_is_left_uncomposed(tmp_path):
    save_routers(_trained(), str(tmp_path))
    wider = _base(embd=32)  # every router's input width differs
    before = _snapshot(wider)
    with pytest.raises(ValueError, match="has shape"):
        load_routers(wider, str(tmp_path))
    assert _same(before, _snapshot(wider)) and getattr(wider, _STATE_ATTR, None) is None
    deeper = _base(layers=3)  # one layer more than saved
    before = _snapshot(deeper)
    with pytest.raises(ValueError, match="do not match the model's Focus layers"):
        load_routers(deeper, str(tmp_path))
    assert _same(before, _snapshot(deeper))


# ---- a routing rule written here only: the registry is all the library needs

from typing import Any, Dict, List, Optional  # noqa: E402

from torch import nn  # noqa: E402

from quest_geometric.nn.focus.router import (  # noqa: E402
    RouterOutput,
    config_kwargs,
    register_router,
    registered_routers,
)


@register_router("test_argmax")
class ArgmaxRouter(nn.Module):
    """Token-wise routing by a learned linear score (groups of a token depend on it alone,
    so the rule is causal): the groups are the top-k of ``h @ weight``."""

    def __init__(self, in_channels: int, num_groups: int, top_k: int = 1,
                 causal: bool = True) -> None:
        super().__init__()
        self.in_channels, self.num_groups, self.top_k, self.causal = (
            in_channels, num_groups, top_k, causal)
        self.weight = nn.Parameter(torch.randn(in_channels, num_groups))

    def forward(self, h, batch=None, col_totals: Optional[List[torch.Tensor]] = None):
        s = (h @ self.weight).float()
        soft = s.softmax(-1)
        return RouterOutput(soft.to(h.dtype), s.topk(self.top_k, -1).indices, soft.log())

    def step(self, x, state, valid=None, return_groups=True):
        groups = self(x).groups
        state.append(groups, valid)
        return groups if return_groups else None

    def config(self) -> Dict[str, Any]:
        return {"in_channels": self.in_channels, "num_groups": self.num_groups,
                "top_k": self.top_k, "causal": self.causal}

    @classmethod
    def from_config(cls, config):
        return cls(**config_kwargs("ArgmaxRouter.from_config", config,
                                   ("in_channels", "num_groups", "top_k", "causal")))


def test_a_rule_defined_in_a_test_is_saved_and_loaded_with_no_edit_elsewhere(tmp_path):
    from quest_geometric.nn.focus import Router

    assert "test_argmax" in registered_routers()
    assert isinstance(ArgmaxRouter(16, 4), Router)
    m = compose_focus(_base(), window=3, router=lambda d: ArgmaxRouter(d, 4, top_k=2)).eval()
    g = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for f in focus_layers(m):
            f.router.weight.copy_(torch.randn(f.router.weight.shape, generator=g))
    save_routers(m, tmp_path)  # a pathlib.Path, as users pass it
    meta = json.loads((tmp_path / ROUTERS_CONFIG).read_text())
    assert meta["config"]["router"] == {"type": "test_argmax", "in_channels": 16,
                                        "num_groups": 4, "top_k": 2, "causal": True}
    base = load_routers(_base(), tmp_path)
    routers = [f.router for f in focus_layers(base)]
    assert all(type(r) is ArgmaxRouter for r in routers) and len(set(map(id, routers))) == 2
    for a, b in zip(routers, (f.router for f in focus_layers(m))):
        assert torch.equal(a.weight, b.weight)
    with torch.no_grad():
        out, ref = base(_x())[0], m(_x())[0]
        assert torch.equal(out, ref)
        # the routing matters: a fresh rule routes otherwise and changes the output
        fresh = compose_focus(_base(), window=3, router=lambda d: ArgmaxRouter(d, 4, top_k=2))
        assert not torch.equal(fresh.eval()(_x())[0], ref)
    # a record with a key the rule does not take is refused before anything is built
    meta["config"]["router"]["extra"] = 1
    _rewrite(tmp_path, meta)
    with pytest.raises(ValueError, match="'router' record .* refused .*unknown \\['extra'\\]"):
        load_routers(_base(), tmp_path)


def test_register_router_refuses_a_taken_name_and_a_non_router():
    with pytest.raises(ValueError, match="register_router: 'name' must be a name not taken"):
        register_router("window_only")(ArgmaxRouter)
    with pytest.raises(TypeError, match="register_router: 'cls' must be a router class"):
        register_router("plain")(nn.Linear)
    with pytest.raises(ValueError, match="register_router: 'name' must be a non-empty str"):
        register_router("")


# ---- every size a file configures is bounded before anything is built

BOUNDS = {
    "num_groups": (10 ** 12, "'num_groups' must be an int >= 1 and <= 4096"),
    "sinkhorn_iters": (10 ** 9, "'sinkhorn_iters' must be an int >= 0 and <= 1000"),
    "sinkhorn_iters_float": (1e9, "'sinkhorn_iters' must be an int"),
    "window": (2 ** 40, "'window' must be an int >= 0 and <= 1048576"),
    "num_sinks": (2 ** 40, "'num_sinks' must be an int >= 0 and <= 1048576"),
    "group_dim": (10 ** 9, "'group_dim' must be an int >= 1 and <= 4096"),
    "tau": (-0.5, "tau"),
    "tau_infinite": ("Infinity", "JSON constant Infinity"),
    "random_groups": ({"type": "random_groups", "num_groups": 10 ** 12, "top_k": 1,
                       "seed": 0, "causal": True}, "'num_groups' must be at most 4096"),
    "far_bias": ({"type": "far_bias", "num_heads": 10 ** 12, "causal": True},
                 "'num_heads' must be at most 4096"),
}


@pytest.mark.parametrize("case", sorted(BOUNDS))
def test_sizes_beyond_the_limits_are_refused_before_anything_is_built(tmp_path, case):
    value, message = BOUNDS[case]
    save_routers(_trained(), str(tmp_path))
    meta = json.loads((tmp_path / ROUTERS_CONFIG).read_text())
    key = case.replace("_float", "").replace("_infinite", "")
    if isinstance(value, dict):
        meta["config"]["router"] = value
    else:
        meta["config"][key] = 12345 if value == "Infinity" else value
    _rewrite(tmp_path, meta)  # the digest matches: the bound alone refuses it
    if value == "Infinity":  # JSON has no infinity: the text a crafted file would hold
        text = (tmp_path / ROUTERS_CONFIG).read_text()
        (tmp_path / ROUTERS_CONFIG).write_text(text.replace("12345", "Infinity"))
    model = _base()
    before = _snapshot(model)
    with pytest.raises(ValueError, match=message) as e:
        load_routers(model, tmp_path)
    assert str(e.value).startswith("load_routers: refused to load ")
    assert _same(before, _snapshot(model)) and getattr(model, _STATE_ATTR, None) is None


def test_another_version_is_refused(tmp_path):
    """A pair of another format version (here 2, whose digest covered the tensors alone) is
    refused with the version it has, even with a digest that matches its own rule."""
    import hashlib

    save_routers(_trained(), tmp_path)
    meta = json.loads((tmp_path / ROUTERS_CONFIG).read_text())
    data = (tmp_path / ROUTERS_FILE).read_bytes()
    meta.update(version=2, sha256=hashlib.sha256(data).hexdigest())
    (tmp_path / ROUTERS_CONFIG).write_text(json.dumps(meta))
    model = _base()
    with pytest.raises(ValueError, match="has version 2, this library reads version 3"):
        load_routers(model, tmp_path)
    assert getattr(model, _STATE_ATTR, None) is None


def test_every_library_router_rebuilds_from_its_config():
    """config() is JSON and from_config(config()) routes exactly as the original (with its
    state dict), for each router the library registers."""
    from quest_geometric.nn.focus import (
        FarBiasRouter,
        FocusRouter,
        RandomGroupsRouter,
        WindowOnlyRouter,
    )

    torch.manual_seed(0)
    h = torch.randn(2, 12, 16)
    for r in (FocusRouter(16, 4, group_dim=8, top_k=2, sinkhorn_iters=3),
              RandomGroupsRouter(4, top_k=2, seed=5), WindowOnlyRouter(causal=False),
              FarBiasRouter(2)):
        cfg = json.loads(json.dumps(r.config()))
        assert cfg == r.config()
        again = type(r).from_config(cfg)
        again.load_state_dict(r.state_dict())
        assert type(again) is type(r) and again.config() == cfg
        a, b = r(h), again(h)
        assert torch.equal(a.groups, b.groups) and torch.equal(a.soft, b.soft)
