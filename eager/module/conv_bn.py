"""MegEngine's convolution-BatchNorm modules (`megengine.module.conv_bn`): ConvBn2d and
ConvBnRelu2d.

In float training and inference they compute exactly what their parts do; MegEngine's
quantization workflow swaps them for fused quantized versions. ConvRelu2d is a Conv2d (its
state-dict keys are `weight` and `bias`); the other two hold a `conv` and a `bn` submodule
(`conv.weight`, `bn.running_mean`, ...), as in MegEngine.
"""

from __future__ import annotations

from .. import functional as F
from ..core.tensors import Tensor
from ._params import Ints
from .batchnorm import BatchNorm2d
from .conv import Conv2d
from .module import Module


class _ConvBnActivation2d(Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: Ints, stride: Ints = 1,
                 padding: Ints = 0, dilation: Ints = 1, groups: int = 1, bias: bool = True,
                 conv_mode: str = "cross_correlation", compute_mode: str = "default",
                 eps: float = 1e-5, momentum: float = 0.9, affine: bool = True,
                 track_running_stats: bool = True, padding_mode: str = "zeros"):
        super().__init__()
        self.conv = Conv2d(in_channels, out_channels, kernel_size, stride, padding, dilation,
                           groups, bias, conv_mode, compute_mode, padding_mode)
        self.bn = BatchNorm2d(out_channels, eps, momentum, affine, track_running_stats)


class ConvBn2d(_ConvBnActivation2d):
    """bn(conv(x)), a `Conv2d` then a `BatchNorm2d`: MegEngine's arguments of both."""

    def forward(self, x: Tensor) -> Tensor:
        return self.bn(self.conv(x))


class ConvBnRelu2d(_ConvBnActivation2d):
    """relu(bn(conv(x))), a `Conv2d`, a `BatchNorm2d` and a relu: MegEngine's arguments of
    the first two."""

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(self.bn(self.conv(x)))
