r"""Image-level augmentation and normalisation, applied before an image becomes a graph.

The usual CIFAR training pipeline (random crop with zero padding, random horizontal flip,
per-channel normalisation) as PyG :class:`~torch_geometric.transforms.BaseTransform` objects.
They act on the ``image`` attribute of a :class:`~torch_geometric.data.Data` (a ``[C, H, W]``
tensor), or on a bare ``[C, H, W]`` tensor, return the same kind of object and never modify
the input in place, so they compose with :class:`~torch_geometric.transforms.Compose` in
front of :class:`~quest_geometric.transforms.image_to_sphere.ImageToSphere` or
:class:`~quest_geometric.transforms.image_to_lattice.ImageToLattice`: augmentation happens on
the pixel grid.

**Randomness.** :class:`RandomCropPad` and :class:`RandomHorizontalFlip` draw from PyTorch's
*global* generator, as torchvision's transforms do, so seeding the process
(:func:`torch.manual_seed`) makes a run reproducible, also in a
:class:`~torch.utils.data.DataLoader` with workers (seeded from the main process).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Union

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.data.datapipes import functional_transform
from torch_geometric.transforms import BaseTransform

from quest_geometric._utils.checks import check_all_finite, check_int, check_real, describe, fail

__all__ = ["RandomCropPad", "RandomHorizontalFlip", "NormalizeImage"]

ImageLike = Union[Tensor, Data]


def _arg(data: ImageLike) -> str:
    """The name of the image argument in messages: ``data`` or ``data.image``."""
    return "data" if isinstance(data, Tensor) else "data.image"


def _get_image(data: ImageLike, name: str) -> Tensor:
    """The ``[C, H, W]`` image of ``data`` (a tensor or a Data with ``image``), checked:
    shape, and finite values (a NaN pixel would pass through a crop or a flip unnoticed and
    spread through the first layer that mixes pixels)."""
    if isinstance(data, Tensor):
        image = data
    elif isinstance(data, Data):
        image = getattr(data, "image", None)
        if image is None:
            raise fail(ValueError, name, "data", "a [C, H, W] tensor or a Data with an 'image' "
                       "attribute", got_text="a Data without 'image'")
        if not isinstance(image, Tensor):
            raise fail(TypeError, name, "data.image", "a [C, H, W] tensor", image)
    else:
        raise fail(TypeError, name, "data", "a [C, H, W] tensor or a Data with an 'image' "
                   "attribute", data)
    if image.dim() != 3:
        hint = ("; for a single-channel [H, W] image pass image[None] to add the channel axis"
                if image.dim() == 2 else "")
        raise fail(ValueError, name, _arg(data), "of shape [C, H, W]", image, hint=hint)
    check_all_finite(((_arg(data), image),), where=name)
    return image


def _put_image(data: ImageLike, image: Tensor) -> ImageLike:
    """Return ``image`` in the form ``data`` came in (``data`` is already a shallow copy)."""
    if isinstance(data, Tensor):
        return image
    data.image = image
    return data


@functional_transform("random_crop_pad")
class RandomCropPad(BaseTransform):
    r"""Crops a random window of a zero-padded image (torchvision's ``RandomCrop(size,
    padding)``): the image is padded with ``padding`` zeros on each side and a window of
    ``size`` is cut at a position drawn uniformly (:func:`torch.randint`) from all that fit:

    .. math::
        \tilde{x} = \mathrm{pad}_p(x) \in \mathbb{R}^{C \times (H + 2p) \times (W + 2p)},
        \qquad
        y = \tilde{x}[:, i:i + h, j:j + w],
        \quad i \sim \mathcal{U}\{0, \ldots, H + 2p - h\},\;
        j \sim \mathcal{U}\{0, \ldots, W + 2p - w\}.

    ``RandomCropPad(32, padding=4)`` on a CIFAR image is the standard translation
    augmentation of up to 4 pixels.  Zero is the padding value of the tensor as given: apply
    this transform to the raw image *before* :class:`NormalizeImage`, as torchvision does,
    so the border is black.  Any dtype is accepted.

    Args:
        size (int or (int, int)): output height and width ``(h, w)``; an int means a square
            ``size x size`` window.
        padding (int): number of zero pixels added on each side before cropping.
            (default: ``4``)
    """

    def __init__(self, size: Union[int, Sequence[int]], padding: int = 4) -> None:
        what = "a positive int or a pair of positive ints (height, width)"
        if isinstance(size, int) and not isinstance(size, bool):
            size = (size, size)
        if not isinstance(size, Sequence) or isinstance(size, str) or any(
                isinstance(s, bool) or not isinstance(s, int) for s in size):
            raise fail(TypeError, "RandomCropPad", "size", what, size)
        if len(size) != 2 or any(s < 1 for s in size):
            raise fail(ValueError, "RandomCropPad", "size", what, size)
        self.size: tuple[int, int] = (int(size[0]), int(size[1]))
        self.padding = check_int(padding, "padding", 0, where="RandomCropPad")

    def forward(self, data: ImageLike) -> ImageLike:
        image = _get_image(data, "RandomCropPad")
        h, w = self.size
        p = self.padding
        padded_h, padded_w = image.size(1) + 2 * p, image.size(2) + 2 * p
        if h > padded_h or w > padded_w:
            raise fail(ValueError, "RandomCropPad", _arg(data), f"an image of at least "
                       f"{(h - 2 * p, w - 2 * p)} pixels (crop size {self.size}, padding {p})",
                       image)
        i = int(torch.randint(0, padded_h - h + 1, (1,)))
        j = int(torch.randint(0, padded_w - w + 1, (1,)))
        out = self.crop(image, i, j)
        return _put_image(data, out)

    def crop(self, image: Tensor, top: int, left: int) -> Tensor:
        r"""The deterministic part: the ``size`` window at ``(top, left)`` of the padded image.

        Args:
            image (Tensor): the ``[C, H, W]`` image.
            top (int): row of the window's first pixel in the padded image.
            left (int): column of the window's first pixel in the padded image.

        Returns:
            Tensor: the ``[C, h, w]`` window (a new tensor).
        """
        h, w = self.size
        p = self.padding
        where = "RandomCropPad.crop"
        if not isinstance(image, Tensor):
            raise fail(TypeError, where, "image", "a [C, H, W] tensor", image)
        check_int(top, "top", where=where)
        check_int(left, "left", where=where)
        padded = F.pad(image, (p, p, p, p)) if p > 0 else image
        for arg, pos, room in (("top", top, padded.size(1) - h),
                               ("left", left, padded.size(2) - w)):
            if not 0 <= pos <= room:
                raise fail(ValueError, where, arg, f"in [0, {room}] (a {self.size} window in "
                           f"the padded image {tuple(padded.shape[1:])})", pos)
        return padded[:, top:top + h, left:left + w].clone()

    def __repr__(self) -> str:
        h, w = self.size
        size = h if h == w else self.size
        return f"{self.__class__.__name__}({size}, padding={self.padding})"


@functional_transform("random_horizontal_flip")
class RandomHorizontalFlip(BaseTransform):
    r"""Mirrors an image left-to-right with probability ``p`` (torchvision's
    ``RandomHorizontalFlip``; the coin is :func:`torch.rand`; any dtype):

    .. math::
        y[c, r, s] = \begin{cases} x[c, r, W - 1 - s] & \text{with probability } p, \\
        x[c, r, s] & \text{otherwise.} \end{cases}

    Args:
        p (float): probability of flipping, in :math:`[0, 1]`. (default: ``0.5``)
    """

    def __init__(self, p: float = 0.5) -> None:
        if not 0.0 <= check_real(p, "p", where="RandomHorizontalFlip") <= 1.0:
            raise fail(ValueError, "RandomHorizontalFlip", "p", "a number in [0, 1]", p)
        self.p = float(p)

    def forward(self, data: ImageLike) -> ImageLike:
        image = _get_image(data, "RandomHorizontalFlip")
        flip = float(torch.rand(1)) < self.p
        return _put_image(data, torch.flip(image, dims=(2,)) if flip else image.clone())

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(p={self.p})"


@functional_transform("normalize_image")
class NormalizeImage(BaseTransform):
    r"""Normalises each channel of a floating-point image by a mean and a standard deviation
    (torchvision's ``Normalize``):

    .. math::
        y[c, r, s] = \frac{x[c, r, s] - \mu_c}{\sigma_c}.

    Args:
        mean (float or Sequence[float]): per-channel means :math:`\mu_c` (one value for all
            channels, or one per channel).
        std (float or Sequence[float]): per-channel standard deviations :math:`\sigma_c > 0`
            (one value, or one per channel).
    """

    def __init__(self, mean: Union[float, Sequence[float]],
                 std: Union[float, Sequence[float]]) -> None:
        self.mean = self._as_tuple(mean, "mean")
        self.std = self._as_tuple(std, "std")
        if any(s <= 0.0 for s in self.std):
            raise fail(ValueError, "NormalizeImage", "std", "> 0 in every channel", self.std)
        if len(self.mean) != len(self.std) and 1 not in (len(self.mean), len(self.std)):
            raise fail(ValueError, "NormalizeImage", "std", f"of the length of 'mean' "
                       f"({len(self.mean)} values), or either of them a single value",
                       got_text=f"{len(self.std)} values")

    @staticmethod
    def _as_tuple(value: Union[float, Sequence[float]], arg: str) -> tuple[float, ...]:
        if isinstance(value, Tensor):
            value = value.flatten().tolist()
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = (value,)
        what = "a number or a non-empty sequence of numbers"
        if not isinstance(value, Sequence) or isinstance(value, str) or any(
                isinstance(v, bool) or not isinstance(v, (int, float)) for v in value):
            raise fail(TypeError, "NormalizeImage", arg, what, value)
        if len(value) == 0:
            raise fail(ValueError, "NormalizeImage", arg, what, value)
        out = tuple(float(v) for v in value)
        if not all(math.isfinite(v) for v in out):
            raise fail(ValueError, "NormalizeImage", arg, "finite", out)
        return out

    def forward(self, data: ImageLike) -> ImageLike:
        image = _get_image(data, "NormalizeImage")
        if not image.is_floating_point():
            raise fail(TypeError, "NormalizeImage", _arg(data), "a floating-point image",
                       image, hint="; convert it first (for example image.float() / 255)")
        channels = image.size(0)
        for arg, values in (("mean", self.mean), ("std", self.std)):
            if len(values) not in (1, channels):
                raise fail(ValueError, "NormalizeImage", _arg(data), f"an image with "
                           f"{len(values)} channels (one per value of '{arg}')",
                           got_text=f"{channels} channels ({describe(image)})")

        mean, std = (torch.tensor(v, dtype=image.dtype, device=image.device).view(-1, 1, 1)
                     for v in (self.mean, self.std))
        return _put_image(data, (image - mean) / std)

    def __repr__(self) -> str:
        def fmt(values: tuple[float, ...]) -> str:
            text = ", ".join(f"{v:g}" for v in values)
            return text if len(values) == 1 else f"({text})"

        return f"{self.__class__.__name__}(mean={fmt(self.mean)}, std={fmt(self.std)})"
