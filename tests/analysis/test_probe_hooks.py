"""No QKProbe hook outlives its probe: a dropped probe leaves the model as it was."""
from __future__ import annotations

import gc

import torch

from quest_geometric.analysis.probe import QKProbe
from quest_geometric.models.char_gpt import CharGPT, GPTConfig


def _model() -> CharGPT:
    torch.manual_seed(0)
    return CharGPT(GPTConfig(vocab_size=23, block_size=16, n_layer=2, n_head=2,
                             n_embd=16)).eval()


def _hooks(model: torch.nn.Module) -> int:
    """The forward (pre-)hooks registered on the model's modules; 0 only when every hook
    dict, the with-kwargs flags included, is empty."""
    count = sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in model.modules())
    flags = sum(len(m._forward_pre_hooks_with_kwargs) for m in model.modules())
    return count if count or not flags else -flags


def test_dropped_probes_leave_no_hooks() -> None:
    model = _model()
    x = torch.randint(0, 23, (2, 12))
    with torch.no_grad():
        expected = model(x)[0]
    assert _hooks(model) == 0
    for _ in range(20):
        probe = QKProbe(model)
        with torch.no_grad():
            model(x)
        assert probe.attached and _hooks(model) == 2
        del probe  # dropped without remove()
    gc.collect()
    assert _hooks(model) == 0
    with torch.no_grad():
        assert torch.equal(model(x)[0], expected)


def test_probes_in_a_cycle_are_removed_by_the_collector() -> None:
    model = _model()
    for _ in range(3):
        probe = QKProbe(model)
        probe.me = probe  # only the cycle collector can free it
        del probe
    gc.collect()
    assert _hooks(model) == 0


def test_kept_probe_measures_and_remove_and_with_still_work() -> None:
    model = _model()
    x = torch.randint(0, 23, (2, 12))
    probe = QKProbe(model)
    gc.collect()  # a live probe keeps its hooks
    with torch.no_grad():
        model(x)
    records = probe.results()
    assert [r["tokens"] for r in records if r["head"] is None] == [24, 24]
    probe.remove()
    assert _hooks(model) == 0 and not probe.attached
    probe.reattach()
    assert _hooks(model) == 2
    del probe
    gc.collect()
    assert _hooks(model) == 0
    with QKProbe(model) as probe:
        assert _hooks(model) == 2
        with torch.no_grad():
            model(x)
    assert _hooks(model) == 0
    assert probe.results()[-1]["tokens"] == 24  # statistics readable after removal
