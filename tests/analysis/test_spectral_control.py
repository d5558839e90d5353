import math

import numpy as np
import pytest
import torch
from torch import nn

from quest_geometric.analysis.spectral_control import (
    KeySpectrumControl,
    qk_weight_kernels,
    spectrum_participation_ratio,
)
from quest_geometric.models.char_gpt import CharGPT, GPTConfig

V, H, C = 23, 4, 16


def model(seed=0, **kw):
    torch.manual_seed(seed)
    return CharGPT(GPTConfig(vocab_size=V, block_size=8, n_layer=2, n_head=H, n_embd=C, **kw))


def key_weights(m):
    return [b.attn.k_proj.weight for b in m.blocks]


def np_svals(w, per_head):
    w = w.detach().double().numpy()
    blocks = w.reshape(H, -1, w.shape[1]) if per_head else w[None]
    return np.stack([np.linalg.svd(b, compute_uv=False) for b in blocks])


def perturb(m, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for w in key_weights(m):
            w.add_(0.05 * torch.randn(w.shape, generator=g))


def test_spectrum_participation_ratio():
    assert math.isclose(spectrum_participation_ratio(torch.ones(5)).item(), 5.0)
    assert math.isclose(spectrum_participation_ratio(torch.tensor([3.0, 0.0, 0.0])).item(), 1.0)
    s = torch.tensor([2.0, 1.0])  # lambda = (4, 1): 25 / 17
    assert math.isclose(spectrum_participation_ratio(s).item(), 25 / 17, rel_tol=1e-12)


@pytest.mark.parametrize("mode", ["hold", "shrink"])
@pytest.mark.parametrize("per_head", [False, True])
def test_frobenius_norm_preserved_and_vectors_kept(mode, per_head):
    m = model()
    ctl = KeySpectrumControl(m, mode=mode, per_head=per_head, decay=0.3)
    perturb(m, 1)
    before = [w.detach().double().clone() for w in key_weights(m)]
    assert ctl.step() is True
    for w0, w in zip(before, key_weights(m)):
        assert math.isclose(w.detach().double().norm().item(), w0.norm().item(), rel_tol=1e-6)
        # The new weight is U diag(s') V^T with the *old* singular vectors (numpy reference).
        blocks0 = w0.numpy().reshape(H, -1, C) if per_head else w0.numpy()[None]
        blocks = w.detach().double().numpy().reshape(blocks0.shape)
        for b0, b in zip(blocks0, blocks):
            u, s, vt = np.linalg.svd(b0, full_matrices=False)
            s_new = np.diag(u.T @ b @ vt.T)
            assert np.allclose(u @ np.diag(s_new) @ vt, b, atol=1e-5)
            assert math.isclose(np.linalg.norm(s_new), np.linalg.norm(s), rel_tol=1e-5)


@pytest.mark.parametrize("per_head", [False, True])
def test_hold_restores_initial_shape(per_head):
    m = model(2)
    s0 = [np_svals(w, per_head) for w in key_weights(m)]
    ctl = KeySpectrumControl(m, mode="hold", per_head=per_head)
    for seed in range(3):
        perturb(m, 10 + seed)
        with torch.no_grad():
            key_weights(m)[0].mul_(1.7)  # a scale change must survive: only the shape is held
        ctl.step()
    for w, ref in zip(key_weights(m), s0):
        s = np_svals(w, per_head)
        assert np.allclose(s / np.linalg.norm(s, axis=1, keepdims=True),
                           ref / np.linalg.norm(ref, axis=1, keepdims=True), atol=1e-5)
    assert np.linalg.norm(np_svals(key_weights(m)[0], per_head)) > 1.5 * np.linalg.norm(s0[0])


def test_shrink_formula():
    m = model(3)
    decay = 0.8
    ctl = KeySpectrumControl(m, mode="shrink", decay=decay)
    s_before = np_svals(key_weights(m)[0], False)[0]
    ctl.apply()
    s_after = np_svals(key_weights(m)[0], False)[0]
    r = len(s_before)
    expected = s_before * np.exp(-decay * np.arange(r) / (r - 1))
    expected *= np.linalg.norm(s_before) / np.linalg.norm(expected)
    assert np.allclose(s_after, expected, rtol=1e-5, atol=1e-7)


def _train(mode, steps=6, decay=0.2):
    m = model(4)
    ctl = None if mode is None else KeySpectrumControl(m, mode=mode, decay=decay)
    ref = KeySpectrumControl(m, mode="hold")  # used only to read spectra
    pr0 = ref.participation_ratios().clone()
    opt = torch.optim.Adam(m.parameters(), lr=3e-2)
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        idx = torch.randint(0, V, (4, 8), generator=g)
        _, loss = m(idx, torch.roll(idx, -1, dims=1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if ctl is not None:
            ctl.step()
    return pr0, ref.participation_ratios()


@pytest.mark.slow
def test_pr_moves_the_intended_way_during_training():
    pr0, pr_hold = _train("hold")
    _, pr_shrink = _train("shrink")
    _, pr_free = _train(None)
    assert torch.allclose(pr_hold, pr0, rtol=1e-6)  # held at the initial dispersion
    assert not torch.allclose(pr_free, pr0, rtol=1e-3)  # training alone moves it
    assert (pr_shrink < pr_hold - 0.5).all()
    assert (pr_shrink < pr_free).all()


def test_every_and_repr_and_state():
    m = model(5)
    ctl = KeySpectrumControl(m, mode="shrink", decay=0.5, every=3)
    w = key_weights(m)[0]
    snapshot = w.detach().clone()
    assert [ctl.step() for _ in range(3)] == [False, False, True]
    assert not torch.equal(w, snapshot)
    assert ctl.num_applied == 1
    assert repr(ctl) == ("KeySpectrumControl(mode='shrink', layers=2, per_head=False, decay=0.5, "
                         "every=3)")
    other = KeySpectrumControl(model(6), mode="hold")
    other.load_state_dict(KeySpectrumControl(m, mode="hold").state_dict())
    assert other.num_calls == 0


class _NoHeads(nn.Module):
    def __init__(self, w):
        super().__init__()
        self.k_proj = nn.Linear(4, 6, bias=False)
        self.k_proj.weight = nn.Parameter(w)


def test_errors():
    with pytest.raises(ValueError, match="no recognisable attention layer"):
        KeySpectrumControl(nn.Sequential(nn.Linear(3, 3)))
    with pytest.raises(ValueError, match="mode"):
        KeySpectrumControl(model(), mode="grow")
    with pytest.raises(ValueError, match="decay"):
        KeySpectrumControl(model(), mode="shrink", decay=-1.0)
    with pytest.raises(ValueError, match="every"):
        KeySpectrumControl(model(), every=0)
    with pytest.raises(ValueError, match="all zero"):
        KeySpectrumControl(_NoHeads(torch.zeros(6, 4)))
    with pytest.raises(ValueError, match="2-D"):
        KeySpectrumControl(_NoHeads(torch.randn(6, 4, 2)))
    with pytest.raises(ValueError, match="head count"):
        KeySpectrumControl(_NoHeads(torch.randn(6, 4)), per_head=True)
    m = model()
    ctl = KeySpectrumControl(m)
    with torch.no_grad():
        key_weights(m)[1].zero_()
    with pytest.raises(ValueError, match="all zero"):
        ctl.step()
    with torch.no_grad():
        key_weights(m)[1].fill_(float("nan"))
    with pytest.raises(ValueError, match="NaN"):
        ctl.step()
    # A rank-deficient (singular) weight is fine: hold restores the full-rank initial shape.
    m = model(7)
    ctl = KeySpectrumControl(m, mode="hold")
    with torch.no_grad():
        key_weights(m)[0][:, 1:] = 0.0
    ctl.step()
    assert torch.linalg.matrix_rank(key_weights(m)[0].double()).item() == C


def test_qk_weight_kernels_match_per_head_logits():
    m = model(8, bias=False)
    kernels = qk_weight_kernels(m)
    assert len(kernels) == 2 and kernels[0].shape == (H, C, C)
    attn = m.blocks[1].attn
    x = torch.randn(1, 5, C, dtype=torch.float64)
    q = attn.queries(x.float()).double()
    k = attn.keys(x.float()).double()
    for h in range(H):
        assert torch.allclose(q[0, h] @ k[0, h].T, x[0] @ kernels[1][h] @ x[0].T, atol=1e-5)
    # Tied init: each head's kernel is symmetric positive semi-definite.
    tied = qk_weight_kernels(model(9, qk_init="tied"))[0]
    assert torch.allclose(tied, tied.transpose(-1, -2))
    assert torch.linalg.eigvalsh(tied).min() > -1e-10
    with pytest.raises(ValueError, match="no recognisable attention layer"):
        qk_weight_kernels(nn.Linear(2, 2))
