"""Shared test fixtures: the independent references several test files check against.

Fixtures that return a function (as PyG's own ``test/conftest.py`` does with
``get_dataset``), so a test asks for the reference by name and calls it.
"""
from __future__ import annotations

from typing import Optional

import pytest
import torch
from torch import Tensor



def _focus_mask_reference(groups: Tensor, window: int, batch: Optional[Tensor],
                          causal: bool, num_sinks: int = 0) -> Tensor:
    """The Focus pattern straight from its definition, by plain loops over all pairs:
    ``mask[i, j]`` (query ``i``, key ``j``) is true iff both tokens lie in one sequence,
    ``j <= i`` if causal, and ``|i - j| <= window``, or their group sets
    (rows of ``groups [N, top_k]``, possibly empty: ``top_k = 0``) share a group, or one of
    them is among the first ``num_sinks`` tokens of the sequence (an attention sink).
    ``batch`` (sorted sequence ids) may be :obj:`None` (one sequence)."""
    n = groups.size(0)
    batch = torch.zeros(n, dtype=torch.long) if batch is None else batch
    first = {}
    for i in range(n):
        first.setdefault(int(batch[i]), i)
    mask = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        for j in range(n):
            if batch[i] != batch[j] or (causal and j > i):
                continue
            shared = bool(set(groups[i].tolist()) & set(groups[j].tolist()))
            start = first[int(batch[i])]
            sink = i - start < num_sinks or j - start < num_sinks
            mask[i, j] = abs(i - j) <= window or shared or sink
    return mask


@pytest.fixture
def focus_mask_reference():
    """``focus_mask_reference(groups, window, batch, causal, num_sinks=0) -> [N, N]`` bool
    (query, key)
    mask of the Focus pattern, from its definition (see :func:`_focus_mask_reference`)."""
    return _focus_mask_reference


@pytest.fixture
def one_thread():
    """Short training loops run much faster on one thread on a shared, busy machine
    (:func:`quest_geometric.testing.common.one_thread`)."""
    from quest_geometric.testing.common import one_thread as _one_thread

    with _one_thread():
        yield


@pytest.fixture(scope="module")
def built_docs(tmp_path_factory):
    """The HTML docs built once per session with warnings as errors
    (``test_docs.build_docs``; skips where the docs extra is not installed)."""
    from test_docs import build_docs

    return build_docs(tmp_path_factory)


@pytest.fixture
def hf_trainer(monkeypatch):
    """``transformers.Trainer`` made safe in this test tree: pytest's default import mode puts
    ``tests/`` on ``sys.path``, where ``tests/datasets/`` (mirroring the package) passes for
    Hugging Face's ``datasets`` package when that is not installed, and ``Trainer`` then
    fails on ``datasets.Dataset``. Tells ``Trainer`` that ``datasets`` is absent in that case
    and returns the ``transformers`` module."""
    import importlib

    transformers = pytest.importorskip("transformers")
    import transformers.trainer as trainer_module

    if not hasattr(importlib.import_module("datasets"), "Dataset"):
        monkeypatch.setattr(trainer_module, "is_datasets_available", lambda: False)
    return transformers
