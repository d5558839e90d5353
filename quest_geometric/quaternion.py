r"""Quaternion algebra on PyTorch tensors.

Quaternions are stored **real part first**, :math:`q = (w, x, y, z) = w + x\,i + y\,j + z\,k`,
in the last dimension of a tensor of shape ``(..., 4)`` (the e3nn convention; note that
:class:`scipy.spatial.transform.Rotation` stores them scalar-*last*).  Every function broadcasts
over the leading dimensions, is differentiable, and works in any floating-point dtype.

The rotation conventions are the usual active ones: a unit quaternion :math:`q` rotates a
3-vector :math:`v` by the sandwich product :math:`q\,(0, v)\,q^{*}`, whose matrix is
:func:`to_rotation_matrix`.  :math:`q` and :math:`-q` are the same rotation.

**Non-finite values pass through.** These are elementwise algebra, like :func:`torch.mul`:
a NaN or an infinity in an entry gives NaN or infinities in the entries computed from it
and nowhere else, so nothing is hidden, and a check here would add a host synchronisation
to every call of the layers' inner loops. The public layers that call them
(:class:`~quest_geometric.nn.QSVConv`, :class:`~quest_geometric.nn.QuaternionLinear`) refuse
non-finite inputs, naming the argument.
"""
from __future__ import annotations

from typing import Optional, Union

import torch
from torch import Tensor

from quest_geometric._utils.checks import check_int, check_tensor, fail

__all__ = ["multiply", "conjugate", "normalize", "NORMALIZE_EPS", "relative",
           "to_rotation_matrix", "rotate", "rotate_vector_parts", "sandwich", "random_unit",
           "angle"]


def _check(q: Tensor, name: str, where: str, size: int = 4) -> None:
    check_tensor(q, name, where=where)
    if q.dim() == 0 or q.size(-1) != size:
        what = "quaternions" if size == 4 else "3-vectors"
        raise fail(ValueError, where, name, f"a tensor of {what} in its last dimension, "
                   f"shape (..., {size})", q)


def multiply(p: Tensor, q: Tensor) -> Tensor:
    r"""Hamilton product :math:`p\,q` of two quaternions.

    .. math::
        p\,q = \bigl(p_w q_w - \mathbf{p}_v \cdot \mathbf{q}_v,\;
        p_w \mathbf{q}_v + q_w \mathbf{p}_v + \mathbf{p}_v \times \mathbf{q}_v\bigr)

    so that :math:`i\,j = k`, :math:`j\,k = i`, :math:`k\,i = j` and
    :math:`i^2 = j^2 = k^2 = -1`.  The product is associative but not commutative.

    Args:
        p (torch.Tensor): Left factor, shape ``(..., 4)``, real part first.
        q (torch.Tensor): Right factor, shape ``(..., 4)``; broadcast against ``p``.

    Returns:
        torch.Tensor: The product, shape ``broadcast(p, q)``.
    """
    _check(p, "p", "multiply")
    _check(q, "q", "multiply")
    pw, px, py, pz = p.unbind(-1)
    qw, qx, qy, qz = q.unbind(-1)
    return torch.stack((pw * qw - px * qx - py * qy - pz * qz,
                        pw * qx + px * qw + py * qz - pz * qy,
                        pw * qy - px * qz + py * qw + pz * qx,
                        pw * qz + px * qy - py * qx + pz * qw), dim=-1)


def conjugate(q: Tensor) -> Tensor:
    r"""Quaternion conjugate :math:`q^{*} = (w, -x, -y, -z)`.

    For a unit quaternion the conjugate is the inverse, and it is the inverse rotation.

    Args:
        q (torch.Tensor): Quaternions, shape ``(..., 4)``.

    Returns:
        torch.Tensor: The conjugates, same shape as ``q``.
    """
    _check(q, "q", "conjugate")
    return torch.cat((q[..., :1], -q[..., 1:]), dim=-1)


#: The default lower bound on the divisor of :func:`normalize` (as
#: :func:`torch.nn.functional.normalize`'s), shared by the native kernels that normalise.
NORMALIZE_EPS = 1e-12


def normalize(q: Tensor, eps: float = NORMALIZE_EPS) -> Tensor:
    r"""Scales quaternions to unit norm.

    .. math::
        \hat{q} = \frac{q}{\max(\lVert q \rVert_2, \epsilon)}

    A quaternion with norm below ``eps`` (in particular the zero quaternion) is divided by
    ``eps`` instead of its norm, so the zero quaternion maps to the zero quaternion (never
    ``NaN``, and with finite gradients); it is the caller's choice what a zero quaternion
    means.  Same semantics as :func:`torch.nn.functional.normalize`.

    Args:
        q (torch.Tensor): Quaternions, shape ``(..., 4)``.
        eps (float, optional): Lower bound on the divisor. (default: :obj:`1e-12`)

    Returns:
        torch.Tensor: Unit quaternions (or zeros), same shape as ``q``.
    """
    _check(q, "q", "normalize")
    return torch.nn.functional.normalize(q, p=2.0, dim=-1, eps=eps)


def relative(q_i: Tensor, q_j: Tensor) -> Tensor:
    r"""Relative quaternion :math:`r_{ij} = q_i^{*}\,q_j`.

    For unit quaternions, :math:`\mathrm{Re}(r_{ij}) = \langle q_i, q_j \rangle` and the rotation
    of :math:`r_{ij}` is :math:`R(q_i)^\top R(q_j)`.  Replacing both :math:`q_i` and :math:`q_j`
    by :math:`g\,q_i`, :math:`g\,q_j` for a unit :math:`g` leaves :math:`r_{ij}` unchanged.

    Args:
        q_i (torch.Tensor): Shape ``(..., 4)``.
        q_j (torch.Tensor): Shape ``(..., 4)``; broadcast against ``q_i``.

    Returns:
        torch.Tensor: :math:`q_i^{*} q_j`, shape ``broadcast(q_i, q_j)``.
    """
    _check(q_i, "q_i", "relative")
    _check(q_j, "q_j", "relative")
    return multiply(conjugate(q_i), q_j)


def to_rotation_matrix(q: Tensor) -> Tensor:
    r"""Rotation matrix of quaternions, acting on column vectors.

    .. math::
        R(q) = \begin{pmatrix}
        w^2 + x^2 - y^2 - z^2 & 2(xy - wz) & 2(xz + wy) \\
        2(xy + wz) & w^2 - x^2 + y^2 - z^2 & 2(yz - wx) \\
        2(xz - wy) & 2(yz + wx) & w^2 - x^2 - y^2 + z^2
        \end{pmatrix}

    This is the matrix of the sandwich product :math:`v \mapsto q\,(0, v)\,q^{*}` for *any*
    quaternion, so it matches :func:`rotate` exactly; for a unit quaternion it is a rotation
    matrix (for a non-unit one it is :math:`\lVert q \rVert^2` times the rotation of
    :math:`q / \lVert q \rVert`; the input is not normalised here).

    Args:
        q (torch.Tensor): Quaternions, shape ``(..., 4)``.

    Returns:
        torch.Tensor: Matrices, shape ``(..., 3, 3)``.
    """
    _check(q, "q", "to_rotation_matrix")
    w, x, y, z = q.unbind(-1)
    ww, xx, yy, zz = w * w, x * x, y * y, z * z
    xy, xz, yz = x * y, x * z, y * z
    wx, wy, wz = w * x, w * y, w * z
    rows = (
        ww + xx - yy - zz, 2 * (xy - wz), 2 * (xz + wy),
        2 * (xy + wz), ww - xx + yy - zz, 2 * (yz - wx),
        2 * (xz - wy), 2 * (yz + wx), ww - xx - yy + zz,
    )
    return torch.stack(rows, dim=-1).unflatten(-1, (3, 3))


def rotate(q: Tensor, v: Tensor) -> Tensor:
    r"""Rotates 3-vectors by quaternions with the sandwich product.

    .. math::
        q\,(0, \mathbf{v})\,q^{*} = \bigl(0,\; (w^2 - \lVert\mathbf{u}\rVert^2)\,\mathbf{v}
        + 2 (\mathbf{u} \cdot \mathbf{v})\,\mathbf{u} + 2 w\,(\mathbf{u} \times \mathbf{v})\bigr),
        \qquad q = (w, \mathbf{u}).

    Equals ``to_rotation_matrix(q) @ v``.  For a unit ``q`` this is a rotation; the input is
    not normalised.

    Args:
        q (torch.Tensor): Quaternions, shape ``(..., 4)``.
        v (torch.Tensor): Vectors, shape ``(..., 3)``; broadcast against ``q[..., 0]``.

    Returns:
        torch.Tensor: Rotated vectors, shape ``broadcast(q[..., :3], v)``.
    """
    _check(q, "q", "rotate")
    _check(v, "v", "rotate", size=3)
    w, u = q[..., :1], q[..., 1:]
    uv = (u * v).sum(-1, keepdim=True)
    uu = (u * u).sum(-1, keepdim=True)
    ux, uy, uz = u.unbind(-1)
    vx, vy, vz = v.unbind(-1)
    cross = torch.stack((uy * vz - uz * vy, uz * vx - ux * vz, ux * vy - uy * vx), dim=-1)
    return (w * w - uu) * v + 2 * uv * u + 2 * w * cross


#: The two forms of :func:`rotate_vector_parts`.
ROTATE_METHODS = ("bmm", "elementwise")


def rotate_vector_parts(rot: Tensor, x: Tensor, transpose: bool = False,
                        method: str = "bmm") -> Tensor:
    r"""Rotates the vector parts of groups of quaternions by one matrix per group of groups:
    :math:`(x_0, \mathbf{x}_v) \mapsto (x_0, R\,\mathbf{x}_v)` (or :math:`R^{\top}`), the
    same :math:`R` for the ``m`` quaternions of one leading index.

    With :math:`R = R(q)` (:func:`to_rotation_matrix`) this is the sandwich product
    :math:`q\,x\,q^{*}` of every quaternion of the group, and :math:`R^{\top}` that of
    :math:`q^{*}`; :class:`~quest_geometric.nn.QSVConv` rotates every node's features this
    way before and after aggregating them.

    Args:
        rot (torch.Tensor): Matrices, shape ``(..., 3, 3)``.
        x (torch.Tensor): Quaternions, shape ``(..., m, 4)`` (real part first), with the same
            leading shape ``...`` as ``rot``.
        transpose (bool, optional): Apply :math:`R^{\top}` instead. (default: :obj:`False`)
        method (str, optional): ``'bmm'``: one batched ``[m, 3] x [3, 3]`` product per
            leading index; ``'elementwise'``: component :math:`a` of the result as
            :math:`\sum_b R_{ab}\,x_b`, broadcast products of ``(..., m)`` slices, which
            :func:`torch.compile` fuses into one pass over ``x`` (the batched product it calls
            out to). Both give the same values and gradients. (default: :obj:`'bmm'`)

    Returns:
        torch.Tensor: The rotated quaternions, shape of ``x``.
    """
    check_tensor(rot, "rot", where="rotate_vector_parts", floating=True)
    check_tensor(x, "x", where="rotate_vector_parts", floating=True)
    if method not in ROTATE_METHODS:
        raise fail(ValueError, "rotate_vector_parts", "method", f"one of {ROTATE_METHODS}", method)
    if rot.dim() < 2 or rot.shape[-2:] != (3, 3):
        raise fail(ValueError, "rotate_vector_parts", "rot", "a tensor of 3 x 3 matrices, "
                   "shape (..., 3, 3)", rot)
    if x.dim() != rot.dim() or x.size(-1) != 4 or x.shape[:-2] != rot.shape[:-2]:
        raise fail(ValueError, "rotate_vector_parts", "x", f"of shape (..., m, 4) with the "
                   f"leading shape {tuple(rot.shape[:-2])} of 'rot'", x)
    if method == "bmm":
        rt = rot if transpose else rot.transpose(-1, -2)
        return torch.cat([x[..., :1], torch.matmul(x[..., 1:], rt)], dim=-1)
    r = rot.unsqueeze(-3)  # (..., 1, 3, 3): one matrix for the m quaternions of the group
    if transpose:
        r = r.transpose(-1, -2)
    x1, x2, x3 = x[..., 1], x[..., 2], x[..., 3]
    parts = [x[..., 0]]
    for a in range(3):
        parts.append(x1 * r[..., a, 0] + x2 * r[..., a, 1] + x3 * r[..., a, 2])
    return torch.stack(parts, dim=-1)


def sandwich(r: Tensor, x: Tensor) -> Tensor:
    r"""Sandwich product :math:`r\,x\,r^{*}` on full quaternions.

    .. math::
        r\,(x_0, \mathbf{x})\,r^{*} = \bigl(\lVert r \rVert^2 x_0,\; R(r)\,\mathbf{x}\bigr)

    For a unit ``r`` the real part :math:`x_0` is kept and the vector part is rotated by
    :math:`R(r)` (:func:`to_rotation_matrix`).  Computed in closed form, equal to
    ``multiply(multiply(r, x), conjugate(r))``.

    Args:
        r (torch.Tensor): Quaternions, shape ``(..., 4)``.
        x (torch.Tensor): Quaternions, shape ``(..., 4)``; broadcast against ``r``.

    Returns:
        torch.Tensor: Shape ``broadcast(r, x)``.
    """
    _check(r, "r", "sandwich")
    _check(x, "x", "sandwich")
    real = (r * r).sum(-1, keepdim=True) * x[..., :1]
    return torch.cat((real, rotate(r, x[..., 1:])), dim=-1)


def random_unit(*shape: Union[int, tuple[int, ...], torch.Size],
                generator: Optional[torch.Generator] = None, seed: Optional[int] = None,
                dtype: Optional[torch.dtype] = None,
                device: Optional[Union[str, torch.device]] = None) -> Tensor:
    r"""Random unit quaternions, uniformly distributed on :math:`S^3` (Haar on rotations).

    Draws :math:`g \sim \mathcal{N}(0, I_4)` and returns :math:`g / \lVert g \rVert`; the normal
    distribution is rotation invariant, so the result is uniform on the sphere.

    Args:
        *shape (int or tuple): Leading shape; the result has shape ``(*shape, 4)``.
            ``random_unit(5, 2)`` and ``random_unit((5, 2))`` are the same.
        generator (torch.Generator, optional): Random generator to draw from.
            (default: :obj:`None`, the global generator)
        seed (int, optional): If given, draw from a fresh generator seeded with it, so the
            result is reproducible and the global random state is untouched; exclusive with
            ``generator``. (default: :obj:`None`)
        dtype (torch.dtype, optional): Floating-point dtype. (default: :obj:`None`, the
            default dtype)
        device (torch.device or str, optional): Device. (default: :obj:`None`, CPU)

    Returns:
        torch.Tensor: Shape ``(*shape, 4)``.
    """
    if len(shape) == 1 and isinstance(shape[0], (tuple, list, torch.Size)):
        shape = tuple(shape[0])
    for i, s in enumerate(shape):
        check_int(s, f"shape (entry {i})", 0, where="random_unit")
    if generator is not None and seed is not None:
        raise fail(ValueError, "random_unit", "seed", "None when 'generator' is given (pass "
                   "at most one of them)", seed)
    if dtype is not None and (not isinstance(dtype, torch.dtype) or not dtype.is_floating_point):
        raise fail(TypeError, "random_unit", "dtype", "a floating-point torch.dtype", dtype)
    if seed is not None:
        gen_device = torch.device(device) if device is not None else torch.device("cpu")
        generator = torch.Generator(device=gen_device)
        generator.manual_seed(int(seed))
    g = torch.randn(*shape, 4, generator=generator, dtype=dtype, device=device)
    # A Gaussian draw of norm < 1e-30 has probability ~1e-120: normalize never divides by 0.
    return normalize(g, eps=1e-30)


def angle(q: Tensor) -> Tensor:
    r"""Rotation angle of quaternions, in :math:`[0, \pi]`.

    .. math::
        \theta(q) = 2\,\operatorname{atan2}\bigl(\lVert \mathbf{u} \rVert, |w|\bigr),
        \qquad q = (w, \mathbf{u}).

    Invariant under :math:`q \mapsto -q` and under positive scaling, accurate near
    :math:`\theta = 0` and :math:`\theta = \pi` (unlike :math:`2 \arccos |w|`).  The zero
    quaternion gives ``0``.

    Args:
        q (torch.Tensor): Quaternions, shape ``(..., 4)``.

    Returns:
        torch.Tensor: Angles in radians, shape ``q.shape[:-1]``.
    """
    _check(q, "q", "angle")
    return 2 * torch.atan2(torch.linalg.vector_norm(q[..., 1:], dim=-1), q[..., 0].abs())
