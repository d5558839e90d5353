"""The committed artefacts that code loads at run time are in the checkout (a fresh clone, as
CI sees it), in the format their loader reads."""
from __future__ import annotations

import torch

from quest_geometric.nn.focus.compose import ROUTERS_CONFIG, ROUTERS_FILE, read_routers
from quest_geometric.tour import PRETRAINED_ROUTERS, RESULTS_DIR

FOCUS_RESULTS = RESULTS_DIR / "focus" / "results"


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
            path = FOCUS_RESULTS / folder / name
            assert path.is_file(), f"{path} is missing (is it ignored by .gitignore?)"
        # read as a user would (digest and finiteness checked), no pickle
        _, cfg, tensors = read_routers(FOCUS_RESULTS / folder)
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
    assert PRETRAINED_ROUTERS == FOCUS_RESULTS / (
        "focus_pretrained_st_budget75_s620_routers_straight_through_st_budget75_s620")
