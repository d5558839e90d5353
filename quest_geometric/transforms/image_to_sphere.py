r"""Maps images onto concentric Fibonacci spheres (one cached template per configuration)."""
from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import NamedTuple, Optional, Union

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.data import Batch, Data
from torch_geometric.data.datapipes import functional_transform
from torch_geometric.transforms import BaseTransform

from quest_geometric._utils.checks import (
    check_all_finite, check_images, check_shell_radii, check_shell_sizes, check_tensor,
)
from quest_geometric.geometry.graphs import sphere_graph
from quest_geometric.transforms._image_graph import split_input, template_batch, to_data

_PROJECTIONS = ("stereographic", "equal_area")
_PADDING = ("zeros", "border", "reflection")
#: Default cap (degrees) per projection: the hemisphere for the conformal stereographic
#: map (which cannot reach the whole sphere), the whole sphere for the equal-area map.
DEFAULT_CAP = {"stereographic": 90.0, "equal_area": 180.0}


def project_to_image(pos: Tensor, projection: str = "stereographic",
                     cap: Optional[float] = None) -> Tensor:
    r"""Projects points (by direction) to normalised image coordinates in :math:`[-1, 1]^2`.

    Only the direction :math:`u = p / \lVert p \rVert` matters, so every shell sees the
    whole image in the same way.  With polar angle :math:`\theta` from the north pole
    :math:`+z` (the image centre), the azimuthal projections put :math:`u` in the plane at

    .. math::
        \text{stereographic (from the south pole, conformal):}\quad
        (\xi, \eta) = \frac{(u_x, u_y)}{1 + u_z}, \quad \rho(\theta) = \tan(\theta / 2),

        \text{Lambert equal-area:}\quad
        (\xi, \eta) = \sqrt{\frac{2}{1 + u_z}} \, (u_x, u_y), \quad
        \rho(\theta) = 2 \sin(\theta / 2),

    and are scaled so that the cap of angular radius :math:`\theta_c` (``cap``) fills the
    disc inscribed in the image:

    .. math::
        (g_x, g_y) = \frac{(\xi, -\eta)}{\rho(\theta_c)}.

    :math:`g_x` grows along image columns (left to right, :math:`+x`) and :math:`g_y`
    along rows (top to bottom, so the image's up is :math:`+y`), as
    :func:`torch.nn.functional.grid_sample` expects.  Points beyond the image square get
    :math:`|g| > 1`; the south pole itself is sent far outside.

    Args:
        pos (Tensor): Points, shape :math:`(N, 3)`, none at the origin.
        projection (str, optional): ``'stereographic'`` or ``'equal_area'``.
            (default: :obj:`'stereographic'`)
        cap (float, optional): :math:`\theta_c` in degrees, in :math:`(0, 180)` for the
            stereographic and :math:`(0, 180]` for the equal-area projection.
            (default: :obj:`90` for ``'stereographic'``, :obj:`180` for ``'equal_area'``)

    Returns:
        Tensor: Grid coordinates :math:`(g_x, g_y)`, shape :math:`(N, 2)`, float64.

    Raises:
        ValueError: a NaN or infinite coordinate in ``pos``.
    """
    projection, cap = _check_projection(projection, cap)
    check_tensor(pos, "pos", where="project_to_image")
    check_all_finite((("pos", pos),), where="project_to_image")
    u = pos.double()
    u = u / u.norm(dim=-1, keepdim=True)
    one_plus_z = (1.0 + u[:, 2]).clamp_min(1e-12)
    theta_c = math.radians(cap)
    if projection == "stereographic":
        factor = 1.0 / one_plus_z
        rho_c = math.tan(theta_c / 2.0)
    else:
        factor = torch.sqrt(2.0 / one_plus_z)
        rho_c = 2.0 * math.sin(theta_c / 2.0)
    return torch.stack([u[:, 0] * factor, -u[:, 1] * factor], dim=-1) / rho_c


def _check_projection(projection: str, cap: Optional[float]) -> tuple[str, float]:
    if projection not in _PROJECTIONS:
        raise ValueError(f"'projection' must be one of {_PROJECTIONS} (got {projection!r})")
    cap = DEFAULT_CAP[projection] if cap is None else float(cap)
    upper_ok = cap < 180.0 if projection == "stereographic" else cap <= 180.0
    if not (cap > 0.0 and upper_ok):
        bound = "(0, 180)" if projection == "stereographic" else "(0, 180]"
        raise ValueError(f"'cap' must be in {bound} degrees for {projection!r} (got {cap})")
    return projection, cap


class _SphereTemplate(NamedTuple):
    pos: Tensor
    shell: Tensor
    edge_index: Tensor
    grid: Tensor  # [N, 2] float64, grid_sample coordinates of every node
    outside: Tensor  # [N] bool, node outside the image square [-1, 1]^2


def _build_sphere_template(config: tuple) -> _SphereTemplate:
    sizes, k, k_cross, radii, projection, cap, backend = config
    graph = sphere_graph(sizes, k, k_cross=k_cross, radii=radii, backend=backend)
    grid = project_to_image(graph.pos, projection, cap)
    outside = (grid.abs() > 1.0).any(dim=1)
    return _SphereTemplate(graph.pos, graph.shell, graph.edge_index, grid, outside)


@functools.lru_cache(maxsize=32)
def _sphere_template(config: tuple) -> _SphereTemplate:
    # Looks the builder up at call time, so tests can count the builds.
    return _build_sphere_template(config)


@functional_transform("image_to_sphere")
class ImageToSphere(BaseTransform):
    r"""Maps an image onto concentric Fibonacci spheres with a kNN graph
    (functional name: :obj:`image_to_sphere`).

    The node layout and graph are :func:`~quest_geometric.geometry.graphs.sphere_graph`
    (in-degree :math:`k + k_\times` everywhere).  Each node samples the image bilinearly
    (:func:`torch.nn.functional.grid_sample`) at
    :func:`project_to_image` of its direction, so **every shell sees the whole image**, at
    its own resolution.  With ``align_corners=False`` the normalised coordinates
    :math:`\pm 1` are the outer edges of the border pixels (pixel :math:`(i, j)`'s centre
    is at :math:`((2j + 1)/W - 1, (2i + 1)/H - 1)`), so the image square is exactly the
    square :math:`[-1, 1]^2` of the projection plane; a non-square image is stretched to
    it.  Nodes inside the square never mix with padding (in its outer half pixel a node
    takes the border value).

    **Nodes outside the image.**  With the default stereographic hemisphere, every node
    whose direction points south of the equator (about half the nodes of each shell) lies
    outside the image square.  They receive ``fill_value`` (``padding_mode='zeros'``, the
    default: exactly ``fill_value`` in every channel, 0 unless set), or the nearest border
    pixel (``'border'``) or the mirrored image (``'reflection'``).  Note that the fill is in
    the units of the image *given to the transform*: a dataset that normalises before the
    transform (as :class:`~quest_geometric.datasets.images.DigitsGraphs` does) makes 0 the
    mean pixel, not black; pass the normalised background value to fill with the
    background.  The equal-area projection of the whole sphere (``cap=180``) puts every node
    inside the image disc.

    **Input.**  A ``[C, H, W]`` tensor (or ``Data(image=...)``): floating-point images are
    sampled as given, ``uint8`` images are first rescaled to :math:`[0, 1]`, other integer
    types are refused.  Channels-last ``[H, W, C]`` input and ``[B, C, H, W]`` batches are
    refused with the call to use instead (``permute(2, 0, 1)``, :meth:`batch_call`).

    The template (graph plus sampling grid) depends only on the configuration; it is built
    once, kept in a module-level LRU cache, and shared by every image and every transform
    with the same configuration.  Outputs hold copies of the template, so changing one
    sample in place cannot corrupt the others.

    Args:
        sizes (Sequence[int], optional): Nodes per shell, innermost first.
            (default: :obj:`(64, 256, 1024)`)
        k (int, optional): Within-shell neighbours. (default: :obj:`12`)
        k_cross (int, optional): Cross-shell neighbours (:math:`k + k_\times = 16`).
            (default: :obj:`4`, :obj:`0` for a single shell)
        projection (str, optional): ``'stereographic'`` or ``'equal_area'``, see
            :func:`project_to_image`. (default: :obj:`'stereographic'`)
        cap (float, optional): Angular radius (degrees) of the spherical cap mapped onto
            the image's inscribed disc. (default: :obj:`90` for ``'stereographic'``, the
            northern hemisphere; :obj:`180` for ``'equal_area'``, the whole sphere)
        radii (Sequence[float], optional): Shell radii. (default: :obj:`(1, ..., S)`)
        padding_mode (str, optional): Value of nodes outside the image, as in
            :func:`~torch.nn.functional.grid_sample`: ``'zeros'`` (``fill_value``),
            ``'border'`` or ``'reflection'``. (default: :obj:`'zeros'`)
        fill_value (float, optional): The value of nodes outside the image with
            ``padding_mode='zeros'``. (default: :obj:`0.0`)
        align_corners (bool, optional): As in :func:`~torch.nn.functional.grid_sample`.
            (default: :obj:`False`)
        backend (str, optional): kNN backend used to build the template.
            (default: :obj:`'auto'`)

    Example:
        >>> t = ImageToSphere(sizes=(16, 64), k=6, k_cross=2)
        >>> t(torch.rand(3, 32, 32))
        Data(x=[80, 3], edge_index=[2, 640], pos=[80, 3], shell=[80])
    """

    def __init__(self, sizes: Sequence[int] = (64, 256, 1024), k: int = 12,
                 k_cross: Optional[int] = None, projection: str = "stereographic",
                 cap: Optional[float] = None, radii: Optional[Sequence[float]] = None,
                 padding_mode: str = "zeros", align_corners: bool = False,
                 backend: str = "auto", fill_value: float = 0.0) -> None:
        self.sizes = tuple(check_shell_sizes(sizes, where="ImageToSphere"))
        self.k = k
        self.k_cross = (4 if len(self.sizes) > 1 else 0) if k_cross is None else k_cross
        self.projection, self.cap = _check_projection(projection, cap)
        self.radii = None if radii is None else tuple(
            check_shell_radii(radii, len(self.sizes), where="ImageToSphere"))
        if padding_mode not in _PADDING:
            raise ValueError(f"'padding_mode' must be one of {_PADDING} (got {padding_mode!r})")
        self.padding_mode = padding_mode
        if (isinstance(fill_value, bool) or not isinstance(fill_value, (int, float))
                or not math.isfinite(fill_value)):
            raise ValueError(f"'fill_value' must be a finite float (got {fill_value!r})")
        if fill_value != 0.0 and padding_mode != "zeros":
            raise ValueError("'fill_value' is used with padding_mode='zeros' only (got "
                             f"padding_mode={padding_mode!r})")
        self.fill_value = float(fill_value)
        self.align_corners = bool(align_corners)
        self.backend = backend
        # Validates k / k_cross now (and warms the cache) rather than at the first image.
        self.template()

    def template(self) -> _SphereTemplate:
        """Returns the cached template ``(pos, shell, edge_index, grid)``; do not modify it
        in place."""
        return _sphere_template((self.sizes, self.k, self.k_cross, self.radii, self.projection,
                                 self.cap, self.backend))

    def _sample(self, images: Tensor) -> Tensor:
        """``[B, C, H, W]`` -> ``[B, N, C]``."""
        t = self.template()
        grid = t.grid.to(device=images.device, dtype=images.dtype)
        grid = grid.view(1, 1, -1, 2).expand(images.size(0), -1, -1, -1)
        # With 'zeros', sample as 'border' and fill the nodes outside the image square
        # afterwards: nodes inside the image never blend with the padding (grid_sample's
        # 'zeros' would fade the outer half pixel towards 0).
        zeros = self.padding_mode == "zeros"
        out = F.grid_sample(images, grid, mode="bilinear",
                            padding_mode="border" if zeros else self.padding_mode,
                            align_corners=self.align_corners)
        out = out[:, :, 0, :].transpose(1, 2)
        if zeros:
            out = out.masked_fill(t.outside.to(images.device).view(1, -1, 1), self.fill_value)
        return out

    def forward(self, data: Union[Tensor, Data]) -> Data:
        image, extra = split_input(data, "ImageToSphere")
        t = self.template()
        x = self._sample(image.unsqueeze(0))[0].contiguous()
        return to_data(x, t.pos, t.shell, t.edge_index, extra)

    def batch_call(self, images: Tensor, y: Optional[Tensor] = None, as_batch: bool = False
                   ) -> Union[list[Data], Batch]:
        r"""Transforms a stack of images with one vectorised
        :func:`~torch.nn.functional.grid_sample`.

        Args:
            images (Tensor): Images, shape :math:`(B, C, H, W)` (floating point, or
                ``uint8``, rescaled to :math:`[0, 1]`).
            y (Tensor, optional): Targets, first dimension :math:`B`; sample :math:`b`
                gets ``y[b:b+1]`` (the shape PyG's ``DataLoader`` concatenates).
                (default: :obj:`None`)
            as_batch (bool, optional): Return one :class:`~torch_geometric.data.Batch`
                instead of a list. (default: :obj:`False`)

        Returns:
            list[Data] or Batch: The same graphs as calling the transform on each image.
        """
        images = check_images(images, y, where="ImageToSphere.batch_call")
        t = self.template()
        xs = self._sample(images)
        if as_batch:
            return template_batch(xs, t.pos, t.shell, t.edge_index, y)
        return [to_data(xs[b], t.pos, t.shell, t.edge_index,
                        {} if y is None else {"y": y[b:b + 1]}) for b in range(images.size(0))]

    def __repr__(self) -> str:
        extra = "".join(text for show, text in (
            (self.radii is not None, f", radii={self.radii}"),
            (self.padding_mode != "zeros", f", padding_mode='{self.padding_mode}'"),
            (self.fill_value != 0.0, f", fill_value={self.fill_value:g}"),
            (self.align_corners, ", align_corners=True")) if show)
        return (f"{self.__class__.__name__}(sizes={self.sizes}, k={self.k}, "
                f"k_cross={self.k_cross}, projection='{self.projection}', "
                f"cap={self.cap:g}{extra})")


__all__ = ["ImageToSphere", "project_to_image", "DEFAULT_CAP"]
