import math
import warnings

import pytest
import torch

from quest_geometric.models.char_gpt import CausalSelfAttention, CharGPT, GPTConfig

V = 37


def tiny(**kw):
    cfg = dict(vocab_size=V, block_size=16, n_layer=2, n_head=4, n_embd=32)
    cfg.update(kw)
    return GPTConfig(**cfg)


@pytest.mark.parametrize("bias", [True, False])
def test_forward_shapes_and_loss(bias):
    torch.manual_seed(0)
    model = CharGPT(tiny(bias=bias))
    idx = torch.randint(0, V, (3, 12))
    tgt = torch.randint(0, V, (3, 12))
    logits, loss = model(idx, tgt)
    assert logits.shape == (3, 12, V)
    # Cross-entropy written out from its definition.
    logp = logits.double() - torch.logsumexp(logits.double(), dim=-1, keepdim=True)
    ref = -logp.gather(-1, tgt.unsqueeze(-1)).mean()
    assert math.isclose(loss.item(), ref.item(), rel_tol=1e-5)
    # Near log(V) at initialisation (small logits).
    assert abs(loss.item() - math.log(V)) < 0.3
    logits2, none = model(idx)
    assert none is None and torch.equal(logits, logits2)


def test_causality():
    torch.manual_seed(1)
    model = CharGPT(tiny()).eval()
    idx = torch.randint(0, V, (2, 16))
    changed = idx.clone()
    changed[:, 9:] = torch.randint(0, V, (2, 7))
    a, _ = model(idx)
    b, _ = model(changed)
    assert torch.allclose(a[:, :9], b[:, :9], atol=1e-6)
    assert not torch.allclose(a[:, 9:], b[:, 9:], atol=1e-4)


def test_weight_tying_and_parameter_count():
    model = CharGPT(tiny())
    assert model.lm_head.weight is model.wte.weight
    unique = {id(p): p.numel() for p in model.parameters()}
    assert model.num_parameters() == sum(unique.values())
    C, L = 32, 2
    per_block = 4 * (C * C + C) + 2 * (2 * C) + (C * 4 * C + 4 * C) + (4 * C * C + C)
    expected = V * C + 16 * C + L * per_block + 2 * C
    assert model.num_parameters() == expected
    assert model.num_parameters(non_embedding=True) == expected - 16 * C


def test_attention_matches_manual_computation():
    torch.manual_seed(2)
    cfg = tiny()
    attn = CausalSelfAttention(cfg)
    for p in attn.parameters():
        torch.nn.init.normal_(p, std=0.3)
    x = torch.randn(2, 7, 32)
    H, d = 4, 8
    # Per-head queries/keys equal a manual reshape of the projections.
    q_manual = (x @ attn.q_proj.weight.T + attn.q_proj.bias).view(2, 7, H, d).permute(0, 2, 1, 3)
    k_manual = (x @ attn.k_proj.weight.T + attn.k_proj.bias).view(2, 7, H, d).permute(0, 2, 1, 3)
    v_manual = (x @ attn.v_proj.weight.T + attn.v_proj.bias).view(2, 7, H, d).permute(0, 2, 1, 3)
    assert torch.allclose(attn.queries(x), q_manual, atol=1e-6)
    assert torch.allclose(attn.keys(x), k_manual, atol=1e-6)
    assert torch.allclose(attn.values(x), v_manual, atol=1e-6)
    # Dense causal softmax attention.
    s = q_manual @ k_manual.transpose(-1, -2) / math.sqrt(d)
    s = s + torch.triu(torch.full((7, 7), float("-inf")), diagonal=1)
    a = s.softmax(-1)
    assert torch.allclose(attn.attention_weights(x), a, atol=1e-6)
    y = (a @ v_manual).permute(0, 2, 1, 3).reshape(2, 7, 32)
    out = y @ attn.out_proj.weight.T + attn.out_proj.bias
    assert torch.allclose(attn(x), out, atol=1e-5)
    assert repr(attn) == "CausalSelfAttention(32, heads=4)"


def test_hook_points_see_per_head_tensors():
    torch.manual_seed(3)
    model = CharGPT(tiny()).eval()
    seen = {}
    layer = model.blocks[1].attn
    h1 = layer.hook_q.register_forward_hook(lambda m, i, o: seen.__setitem__("q", o))
    h2 = layer.hook_k.register_forward_hook(lambda m, i, o: seen.__setitem__("k", o))
    idx = torch.randint(0, V, (2, 10))
    captured_in = {}
    h3 = layer.register_forward_pre_hook(lambda m, a: captured_in.__setitem__("x", a[0]))
    out, _ = model(idx)
    for h in (h1, h2, h3):
        h.remove()
    assert seen["q"].shape == seen["k"].shape == (2, 4, 10, 8)
    assert torch.allclose(seen["q"], layer.queries(captured_in["x"]), atol=1e-6)
    assert torch.allclose(seen["k"], layer.keys(captured_in["x"]), atol=1e-6)
    assert torch.equal(model(idx)[0], out)  # hooks removed, output unchanged


def _head_blocks(w, H):
    return w.detach().view(H, w.size(0) // H, w.size(1)).double()


@pytest.mark.parametrize("qk_init", ["independent", "tied", "orthogonal"])
def test_qk_inits(qk_init):
    torch.manual_seed(4)
    model = CharGPT(tiny(qk_init=qk_init, n_embd=64, n_head=4))
    ref = CharGPT(tiny(n_embd=64, n_head=4))
    for block, ref_block in zip(model.blocks, ref.blocks):
        q, k = block.attn.q_proj.weight, block.attn.k_proj.weight
        assert q is not k
        qh, kh = _head_blocks(q, 4), _head_blocks(k, 4)
        cross = (qh @ kh.transpose(-1, -2)).abs().max().item()
        if qk_init == "tied":
            assert torch.equal(q, k)
        elif qk_init == "orthogonal":
            # Row spaces of each head's W_Q and W_K are orthogonal: W_Q^h W_K^h^T = 0.
            assert cross < 1e-6
            # Projected onto a C/2-dimensional subspace: rank d, not more.
            assert torch.linalg.matrix_rank(qh[0]).item() == 16
            # Frobenius norm on the standard scale (same expectation as independent init).
            ratio = q.norm().item() / ref_block.attn.q_proj.weight.norm().item()
            assert 0.8 < ratio < 1.25
        else:
            assert not torch.equal(q, k) and cross > 1e-3
    if qk_init == "tied":
        # Parameters are separate: training moves them apart.
        idx = torch.randint(0, V, (2, 16))
        _, loss = model(idx, idx)
        loss.backward()
        opt = torch.optim.SGD(model.parameters(), lr=1.0)
        opt.step()
        assert not torch.equal(model.blocks[0].attn.q_proj.weight,
                               model.blocks[0].attn.k_proj.weight)


def test_orthogonal_single_head_warns():
    with pytest.warns(UserWarning, match="cannot be orthogonal"):
        CharGPT(tiny(n_head=1, qk_init="orthogonal"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        CharGPT(tiny(n_head=2, qk_init="orthogonal"))


def test_generate_and_checkpoint(tmp_path):
    torch.manual_seed(5)
    model = CharGPT(tiny()).eval()
    prompt = torch.randint(0, V, (2, 3))
    out = model.generate(prompt, 20, generator=torch.Generator().manual_seed(0), top_k=5)
    assert out.shape == (2, 23) and torch.equal(out[:, :3], prompt)
    assert out.max() < V
    path = tmp_path / "ckpt.pt"
    torch.save(model.checkpoint(), path)
    again = CharGPT.from_checkpoint(str(path))
    assert again.config == model.config
    idx = torch.randint(0, V, (1, 16))
    assert torch.equal(again(idx)[0], model(idx)[0])
    torch.save({"weights": 1}, tmp_path / "bad.pt")
    with pytest.raises(ValueError, match="does not hold a CharGPT"):
        CharGPT.from_checkpoint(tmp_path / "bad.pt")
    with pytest.raises(FileNotFoundError):
        CharGPT.from_checkpoint(tmp_path / "nope.pt")
    (tmp_path / "text.pt").write_text("not a checkpoint")
    with pytest.raises(ValueError, match="does not hold a CharGPT"):
        CharGPT.from_checkpoint(tmp_path / "text.pt")


def test_config_roundtrip_and_errors():
    cfg = tiny(attention="full", focus={"num_groups": 4})
    assert GPTConfig.from_dict(cfg.to_dict()) == cfg
    assert CharGPT(cfg.to_dict()).config == cfg
    with pytest.raises(ValueError, match="divisible"):
        tiny(n_embd=30)
    with pytest.raises(ValueError, match="attention"):
        tiny(attention="sparse")
    with pytest.raises(ValueError, match="qk_init"):
        tiny(qk_init="random")
    with pytest.raises(ValueError, match="unknown keys"):
        GPTConfig.from_dict({**cfg.to_dict(), "n_layers": 3})
    with pytest.raises(ValueError, match="n_layer"):
        tiny(n_layer=0)
    model = CharGPT(tiny())
    with pytest.raises(ValueError, match=r"^CharGPT: 'idx' must be of length T in "
                                         r"1\.\.block_size=16"):
        model(torch.zeros(1, 17, dtype=torch.long))
    with pytest.raises(TypeError, match="^CharGPT: 'idx' must be a long or int32"):
        model(torch.zeros(1, 4))
    with pytest.raises(ValueError, match="^CharGPT: 'targets' must be of the shape of 'idx'"):
        model(torch.zeros(1, 4, dtype=torch.long), torch.zeros(1, 3, dtype=torch.long))


@pytest.mark.slow
def test_loss_decreases_on_embedded_corpus():
    from quest_geometric.datasets.char_corpus import CharCorpus

    torch.manual_seed(0)
    corpus = CharCorpus(block_size=32)
    model = CharGPT(GPTConfig(vocab_size=corpus.vocab_size, block_size=32, n_layer=2, n_head=2,
                              n_embd=32))
    g = torch.Generator().manual_seed(0)
    xv, yv = corpus.get_batch("val", 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        before = model(xv, yv)[1].item()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(30):
        x, y = corpus.get_batch("train", 16, generator=g)
        _, loss = model(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        after = model(xv, yv)[1].item()
    assert after < 0.8 * before, (before, after)


@pytest.mark.parametrize("qk_init", ["independent", "tied"])
def test_focus_attention_branch(qk_init):
    focus = pytest.importorskip("quest_geometric.nn.focus.module")
    from quest_geometric.analysis.spectral_control import KeySpectrumControl

    torch.manual_seed(6)
    model = CharGPT(tiny(attention="focus", focus={"num_groups": 2, "window": 4}, qk_init=qk_init))
    assert all(isinstance(b.attn, focus.FocusAttention) for b in model.blocks)
    attn = model.blocks[0].attn
    assert (attn.q_proj.bias is not None) and torch.equal(attn.q_proj.bias, torch.zeros(32))
    assert 0.01 < attn.q_proj.weight.std().item() < 0.03  # GPT init applied to its projections
    assert torch.equal(attn.q_proj.weight, attn.k_proj.weight) == (qk_init == "tied")
    assert len(KeySpectrumControl(model).weights) == 2
    idx = torch.randint(0, V, (2, 16))
    logits, loss = model(idx, idx)
    assert logits.shape == (2, 16, V) and torch.isfinite(loss)
    loss.backward()
    model.eval()
    changed = idx.clone()
    changed[:, 10:] = (changed[:, 10:] + 1) % V
    a, _ = model(idx)
    b, _ = model(changed)
    assert torch.allclose(a[:, :10], b[:, :10], atol=1e-5)
