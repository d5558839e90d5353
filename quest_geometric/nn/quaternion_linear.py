r"""Hamilton-product (quaternion-structured) linear layer (:class:`QuaternionLinear`)."""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn import Parameter

from quest_geometric._utils.checks import check_all_finite, check_int, check_tensor, fail
from quest_geometric.quaternion import multiply

__all__ = ["QuaternionLinear"]


class QuaternionLinear(nn.Module):
    r"""The quaternion (Hamilton-product) linear layer of quaternion neural networks
    (`Parcollet et al., "Quaternion Recurrent Neural Networks" (ICLR 2019)
    <https://arxiv.org/abs/1806.04418>`_), used by QSV for channel mixing that keeps the
    4-channel grouping of :class:`~quest_geometric.nn.qsv_conv.QSVConv`.

    The channels are read as quaternions, four consecutive channels each, real part first:
    :math:`\mathbf{x} = (x_1, \dots, x_{n})` with :math:`n =` :obj:`in_channels / 4`.  Output
    quaternion :math:`o` is a sum of Hamilton products with learned quaternion weights
    :math:`W_{oi} = W_r[o, i] + W_i[o, i]\,i + W_j[o, i]\,j + W_k[o, i]\,k`,

    .. math::
        y_o = \sum_{i=1}^{n} W_{oi} \otimes x_i + b_o,

    the real linear map with the Hamilton block matrix (written per component; in memory
    :math:`\mathbf{W}[4o + r, 4i + s]` is entry :math:`(r, s)` of the :math:`4 \times 4`
    matrix of left multiplication by :math:`W_{oi}`)

    .. math::
        \mathbf{W} = \begin{pmatrix}
        W_r & -W_i & -W_j & -W_k \\
        W_i & W_r & -W_k & W_j \\
        W_j & W_k & W_r & -W_i \\
        W_k & -W_j & W_i & W_r
        \end{pmatrix}.

    Its :math:`F_{in} F_{out} / 4` weights are four times fewer than
    :class:`torch.nn.Linear`'s; the bias is a full :math:`F_{out}`-vector.  The weights are
    initialised Glorot-uniform with the fans of the assembled matrix (variance
    :math:`2 / (F_{in} + F_{out})` per real entry, as the quaternion initialisation of
    Parcollet et al.), the bias to zero.

    Args:
        in_channels (int): Size of each input sample, a positive multiple of 4.
        out_channels (int): Size of each output sample, a positive multiple of 4.
        bias (bool, optional): If set to :obj:`False`, the layer will not learn an additive
            bias. (default: :obj:`True`)

    Shapes:
        - **input:** :math:`(*, F_{in})`
        - **output:** :math:`(*, F_{out})`

    Example:
        >>> lin = QuaternionLinear(64, 32)
        >>> lin(torch.randn(10, 64)).shape
        torch.Size([10, 32])
        >>> sum(p.numel() for p in lin.parameters())  # 64 * 32 / 4 + 32
        544
    """

    def __init__(self, in_channels: int, out_channels: int, bias: bool = True) -> None:
        super().__init__()
        for name, value in (("in_channels", in_channels), ("out_channels", out_channels)):
            check_int(value, name, 4, where="QuaternionLinear")
            if value % 4 != 0:
                raise fail(ValueError, "QuaternionLinear", name, "a positive multiple of 4 "
                           "(channels are grouped in quaternions)", value)
        if not isinstance(bias, bool):
            raise fail(TypeError, "QuaternionLinear", "bias", "a bool", bias)
        self.in_channels = in_channels
        self.out_channels = out_channels
        #: The weight components ``[W_r, W_i, W_j, W_k]``, shape
        #: ``[4, out_channels // 4, in_channels // 4]``.
        self.weight = Parameter(torch.empty(4, out_channels // 4, in_channels // 4))
        self.register_parameter("bias", Parameter(torch.empty(out_channels)) if bias else None)
        # basis[c, r, s]: entry (r, s) of left multiplication by the unit quaternion e_c,
        # column s being the Hamilton product e_c e_s.
        eye = torch.eye(4)
        self.register_buffer("basis", multiply(eye[:, None], eye[None, :]).transpose(1, 2),
                             persistent=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        r"""Glorot-uniform weights (fans of the assembled matrix) and zero bias."""
        bound = math.sqrt(6.0 / (self.in_channels + self.out_channels))
        with torch.no_grad():
            self.weight.uniform_(-bound, bound)
            if self.bias is not None:
                self.bias.zero_()

    def full_weight(self) -> Tensor:
        r"""The assembled real weight matrix :math:`\mathbf{W}`, shape
        ``[out_channels, in_channels]`` (differentiable)."""
        basis = self.basis.to(dtype=self.weight.dtype)
        w = torch.einsum("coi,crs->oris", self.weight, basis)
        return w.reshape(self.out_channels, self.in_channels)

    def forward(self, x: Tensor) -> Tensor:
        r"""Applies :math:`y = \mathbf{W} x + b` to the last dimension of :obj:`x`.

        Args:
            x (torch.Tensor): Input ``[*, in_channels]``.

        Returns:
            torch.Tensor: ``[*, out_channels]``.

        Raises:
            TypeError: if :obj:`x` is not a tensor or has another dtype than the parameters
                (outside :func:`torch.autocast`).
            ValueError: if its last dimension is not :obj:`in_channels`, or it holds a NaN
                or an infinity (eager mode; a NaN would fill its whole output row).
        """
        check_tensor(x, "x", where="QuaternionLinear")
        if x.dim() == 0 or x.size(-1) != self.in_channels:
            raise fail(ValueError, "QuaternionLinear", "x", f"a tensor of {self.in_channels} "
                       "channels in its last dimension", x)
        if x.dtype != self.weight.dtype and not torch.is_autocast_enabled(x.device.type):
            raise TypeError(
                f"QuaternionLinear: 'x' must be of the dtype of the layer's parameters "
                f"({self.weight.dtype}), got {x.dtype}; convert the input with "
                f"x.to({self.weight.dtype}) or the layer with layer.to({x.dtype})")
        check_all_finite((("x", x),), where="QuaternionLinear")
        return torch.nn.functional.linear(x, self.full_weight(), self.bias)

    def __repr__(self) -> str:
        extra = "" if self.bias is not None else ", bias=False"
        return f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}{extra})"
