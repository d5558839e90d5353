"""Fixtures of the Focus tests."""
from contextlib import ExitStack

import pytest

from quest_geometric.nn.focus.config import blocks_config, decode_config


class _Tuning:
    """Sets the Focus kernels' tuning for the rest of one test (undone afterwards)."""

    def __init__(self, stack: ExitStack) -> None:
        self._stack = stack

    def blocks(self, **overrides):
        return self._stack.enter_context(blocks_config(**overrides))

    def decode(self, **overrides):
        return self._stack.enter_context(decode_config(**overrides))


@pytest.fixture
def tuning():
    """``tuning.blocks(band_block=...)`` / ``tuning.decode(store_after=...)``: the
    :mod:`~quest_geometric.nn.focus.config` in force until the test ends."""
    with ExitStack() as stack:
        yield _Tuning(stack)
