r"""The image-to-graph helpers shared by
:class:`~quest_geometric.transforms.image_to_sphere.ImageToSphere` and
:class:`~quest_geometric.transforms.image_to_lattice.ImageToLattice` (private): the
:class:`~torch_geometric.data.Data` of one image on a template graph, and the
:class:`~torch_geometric.data.Batch` of many images on one template."""
from __future__ import annotations

from typing import Optional, Union

import torch
from torch import Tensor
from torch_geometric.data import Batch, Data

from quest_geometric._utils.checks import check_image, fail

__all__ = ["split_input", "to_data", "template_batch"]


def split_input(data: Union[Tensor, Data], where: str) -> tuple[Tensor, dict]:
    """Returns the image and the attributes to carry over (everything but the image)."""
    if isinstance(data, Tensor):
        return check_image(data, where=where), {}
    if isinstance(data, Data):
        if "image" not in data:
            raise ValueError(f"{where}: 'data' must be a [C, H, W] tensor or a Data with 'image', "
                             f"got a Data without 'image'")
        image = check_image(data.image, "data.image", where=where)
        extra = {key: value for key, value in data.items()
                 if key not in ("image", "x", "pos", "shell", "edge_index", "num_nodes")}
        return image, extra
    raise fail(TypeError, where, "data", "a [C, H, W] tensor or a Data", data)


def to_data(x: Tensor, pos: Tensor, shell: Tensor, edge_index: Tensor, extra: dict) -> Data:
    device = x.device  # the template lives on the CPU; the graph follows the image
    data = Data(x=x, pos=pos.to(device, copy=True), shell=shell.to(device, copy=True),
                edge_index=edge_index.to(device, copy=True))
    for key, value in extra.items():
        data[key] = value
    return data


def template_batch(xs: Tensor, pos: Tensor, shell: Tensor, edge_index: Tensor,
                   y: Optional[Tensor]) -> Batch:
    """Builds the :class:`Batch` of ``B`` copies of one template graph without collating
    ``B`` separate objects (the result equals ``Batch.from_data_list``; tested)."""
    num_graphs, num_nodes = xs.size(0), pos.size(0)
    num_edges = edge_index.size(1)
    device = xs.device
    graphs = torch.arange(num_graphs, device=device)
    node_ptr = torch.arange(num_graphs + 1, device=device) * num_nodes
    edge_index = edge_index.to(device)
    data = {
        "x": xs.reshape(num_graphs * num_nodes, -1),
        "edge_index": (edge_index.repeat(1, num_graphs)
                       + (graphs * num_nodes).repeat_interleave(num_edges)),
        "pos": pos.to(device).repeat(num_graphs, 1),
        "shell": shell.to(device).repeat(num_graphs),
    }
    if y is not None:
        data["y"] = y
    batch = Batch(_base_cls=Data, **data)
    batch.batch = graphs.repeat_interleave(num_nodes)
    batch.ptr = node_ptr
    zeros = torch.zeros(num_graphs, dtype=torch.long, device=device)
    batch._num_graphs = num_graphs
    batch._slice_dict = {"x": node_ptr, "edge_index": node_ptr // num_nodes * num_edges,
                         "pos": node_ptr, "shell": node_ptr}
    batch._inc_dict = {"x": zeros, "edge_index": graphs * num_nodes, "pos": zeros,
                       "shell": zeros}
    if y is not None:
        batch._slice_dict["y"] = torch.arange(num_graphs + 1, device=device)
        batch._inc_dict["y"] = zeros
    return batch
