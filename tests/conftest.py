"""Shared test fixtures: the independent references several test files check against.

Fixtures that return a function (as PyG's own ``test/conftest.py`` does with
``get_dataset``), so a test asks for the reference by name and calls it.
"""
from __future__ import annotations

import gc

import pytest


def pytest_collection_finish(session):
    """Moves every object alive after collection (the imported torch, PyG, transformers and
    test modules: millions of objects that stay alive) out of the cyclic collector's reach
    (:func:`gc.freeze`), after one last collection. Each full collection during the tests
    (and pytest's own at the session's end) then traverses only the objects created since,
    instead of the whole heap again. Objects a test creates, and the cycles among them,
    are collected as before."""
    gc.collect()
    gc.freeze()


@pytest.fixture
def focus_mask_reference():
    """``focus_mask_reference(groups, window, batch, causal, num_sinks=0) -> [N, N]`` bool
    (query, key)
    mask of the Focus pattern, from its definition
    (:func:`quest_geometric.testing.focus.focus_mask_reference`)."""
    from quest_geometric.testing.focus import focus_mask_reference as reference

    return reference


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
