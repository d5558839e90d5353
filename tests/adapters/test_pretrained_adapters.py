"""compose_focus and QKProbe on the Llama family, GPT-2 and GPT-NeoX (tiny random configs, no
download): exactness against the original model, cached generation against the uncached
forward, padded batches against each sequence alone, saving and reloading."""
from __future__ import annotations

import math

import pytest
import torch

from quest_geometric.adapters import (
    LlamaAttentionAdapter,
    get_attention_adapter,
    padding_from_mask,
    repeat_kv,
)
from quest_geometric.analysis.probe import QKProbe
from quest_geometric.nn.focus.compose import (
    compose_focus,
    decompose,
    focus_disabled,
)
from quest_geometric.nn.focus.router_files import load_routers, save_routers
from quest_geometric.testing.hf import HF_ARCHS, build_hf, tokens

pytest.importorskip("transformers")
LLAMA_FAMILY = ["llama", "mistral", "qwen2"]


def _attn(m):
    return [a for a in m.modules() if get_attention_adapter(a) is not None
            and type(a).__name__.endswith("Attention")]


@pytest.mark.parametrize("arch", HF_ARCHS)
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_disabled_is_bitwise_and_wide_window_equals_original(arch, attn):
    m = build_hf(arch, attn=attn)
    x = tokens(2, 30)
    with torch.no_grad():
        ref = m(x).logits
        compose_focus(m, num_groups=4, top_k=1, window=64)
        with focus_disabled(m):
            assert torch.equal(m(x).logits, ref)
        assert torch.allclose(m(x).logits, ref, atol=1e-5, rtol=0)  # hard, w >= T
        m.train()
        assert torch.allclose(m(x).logits, ref, atol=1e-5, rtol=0)  # soft, w >= T


@pytest.mark.parametrize("arch", LLAMA_FAMILY)
def test_llama_layer_matches_hand_written_gqa_rope_attention(arch):
    """One composed layer against a plain re-implementation: q/k/v projections (with
    biases), rotary embedding by hand, keys/values repeated per group, and the Focus mask of
    the router's hard groups applied to a dense softmax."""
    m = build_hf(arch)
    compose_focus(m, num_groups=4, top_k=1, window=2)
    layer = m.model.layers[0].self_attn
    orig = layer.original
    t, c = 24, m.config.hidden_size
    h = torch.randn(1, t, c, generator=torch.Generator().manual_seed(5))
    pos = torch.arange(t).unsqueeze(0)
    cos, sin = m.model.rotary_emb(h, pos)
    with torch.no_grad():
        out, _ = layer(h, position_embeddings=(cos, sin), attention_mask=None)
        d = orig.head_dim
        nh, nkv = m.config.num_attention_heads, m.config.num_key_value_heads
        q = orig.q_proj(h).view(1, t, nh, d).transpose(1, 2)
        k = orig.k_proj(h).view(1, t, nkv, d).transpose(1, 2)
        v = orig.v_proj(h).view(1, t, nkv, d).transpose(1, 2)

        def rot(x):  # rotate_half, written out
            x1, x2 = x[..., : d // 2], x[..., d // 2:]
            return torch.cat([-x2, x1], -1)

        q = q * cos[:, None] + rot(q) * sin[:, None]
        k = k * cos[:, None] + rot(k) * sin[:, None]
        k = k.repeat_interleave(nh // nkv, dim=1)
        v = v.repeat_interleave(nh // nkv, dim=1)
        groups = layer.router(h[0]).groups[:, 0]
        i = torch.arange(t)
        allowed = ((i[:, None] - i[None]) <= 2) | (groups[:, None] == groups[None])
        allowed &= i[None] <= i[:, None]
        s = (q @ k.transpose(-1, -2)) / math.sqrt(d)
        a = s.masked_fill(~allowed, float("-inf")).softmax(-1)
        ref = orig.o_proj((a @ v).transpose(1, 2).reshape(1, t, nh * d))
    assert not bool(allowed.all())  # the pattern is sparse
    assert torch.allclose(out, ref, atol=1e-5)


@pytest.mark.parametrize("arch", HF_ARCHS)
@pytest.mark.parametrize("top_k", [1, 2, 4])
@pytest.mark.slow
def test_cached_decoding_equals_full_forward(arch, top_k):
    m = build_hf(arch)
    compose_focus(m, num_groups=4, top_k=top_k, window=3)
    x = tokens(2, 40, seed=7)
    with torch.no_grad():
        full = m(x, use_cache=False).logits
        pre = m(x[:, :25], use_cache=True)
        cache = pre.past_key_values
        assert torch.allclose(pre.logits, full[:, :25], atol=1e-4, rtol=0)
        for i in range(25, 40):
            o = m(x[:, i:i + 1], cache=cache, use_cache=True)
            assert torch.allclose(o.logits[:, 0], full[:, i], atol=1e-4, rtol=0), i
        g1 = m.generate(x[:, :10], max_new_tokens=20, do_sample=False, use_cache=True)
        g2 = m.generate(x[:, :10], max_new_tokens=20, do_sample=False, use_cache=False)
    assert g1.shape == (2, 30)
    assert torch.equal(g1, g2)


def test_decode_attends_only_to_window_and_shared_group():
    """The decode step's gathered keys are exactly the window plus the tokens sharing a
    group, a small share of a long context."""
    from quest_geometric.nn.focus.decode import FocusDecodeState, focus_decode_attention

    s, w = 400, 4
    g = torch.randint(0, 8, (1, s, 1), generator=torch.Generator().manual_seed(0))
    st = FocusDecodeState(g, torch.arange(s).view(1, s), torch.zeros(1, 1, 8),
                          torch.tensor([s]))
    q = torch.randn(1, 2, 1, 8)
    k, v = torch.randn(1, 1, s, 8), torch.randn(1, 1, s, 8)
    o = focus_decode_attention(q, k, v, st, w, 0.3)
    i = torch.arange(s)
    allowed = ((s - 1 - i) <= w) | (g[0, :, 0] == g[0, -1, 0])
    ref = torch.softmax((q @ k.repeat(1, 2, 1, 1).transpose(-1, -2) * 0.3)
                        .masked_fill(~allowed, float("-inf")), -1) @ v.repeat(1, 2, 1, 1)
    assert torch.allclose(o, ref, atol=1e-6)
    assert int(allowed.sum()) < s // 4


@pytest.mark.parametrize("arch", HF_ARCHS)
@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("train", [False, True])
def test_padded_batch_equals_each_sequence_alone(arch, side, train):
    m = build_hf(arch, attn="eager" if side == "right" else "sdpa")
    compose_focus(m, num_groups=4, top_k=2, window=3)
    m.train(train)
    a, b = tokens(1, 12, seed=3), tokens(1, 20, seed=4)
    ids = torch.full((2, 20), 2)
    mask = torch.zeros(2, 20, dtype=torch.long)
    sl = slice(8, 20) if side == "left" else slice(0, 12)
    ids[0, sl], mask[0, sl] = a[0], 1
    ids[1], mask[1] = b[0], 1
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    with torch.no_grad():
        out = m(ids, attention_mask=mask, position_ids=pos, use_cache=False).logits
        alone_a = m(a, use_cache=False).logits
        alone_b = m(b, use_cache=False).logits
    assert torch.allclose(out[0, sl], alone_a[0], atol=1e-5, rtol=0)
    assert torch.allclose(out[1], alone_b[0], atol=1e-5, rtol=0)


@pytest.mark.parametrize("arch", HF_ARCHS)
def test_batched_generate_with_left_padding_gives_each_prompts_continuation(arch):
    m = build_hf(arch)
    compose_focus(m, num_groups=4, top_k=1, window=2)
    a, b = tokens(1, 7, seed=8), tokens(1, 15, seed=9)
    ids = torch.full((2, 15), 2)
    mask = torch.zeros(2, 15, dtype=torch.long)
    ids[0, 8:], mask[0, 8:] = a[0], 1
    ids[1], mask[1] = b[0], 1
    with torch.no_grad():
        g = m.generate(ids, attention_mask=mask, max_new_tokens=12, do_sample=False)
        ga = m.generate(a, max_new_tokens=12, do_sample=False)
        gb = m.generate(b, max_new_tokens=12, do_sample=False)
    assert torch.equal(g[0, 15:], ga[0, 7:])
    assert torch.equal(g[1, 15:], gb[0, 15:])


@pytest.mark.parametrize("arch", HF_ARCHS)
def test_output_attentions_is_refused_the_same_way_by_every_adapter(arch):
    # issue 28 §7: GPT-2 (which records attentions through output-capturing hooks instead of
    # passing the flag down) returned an empty tuple; every adapter now refuses alike
    m = build_hf(arch, attn="eager")
    x = tokens(1, 6)
    with torch.no_grad():
        ref = m(x, output_attentions=True).attentions  # the original returns them
    assert len(ref) == 2 and all(a.shape[-2:] == (6, 6) for a in ref)
    compose_focus(m, num_groups=4, top_k=2, window=4)
    with pytest.raises(ValueError, match=r"^compose_focus \(\w+Attention\): "
                                         r"'output_attentions' must be False with Focus "
                                         r"enabled .*, got True$"):
        m(x, output_attentions=True)
    with torch.no_grad():  # other recorded outputs still work; disabled Focus gives them back
        assert len(m(x, output_hidden_states=True).hidden_states) == 3
        with focus_disabled(m):
            got = m(x, output_attentions=True).attentions
    assert all(torch.equal(a, b) for a, b in zip(got, ref)) and len(got) == 2


def test_non_padding_masks_are_refused_with_what_is_supported():
    m = build_hf("llama", attn="eager")
    compose_focus(m, num_groups=4, top_k=1, window=2)
    layer = m.model.layers[0].self_attn
    h = torch.randn(1, 6, m.config.hidden_size)
    pe = m.model.rotary_emb(h, torch.arange(6).unsqueeze(0))
    band = torch.ones(6, 6, dtype=torch.bool).tril() & ~torch.ones(6, 6, dtype=torch.bool).tril(-3)
    with pytest.raises(ValueError, match=r"^compose_focus \(LlamaAttention\): 'attention_mask' "
                                         "must be a padding mask with Focus enabled .*, got a "
                                         r"\[1, 1, 6, 6\] mask that masks other pairs"):
        layer(h, position_embeddings=pe, attention_mask=band.view(1, 1, 6, 6))
    bias = torch.zeros(1, 1, 6, 6).masked_fill(~torch.ones(6, 6, dtype=torch.bool).tril(),
                                               torch.finfo(torch.float32).min)
    bias[..., 0] = 0.5  # a finite additive bias
    with pytest.raises(ValueError, match=r"^compose_focus \(LlamaAttention\): 'attention_mask' "
                                         "must be a padding mask .*, got an additive bias"):
        layer(h, position_embeddings=pe, attention_mask=bias)


def test_padding_from_mask_reads_hf_masks():
    valid = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]], dtype=torch.bool)
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    four = (valid[:, None, None, :] & causal).clone()
    four[0, 0, :2] = True  # HF opens fully masked padding rows; they are ignored
    assert torch.equal(padding_from_mask(four, 5, 5, True, "t"), valid)
    assert padding_from_mask(torch.ones(2, 5), 5, 5, True, "t") is None
    assert torch.equal(padding_from_mask(valid.long(), 5, 5, True, "t"), valid)
    # a decode step: one query over a cache of 5
    assert torch.equal(padding_from_mask(four[:, :, -1:], 1, 5, True, "t"), valid)
    with pytest.raises(ValueError, match=r"^t: 'attention_mask' must be 2-D \[B, S\] or 4-D"):
        padding_from_mask(torch.ones(5), 5, 5, True, "t")


def _counting_reduce(monkeypatch):
    """Count the reductions :func:`padding_from_mask` actually runs."""
    from quest_geometric.adapters import base

    calls = []
    real = base._reduce_mask

    def spy(*a, **kw):
        calls.append(a[1:3])
        return real(*a, **kw)

    monkeypatch.setattr(base, "_reduce_mask", spy)
    return calls


def test_padding_from_mask_reduces_one_mask_once_and_sees_changes(monkeypatch):
    calls = _counting_reduce(monkeypatch)
    valid = torch.tensor([[0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]], dtype=torch.bool)
    # a static-cache decoding step: one query, a mask over the whole buffer of 8 slots
    mask = torch.zeros(2, 1, 1, 8, dtype=torch.bool)
    mask[..., :6] = valid[:, None, None, :]
    for _ in range(3):  # three layers of one forward
        assert torch.equal(padding_from_mask(mask, 1, 6, True, "t"), valid)
    assert calls == [(1, 6)]
    # other lengths are another question
    assert torch.equal(padding_from_mask(mask, 1, 5, True, "t"), valid[:, :5])
    assert calls == [(1, 6), (1, 5)]
    # an in-place change is seen: row 1 now pads its first key
    mask[1, ..., 0] = False
    want = valid.clone()
    want[1, 0] = False
    assert torch.equal(padding_from_mask(mask, 1, 5, True, "t"), want[:, :5])
    assert len(calls) == 3
    # ... and a change that makes it no padding mask raises instead of a stale answer
    bias = torch.zeros(1, 1, 3, 3)
    bias[0, 0].masked_fill_(~torch.ones(3, 3, dtype=torch.bool).tril(), float("-inf"))
    assert padding_from_mask(bias, 3, 3, True, "t") is None
    bias[0, 0, 2, 0] = 0.5
    with pytest.raises(ValueError, match="^t: 'attention_mask' must be .*, got an additive bias"):
        padding_from_mask(bias, 3, 3, True, "t")
    # an equal but different tensor is reduced again (the memo is by identity)
    n = len(calls)
    assert torch.equal(padding_from_mask(mask.clone(), 1, 5, True, "t"), want[:, :5])
    assert len(calls) == n + 1


def test_padding_from_mask_does_not_remember_inference_tensors(monkeypatch):
    calls = _counting_reduce(monkeypatch)
    with torch.inference_mode():  # no version counter: every call reduces again
        mask = torch.ones(1, 1, 1, 4, dtype=torch.bool)
        assert padding_from_mask(mask, 1, 4, True, "t") is None
        mask[..., 0] = False
        assert torch.equal(padding_from_mask(mask, 1, 4, True, "t"),
                           torch.tensor([[False, True, True, True]]))
    assert len(calls) == 2


def test_static_cache_step_reduces_its_mask_once(monkeypatch):
    """Every composed layer of a static-cache decoding step gets the same mask; it is
    reduced once per forward, and the decoded tokens are those of the uncached forward."""
    m = build_hf("llama")
    layers = len(_attn(m))
    assert layers > 1
    compose_focus(m, num_groups=4, top_k=1, window=3)
    x = tokens(1, 12)
    with torch.no_grad():
        a = m.generate(x, max_new_tokens=4, do_sample=False, use_cache=False)
        calls = _counting_reduce(monkeypatch)
        b = m.generate(x, max_new_tokens=4, do_sample=False, cache_implementation="static")
    assert torch.equal(a, b)
    assert 0 < len(calls) <= 4  # one per forward (prefill and decoding steps), not per layer


def test_sliding_window_is_refused_naming_the_option():
    m = build_hf("mistral", sliding_window=8)
    compose_focus(m, num_groups=4, top_k=1, window=2)
    with torch.no_grad():
        m(tokens(1, 8))  # within the window: fine
        with pytest.raises(ValueError, match=r"^compose_focus \(MistralAttention\): "
                                             "'hidden_states' must be at most "
                                             "config.sliding_window=8 keys .*, got 12 keys; set "
                                             "config.sliding_window=None"):
            m(tokens(1, 12))


@pytest.mark.parametrize("arch", HF_ARCHS)
def test_save_pretrained_reloads_original_and_routers_bitwise(arch, tmp_path):
    m = build_hf(arch)
    before = {k: v.clone() for k, v in m.state_dict().items()}
    compose_focus(m, num_groups=4, top_k=2, window=3)
    with torch.no_grad():
        for p in m.parameters():
            if p.requires_grad:  # "trained" routers: anything but their initial values
                p.add_(0.1 * torch.randn_like(p))
    x = tokens(1, 30)
    with torch.no_grad():
        ref = m(x).logits
    sd = m.state_dict()
    assert all(torch.equal(sd[k], v) for k, v in before.items())  # original names kept
    assert any(".focus.router." in k for k in sd)  # the state dict still holds the routers
    m.save_pretrained(tmp_path)
    save_routers(m, tmp_path)
    # the base model's file holds exactly what the uncomposed model's save_pretrained writes
    build_hf(arch).save_pretrained(tmp_path / "plain")
    assert _saved_keys(tmp_path) == _saved_keys(tmp_path / "plain")
    base, info = type(m).from_pretrained(tmp_path, output_loading_info=True)
    base.eval()
    assert info["unexpected_keys"] == set() and info["missing_keys"] == set()
    bsd = base.state_dict()
    assert set(bsd) == set(before)
    assert all(torch.equal(bsd[k], v) for k, v in before.items())
    load_routers(base, tmp_path)
    with torch.no_grad():
        assert torch.equal(base(x).logits, ref)
    # torch.save of a state dict round-trips into a freshly composed model
    torch.save(m.state_dict(), tmp_path / "sd.pt")
    fresh = compose_focus(build_hf(arch), num_groups=4, top_k=2, window=3)
    fresh.load_state_dict(torch.load(tmp_path / "sd.pt"))
    with torch.no_grad():
        assert torch.equal(fresh(x).logits, ref)


def _saved_keys(folder):
    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        return set(f.keys())


def _load_messages(cls, folder):
    """What transformers logs (its loggers do not propagate) while loading ``folder``."""
    import logging

    got = []

    class Keep(logging.Handler):
        def emit(self, record):
            got.append(record.getMessage())

    keep, root = Keep(logging.WARNING), logging.getLogger("transformers")
    root.addHandler(keep)
    try:
        cls.from_pretrained(folder)
    finally:
        root.removeHandler(keep)
    return "\n".join(got)


def test_from_pretrained_of_a_saved_composed_model_reports_nothing(tmp_path):
    """Transformers' load report (logged when a checkpoint holds keys the model lacks) has
    nothing to report: the composed model's file holds the base model's keys only."""
    m = compose_focus(build_hf("llama"), num_groups=4, top_k=2, window=3)
    m.save_pretrained(tmp_path / "a")
    assert "LOAD REPORT" not in _load_messages(type(m), tmp_path / "a")
    # the same save with the router keys written (as before) is reported, keys named
    hidden, m._keys_to_ignore_on_save = m._keys_to_ignore_on_save, set()
    m.save_pretrained(tmp_path / "b")
    m._keys_to_ignore_on_save = hidden
    report = _load_messages(type(m), tmp_path / "b")
    assert "LOAD REPORT" in report and "UNEXPECTED" in report and "focus.router" in report


def test_decompose_restores_what_save_pretrained_writes(tmp_path):
    m = build_hf("gpt2")
    own = m.__dict__.get("_keys_to_ignore_on_save", "unset")
    compose_focus(m, num_groups=4, top_k=2, window=3)
    assert any("focus" in k for k in m._keys_to_ignore_on_save)
    decompose(m)
    assert m.__dict__.get("_keys_to_ignore_on_save", "unset") == own
    m.save_pretrained(tmp_path / "a")
    build_hf("gpt2").save_pretrained(tmp_path / "b")
    assert _saved_keys(tmp_path / "a") == _saved_keys(tmp_path / "b")
    # composing again hides the new routers; a nested model hides its own (relative) keys
    compose_focus(m, num_groups=2, top_k=1, window=3)
    inner = m.transformer
    assert inner._keys_to_ignore_on_save == {k[len("transformer."):] for k in
                                             m._keys_to_ignore_on_save}
    assert {k for k in m.state_dict() if ".focus." in k} == set(m._keys_to_ignore_on_save)


def test_routers_save_routers_cannot_store_stay_in_the_saved_weights(tmp_path):
    """A model composed with a given router of an unregistered class (which save_routers
    refuses) keeps its router in what save_pretrained writes, so nothing trained is lost; a
    registered one (FocusRouter) is left out of it and travels with save_routers."""
    from quest_geometric.nn.focus.router import FocusRouter

    class Unregistered(FocusRouter):  # a subclass may route differently: not saved as one
        pass

    m = compose_focus(build_hf("llama"), router=lambda d: Unregistered(d, 4, 8), window=3)
    with pytest.raises(ValueError, match="given 'router' whose class is not registered"):
        save_routers(m, tmp_path)
    m.save_pretrained(tmp_path)
    routers = {k for k in m.state_dict() if ".focus." in k}
    assert routers and routers <= _saved_keys(tmp_path)
    m = compose_focus(build_hf("llama"), router=lambda d: FocusRouter(d, 4, 8), window=3)
    m.save_pretrained(tmp_path / "registered")
    save_routers(m, tmp_path / "registered")
    assert not any(".focus." in k for k in _saved_keys(tmp_path / "registered"))
    back = load_routers(build_hf("llama"), tmp_path / "registered")
    for a, b in zip(back.state_dict().items(), m.state_dict().items()):
        assert a[0] == b[0] and torch.equal(a[1], b[1])


def test_load_routers_errors(tmp_path):
    m = build_hf("llama")
    with pytest.raises(FileNotFoundError, match="save_routers"):
        load_routers(m, tmp_path)
    with pytest.raises(ValueError, match="^save_routers: 'model' must be a model composed with "
                                         "compose_focus, got a LlamaForCausalLM that is not "
                                         "composed$"):
        save_routers(m, tmp_path)


def test_load_routers_refuses_another_pattern_unless_not_strict(tmp_path):
    m = compose_focus(build_hf("llama"), num_groups=4, top_k=2, window=3)
    save_routers(m, tmp_path)
    saved = [p.detach().clone() for p in m.parameters() if p.requires_grad]
    for kw, name in ((dict(num_groups=4, window=5), "window=3, but the model is composed "
                      "with window=5"), (dict(num_groups=2, window=3), "num_groups=4")):
        other = compose_focus(build_hf("llama"), top_k=1, **kw)
        with pytest.raises(ValueError, match=name):
            load_routers(other, tmp_path)
    # strict=False loads into another window (same number of groups: same shapes)
    other = compose_focus(build_hf("llama"), num_groups=4, top_k=2, window=5)
    load_routers(other, tmp_path, strict=False)
    assert all(torch.equal(a, b) for a, b in
               zip([p for p in other.parameters() if p.requires_grad], saved))
    # the same pattern (another top-k is a decoding option, not the pattern) loads
    same = compose_focus(build_hf("llama"), num_groups=4, top_k=1, window=3)
    load_routers(same, tmp_path)
    assert all(torch.equal(a, b) for a, b in
               zip([p for p in same.parameters() if p.requires_grad], saved))


def test_cache_filled_without_focus_is_refused():
    m = build_hf("llama")
    compose_focus(m, num_groups=4, top_k=1, window=2)
    x = tokens(1, 10)
    with torch.no_grad():
        with focus_disabled(m):
            cache = m(x, use_cache=True).past_key_values
        with pytest.raises(ValueError, match="did not route"):
            m(x[:, :1], cache=cache, use_cache=True)


def test_probe_on_gqa_measures_each_query_head_against_its_key_head():
    m = build_hf("llama")
    x = tokens(1, 16)
    with QKProbe(m, max_tokens=64) as probe, torch.no_grad():
        m(x)
    rec = [r for r in probe.results() if r.get("head") is None]
    assert len(rec) == 2
    # the view the adapter gives, against a direct computation
    attn = m.model.layers[0].self_attn
    ad = get_attention_adapter(attn)
    assert isinstance(ad, LlamaAttentionAdapter)
    hs = m.model.embed_tokens(x)
    pe = m.model.rotary_emb(hs, torch.arange(16).unsqueeze(0))
    with torch.no_grad():
        view = ad.qk_view(attn, (hs,), {"position_embeddings": pe, "attention_mask": None})
        k = attn.k_proj(hs).view(1, 16, 2, -1).transpose(1, 2)
        _, k = m.model.layers[0].self_attn.__class__.__module__, k
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb
        _, kr = apply_rotary_pos_emb(k, k, *pe)
    assert view.q.shape == (1, 4, 16, 8) and view.k.shape == (1, 4, 16, 8)
    assert torch.allclose(view.k, repeat_kv(kr, 2))
    assert torch.equal(view.k[:, 0], view.k[:, 1]) and torch.equal(view.k[:, 2], view.k[:, 3])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_llama_composed_runs(dtype):
    m = build_hf("llama", dtype=dtype)
    compose_focus(m, num_groups=4, top_k=2, window=3)
    x = tokens(1, 20)
    with torch.no_grad():
        out = m(x).logits
        g = m.generate(x[:, :8], max_new_tokens=4, do_sample=False)
    assert out.dtype == dtype and bool(torch.isfinite(out).all())
    assert g.shape == (1, 12)


def test_probe_of_a_composed_model_measures_the_same_queries_and_keys():
    m = build_hf("llama")
    x = tokens(1, 24)
    with QKProbe(m, max_tokens=64) as probe, torch.no_grad():
        m(x)
    ref = [r for r in probe.results() if r.get("head") is not None]
    compose_focus(m, num_groups=4, top_k=1, window=64)  # w >= T: every layer sees the same
    with QKProbe(m, max_tokens=64) as probe, torch.no_grad():
        m(x)
    got = [r for r in probe.results() if r.get("head") is not None]
    assert len(got) == len(ref) == 2 * 4
    assert {r["type"] for r in got} == {"FocusComposed"}
    for a, b in zip(got, ref):
        assert a["pr_q"] == pytest.approx(b["pr_q"], rel=1e-4)
        assert a["pr_k"] == pytest.approx(b["pr_k"], rel=1e-4)


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_static_cache_generate_equals_uncached(arch):
    """A preallocated StaticCache (written in place, returned at full capacity) decodes like
    the uncached forward: the Focus state bounds the keys to those already written."""
    m = build_hf(arch)
    compose_focus(m, num_groups=4, top_k=1, window=3)
    x = tokens(1, 20)
    with torch.no_grad():
        a = m.generate(x, max_new_tokens=10, do_sample=False, use_cache=False)
        b = m.generate(x, max_new_tokens=10, do_sample=False, cache_implementation="static")
    assert torch.equal(a, b)
