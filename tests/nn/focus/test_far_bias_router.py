"""The content-free trained control of soft Focus (a per-head temperature and far-pair bias):
its attention against a dense computation, its two modes in FocusAttention, training through
router_parameters, and the router files."""
import math

import pytest
import torch

from quest_geometric.nn.focus import (
    FarBiasRouter,
    FocusAttention,
    focus_far_bias_attention,
    full_attention,
)


def brute(q, k, v, theta, beta, window, batch, causal, num_sinks):
    """Per sequence and head, by loops over the pairs: e^theta * q.k / sqrt(D), plus beta on
    the pairs beyond the window that touch no sink; softmax over the (causal) keys."""
    n, h, d = q.shape
    seq = torch.zeros(n, dtype=torch.long) if batch is None else batch
    out = torch.zeros(n, h, d, dtype=torch.float64)
    for s in seq.unique().tolist():
        idx = (seq == s).nonzero().view(-1).tolist()
        for a, i in enumerate(idx):
            for hh in range(h):
                logits, vals = [], []
                for b, j in enumerate(idx):
                    if causal and b > a:
                        continue
                    x = math.exp(float(theta[hh])) * float(q[i, hh].double() @ k[j, hh].double())
                    x /= math.sqrt(d)
                    if abs(a - b) > window and min(a, b) >= num_sinks:
                        x += float(beta[hh])
                    logits.append(x)
                    vals.append(v[j, hh].double())
                p = torch.softmax(torch.tensor(logits, dtype=torch.float64), 0)
                out[i, hh] = sum(pi * vi for pi, vi in zip(p, vals))
    return out


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("num_sinks", [0, 2])
def test_attention_equals_the_dense_formula(causal, num_sinks):
    torch.manual_seed(1)
    batch = torch.tensor([0] * 3 + [1] * 14)
    q, k, v = (torch.randn(17, 3, 4, dtype=torch.float64) for _ in range(3))
    theta = torch.tensor([0.3, -0.5, 0.0], dtype=torch.float64)
    beta = torch.tensor([-2.0, 1.0, 0.5], dtype=torch.float64)
    for b in (None, batch):
        out = focus_far_bias_attention(q, k, v, theta, beta, 2, b, causal, num_sinks)
        torch.testing.assert_close(out, brute(q, k, v, theta, beta, 2, b, causal, num_sinks))


def test_zero_parameters_are_full_attention_and_gradients_reach_them():
    torch.manual_seed(2)
    q, k, v = (torch.randn(20, 2, 8, dtype=torch.float64) for _ in range(3))
    r = FarBiasRouter(2).double()
    torch.testing.assert_close(r.soft_attention(q, k, v, 3), full_attention(q, k, v))
    theta = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    beta = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    qs, ks, vs = q[:9, :, :3], k[:9, :, :3], v[:9, :, :3]
    assert torch.autograd.gradcheck(
        lambda t, b: focus_far_bias_attention(qs, ks, vs, t, b, 3, None, True, 1),
        (theta, beta))
    with pytest.raises(ValueError, match="far_bias"):
        focus_far_bias_attention(q, k, v, theta, beta[:1], 3)
    with pytest.raises(ValueError, match=r"FarBiasRouter: 'q' must be a \[N, 2, D\] tensor "
                       r"\(the router was built for 2 heads\), got "):
        r.soft_attention(q[:, :1], k[:, :1], v[:, :1], 3)


def test_focus_attention_soft_rows_and_hard_window():
    torch.manual_seed(3)
    r = FarBiasRouter(2)
    with torch.no_grad():
        r.log_scale.copy_(torch.tensor([0.2, -0.1]))
        r.far_bias.copy_(torch.tensor([-1.0, -3.0]))
    layer = FocusAttention(16, 2, window=3, num_sinks=1, router=r)
    x = torch.randn(25, 16)
    q, k, v = (p(x).view(25, 2, 8) for p in (layer.q_proj, layer.k_proj, layer.v_proj))
    soft = brute(q.detach(), k.detach(), v.detach(), r.log_scale.detach(),
                 r.far_bias.detach(), 3, None, True, 1)
    torch.testing.assert_close(layer.train()(x), layer.out_proj(soft.float().reshape(25, 16)),
                               atol=1e-5, rtol=1e-5)
    # hard (eval): the window and the sink only, whatever the parameters
    big = torch.full((2,), -1e9)
    hard = brute(q.detach(), k.detach(), v.detach(), torch.zeros(2), big, 3, None, True, 1)
    torch.testing.assert_close(layer.eval()(x), layer.out_proj(hard.float().reshape(25, 16)),
                               atol=1e-5, rtol=1e-5)
    # training reaches the two parameters per head
    layer.train()(x).square().sum().backward()
    assert r.log_scale.grad.abs().sum() > 0 and r.far_bias.grad.abs().sum() > 0
    r.reset_parameters()
    assert not r.log_scale.any() and not r.far_bias.any()


def test_composed_parameters_train_and_round_trip(tmp_path):
    from quest_geometric.models.char_gpt import CharGPT, GPTConfig
    from quest_geometric.nn.focus import (
        compose_focus,
        focus_layers,
        load_routers,
        router_parameters,
        save_routers,
    )

    def base():
        torch.manual_seed(0)
        return CharGPT(GPTConfig(vocab_size=30, block_size=32, n_layer=2, n_head=2,
                                 n_embd=16)).eval()

    m = compose_focus(base(), window=3, router=lambda d: FarBiasRouter(2))
    params = list(router_parameters(m))
    assert len(params) == 4 and sum(p.numel() for p in params) == 2 * 2 * 2  # 2 per head
    assert all(p.requires_grad for p in params)
    assert not any(p.requires_grad for n, p in m.named_parameters() if "router" not in n)
    x = torch.randint(0, 30, (2, 20), generator=torch.Generator().manual_seed(1))
    m.train()
    opt = torch.optim.SGD(params, lr=0.5)
    for _ in range(3):
        opt.zero_grad()
        logits = m(x)[0]
        torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 30),
                                          x[:, 1:].reshape(-1)).backward()
        opt.step()
    assert all(p.abs().sum() > 0 for p in params)  # trained away from full attention
    save_routers(m, str(tmp_path))
    loaded = load_routers(base(), str(tmp_path)).train()
    assert all(type(f.router) is FarBiasRouter for f in focus_layers(loaded))
    assert focus_layers(loaded)[0].router is not focus_layers(loaded)[1].router
    with torch.no_grad():
        assert torch.equal(loaded(x)[0], m(x)[0])
