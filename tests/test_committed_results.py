"""The committed artefacts that code loads at run time are in the checkout (a fresh clone, as
CI sees it), in the format their loader reads: the routers the tour loads, and those of the
Focus operating-point rows the passkey and speed studies rerun."""
from __future__ import annotations

import re

import pytest
import torch

from quest_geometric.nn.focus.router_files import ROUTERS_CONFIG, ROUTERS_FILE, read_routers
from quest_geometric.tour import PRETRAINED_ROUTERS, RESULTS_DIR

FOCUS_RESULTS = RESULTS_DIR / "focus" / "results"

#: The operating-point rows whose routers stay committed: the rows chosen on validation
#: that the verdict, passkey and speed tables report (their baselines need no routers).
CHOSEN_ROWS = ("K4_top2_w256_distill_s4", "K4_top2_w64_distill_s4_c200",
               "K8_top2_w256_distill_s4_c160", "K8_top2_w64_distill_s4_120",
               "K16_top2_w256_distill_s4_c200")


def _check_routers(folder, num_groups, window, gate):
    for name in (ROUTERS_FILE, ROUTERS_CONFIG):
        path = folder / name
        assert path.is_file(), f"{path} is missing (is it ignored by .gitignore?)"
    # read as a user would (digest and finiteness checked), no pickle
    _, cfg, tensors = read_routers(folder)
    assert cfg["num_groups"] == num_groups and cfg["window"] == window, cfg
    assert cfg["gate"] == gate, cfg
    # one router per SmolLM2 layer (30), each with finite centroids of K rows
    layers = {n.rsplit(".lin.", 1)[0] if ".lin." in n else n.rsplit(".", 1)[0]
              for n in tensors}
    assert len(layers) == 30 and len(tensors) == 60
    assert all(torch.isfinite(t).all() for t in tensors.values())
    assert all(t.shape[0] == num_groups for n, t in tensors.items() if "centroid" in n)


def test_the_tours_routers_are_present_and_complete():
    # the tour loads the recommended routers (tour.COMMITTED)
    assert PRETRAINED_ROUTERS == FOCUS_RESULTS / (
        "focus_pretrained_st_budget75_s620_routers_straight_through_st_budget75_s620")
    _check_routers(PRETRAINED_ROUTERS, 4, 64, "straight_through")


@pytest.mark.parametrize("row", CHOSEN_ROWS)
def test_the_chosen_operating_point_routers_are_present_and_complete(row):
    k, window = map(int, re.match(r"K(\d+)_top2_w(\d+)_", row).groups())
    folder = FOCUS_RESULTS / "focus_operating_point" / f"routers_{row}"
    _check_routers(folder, k, window, "straight_through")


@pytest.mark.slow
def test_committed_routers_load_into_a_model_of_their_shape():
    """Two committed folders (the tour's and an operating point's, one per writer) load with
    load_routers into a random Llama of SmolLM2-135M's attention shape: composed as
    recorded, every router tensor bitwise the file's (read independently)."""
    transformers = pytest.importorskip("transformers")
    from safetensors.torch import load_file

    from quest_geometric.nn.focus import focus_layers, load_routers

    for folder in (PRETRAINED_ROUTERS,
                   FOCUS_RESULTS / "focus_operating_point" / "routers_K8_top2_w64_distill_s4_120"):
        torch.manual_seed(0)
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
            hidden_size=576, num_hidden_layers=30, num_attention_heads=9,
            num_key_value_heads=3, intermediate_size=32, vocab_size=32))
        _, cfg, _ = read_routers(folder)
        load_routers(model, folder)
        layers = focus_layers(model)
        assert len(layers) == 30
        assert all(f.window == cfg["window"] and f.num_groups == cfg["num_groups"]
                   and f.num_sinks == cfg.get("num_sinks", 0) for f in layers)
        saved = load_file(str(folder / ROUTERS_FILE))
        for name, m in model.named_modules():
            if hasattr(m, "focus"):
                for key, t in m.focus.router.state_dict().items():
                    assert torch.equal(t, saved.pop(f"{name}.{key}"))
        assert not saved
