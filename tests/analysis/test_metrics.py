import math

import numpy as np
import pytest
import torch

from quest_geometric.analysis.metrics import (
    attention_entropy,
    effective_rank,
    mean_attention_entropy,
    participation_ratio,
    participation_ratio_from_covariance,
    stable_rank,
)
from quest_geometric.testing.common import np_pr


@pytest.mark.parametrize("n,dim", [(200, 6), (5, 12), (2, 3)])
def test_participation_ratio_vs_numpy(n, dim):
    rng = np.random.default_rng(n + dim)
    z = rng.normal(size=(n, dim)) * rng.uniform(0.1, 3.0, size=dim) + 5.0
    got = participation_ratio(torch.from_numpy(z))
    assert got.dtype == torch.float64 and got.shape == ()
    assert np.isclose(got.item(), np_pr(z), rtol=1e-10)
    # float32 input is accumulated in float64
    assert np.isclose(participation_ratio(torch.from_numpy(z).float()).item(),
                      np_pr(z.astype(np.float32)), rtol=1e-5)


def test_participation_ratio_hand_cases():
    torch.manual_seed(0)
    iso = torch.randn(20000, 10, dtype=torch.float64)
    assert abs(participation_ratio(iso).item() - 10) < 0.1
    rank1 = torch.randn(50, 1, dtype=torch.float64) * torch.randn(1, 7, dtype=torch.float64) + 3.0
    assert math.isclose(participation_ratio(rank1).item(), 1.0, rel_tol=1e-9)
    # Two orthogonal directions with variances 1 and 1: PR = 2; variances 4 and 1: 25/17.
    x = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]], dtype=torch.float64)
    assert math.isclose(participation_ratio(x).item(), 2.0, rel_tol=1e-12)
    x2 = x * torch.tensor([2.0, 1.0], dtype=torch.float64)
    assert math.isclose(participation_ratio(x2).item(), 25 / 17, rel_tol=1e-12)


def test_participation_ratio_batched():
    torch.manual_seed(1)
    z = torch.randn(3, 4, 30, 5)
    got = participation_ratio(z)
    assert got.shape == (3, 4)
    for i in range(3):
        for h in range(4):
            assert np.isclose(got[i, h].item(), np_pr(z[i, h].double().numpy()), rtol=1e-10)
    cov = torch.from_numpy(np.cov(z[0, 0].double().numpy(), rowvar=False))
    assert np.isclose(participation_ratio_from_covariance(cov).item(), got[0, 0].item(), rtol=1e-10)


def test_participation_ratio_errors():
    with pytest.raises(ValueError, match="^participation_ratio: 'z' must be of at least 2 "
                                         "samples along dim -2"):
        participation_ratio(torch.randn(1, 4))
    with pytest.raises(ValueError, match="at least 2 samples"):
        participation_ratio(torch.randn(3, 0, 4))
    with pytest.raises(ValueError, match="^participation_ratio: 'z' must be non-constant .*, "
                                         r"got zero variance in a torch.float\d+ tensor of shape "
                                         r"\[10, 3\]$"):
        participation_ratio(torch.ones(10, 3))
    z = torch.randn(2, 10, 3)
    z[1] = 2.0
    with pytest.raises(ValueError, match="zero variance"):
        participation_ratio(z)
    with pytest.raises(ValueError, match="^participation_ratio: 'z' must be a tensor of at least "
                       "2 dimensions"):
        participation_ratio(torch.randn(10))
    with pytest.raises(ValueError, match="^participation_ratio: 'z' must be finite, got NaN"):
        participation_ratio(torch.tensor([[1.0, float("nan")], [0.0, 1.0]]))
    with pytest.raises(TypeError, match="^participation_ratio: 'z' must be a tensor, got ndarray"):
        participation_ratio(np.ones((3, 3)))
    with pytest.raises(TypeError, match="^participation_ratio: 'z' must be a real tensor"):
        participation_ratio(torch.ones(3, 3, dtype=torch.complex64))
    with pytest.raises(ValueError, match=r"^participation_ratio_from_covariance: 'cov' must be "
                                         r"square \[\.\.\., dim, dim\]"):
        participation_ratio_from_covariance(torch.ones(2, 3))


def test_effective_and_stable_rank_vs_numpy():
    rng = np.random.default_rng(3)
    m = rng.normal(size=(4, 6, 9))
    er = effective_rank(torch.from_numpy(m))
    sr = stable_rank(torch.from_numpy(m))
    assert er.shape == sr.shape == (4,)
    for i in range(4):
        s = np.linalg.svd(m[i], compute_uv=False)
        p = s / s.sum()
        assert np.isclose(er[i].item(), np.exp(-(p * np.log(p)).sum()), rtol=1e-10)
        assert np.isclose(sr[i].item(),
                          np.linalg.norm(m[i], "fro") ** 2 / np.linalg.norm(m[i], 2) ** 2,
                          rtol=1e-10)


def test_rank_hand_cases():
    eye = torch.eye(5, dtype=torch.float64) * 3.0
    assert math.isclose(effective_rank(eye).item(), 5.0, rel_tol=1e-12)
    assert math.isclose(stable_rank(eye).item(), 5.0, rel_tol=1e-12)
    r1 = torch.outer(torch.arange(1.0, 5.0), torch.arange(1.0, 4.0))
    assert math.isclose(effective_rank(r1).item(), 1.0, rel_tol=1e-6)
    assert math.isclose(stable_rank(r1).item(), 1.0, rel_tol=1e-6)
    d = torch.diag(torch.tensor([2.0, 1.0, 1.0, 0.0]))
    # sigma = (2, 1, 1, 0): p = (1/2, 1/4, 1/4) -> H = 1.5 log 2 -> erank = 2^1.5; srank = 6/4
    assert math.isclose(effective_rank(d).item(), 2 ** 1.5, rel_tol=1e-12)
    assert math.isclose(stable_rank(d).item(), 1.5, rel_tol=1e-12)


def test_rank_errors():
    with pytest.raises(ValueError, match="^effective_rank: 'm' must be non-zero .*, got 1 of 1 "
                                         "matrices all zero$"):
        effective_rank(torch.zeros(3, 3))
    with pytest.raises(ValueError, match="all zero"):
        stable_rank(torch.stack([torch.eye(2), torch.zeros(2, 2)]))
    with pytest.raises(ValueError, match="^stable_rank: 'm' must be a tensor of at least 2 "
                       "dimensions"):
        stable_rank(torch.ones(3))
    with pytest.raises(ValueError, match="^effective_rank: 'm' must be non-empty, got"):
        effective_rank(torch.ones(3, 0))


def causal(T):
    return torch.ones(T, T, dtype=torch.bool).tril()


def test_entropy_uniform_and_one_hot():
    T = 6
    uni = torch.full((T, T), 1.0 / T)
    res = attention_entropy(uni)
    assert res.entropy.dtype == torch.float64
    assert torch.allclose(res.entropy, torch.ones(T, dtype=torch.float64)) and res.valid.all()
    raw = attention_entropy(uni, normalized=False)
    assert torch.allclose(raw.entropy, torch.full((T,), math.log(T), dtype=torch.float64))
    onehot = torch.eye(T)
    assert torch.equal(attention_entropy(onehot).entropy, torch.zeros(T, dtype=torch.float64))
    # Causal uniform: row i spreads over i + 1 keys -> normalised entropy 1, except row 0.
    cu = causal(T).float() / causal(T).sum(-1, keepdim=True)
    res = attention_entropy(cu, mask=causal(T))
    assert res.valid.tolist() == [False] + [True] * (T - 1)
    assert res.entropy[0] == 0 and torch.allclose(res.entropy[1:], torch.ones(T - 1,
                                                                              dtype=torch.float64))
    raw = attention_entropy(cu, mask=causal(T), normalized=False)
    assert raw.valid.all()
    assert torch.allclose(raw.entropy, torch.log(torch.arange(1, T + 1, dtype=torch.float64)))
    assert math.isclose(mean_attention_entropy(cu, causal(T)).item(), 1.0,
                        rel_tol=1e-6)  # float32 input


def test_entropy_vs_formula_batched():
    torch.manual_seed(0)
    B, H, T = 2, 3, 5
    logits = torch.randn(B, H, T, T)
    mask = causal(T)
    a = logits.masked_fill(~mask, float("-inf")).softmax(-1)
    res = attention_entropy(a, mask=mask)
    assert res.entropy.shape == res.valid.shape == (B, H, T)
    an = a.double().numpy()
    for b in range(B):
        for h in range(H):
            for i in range(1, T):
                p = an[b, h, i, : i + 1]
                ref = -(p * np.log(p)).sum() / np.log(i + 1)
                assert np.isclose(res.entropy[b, h, i].item(), ref, rtol=1e-6)
    expected_mean = res.entropy[..., 1:].mean()
    assert torch.isclose(res.mean(), expected_mean)


def test_entropy_fully_masked_row_and_errors():
    a = torch.tensor([[0.5, 0.5], [0.0, 0.0]])
    m = torch.tensor([[True, True], [False, False]])
    res = attention_entropy(a, mask=m, normalized=False)
    assert res.valid.tolist() == [True, False]
    assert res.entropy[1] == 0
    with pytest.raises(ValueError, match="no row"):
        attention_entropy(torch.tensor([[1.0]])).mean()
    with pytest.raises(ValueError, match="^attention_entropy: 'attn' must be non-negative"):
        attention_entropy(torch.tensor([[1.5, -0.5]]))
    with pytest.raises(ValueError, match="^attention_entropy: 'attn' must be rows that sum to 1 "
                                         r".*, got 1 row\(s\) that do not \(e.g. 0.4\)$"):
        attention_entropy(torch.tensor([[0.2, 0.2]]))
    # weight on a masked key
    with pytest.raises(ValueError, match="sum to 1"):
        attention_entropy(torch.tensor([[0.5, 0.5]]), mask=torch.tensor([[True, False]]))
    with pytest.raises(TypeError, match="^attention_entropy: 'mask' must be a bool tensor"):
        attention_entropy(torch.tensor([[0.5, 0.5]]), mask=torch.tensor([[1, 1]]))
    with pytest.raises(ValueError, match=r"^attention_entropy: 'mask' must be broadcastable to "
                                         r"'attn' \[2, 2\]"):
        attention_entropy(torch.full((2, 2), 0.5), mask=torch.ones(3, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="^attention_entropy: 'attn' must be finite, got NaN"):
        attention_entropy(torch.tensor([[float("nan"), 1.0]]))
