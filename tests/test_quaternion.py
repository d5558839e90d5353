"""Tests for quest_geometric.quaternion against scipy, hand cases and properties."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial.transform import Rotation

from quest_geometric import quaternion as Q

ONE = torch.tensor([1.0, 0.0, 0.0, 0.0])
QI = torch.tensor([0.0, 1.0, 0.0, 0.0])
QJ = torch.tensor([0.0, 0.0, 1.0, 0.0])
QK = torch.tensor([0.0, 0.0, 0.0, 1.0])


def to_scipy(q: torch.Tensor) -> Rotation:
    """Our (w, x, y, z) -> scipy's scalar-last (x, y, z, w)."""
    return Rotation.from_quat(q.detach().double().numpy()[..., [1, 2, 3, 0]])


def from_scipy(r: Rotation) -> torch.Tensor:
    return torch.from_numpy(r.as_quat()[..., [3, 0, 1, 2]])


finite = st.floats(-3.0, 3.0, allow_nan=False, allow_infinity=False)
quat = st.lists(finite, min_size=4, max_size=4).filter(
    lambda v: sum(a * a for a in v) > 1e-2
)


# ----------------------------------------------------------------------------- hand cases
def test_hamilton_units():
    assert torch.equal(Q.multiply(QI, QJ), QK)
    assert torch.equal(Q.multiply(QJ, QK), QI)
    assert torch.equal(Q.multiply(QK, QI), QJ)
    assert torch.equal(Q.multiply(QJ, QI), -QK)
    for u in (QI, QJ, QK):
        assert torch.equal(Q.multiply(u, u), -ONE)
    # i j k = -1
    assert torch.equal(Q.multiply(Q.multiply(QI, QJ), QK), -ONE)
    assert torch.equal(Q.multiply(ONE, QI), QI)


def test_conjugate_and_relative_hand():
    q = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert torch.equal(Q.conjugate(q), torch.tensor([1.0, -2.0, -3.0, -4.0]))
    # q q* = |q|^2
    torch.testing.assert_close(Q.multiply(q, Q.conjugate(q)), torch.tensor([30.0, 0, 0, 0]))
    # relative(i, j) = conj(i) j = -i j = -k
    assert torch.equal(Q.relative(QI, QJ), -QK)


def test_rotation_hand_case():
    # 90 degrees about z maps x -> y.
    q = torch.tensor([math.cos(math.pi / 4), 0.0, 0.0, math.sin(math.pi / 4)])
    ex = torch.tensor([1.0, 0.0, 0.0])
    torch.testing.assert_close(Q.rotate(q, ex), torch.tensor([0.0, 1.0, 0.0]))
    torch.testing.assert_close(Q.to_rotation_matrix(q) @ ex, torch.tensor([0.0, 1.0, 0.0]))
    torch.testing.assert_close(Q.angle(q), torch.tensor(math.pi / 2))
    torch.testing.assert_close(Q.angle(-q), torch.tensor(math.pi / 2))


# ----------------------------------------------------------------------------- scipy
def test_multiply_matches_scipy_composition():
    p = Q.random_unit(50, seed=0, dtype=torch.float64)
    q = Q.random_unit(50, seed=1, dtype=torch.float64)
    ours = Q.multiply(p, q)
    ref = from_scipy(to_scipy(p) * to_scipy(q))
    # same rotation up to the sign of the quaternion
    sign = torch.sign((ours * ref).sum(-1, keepdim=True))
    torch.testing.assert_close(ours, sign * ref)


def test_rotation_matrix_rotate_sandwich_match_scipy():
    q = Q.random_unit(7, 3, seed=2, dtype=torch.float64)
    v = torch.randn(7, 3, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    r = to_scipy(q.reshape(-1, 4))
    mat = torch.from_numpy(r.as_matrix()).reshape(7, 3, 3, 3)
    torch.testing.assert_close(Q.to_rotation_matrix(q), mat)
    ref_v = torch.from_numpy(r.apply(v.reshape(-1, 3).numpy())).reshape(7, 3, 3)
    torch.testing.assert_close(Q.rotate(q, v), ref_v)
    x = torch.cat((torch.randn(7, 3, 1, dtype=torch.float64), v), dim=-1)
    out = Q.sandwich(q, x)
    torch.testing.assert_close(out[..., 0], x[..., 0])
    torch.testing.assert_close(out[..., 1:], ref_v)
    ref_angle = torch.from_numpy(r.magnitude()).reshape(7, 3)
    torch.testing.assert_close(Q.angle(q), ref_angle)


def test_sandwich_equals_two_hamilton_products_any_norm():
    r = torch.randn(5, 4, dtype=torch.float64)
    x = torch.randn(5, 4, dtype=torch.float64)
    ref = Q.multiply(Q.multiply(r, x), Q.conjugate(r))
    torch.testing.assert_close(Q.sandwich(r, x), ref)
    v = torch.randn(5, 3, dtype=torch.float64)
    torch.testing.assert_close(Q.rotate(r, v), Q.sandwich(r, torch.cat((torch.zeros(5, 1,
                               dtype=torch.float64), v), -1))[..., 1:])
    torch.testing.assert_close(Q.rotate(r, v), (Q.to_rotation_matrix(r) @ v[..., None])[..., 0])


def test_broadcasting():
    p = Q.random_unit(3, 1, seed=0)
    q = Q.random_unit(1, 5, seed=1)
    assert Q.multiply(p, q).shape == (3, 5, 4)
    assert Q.relative(p, q).shape == (3, 5, 4)
    assert Q.sandwich(p, q).shape == (3, 5, 4)
    assert Q.rotate(p, torch.randn(5, 3)).shape == (3, 5, 3)
    assert Q.to_rotation_matrix(p).shape == (3, 1, 3, 3)
    assert Q.angle(q).shape == (1, 5)


# ----------------------------------------------------------------------------- properties
@settings(max_examples=60, deadline=None)
@given(quat, quat)
def test_norm_is_multiplicative_and_unit_preserved(a, b):
    p = torch.tensor(a, dtype=torch.float64)
    q = torch.tensor(b, dtype=torch.float64)
    n = torch.linalg.vector_norm
    torch.testing.assert_close(n(Q.multiply(p, q)), n(p) * n(q))
    pu, qu = Q.normalize(p), Q.normalize(q)
    torch.testing.assert_close(n(pu), torch.tensor(1.0, dtype=torch.float64))
    torch.testing.assert_close(n(Q.multiply(pu, qu)), torch.tensor(1.0, dtype=torch.float64))
    torch.testing.assert_close(n(Q.relative(pu, qu)), torch.tensor(1.0, dtype=torch.float64))


@settings(max_examples=60, deadline=None)
@given(quat, quat, quat)
def test_associative_and_conjugate_antihomomorphism(a, b, c):
    p, q, r = (torch.tensor(t, dtype=torch.float64) for t in (a, b, c))
    torch.testing.assert_close(Q.multiply(Q.multiply(p, q), r), Q.multiply(p, Q.multiply(q, r)))
    torch.testing.assert_close(Q.conjugate(Q.multiply(p, q)),
                               Q.multiply(Q.conjugate(q), Q.conjugate(p)))


@settings(max_examples=60, deadline=None)
@given(quat, quat, quat)
def test_relative_real_part_and_global_invariance(a, b, c):
    qi, qj, g = (Q.normalize(torch.tensor(t, dtype=torch.float64)) for t in (a, b, c))
    r = Q.relative(qi, qj)
    torch.testing.assert_close(r[0], (qi * qj).sum())
    torch.testing.assert_close(Q.relative(Q.multiply(g, qi), Q.multiply(g, qj)), r)
    # R(r_ij) = R(q_i)^T R(q_j)
    torch.testing.assert_close(Q.to_rotation_matrix(r),
                               Q.to_rotation_matrix(qi).T @ Q.to_rotation_matrix(qj))


@settings(max_examples=60, deadline=None)
@given(quat)
def test_rotation_matrix_orthonormal_and_sign_invariant(a):
    q = Q.normalize(torch.tensor(a, dtype=torch.float64))
    m = Q.to_rotation_matrix(q)
    torch.testing.assert_close(m @ m.T, torch.eye(3, dtype=torch.float64))
    torch.testing.assert_close(torch.linalg.det(m), torch.tensor(1.0, dtype=torch.float64))
    torch.testing.assert_close(Q.to_rotation_matrix(-q), m)
    assert 0.0 <= float(Q.angle(q)) <= math.pi


def test_angle_stable_near_zero():
    for eps in (1e-4, 1e-8, 1e-12):
        q = torch.tensor([math.cos(eps / 2), math.sin(eps / 2), 0.0, 0.0], dtype=torch.float64)
        torch.testing.assert_close(Q.angle(q), torch.tensor(eps, dtype=torch.float64),
                                   rtol=1e-6, atol=0.0)
    # float32 too: arccos would return 0 here
    q = torch.tensor([1.0, 1e-5, 0.0, 0.0])
    torch.testing.assert_close(Q.angle(q), torch.tensor(2e-5), rtol=1e-4, atol=0.0)


# ----------------------------------------------------------------------------- normalize
def test_normalize_zero_is_zero_with_finite_grad():
    q = torch.zeros(2, 4, dtype=torch.float64, requires_grad=True)
    out = Q.normalize(q)
    assert torch.equal(out, torch.zeros(2, 4, dtype=torch.float64))
    out.sum().backward()
    assert torch.isfinite(q.grad).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_dtypes(dtype):
    q = Q.random_unit(10, seed=0, dtype=dtype)
    assert q.dtype == dtype
    for out in (Q.multiply(q, q), Q.conjugate(q), Q.normalize(q), Q.relative(q, q),
                Q.to_rotation_matrix(q), Q.rotate(q, q[..., 1:]), Q.sandwich(q, q), Q.angle(q)):
        assert out.dtype == dtype
        assert torch.isfinite(out).all()


# ----------------------------------------------------------------------------- gradients
def test_gradcheck():
    gen = torch.Generator().manual_seed(0)
    p = torch.randn(3, 4, dtype=torch.float64, generator=gen, requires_grad=True)
    q = torch.randn(3, 4, dtype=torch.float64, generator=gen, requires_grad=True)
    v = torch.randn(3, 3, dtype=torch.float64, generator=gen, requires_grad=True)
    gc = torch.autograd.gradcheck
    assert gc(Q.multiply, (p, q))
    assert gc(Q.conjugate, (p,))
    assert gc(Q.normalize, (p,))
    assert gc(Q.relative, (p, q))
    assert gc(Q.to_rotation_matrix, (p,))
    assert gc(Q.rotate, (p, v))
    assert gc(Q.sandwich, (p, q))
    assert gc(Q.angle, (p,))


# ----------------------------------------------------------------------------- random_unit
def test_random_unit_shape_norm_seed():
    a = Q.random_unit(4, 5, seed=123)
    assert a.shape == (4, 5, 4)
    assert Q.random_unit((4, 5), seed=123).shape == (4, 5, 4)
    torch.testing.assert_close(torch.linalg.vector_norm(a, dim=-1), torch.ones(4, 5))
    assert torch.equal(a, Q.random_unit(4, 5, seed=123))
    assert not torch.equal(a, Q.random_unit(4, 5, seed=124))
    g1, g2 = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    assert torch.equal(Q.random_unit(3, generator=g1), Q.random_unit(3, generator=g2))
    # seed= does not touch the global RNG
    torch.manual_seed(0)
    expected = torch.rand(1)
    torch.manual_seed(0)
    Q.random_unit(10, seed=1)
    assert torch.equal(torch.rand(1), expected)


def test_random_unit_uniform_moments():
    q = Q.random_unit(200_000, seed=0, dtype=torch.float64)
    # Uniform on S^3: mean 0, second moment I/4, and the rotation angle has density
    # (1 - cos t) / pi on [0, pi], so E[theta] = pi/2 + 2/pi.
    assert q.mean(0).abs().max() < 0.01
    torch.testing.assert_close(q.T @ q / len(q), torch.eye(4, dtype=torch.float64) / 4,
                               atol=0.005, rtol=0.0)
    mean_angle = Q.angle(q).mean()
    assert abs(float(mean_angle) - (math.pi / 2 + 2 / math.pi)) < 0.01


# ----------------------------------------------------------------------------- validation
@pytest.mark.parametrize("fn", [Q.conjugate, Q.normalize, Q.to_rotation_matrix, Q.angle])
def test_bad_last_dim(fn):
    with pytest.raises(ValueError, match=rf"^{fn.__name__}: 'q' must be a tensor of quaternions "
                       r"in its last dimension, shape \(\.\.\., 4\), got .* shape \[5, 3\]$"):
        fn(torch.zeros(5, 3))
    with pytest.raises(ValueError, match=rf"^{fn.__name__}: 'q' must be a tensor of quaternions"):
        fn(torch.tensor(1.0))


def test_bad_inputs_other():
    with pytest.raises(ValueError, match="^multiply: 'p' must be a tensor of quaternions"):
        Q.multiply(torch.zeros(3), ONE)
    with pytest.raises(ValueError, match=r"^rotate: 'v' must be a tensor of 3-vectors"):
        Q.rotate(ONE, torch.zeros(4))
    with pytest.raises(ValueError, match="^sandwich: 'x' must be a tensor of quaternions"):
        Q.sandwich(ONE, torch.zeros(3))
    with pytest.raises(TypeError, match="^conjugate: 'q' must be a tensor, got ndarray"):
        Q.conjugate(np.zeros(4))
    with pytest.raises(ValueError, match="^random_unit: 'seed' must be None when 'generator'"):
        Q.random_unit(3, seed=0, generator=torch.Generator())
    with pytest.raises(TypeError, match="^random_unit: 'dtype' must be a floating-point "
                       "torch.dtype, got torch.int64$"):
        Q.random_unit(3, dtype=torch.int64)
    with pytest.raises(ValueError, match=r"^random_unit: 'shape' \(entry 0\) must be an int >= 0"):
        Q.random_unit(-1)
    with pytest.raises(TypeError, match=r"^random_unit: 'shape' \(entry 1\) must be an int >= 0"):
        Q.random_unit(2, 2.0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("transpose", [False, True])
def test_rotate_vector_parts_both_methods_match_the_sandwich_product(dtype, transpose):
    # both methods against the sandwich product q (0, v) q* of every quaternion of the group
    # (Q.rotate, checked against scipy above), values and gradients; the transpose is the
    # rotation by the conjugate
    g = torch.Generator().manual_seed(1)
    N, H, m = 5, 2, 3
    q = Q.normalize(torch.randn(N, H, 4, generator=g, dtype=dtype))
    x = torch.randn(N, H, m, 4, generator=g, dtype=dtype)
    qq = Q.conjugate(q) if transpose else q
    expected = torch.cat([x[..., :1], Q.rotate(qq.unsqueeze(2).expand(N, H, m, 4), x[..., 1:])],
                         dim=-1)
    tol = dict(atol=1e-6, rtol=1e-5) if dtype == torch.float32 else dict(atol=1e-12, rtol=1e-12)
    grads = []
    weights = torch.linspace(-1, 1, x.numel(), dtype=dtype).view_as(x)
    for method in Q.ROTATE_METHODS:
        rot = Q.to_rotation_matrix(q).detach().requires_grad_(True)
        xl = x.clone().requires_grad_(True)
        out = Q.rotate_vector_parts(rot, xl, transpose, method=method)
        torch.testing.assert_close(out, expected, **tol)
        (out * weights).sum().backward()
        grads.append((rot.grad, xl.grad))
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, **tol)
    if dtype == torch.float64:
        for method in Q.ROTATE_METHODS:
            rot = Q.to_rotation_matrix(q).detach().requires_grad_(True)
            assert torch.autograd.gradcheck(
                lambda r, v: Q.rotate_vector_parts(r, v, transpose, method=method),
                (rot, x.clone().requires_grad_(True)))


def test_rotate_vector_parts_refuses_bad_input():
    rot, x = torch.eye(3).expand(2, 3, 3), torch.randn(2, 5, 4)
    with pytest.raises(ValueError, match=r"^rotate_vector_parts: 'method' must be one of"):
        Q.rotate_vector_parts(rot, x, method="einsum")
    with pytest.raises(ValueError, match=r"^rotate_vector_parts: 'rot' must be a tensor of 3 x 3"):
        Q.rotate_vector_parts(torch.eye(4).expand(2, 4, 4), x)
    with pytest.raises(ValueError,
                       match=r"^rotate_vector_parts: 'x' must be of shape \(\.\.\., m, 4\)"):
        Q.rotate_vector_parts(rot, torch.randn(3, 5, 4))  # other leading shape
    with pytest.raises(TypeError, match=r"^rotate_vector_parts: 'x' must be a floating-point"):
        Q.rotate_vector_parts(rot, torch.ones(2, 5, 4, dtype=torch.long))
    # the identity leaves the quaternions as they are, with either method
    for method in Q.ROTATE_METHODS:
        torch.testing.assert_close(Q.rotate_vector_parts(rot, x, method=method), x)
