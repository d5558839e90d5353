r"""Maps images onto their flat pixel lattice with a 2-D kNN graph (the control)."""
from __future__ import annotations

import functools
from typing import Optional, Union

from torch import Tensor
from torch_geometric.data import Batch, Data
from torch_geometric.data.datapipes import functional_transform
from torch_geometric.transforms import BaseTransform

from quest_geometric._utils.checks import check_images, check_positive_int
from quest_geometric.geometry.graphs import lattice_graph
from quest_geometric.transforms._image_graph import split_input, template_batch, to_data


def _build_lattice_template(config: tuple) -> Data:
    height, width, k, backend = config
    return lattice_graph(height, width, k, backend=backend)


@functools.lru_cache(maxsize=32)
def _lattice_template(config: tuple) -> Data:
    # Looks the builder up at call time, so tests can count the builds.
    return _build_lattice_template(config)


@functional_transform("image_to_lattice")
class ImageToLattice(BaseTransform):
    r"""Turns an image into a graph on its pixel grid with a 2-D kNN graph
    (functional name: :obj:`image_to_lattice`): the flat-lattice control of
    :class:`~quest_geometric.transforms.image_to_sphere.ImageToSphere`, with the same output
    form and input rules.  Node :math:`i W + j` is pixel (row :math:`i`, column :math:`j`)
    (``x = image.flatten(1).t()``), ``pos`` is ``(j, i, 0)``, ``shell`` is zero, and
    ``edge_index`` is :func:`~quest_geometric.geometry.graphs.lattice_graph` (exactly
    :math:`k` in-edges per node, sorted by target), cached per ``(H, W, k)``.

    Args:
        k (int, optional): Neighbours per pixel (``4``: 4-neighbourhood, ``8``:
            8-neighbourhood in the interior). (default: :obj:`8`)
        backend (str, optional): kNN backend used to build the template.
            (default: :obj:`'auto'`)
    """

    def __init__(self, k: int = 8, backend: str = "auto") -> None:
        self.k = check_positive_int(k, "'k'", where="ImageToLattice")
        self.backend = backend

    def template(self, height: int, width: int) -> Data:
        """Returns the cached lattice graph for ``height x width`` images; do not modify
        it in place."""
        return _lattice_template((height, width, self.k, self.backend))

    def forward(self, data: Union[Tensor, Data]) -> Data:
        image, extra = split_input(data, "ImageToLattice")
        t = self.template(image.size(1), image.size(2))
        x = image.flatten(1).t().contiguous()
        return to_data(x, t.pos, t.shell, t.edge_index, extra)

    def batch_call(self, images: Tensor, y: Optional[Tensor] = None, as_batch: bool = False
                   ) -> Union[list[Data], Batch]:
        r"""Transforms a stack of images at once, as
        :meth:`~quest_geometric.transforms.image_to_sphere.ImageToSphere.batch_call`."""
        images = check_images(images, y, where="ImageToLattice.batch_call")
        t = self.template(images.size(2), images.size(3))
        xs = images.flatten(2).transpose(1, 2)
        if as_batch:
            return template_batch(xs, t.pos, t.shell, t.edge_index, y)
        return [to_data(xs[b].contiguous(), t.pos, t.shell, t.edge_index,
                        {} if y is None else {"y": y[b:b + 1]}) for b in range(images.size(0))]

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(k={self.k})"


__all__ = ["ImageToLattice"]
