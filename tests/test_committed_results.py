"""The committed artefacts that code loads at run time are in the checkout (a fresh clone, as
CI sees it), in the format their loader reads: the routers the tour loads, and those of the
Focus operating-point rows the passkey and speed studies rerun."""
from __future__ import annotations

import re

import pytest
import torch

from quest_geometric.nn.focus.compose import ROUTERS_CONFIG, ROUTERS_FILE, read_routers
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
