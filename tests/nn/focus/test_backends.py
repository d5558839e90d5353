"""The Focus back-end registry: every registered back-end (the built-in ones and one
registered here) against the dense oracle through the one shared check
(:func:`quest_geometric.testing.focus.check_focus_backend`), the 'auto' rule, and what
FocusAttention says it ran."""
import math

import pytest
import torch

from quest_geometric.nn.focus import FocusAttention
from quest_geometric.nn.focus.backends import (
    choose_focus_backend,
    focus_backend,
    focus_backend_names,
    register_focus_backend,
    unregister_focus_backend,
)
from quest_geometric.nn.focus.flex import FLEX_AVAILABLE
from quest_geometric.testing.focus import check_focus_backend, focus_mask_reference


def _loop_backend(q, k, v, groups, window, batch, causal, num_groups, num_sinks):
    """A back-end written here: the pattern's definition as a mask (plain loops) under one
    masked softmax (differentiable)."""
    mask = focus_mask_reference(groups.cpu(), window, None if batch is None else batch.cpu(),
                                causal, num_sinks).to(q.device)
    s = torch.einsum("ihd,jhd->hij", q, k) / math.sqrt(q.size(-1))
    p = torch.softmax(s.masked_fill(~mask, float("-inf")), -1)
    return torch.einsum("hij,jhd->ihd", p, v)


@pytest.fixture
def loop_backend():
    register_focus_backend("test_loop", _loop_backend)
    yield "test_loop"
    unregister_focus_backend("test_loop")


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "flex" else n
                                  for n in focus_backend_names()])
def test_every_registered_backend_equals_the_dense_oracle(name):
    if name == "flex" and not FLEX_AVAILABLE:
        pytest.skip("FlexAttention is not in this PyTorch build")
    # FlexAttention has no backward on CPU: its forward is checked here, its gradients on
    # CUDA (tests/test_cuda.py)
    assert check_focus_backend(name, gradients=name != "flex") == 24


def test_a_backend_registered_by_the_user_is_checked_and_used(loop_backend):
    assert loop_backend in focus_backend_names()
    assert check_focus_backend(loop_backend) == 24
    torch.manual_seed(0)
    m = FocusAttention(16, 2, num_groups=4, top_k=2, window=3, num_sinks=1,
                       backend=loop_backend).eval()
    x = torch.randn(2, 9, 16)
    out = m(x)
    assert m.last_backend == loop_backend
    m.backend = "dense"
    torch.testing.assert_close(out, m(x), atol=1e-5, rtol=1e-5)


def test_the_shared_check_fails_a_wrong_backend():
    def no_sinks(q, k, v, groups, window, batch, causal, num_groups, num_sinks):
        return focus_backend("dense")(q, k, v, groups, window, batch, causal, num_groups, 0)

    def detached(q, k, v, groups, window, batch, causal, num_groups, num_sinks):
        out = focus_backend("dense")(q, k, v, groups, window, batch, causal, num_groups,
                                     num_sinks)
        return out + 1e-3 * (q - q.detach())  # right values, wrong gradient of q

    with pytest.raises(AssertionError, match=r"output \(.*num_sinks=2"):
        check_focus_backend(no_sinks)
    with pytest.raises(AssertionError, match="gradient of q"):
        check_focus_backend(detached)
    check_focus_backend(detached, gradients=False)  # the values alone are right


def test_registry_errors_name_the_argument():
    with pytest.raises(ValueError, match="register_focus_backend: 'name' must be a new name"):
        register_focus_backend("blocks", _loop_backend)
    with pytest.raises(ValueError, match="'name' must be a new name"):
        register_focus_backend("auto", _loop_backend)
    with pytest.raises(TypeError, match="'fn' must be a callable"):
        register_focus_backend("x", "not a function")
    with pytest.raises(ValueError, match=r"focus_backend: 'name' must be one of \('blocks'"):
        focus_backend("nope")
    with pytest.raises(ValueError, match="unregister_focus_backend"):
        unregister_focus_backend("dense")
    register_focus_backend("test_twice", _loop_backend)
    try:
        with pytest.raises(ValueError, match="replace=True"):
            register_focus_backend("test_twice", _loop_backend)
        register_focus_backend("test_twice", _loop_backend, replace=True)
    finally:
        unregister_focus_backend("test_twice")
    assert "test_twice" not in focus_backend_names()
    with pytest.raises(ValueError, match="'backend' must be one of"):
        FocusAttention(8, 2, backend="test_twice")


def test_auto_is_blocks_off_cuda_and_the_layer_says_what_it_ran():
    q = torch.randn(10, 2, 8)
    assert choose_focus_backend(q, 8) == "blocks"
    assert choose_focus_backend(q.to("meta"), 8) == "blocks"
    m = FocusAttention(16, 2, num_groups=4, window=3).eval()
    assert m.backend == "auto" and m.last_backend is None
    assert repr(m).endswith("backend='auto', gate='additive', gate_bias=0.5)")
    m(torch.randn(1, 7, 16))
    assert m.last_backend == "blocks"
    assert repr(m).endswith("gate_bias=0.5, last_backend='blocks')")
    m.backend = "dense"
    m(torch.randn(1, 7, 16))
    assert m.last_backend == "dense" and "last_backend" not in repr(m)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", focus_backend_names())
def test_every_registered_backend_equals_the_dense_oracle_on_cuda(name):
    # float32 (the compiled FlexAttention kernel takes no float64), gradients included;
    # the kernels' dots may use TF32
    assert check_focus_backend(name, device="cuda", dtype=torch.float32, tol=6e-3) == 24
