"""The router-training pieces of ``python -m benchmarks.focus.pretrained``: the block order, the
paired revisit measure of a plateau, and resuming a training (on a tiny random Llama)."""
from __future__ import annotations

import math

import pytest
import torch
from scipy import stats

from benchmarks.focus.pretrained import (
    load_router_weights,
    paired_block_delta,
    revisit_drop,
)
from quest_geometric.testing.focus import tiny_composed_llama as _tiny_composed
from quest_geometric.training.routers import block_order, train_routers


def test_paired_block_delta_against_scipy_and_a_hand_computed_case():
    full = [2.0, 2.5, 1.5, 3.0]
    other = [2.1, 2.4, 1.5 + math.log(1.5), 3.0]
    d = [100 * (math.exp(b - a) - 1) for a, b in zip(full, other)]
    out = paired_block_delta(full, other)
    assert d[2] == pytest.approx(50.0)  # a loss higher by log 1.5: perplexity x 1.5
    assert out["delta_block_mean"] == pytest.approx(sum(d) / 4)
    assert out["delta_sem"] == pytest.approx(float(stats.sem(d)))
    assert out["blocks_worse"] == 2  # equal losses are not worse
    # the median block: log differences -0.1, 0, 0.1, log 1.5 -> (0 + 0.1) / 2
    assert out["delta_median"] == pytest.approx(100 * math.expm1(0.05))
    assert math.isnan(paired_block_delta([1.0], [1.2])["delta_sem"])
    with pytest.raises(ValueError, match="same number"):
        paired_block_delta(full, other[:3])


def test_revisit_drop_by_hand():
    # blocks 0 1 0 2 1 0 with losses 5 4 3 9 1 2: revisits (0: 5->3, 3->2), (1: 4->1)
    curve, order = [5.0, 4.0, 3.0, 9.0, 1.0, 2.0], [0, 1, 0, 2, 1, 0]
    r = revisit_drop(curve, order)
    diffs = [-2.0, -3.0, -1.0]
    assert r["n"] == 3 and r["mean"] == pytest.approx(-2.0)
    assert r["sem"] == pytest.approx(stats.sem(diffs))
    assert r["share_lower"] == 1.0
    assert r["sign_p"] == pytest.approx(stats.binomtest(3, 3, 0.5).pvalue)
    # from step 2 on, block 0's first visit is dropped: pairs (0: 3->2), (1: none before 4)
    r2 = revisit_drop(curve, order, after=2)
    assert r2["n"] == 1 and r2["mean"] == pytest.approx(-1.0) and math.isnan(r2["sem"])
    assert math.isnan(revisit_drop([1.0, 2.0], [0, 1])["mean"])  # no block seen twice
    with pytest.raises(ValueError, match="order"):
        revisit_drop([1.0, 2.0, 3.0], [0, 1])


def test_revisit_drop_is_near_zero_on_a_flat_noisy_curve():
    g = torch.Generator().manual_seed(0)
    order = block_order(10, 400, seed=0)
    base = torch.rand(10, generator=g) * 3  # block-to-block spread, no trend
    curve = (base[order] + 0.01 * torch.randn(order.numel(), generator=g)).tolist()
    r = revisit_drop(curve, order.tolist())
    assert abs(r["mean"]) < 4 * r["sem"]
    trend = [c - 0.001 * i for i, c in enumerate(curve)]  # a falling curve is detected
    assert revisit_drop(trend, order.tolist())["mean"] < -5 * r["sem"]


def test_decode_bounds_by_hand(tmp_path):
    import json

    from benchmarks.focus.pretrained import decode_bounds, write_decode_bounds

    # full attention takes exactly 50 ms + 0.01 ms per context token
    rows = [{"context": c, "mode": "full", "tok_per_s": 1e3 / (50 + 0.01 * c), "vs_full": 1.0}
            for c in (1000, 4000, 8000)]
    rows.append({"context": 4000, "mode": "top-1", "tok_per_s": 1e3 / 75, "vs_full": 1.2})
    out = decode_bounds(rows, target=1.3)
    assert [r["context"] for r in out] == [1000, 4000, 8000]
    r = out[1]
    assert r["fixed_ms"] == pytest.approx(50) and r["context_ms"] == pytest.approx(40)
    assert all(abs(x["residual_ms"]) < 1e-9 for x in out)  # an exact line
    assert r["full_ms"] == pytest.approx(90) and r["bound_vs_full"] == pytest.approx(1.8)
    assert r["max_share_for_target"] == pytest.approx((90 / 1.3 - 50) / 40)
    # a method keeping that share of the context cost, at no overhead, is exactly 1.3x
    assert r["full_ms"] / (50 + r["max_share_for_target"] * 40) == pytest.approx(1.3)
    assert r["top-1_ms"] == pytest.approx(75) and r["top-1_vs_full"] == 1.2
    assert "top-1_ms" not in out[0]
    assert out[0]["max_share_for_target"] < 0  # at 1K even a free attention cannot reach 1.3x
    with pytest.raises(ValueError, match="two contexts"):
        decode_bounds(rows[:1])
    with pytest.raises(ValueError, match="target"):
        decode_bounds(rows, target=0)
    src = tmp_path / "speed.json"
    src.write_text(json.dumps({"meta": {"date": "then", "torch_threads": 1}, "rows": rows}))
    written = write_decode_bounds(src)
    assert written["paths"]["md"].name == "speed_bounds.md"
    assert "then" in written["paths"]["md"].read_text()
    with pytest.raises(FileNotFoundError, match="--speed"):
        write_decode_bounds(tmp_path / "missing.json")


def test_decode_bounds_fits_each_cache_on_its_own():
    from benchmarks.focus.pretrained import decode_bounds

    rows = [{"cache": cache, "context": c, "mode": "full",
             "tok_per_s": 1e3 / (fixed + 0.01 * c), "vs_full": 1.0}
            for cache, fixed in (("dynamic", 50.0), ("static", 30.0)) for c in (1000, 4000)]
    out = decode_bounds(rows)
    assert [(r["cache"], r["context"]) for r in out] == [
        ("dynamic", 1000), ("dynamic", 4000), ("static", 1000), ("static", 4000)]
    assert [round(r["fixed_ms"], 6) for r in out] == [50, 50, 30, 30]


@pytest.mark.slow
def test_load_router_weights_reads_checkpoints_and_saved_folders(tmp_path):
    # run_speed's --routers: a train_routers checkpoint or a committed save_routers folder
    pytest.importorskip("transformers")
    from quest_geometric.testing.hf import tokens

    from quest_geometric.nn.focus import router_parameters, save_routers

    def params(model):
        return [p.detach().clone() for p in router_parameters(model)]

    trained = _tiny_composed(seed=1, window=4)
    train_routers(trained, tokens(3, 16, seed=4), 2, 1e-2, tmp_path / "run", progress=False)
    save_routers(trained, str(tmp_path / "saved"))
    for path in (tmp_path / "run", tmp_path / "saved"):
        other = _tiny_composed(seed=7, window=4)
        assert not all(torch.equal(x, y) for x, y in zip(params(other), params(trained)))
        assert load_router_weights(other, path) is other
        for x, y in zip(params(other), params(trained)):
            torch.testing.assert_close(x, y, rtol=0, atol=0)
    with pytest.raises(ValueError, match="window=4, but the model is composed with window=8"):
        load_router_weights(_tiny_composed(window=8), tmp_path / "saved")
    with pytest.raises(ValueError, match="not a train_routers checkpoint"):
        load_router_weights(_tiny_composed(num_groups=2, window=4),
                            tmp_path / "run")
    with pytest.raises(FileNotFoundError, match="no routers at"):
        load_router_weights(_tiny_composed(), tmp_path / "absent")


def test_speed_command_line_passes_contexts_rounds_and_tokens(monkeypatch):
    from benchmarks.focus.pretrained import cli

    seen = []
    monkeypatch.setattr(cli, "run_speed", lambda **kw: seen.append(kw))
    cli.main(["--speed", "--cache", "both", "--contexts", "1024", "8000", "--rounds", "8",
             "--new-tokens", "24", "--no-progress"])
    cli.main(["--speed", "--quick", "--rounds", "5"])  # the quick preset, one value replaced
    cli.main(["--speed"])  # run_speed's own defaults
    assert seen[0]["contexts"] == [1024, 8000] and seen[0]["rounds"] == 8
    assert seen[0]["new_tokens"] == 24 and seen[0]["name"] == "focus_pretrained_speed_caches"
    assert (seen[1]["contexts"], seen[1]["rounds"], seen[1]["new_tokens"]) == ((256, 512), 5, 4)
    assert seen[1]["name"] == "focus_pretrained_speed_quick"
    assert not {"contexts", "rounds", "new_tokens"} & set(seen[2])


@pytest.mark.slow
def test_evaluate_saved_checks_every_router_folder_before_loading_a_model(tmp_path):
    pytest.importorskip("transformers")
    # a damaged folder is refused (digest) before SmolLM2 is loaded, and nothing is unpickled
    from benchmarks.focus.pretrained import evaluate_saved
    from quest_geometric.nn.focus import save_routers
    from quest_geometric.nn.focus.router_files import ROUTERS_FILE

    save_routers(_tiny_composed(), str(tmp_path / "good"))
    save_routers(_tiny_composed(), str(tmp_path / "bad"))
    data = bytearray((tmp_path / "bad" / ROUTERS_FILE).read_bytes())
    data[-1] ^= 1
    (tmp_path / "bad" / ROUTERS_FILE).write_bytes(bytes(data))
    with pytest.raises(ValueError, match="evaluate_saved: refused to load .*bad.*digest"):
        evaluate_saved([tmp_path / "good", tmp_path / "bad"], quick=True, out_dir=tmp_path,
                       progress=False)
    with pytest.raises(FileNotFoundError, match="save_routers"):
        evaluate_saved([tmp_path], quick=True, out_dir=tmp_path, progress=False)


class _WritesMarker:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_crafted_checkpoint_or_router_file_is_refused_and_never_runs(tmp_path):
    # a train_routers checkpoint / --routers file whose pickle would write a marker
    marker = tmp_path / "PWNED"
    for name in ("routers.pt", "focus_routers.pt", "other.pt"):
        torch.save({"format": 1, "params": _WritesMarker(str(marker))}, tmp_path / name)
        with pytest.raises(FileNotFoundError, match=f"no routers at .*{name}"):
            load_router_weights(torch.nn.Linear(2, 2), tmp_path / name)
        assert not marker.exists()
