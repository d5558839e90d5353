"""Tests of quest_geometric.geometry.fibonacci: Fibonacci spheres and concentric shells."""
import math

import numpy as np
import pytest
import torch
from scipy.spatial.distance import cdist

from quest_geometric.geometry.fibonacci import concentric_spheres, fibonacci_sphere


# ------------------------------------------------------------------------- fibonacci
@pytest.mark.parametrize("radius", [1.0, 2.5])
def test_fibonacci_sphere_formula_and_uniformity(radius):
    n = 500
    pos = fibonacci_sphere(n, radius, dtype=torch.float64)
    assert pos.shape == (n, 3) and pos.dtype == torch.float64
    assert torch.allclose(pos.norm(dim=1), torch.full((n,), radius, dtype=torch.float64))
    i = np.arange(n)
    z = 1 - 2 * (i + 0.5) / n
    phi = i * math.pi * (3 - math.sqrt(5))
    r = np.sqrt(1 - z**2)
    expected = radius * np.stack([r * np.cos(phi), r * np.sin(phi), z], 1)
    np.testing.assert_allclose(pos.numpy(), expected, atol=1e-12)
    # nearly uniform: centroid at the origin, nearest-neighbour distances within a narrow
    # band around the ideal spacing sqrt(4 pi / n) * radius.
    assert pos.mean(0).norm() < 0.01 * radius
    d = cdist(pos.numpy(), pos.numpy())
    np.fill_diagonal(d, np.inf)
    nn = d.min(1) / (radius * math.sqrt(4 * math.pi / n))
    assert 0.75 < nn.min() and nn.max() < 1.25 and nn.std() < 0.1


def test_fibonacci_sphere_dtype_and_errors():
    assert fibonacci_sphere(10, dtype=torch.float32).dtype == torch.float32
    with pytest.raises(ValueError, match="'n'"):
        fibonacci_sphere(0)
    with pytest.raises(TypeError, match="'n'"):
        fibonacci_sphere(2.5)
    with pytest.raises(ValueError, match="'radius'"):
        fibonacci_sphere(10, radius=-1.0)


def test_concentric_spheres():
    pos, shell = concentric_spheres([8, 32, 128])
    assert pos.shape == (168, 3) and shell.dtype == torch.long
    assert torch.equal(torch.bincount(shell), torch.tensor([8, 32, 128]))
    assert torch.allclose(pos.norm(dim=1), (shell + 1).to(pos.dtype), atol=1e-6)
    pos, shell = concentric_spheres([8, 16], radii=[0.5, 3.0])
    assert torch.allclose(pos.norm(dim=1), torch.tensor([0.5] * 8 + [3.0] * 16), atol=1e-6)
    with pytest.raises(ValueError, match="'radii'"):
        concentric_spheres([8, 16], radii=[2.0, 1.0])
    with pytest.raises(ValueError, match="'radii'"):
        concentric_spheres([8, 16], radii=[1.0])
    with pytest.raises(ValueError, match="'sizes'"):
        concentric_spheres([])
