"""The tour's Focus pipeline (:mod:`quest_geometric.pipelines.focus`): its table recomputed
from the returned models by plain computations, the baseline content-free and matched in
pairs, its files, and its argument errors."""
from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F

from quest_geometric.pipelines import focus


@pytest.mark.parametrize("kwargs,exc,match", [
    ({"steps": 0}, ValueError, "focus.run: 'steps' must be an int >= 1, got 0"),
    ({"router_steps": 1.5}, TypeError, "focus.run: 'router_steps' must be an int >= 1"),
    ({"progress": "no"}, TypeError, "focus.run: 'progress' must be a bool"),
    ({"device": "gpu0"}, ValueError, "device='gpu0' is not a valid torch device"),
])
def test_bad_arguments_are_refused_by_name_before_anything_runs(tmp_path, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        focus.run(tmp_path / "out", **kwargs)
    assert not (tmp_path / "out").exists()


def _pairs(g: torch.Tensor, window: int, num_groups: int) -> float:
    """The share of causal pairs (j <= i) with i - j <= window or a shared group, of one
    sequence's groups ``[T, k]``, from the membership matrix."""
    member = F.one_hot(g, num_groups).sum(-2).clamp(max=1).float()  # [T, K]
    shared = (member @ member.T) > 0
    i = torch.arange(g.size(0))[:, None]
    j = torch.arange(g.size(0))[None, :]
    keep = (j <= i) & ((i - j <= window) | shared)
    return float(keep.sum()) / (g.size(0) * (g.size(0) + 1) / 2)


def _band_share(t: int, window: int, sinks: int) -> float:
    kept = sum(1 for i in range(t) for j in range(i + 1) if i - j <= window or j < sinks)
    return kept / (t * (t + 1) / 2)


@pytest.mark.slow
def test_the_table_is_what_the_returned_models_give(tmp_path):
    from quest_geometric.nn.focus import FocusRouter, WindowOnlyRouter, focus_layers

    out = focus.run(tmp_path, progress=False, steps=60, router_steps=10)
    rows, models, val = out["rows"], out["models"], out["val_blocks"]
    assert [r["model"].split(",")[0].split(" (")[0] for r in rows] == [
        "full attention", "Focus hard top-2", "Focus hard top-2",
        f"window {rows[3]['model'].split()[1]} + {focus.NUM_SINKS} sinks"]
    assert val.shape == (focus.VAL_BLOCKS, focus.BLOCK + 1)
    # bits per character by a plain cross-entropy over every block (row 1's untrained
    # routers are not returned)
    with torch.no_grad():
        for i, m in ((0, models["full"]), (2, models["focus"]), (3, models["window"])):
            ce = [float(F.cross_entropy(m(b[None, :-1])[0][0], b[1:])) for b in val]
            assert rows[i]["val_bpc"] == pytest.approx(sum(ce) / len(ce) / math.log(2),
                                                       rel=1e-5)
    for r in rows:
        assert r["vs_full"] == pytest.approx(100 * (r["val_bpc"] / rows[0]["val_bpc"] - 1))
    # the trained Focus row: the pairs its routers' groups keep, counted per call
    groups = []
    hooks = [m.register_forward_hook(  # groups [1, T, k] or [T, k]: one sequence
        lambda _m, _i, o: groups.append(o.groups.reshape(-1, o.groups.size(-1))))
             for m in models["focus"].modules() if isinstance(m, FocusRouter)]
    with torch.no_grad():
        for b in val:
            models["focus"](b[None, :-1])
    for h in hooks:
        h.remove()
    assert len(groups) == len(val) * focus.MODEL["n_layer"]
    assert all(g.shape == (focus.BLOCK, focus.FOCUS["top_k"]) for g in groups)
    share = sum(_pairs(g, focus.FOCUS["window"], focus.FOCUS["num_groups"])
                for g in groups) / len(groups)
    assert rows[2]["pairs_kept"] == pytest.approx(share, rel=1e-9)
    assert rows[0]["pairs_kept"] == 1.0
    # only the routers were trained: every other weight is the full model's
    full = dict(models["full"].named_parameters())
    for name, p in models["focus"].named_parameters():
        if ".focus.router." in name:
            assert p.requires_grad
        else:
            assert not p.requires_grad and torch.equal(p, full[name.replace(".original", "")])
    # the baseline: content-free (no weights, no groups) and the smallest window that keeps
    # at least the trained Focus row's share
    window = json.loads((tmp_path / "focus.json").read_text())["meta"]["window_baseline"]
    layers = focus_layers(models["window"])
    assert layers and all(isinstance(f.router, WindowOnlyRouter) and f.router.top_k == 0
                          and not list(f.router.parameters()) for f in layers)
    assert all(f.window == window and f.num_sinks == focus.NUM_SINKS for f in layers)
    t = focus.BLOCK
    assert _band_share(t, window - 1, 4) < rows[2]["pairs_kept"] <= _band_share(t, window, 4)
    assert rows[3]["pairs_kept"] == pytest.approx(_band_share(t, window, 4), rel=1e-9)
    # the files: the same rows, the table and its notes
    stored = json.loads((tmp_path / "focus.json").read_text())["rows"]
    assert [r["val_bpc"] for r in stored] == pytest.approx([r["val_bpc"] for r in rows])
    assert (tmp_path / "focus.csv").read_text().count("\n") == 5
    md = (tmp_path / "focus.md").read_text()
    assert out["markdown"] == md and "content-free" in md and "causal pairs kept (%)" in md
    assert len(out["summary"]) == 4 and all("\n" not in s for s in out["summary"])
