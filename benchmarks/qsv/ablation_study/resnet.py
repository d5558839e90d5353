r"""The CIFAR ResNet-20 of He et al. (2016), the convolutional baseline of the QSV benchmark."""
from __future__ import annotations

from typing import Any, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from quest_geometric._utils.checks import check_choice, check_int

__all__ = ["BasicBlock", "ResNet20"]

_SHORTCUTS = ("A", "B")


class BasicBlock(nn.Module):
    r"""The basic residual block of CIFAR ResNets: two :math:`3 \times 3` convolutions with
    batch normalisation and a shortcut,

    .. math::
        \mathbf{y} = \mathrm{ReLU}\bigl(\mathrm{BN}(\mathrm{conv}(\mathrm{ReLU}(
        \mathrm{BN}(\mathrm{conv}(\mathbf{x}))))) + \mathrm{shortcut}(\mathbf{x})\bigr).

    The shortcut is the identity when the shape is kept; when the block downsamples and
    widens, option ``'A'`` subsamples and zero-pads the new channels (no parameters), option
    ``'B'`` is a strided :math:`1 \times 1` convolution with batch norm (He et al., 2016).

    Args:
        in_planes (int): Input channels.
        planes (int): Output channels.
        stride (int, optional): Stride of the first convolution. (default: :obj:`1`)
        shortcut (str, optional): ``'A'`` or ``'B'``. (default: :obj:`'A'`)

    Shapes:
        - **input:** :math:`(B, C_{in}, H, W)`
        - **output:** :math:`(B, C_{out}, H / s, W / s)`
    """

    def __init__(self, in_planes: int, planes: int, stride: int = 1,
                 shortcut: str = "A") -> None:
        super().__init__()
        check_choice(shortcut, "'shortcut'", _SHORTCUTS, where="BasicBlock")
        self.in_planes, self.planes, self.stride = in_planes, planes, stride
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut_type = shortcut
        self.downsample = stride != 1 or in_planes != planes
        if self.downsample and shortcut == "B":
            self.shortcut: nn.Module = nn.Sequential(
                nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False),
                nn.BatchNorm2d(planes))
        else:
            self.shortcut = nn.Identity()

    def _shortcut(self, x: Tensor) -> Tensor:
        if not self.downsample or self.shortcut_type == "B":
            return self.shortcut(x)
        x = x[:, :, ::self.stride, ::self.stride]
        extra = self.planes - self.in_planes
        return F.pad(x, (0, 0, 0, 0, extra // 2, extra - extra // 2))

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self._shortcut(x))


class ResNet20(nn.Module):
    r"""The CIFAR ResNet-20 from the `"Deep Residual Learning for Image Recognition"
    <https://arxiv.org/abs/1512.03385>`_ paper (Sec. 4.2), the convolutional baseline of the
    QSV ablation table.

    A :math:`3 \times 3` convolution to 16 channels, three stages of three
    :class:`BasicBlock` s with 16, 32 and 64 channels (stages 2 and 3 halve the resolution),
    global average pooling and a linear classifier: :math:`6n + 2 = 20` weighted layers.
    With option ``'A'`` shortcuts (the paper's choice for CIFAR), 3 input channels and 10
    classes it has 269,722 parameters (``'B'``: 272,474). Weights are Kaiming-normal.

    Args:
        num_classes (int, optional): Number of classes. (default: :obj:`10`)
        in_channels (int, optional): Image channels. (default: :obj:`3`)
        shortcut (str, optional): ``'A'`` (zero-padded identity) or ``'B'`` (projection)
            for the downsampling shortcuts. (default: :obj:`'A'`)

    Shapes:
        - **input:** images :math:`(B, C, H, W)`, or an object with an ``image`` attribute of
          that shape (the image datasets with ``graph=None``)
        - **output:** logits :math:`(B, \text{num\_classes})`

    Example:
        >>> model = ResNet20(num_classes=10)
        >>> model(torch.randn(2, 3, 32, 32)).shape
        torch.Size([2, 10])
    """

    def __init__(self, num_classes: int = 10, in_channels: int = 3, shortcut: str = "A") -> None:
        super().__init__()
        check_int(num_classes, "'num_classes'", 1, where="ResNet20")
        check_int(in_channels, "'in_channels'", 1, where="ResNet20")
        check_choice(shortcut, "'shortcut'", _SHORTCUTS, where="ResNet20")
        self.num_classes = num_classes
        self.in_channels = in_channels
        self.shortcut = shortcut
        self.conv1 = nn.Conv2d(in_channels, 16, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        stages = []
        in_planes = 16
        for planes, stride in ((16, 1), (32, 2), (64, 2)):
            blocks = []
            for b in range(3):
                blocks.append(BasicBlock(in_planes, planes, stride if b == 0 else 1, shortcut))
                in_planes = planes
            stages.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3 = stages
        self.linear = nn.Linear(64, num_classes)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        r"""Kaiming-normal weights, zero biases, unit/zero batch norms (statistics reset)."""
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.kaiming_normal_(m.weight)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.BatchNorm2d):
                m.reset_parameters()

    def forward(self, x: Union[Tensor, Any]) -> Tensor:
        r"""Logits ``[B, num_classes]`` of images ``x`` ``[B, C, H, W]`` (or of ``x.image``)."""
        if not isinstance(x, Tensor):
            image = getattr(x, "image", None)
            if not isinstance(image, Tensor):
                raise TypeError("ResNet20 expects an image tensor [B, C, H, W] or a batch with an "
                                f"'image' attribute (got {type(x).__name__})")
            x = image
        if x.dim() != 4 or x.size(1) != self.in_channels:
            raise ValueError(f"ResNet20 expects images of shape [B, {self.in_channels}, H, W] "
                             f"(got {tuple(x.shape)})")
        if not x.is_floating_point():
            raise ValueError(f"ResNet20 expects floating-point images (got {x.dtype})")
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer3(self.layer2(self.layer1(out)))
        out = torch.flatten(F.adaptive_avg_pool2d(out, 1), 1)
        return self.linear(out)

    def parameter_count(self) -> int:
        """The number of learnable parameters."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def __repr__(self) -> str:
        extra = "" if self.shortcut == "A" else ", shortcut='B'"
        return (f"{self.__class__.__name__}(num_classes={self.num_classes}, "
                f"in_channels={self.in_channels}{extra})")
