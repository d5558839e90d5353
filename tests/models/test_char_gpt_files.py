"""A CharGPT checkpoint file may come from someone else: it is read as data only."""
from __future__ import annotations

import re

import pytest
import torch

from quest_geometric.models.char_gpt import CharGPT


class _Payload:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').close()",))


def test_crafted_checkpoint_never_runs(tmp_path) -> None:
    marker = tmp_path / "marker"
    crafted = tmp_path / "ckpt.pt"
    torch.save({"config": {}, "model": _Payload(str(marker))}, crafted)
    with pytest.raises(ValueError, match="refused to load " + re.escape(repr(str(crafted)))
                       + ".*does not hold a CharGPT"):
        CharGPT.from_checkpoint(crafted)
    assert not marker.exists()
