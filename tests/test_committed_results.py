"""The committed artefacts that code loads at run time are in the checkout (a fresh clone, as
CI sees it), in the format their loader reads."""
from __future__ import annotations

import pytest
import torch

from quest_geometric.nn.focus.router_files import ROUTERS_CONFIG, ROUTERS_FILE, read_routers
from quest_geometric.tour import PRETRAINED_ROUTERS, RESULTS_DIR


def test_committed_smollm2_routers_are_present_and_complete():
    for folder, gate in (("focus_pretrained_routers_additive", "additive"),
                         ("focus_pretrained_routers_multiplicative", "multiplicative"),
                         ("focus_pretrained_st_routers_straight_through_st", "straight_through"),
                         ("focus_pretrained_st_budget_routers_straight_through_st_budget",
                          "straight_through"),
                         ("focus_pretrained_st_budget_s400_routers_straight_through"
                          "_st_budget_s400", "straight_through"),
                         ("focus_pretrained_st_budget75_routers_straight_through_st_budget75",
                          "straight_through"),
                         ("focus_pretrained_st_budget75_s400_routers_straight_through"
                          "_st_budget75_s400", "straight_through"),
                         ("focus_pretrained_st_budget75_s620_routers_straight_through"
                          "_st_budget75_s620", "straight_through"),
                         ("focus_pretrained_additive_s620_routers_additive_additive_s620",
                          "additive"),
                         ("focus_pretrained_additive_b0125_routers_additive_additive_b0125",
                          "additive"),
                         ("focus_pretrained_multiplicative_s620_routers_multiplicative"
                          "_multiplicative_s620", "multiplicative")):
        for name in (ROUTERS_FILE, ROUTERS_CONFIG):
            path = RESULTS_DIR / folder / name
            assert path.is_file(), f"{path} is missing (is it ignored by .gitignore?)"
        # read as a user would (digest and finiteness checked), no pickle
        _, cfg, tensors = read_routers(RESULTS_DIR / folder)
        assert cfg["num_groups"] == 4 and cfg["window"] == 64, cfg
        assert cfg["gate"] == gate, cfg
        # the additive gate's b: the top-2 relaxation 1/8 where the folder says so, else the
        # library default 1/2 (not recorded)
        assert cfg.get("gate_bias", 0.5) == (0.125 if "_b0125" in folder else 0.5), cfg
        # one router per SmolLM2 layer (30), each with finite centroids of K rows
        layers = {n.rsplit(".lin.", 1)[0] if ".lin." in n else n.rsplit(".", 1)[0]
                  for n in tensors}
        assert len(layers) == 30 and len(tensors) == 60
        assert all(torch.isfinite(t).all() for t in tensors.values())
    # the tour loads the recommended routers (tour.COMMITTED), one of the folders above
    assert PRETRAINED_ROUTERS == RESULTS_DIR / (
        "focus_pretrained_st_budget75_s620_routers_straight_through_st_budget75_s620")


@pytest.mark.slow
def test_committed_routers_load_into_a_model_of_their_shape():
    """Two committed folders (the tour's and an operating point's, one per writer) load with
    load_routers into a random Llama of SmolLM2-135M's attention shape: composed as
    recorded, every router tensor bitwise the file's (read independently)."""
    transformers = pytest.importorskip("transformers")
    from safetensors.torch import load_file

    from quest_geometric.nn.focus import focus_layers, load_routers

    for folder in (PRETRAINED_ROUTERS,
                   RESULTS_DIR / "focus_operating_point" / "routers_K8_top2_w64_distill_s4"):
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
