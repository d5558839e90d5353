"""Tests of compose_focus / decompose on CharGPT and tiny random Hugging Face models."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from quest_geometric.models.char_gpt import CausalSelfAttention, CharGPT, GPTConfig
from quest_geometric.nn.focus.compose import (
    compose_focus,
    decompose,
    focus_disabled,
    focus_layers,
    router_parameters,
    set_focus_enabled,
    set_focus_options,
)
from quest_geometric.nn.focus.composed import FocusComposed

VOCAB, T, C, LAYERS = 50, 40, 32, 2
ARCHS = ["chargpt", "gpt2", "gpt2-eager", "neox"]


def _build(arch: str) -> tuple[nn.Module, callable]:
    torch.manual_seed(0)
    if arch == "chargpt":
        m = CharGPT(GPTConfig(vocab_size=VOCAB, block_size=64, n_layer=LAYERS, n_head=2,
                              n_embd=C))
        return m, lambda model, x: model(x)[0]
    transformers = pytest.importorskip("transformers")
    if arch.startswith("gpt2"):
        cfg = transformers.GPT2Config(
            n_layer=LAYERS, n_head=2, n_embd=C, vocab_size=VOCAB, n_positions=64,
            bos_token_id=0, eos_token_id=0,
            attn_implementation="eager" if arch.endswith("eager") else "sdpa",
            scale_attn_by_inverse_layer_idx=arch.endswith("eager"))
        m = transformers.GPT2LMHeadModel(cfg)
    else:
        cfg = transformers.GPTNeoXConfig(
            num_hidden_layers=LAYERS, num_attention_heads=2, hidden_size=C,
            intermediate_size=64, vocab_size=VOCAB, max_position_embeddings=64,
            bos_token_id=0, eos_token_id=0)
        m = transformers.GPTNeoXForCausalLM(cfg)
    return m, lambda model, x: model(x, use_cache=False).logits


def _tokens(b: int = 2, t: int = T, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (b, t), generator=torch.Generator().manual_seed(seed))


def _attn_modules(m: nn.Module) -> list[nn.Module]:
    names = ("CausalSelfAttention", "GPT2Attention", "GPTNeoXAttention")
    return [a for a in m.modules() if type(a).__name__ in names]


@pytest.mark.parametrize("arch", ARCHS)
def test_disabled_equals_original_exactly(arch):
    m, f = _build(arch)
    m.eval()
    x = _tokens()
    with torch.no_grad():
        ref = f(m, x)
        compose_focus(m, num_groups=4, top_k=1, window=3)
        assert len(focus_layers(m)) == LAYERS
        with focus_disabled(m):
            assert torch.equal(f(m, x), ref)
        assert all(fl.enabled for fl in focus_layers(m))  # restored
        on = f(m, x)
        set_focus_enabled(m, False)
        assert torch.equal(f(m, x), ref)
    # with top_k = 1 and a window of 3 << T the sparse model must differ
    assert not torch.allclose(on, ref, atol=1e-4)


@pytest.mark.parametrize("arch,backend", [(a, "blocks") for a in ARCHS] + [
    ("chargpt", "edges"), ("neox", "edges"), ("gpt2-eager", "dense")])
def test_top_k_equal_K_is_full_attention(arch, backend):
    m, f = _build(arch)
    m.eval()
    x = _tokens()
    with torch.no_grad():
        ref = f(m, x)
        compose_focus(m, num_groups=4, top_k=4, window=3, backend=backend)
        assert torch.allclose(f(m, x), ref, atol=1e-5, rtol=0)


def test_chargpt_layer_matches_dense_reference():
    """top_k = 1: the composed layer equals masked attention written here from the formulas
    (causal AND (|i - j| <= w OR same group)) with the original weights."""
    m, _ = _build("chargpt")
    m.eval()
    attn = m.blocks[0].attn
    compose_focus(m, num_groups=4, top_k=1, window=2)
    w = m.blocks[0].attn
    h = torch.randn(2, T, C, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        out = w(h)
        groups = w.router(h).groups[..., 0]  # [B, T]
        hd = attn.head_dim
        q, k, v = (p(h).view(2, T, 2, hd).transpose(1, 2)
                   for p in (attn.q_proj, attn.k_proj, attn.v_proj))
        i = torch.arange(T)
        near = (i.view(-1, 1) - i.view(1, -1)) <= 2
        causal = i.view(-1, 1) >= i.view(1, -1)
        same = groups.unsqueeze(2) == groups.unsqueeze(1)  # [B, T, T]
        allowed = (causal & (near | same)).unsqueeze(1)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        p = s.masked_fill(~allowed, float("-inf")).softmax(-1)
        ref = attn.out_proj((p @ v).transpose(1, 2).reshape(2, T, C))
    assert torch.allclose(out, ref, atol=1e-5)
    assert not bool(allowed.all())  # the mask really prunes


@pytest.mark.parametrize("arch", ARCHS)
def test_only_router_params_trainable_and_training_changes_routers_only(arch):
    m, f = _build(arch)
    before = {n: p.detach().clone() for n, p in m.named_parameters()}
    flags = {id(p): p.requires_grad for p in m.parameters()}
    originals = {id(p) for p in m.parameters()}
    compose_focus(m, num_groups=4, top_k=2, window=3, group_dim=8)
    trainable = [p for p in m.parameters() if p.requires_grad]
    routers = list(router_parameters(m))
    assert {id(p) for p in trainable} == {id(p) for p in routers}
    assert not originals & {id(p) for p in routers}
    assert sum(p.numel() for p in trainable) == LAYERS * (C * 8 + 4 * 8)  # L (d d_g + K d_g)
    r0 = [p.detach().clone() for p in routers]
    opt = torch.optim.Adam(trainable, lr=1e-2)
    m.train()
    x = _tokens(seed=5)
    for _ in range(3):
        logits = f(m, x)
        loss = nn.functional.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), x[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert all(not torch.equal(a, p) for a, p in zip(r0, routers))
    for p in m.parameters():
        if id(p) in originals:
            assert p.grad is None
    # every original tensor is bitwise unchanged (names changed under '.original.')
    decompose(m)
    for n, p in m.named_parameters():
        assert torch.equal(p, before[n]), n
        assert p.requires_grad == flags[id(p)]


@pytest.mark.parametrize("arch", ARCHS)
def test_decompose_restores_objects_and_outputs(arch):
    m, f = _build(arch)
    m.eval()
    x = _tokens()
    mods = _attn_modules(m)
    with torch.no_grad():
        ref = f(m, x)
        compose_focus(m, num_groups=4, top_k=1, window=3)
        assert _attn_modules(m) == mods  # still reachable, as .original
        wrapped = [w.original for w in m.modules() if isinstance(w, FocusComposed)]
        assert len(wrapped) == len(mods) and all(a is b for a, b in zip(wrapped, mods))
        decompose(m)
        assert not any(isinstance(w, FocusComposed) for w in m.modules())
        after = _attn_modules(m)
        assert len(after) == len(mods) and all(a is b for a, b in zip(after, mods))
        assert torch.equal(f(m, x), ref)
    with pytest.raises(ValueError, match="^decompose: 'model' must be a model composed with "
                                         r"compose_focus, got a \w+ that is not composed$"):
        decompose(m)


def test_freeze_false_keeps_flags_and_compose_twice_fails():
    m, _ = _build("chargpt")
    compose_focus(m, num_groups=4, top_k=1, window=3, freeze=False)
    assert all(p.requires_grad for p in m.parameters())
    with pytest.raises(ValueError, match="^compose_focus: 'model' must be a model not composed "
                                         "yet, got an already composed CharGPT; call "
                                         r"decompose\(model\) first$"):
        compose_focus(m)
    decompose(m)


@pytest.mark.parametrize("arch", ["gpt2", "neox"])
def test_future_tokens_never_change_past_outputs(arch):
    m, f = _build(arch)
    m.eval()
    compose_focus(m, num_groups=4, top_k=1, window=2)
    x = _tokens(b=1)
    y = x.clone()
    y[:, 25:] = (y[:, 25:] + 7) % VOCAB
    with torch.no_grad():
        a, b = f(m, x), f(m, y)
    assert torch.allclose(a[:, :25], b[:, :25], atol=1e-6)
    assert not torch.allclose(a[:, 25:], b[:, 25:], atol=1e-4)


def test_hf_cache_prefill_and_refusals():
    transformers = pytest.importorskip("transformers")
    m, _ = _build("gpt2-eager")
    m.eval()
    x = _tokens()
    with torch.no_grad():
        ref = m(x, use_cache=True)
        compose_focus(m, num_groups=4, top_k=4, window=3)
        out = m(x, use_cache=True)
        assert torch.allclose(out.logits, ref.logits, atol=1e-5)
        for la, lb in zip(ref.past_key_values.layers, out.past_key_values.layers):
            assert torch.allclose(la.keys, lb.keys, atol=1e-5)
            assert torch.allclose(la.values, lb.values, atol=1e-5)
        # continuing the cache (issue 10: cached decoding) equals the full forward
        nxt = m(x[:, :1], cache=out.past_key_values, use_cache=True).logits[:, 0]
        full = m(torch.cat([x, x[:, :1]], 1), use_cache=False).logits[:, -1]
        assert torch.allclose(nxt, full, atol=1e-4)
        pad = torch.ones(2, T, dtype=torch.long)
        pad[0, :5] = 0  # left padding (issue 10: supported; tested in test_pretrained_adapters)
        m(x, attention_mask=pad, use_cache=False)
        bias = torch.zeros(2, 1, T, T)
        bias[..., 0] = 0.25  # an additive bias is not a padding mask
        with pytest.raises(ValueError, match=r"^compose_focus \(GPT2Attention\): 'attention_mask' "
                                             "must be a padding mask"):
            m.transformer.h[0].attn(m.transformer.wte(x), attention_mask=bias)
        m(x, attention_mask=torch.ones(2, T, dtype=torch.long), use_cache=False)  # no padding ok
    assert isinstance(transformers.__version__, str)


def test_unsupported_model_and_bad_arguments():
    class MyAttention(nn.Module):  # an attention class no adapter is registered for
        def __init__(self) -> None:
            super().__init__()
            self.qkv = nn.Linear(4, 12)

        def forward(self, x):
            q, k, v = self.qkv(x).chunk(3, -1)
            return torch.softmax(q @ k.transpose(-1, -2), -1) @ v

    with pytest.raises(ValueError, match="^compose_focus: 'model' must be a model with a "
                                         "supported attention layer .*CausalSelfAttention.*, "
                                         r"got a Sequential without one \(attention-like "
                                         r"modules found: \['MyAttention'\]\)$"):
        compose_focus(nn.Sequential(nn.Linear(4, 4), MyAttention()))
    with pytest.raises(TypeError, match="^compose_focus: 'model' must be a torch.nn.Module, got "
                                        "'gpt2'$"):
        compose_focus("gpt2")
    m, _ = _build("chargpt")
    with pytest.raises(ValueError, match="^compose_focus: 'top_k' must be an int >= 1 and <= 4, "
                                         "got 5$"):
        compose_focus(m, num_groups=4, top_k=5)
    assert not any(isinstance(a, FocusComposed) for a in m.modules())  # nothing changed
    compose_focus(m, num_groups=4, top_k=2, window=3)
    # the router's own rule, under this function's name and the layer's index
    with pytest.raises(ValueError, match=r"^set_focus_options: layer 0's FocusRouter"
                                         r"\(num_groups=4\): 'top_k' must be an int >= 1 "
                                         r"and <= 4, got 5$"):
        set_focus_options(m, top_k=5)
    with pytest.raises(ValueError, match="^set_focus_options: 'window' must be an int >= 0, "
                                         "got -1$"):
        set_focus_options(m, top_k=1, window=-1)
    assert all(f.top_k == 2 for f in focus_layers(m))  # checked before anything changed
    # layers whose routers differ: the layer that refuses is named, the others are restored
    from itertools import cycle

    from quest_geometric.nn.focus import RandomGroupsRouter

    mixed, _ = _build("chargpt")
    ks = cycle([4, 2])
    compose_focus(mixed, num_groups=4, top_k=1, window=3,
                  router=lambda _dim: RandomGroupsRouter(next(ks), 1))
    assert [f.num_groups for f in focus_layers(mixed)][:2] == [4, 2]
    with pytest.raises(ValueError, match=r"^set_focus_options: layer 1's RandomGroupsRouter"
                                         r"\(num_groups=2\): 'top_k' must be an int >= 1 and "
                                         r"<= 2, got 3$"):
        set_focus_options(mixed, top_k=3)
    assert all(f.top_k == 1 for f in focus_layers(mixed))
    with pytest.raises(ValueError, match="backend"):
        set_focus_options(m, backend="flash")
    with pytest.raises(ValueError, match="window"):
        set_focus_options(m, window=-1)
    with pytest.raises(ValueError, match="num_sinks"):
        set_focus_options(m, num_sinks=-1)
    with pytest.raises(TypeError, match="num_sinks"):
        set_focus_options(m, num_sinks=1.5)
    with pytest.raises(ValueError, match="num_sinks"):  # all or nothing
        set_focus_options(m, window=7, num_sinks=-1)
    assert all(f.window == 3 and f.num_sinks == 0 for f in focus_layers(m))
    with pytest.raises(ValueError, match="^set_focus_enabled: 'model' must be a model with a "
                                         "Focus layer, got a Linear without one$"):
        set_focus_enabled(nn.Linear(2, 2), False)
    assert str(m.blocks[0].attn) == ("FocusComposed(CausalSelfAttention, num_groups=4, top_k=2, "
                                     "window=3, backend='auto', gate='additive', enabled=True)")
    assert isinstance(m.blocks[0].attn.original, CausalSelfAttention)


def test_num_groups_is_checked_first_and_a_refusal_leaves_the_model_untouched():
    m, _ = _build("chargpt")
    with pytest.raises(ValueError, match="'num_groups' must be an int >= 1"):
        compose_focus(m, num_groups=0, top_k=1)
    # a model whose second attention layer cannot be composed without causal=...
    both = nn.ModuleList([m.blocks[0].attn, nn.MultiheadAttention(C, 2, batch_first=True)])
    with pytest.raises(ValueError, match="^FocusComposed: 'causal' must be True or False"):
        compose_focus(both, num_groups=4, top_k=1)
    assert isinstance(both[0], CausalSelfAttention)  # nothing was swapped in
    assert all(p.requires_grad for p in both.parameters())
