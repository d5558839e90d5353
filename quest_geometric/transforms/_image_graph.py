r"""The image-to-graph helpers shared by
:class:`~quest_geometric.transforms.image_to_sphere.ImageToSphere` and
:class:`~quest_geometric.transforms.image_to_lattice.ImageToLattice` (private): input checks,
the :class:`~torch_geometric.data.Data` of one image on a template graph, and the
:class:`~torch_geometric.data.Batch` of many images on one template."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional, Union

import torch
from torch import Tensor
from torch_geometric.data import Batch, Data

__all__ = ["check_image", "check_images", "split_input", "to_data", "template_batch"]

_CHANNEL_COUNTS = (1, 2, 3, 4)


def looks_channels_last(shape: Sequence[int]) -> bool:
    """``[..., H, W, C]`` with few channels last and a spatial size first (an image as
    loaded by PIL / NumPy / matplotlib)."""
    return shape[-1] in _CHANNEL_COUNTS and shape[-3] not in _CHANNEL_COUNTS


def check_image(image: Any, name: str = "image") -> Tensor:
    if not isinstance(image, Tensor):
        raise TypeError(f"'{name}' must be a Tensor (got {type(image).__name__})")
    shape = tuple(image.shape)
    if image.dim() == 4:
        raise ValueError(
            f"'{name}' must have shape [C, H, W] (got {shape}, a batch [B, C, H, W]); call "
            "transform.batch_call(images) for a batch, or transform it image by image"
        )
    if image.dim() == 2:
        raise ValueError(
            f"'{name}' must have shape [C, H, W] (got {shape}, a single-channel [H, W] "
            f"image?); pass {name}[None] to add the channel axis"
        )
    if image.dim() != 3:
        raise ValueError(f"'{name}' must have shape [C, H, W] (got {shape})")
    if looks_channels_last(shape):
        raise ValueError(
            f"'{name}' must have shape [C, H, W] (got {shape}, which looks channels-last "
            f"[H, W, C]); pass {name}.permute(2, 0, 1)"
        )
    return as_float(image, name)


def as_float(image: Tensor, name: str) -> Tensor:
    r"""Floating-point images pass unchanged (their range is the caller's); ``uint8`` images
    are rescaled to :math:`[0, 1]` by :math:`x / 255`; other integer or boolean images are
    refused (their range is unknown)."""
    if image.dtype == torch.uint8:
        image = image.to(torch.get_default_dtype()).div_(255.0)
    elif not image.is_floating_point():
        raise ValueError(
            f"'{name}' has dtype {image.dtype}: pass a floating-point image, or uint8 (which "
            "is rescaled to [0, 1]); convert other integer images to float in the range you "
            "want first"
        )
    if not bool(torch.isfinite(image).all()):
        raise ValueError(f"'{name}' holds non-finite values (NaN or inf)")
    return image


def check_images(images: Any, y: Optional[Tensor]) -> Tensor:
    """Validate a ``[B, C, H, W]`` image batch (and its targets) for ``batch_call``."""
    if not isinstance(images, Tensor) or images.dim() != 4:
        shape = tuple(images.shape) if isinstance(images, Tensor) else type(images)
        hint = ""
        if isinstance(images, Tensor) and images.dim() == 3:
            hint = ("; for one image [C, H, W] call the transform itself, or pass "
                    "images.unsqueeze(0)")
        raise ValueError(f"'images' must have shape [B, C, H, W] (got {shape}){hint}")
    if looks_channels_last(tuple(images.shape)):
        raise ValueError(
            f"'images' must have shape [B, C, H, W] (got {tuple(images.shape)}, which looks "
            "channels-last [B, H, W, C]); pass images.permute(0, 3, 1, 2)"
        )
    images = as_float(images, "images")
    if y is not None and (not isinstance(y, Tensor) or y.size(0) != images.size(0)):
        raise ValueError("'y' must be a Tensor with one entry per image")
    return images


def split_input(data: Union[Tensor, Data]) -> tuple[Tensor, dict]:
    """Returns the image and the attributes to carry over (everything but the image)."""
    if isinstance(data, Tensor):
        return check_image(data), {}
    if isinstance(data, Data):
        if "image" not in data:
            raise ValueError("'data' must be a [C, H, W] Tensor or a Data with 'image'")
        image = check_image(data.image, "data.image")
        extra = {key: value for key, value in data.items()
                 if key not in ("image", "x", "pos", "shell", "edge_index", "num_nodes")}
        return image, extra
    raise TypeError(f"'data' must be a Tensor or a Data (got {type(data).__name__})")


def to_data(x: Tensor, pos: Tensor, shell: Tensor, edge_index: Tensor,
             extra: dict) -> Data:
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
