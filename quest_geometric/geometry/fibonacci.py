"""Spherical Fibonacci lattices and concentric shells of them."""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Optional, Union

import torch
from torch import Tensor

from quest_geometric._utils.checks import (
    check_positive_float, check_positive_int, check_shell_radii, check_shell_sizes, fail,
)

#: The golden angle, :math:`\pi (3 - \sqrt{5})`, in radians.
GOLDEN_ANGLE: float = math.pi * (3.0 - math.sqrt(5.0))


def fibonacci_sphere(n: int, radius: float = 1.0, dtype: Optional[torch.dtype] = None,
                     device: Optional[Union[torch.device, str]] = None) -> Tensor:
    r"""Returns the :math:`n` points of a spherical Fibonacci lattice: point
    :math:`i \in \{0, \dots, n - 1\}` has height and azimuth

    .. math::
        z_i = 1 - \frac{2 (i + 1/2)}{n}, \qquad
        \varphi_i = i \, \pi (3 - \sqrt{5}),

    and lies at :math:`r \, (\sqrt{1 - z_i^2} \cos\varphi_i,\;
    \sqrt{1 - z_i^2} \sin\varphi_i,\; z_i)`.  Equally spaced heights give every point the
    same area :math:`4 \pi r^2 / n` (Archimedes), and the golden-angle azimuths spread the
    points nearly uniformly, from the north pole (:math:`+z`) to the south pole, none on a
    pole.  Computed in float64, cast at the end.

    Args:
        n (int): The number of points.
        radius (float, optional): The radius of the sphere. (default: :obj:`1.0`)
        dtype (torch.dtype, optional): The floating dtype of the result.
            (default: :obj:`torch.get_default_dtype()`)
        device (torch.device, optional): The device of the result. (default: :obj:`None`)

    Returns:
        Tensor: The positions, shape :math:`(n, 3)`.
    """
    n = check_positive_int(n, "'n'", where="fibonacci_sphere")
    radius = check_positive_float(radius, "radius", where="fibonacci_sphere")
    dtype = torch.get_default_dtype() if dtype is None else dtype
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise fail(TypeError, "fibonacci_sphere", "dtype", "a floating dtype (or None)", dtype)

    i = torch.arange(n, dtype=torch.float64)
    z = 1.0 - 2.0 * (i + 0.5) / n
    phi = i * GOLDEN_ANGLE
    rho = torch.sqrt((1.0 - z * z).clamp_min(0.0))
    pos = torch.stack([rho * torch.cos(phi), rho * torch.sin(phi), z], dim=-1) * radius
    return pos.to(dtype=dtype, device=device)


def concentric_spheres(sizes: Sequence[int], radii: Optional[Sequence[float]] = None,
                       dtype: Optional[torch.dtype] = None,
                       device: Optional[Union[torch.device, str]] = None
                       ) -> tuple[Tensor, Tensor]:
    r"""Returns concentric spherical Fibonacci lattices (shells), innermost first: shell
    :math:`s` holds ``sizes[s]`` points of :func:`fibonacci_sphere` at radius ``radii[s]``;
    nodes are numbered shell after shell.

    The default radii :math:`r_s = s + 1` space the shells equally, so the radial part of

    .. math::
        \lVert p - p' \rVert^2 = (r - r')^2 + 2 r r' (1 - \cos\theta)

    is the same to the shell inside and to the shell outside: cross-shell neighbours picked
    by Euclidean distance from both adjacent shells
    (:func:`~quest_geometric.geometry.graphs.sphere_graph`) are not excluded by the radii
    alone, and information flows both inward and outward.  (Radii proportional to
    :math:`\sqrt{n_s}` would equalise the node spacing, but for sizes growing 4x per shell
    the gaps would double and every middle node's cross neighbours lie on the inner shell.)

    Args:
        sizes (Sequence[int]): The number of points on each shell, innermost first.
        radii (Sequence[float], optional): The radius of each shell, strictly increasing.
            (default: :obj:`(1, 2, ..., S)`)
        dtype (torch.dtype, optional): The floating dtype of the positions.
            (default: :obj:`torch.get_default_dtype()`)
        device (torch.device, optional): The device of the result. (default: :obj:`None`)

    Returns:
        (Tensor, Tensor): The positions, shape :math:`(N, 3)` with
        :math:`N = \sum_s n_s`, and the shell index of every node (``torch.long``), shape
        :math:`(N,)`.
    """
    sizes = check_shell_sizes(sizes, where="concentric_spheres")
    radii = check_shell_radii(radii, len(sizes), where="concentric_spheres")
    pos = torch.cat([fibonacci_sphere(n, r, dtype=dtype, device=device)
                     for n, r in zip(sizes, radii)])
    shell = torch.repeat_interleave(torch.arange(len(sizes), device=device),
                                    torch.tensor(sizes, device=device))
    return pos, shell


__all__ = ["GOLDEN_ANGLE", "fibonacci_sphere", "concentric_spheres"]
