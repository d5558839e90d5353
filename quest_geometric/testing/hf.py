"""Tiny random Hugging Face language models (no download) for tests of the adapters, Focus
composition and the pretrained-model experiments."""
from __future__ import annotations

import torch
from torch import nn

VOCAB, C, LAYERS = 61, 32, 2
HF_ARCHS = ["llama", "mistral", "qwen2", "gpt2", "neox"]


def build_hf(arch: str, attn: str = "sdpa", dtype: torch.dtype = torch.float32,
             seed: int = 0, **overrides) -> nn.Module:
    """A 2-layer causal LM of ``arch`` (one of :data:`HF_ARCHS`) with random weights (the
    calling test skipped without ``transformers``); the Llama family uses grouped-query
    attention (4 query heads, 2 key/value heads) and Qwen2 its projection biases."""
    import pytest

    transformers = pytest.importorskip("transformers")
    torch.manual_seed(seed)
    common = dict(vocab_size=VOCAB, bos_token_id=0, eos_token_id=1, pad_token_id=2)
    if arch in ("llama", "mistral", "qwen2"):
        kw = dict(hidden_size=C, intermediate_size=64, num_hidden_layers=LAYERS,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                  **common)
        if arch == "mistral":
            kw["sliding_window"] = None
        kw.update(overrides)
        cfg_cls, model_cls = {
            "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
            "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
            "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
        }[arch]
        cfg = cfg_cls(**kw)
    elif arch == "gpt2":
        cfg = transformers.GPT2Config(n_layer=LAYERS, n_head=2, n_embd=C, n_positions=256,
                                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                      **common, **overrides)
        model_cls = transformers.GPT2LMHeadModel
    elif arch == "neox":
        cfg = transformers.GPTNeoXConfig(num_hidden_layers=LAYERS, num_attention_heads=2,
                                         hidden_size=C, intermediate_size=64,
                                         max_position_embeddings=256, **common, **overrides)
        model_cls = transformers.GPTNeoXForCausalLM
    else:  # pragma: no cover
        raise ValueError(arch)
    cfg._attn_implementation = attn
    m = model_cls(cfg).to(dtype)
    if arch == "qwen2":  # non-zero biases, so a forgotten bias would show
        with torch.no_grad():
            for layer in m.model.layers:
                for p in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                    p.bias.normal_(0, 0.5)
    m.generation_config.eos_token_id = None  # generate exactly max_new_tokens
    m.generation_config.pad_token_id = 2
    return m.eval()


def tokens(b: int, t: int, seed: int = 1) -> torch.Tensor:
    """A ``(b, t)`` batch of random token ids in ``[3, VOCAB)`` (above the special tokens)."""
    return torch.randint(3, VOCAB, (b, t), generator=torch.Generator().manual_seed(seed))
