"""MegEngine's transposed-convolution-BatchNorm modules (`megengine.module.conv_transpose_bn`):
ConvTransposeBn2d and ConvTransposeBnRelu2d.

In float they compute what their parts do; quantization-aware training folds the BatchNorm into
the transposed convolution's weight (`eager.module.qat`). They hold a `conv_transpose2d` and a
`bn` submodule, as in MegEngine, so its state dicts load.
"""

from __future__ import annotations

from .. import functional as F
from ..core.tensors import Tensor
from ._params import Ints
from .batchnorm import BatchNorm2d
from .conv import ConvTranspose2d
from .module import Module


class _ConvTransposeBnActivation2d(Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: Ints, stride: Ints = 1,
                 padding: Ints = 0, output_padding: Ints = 0, dilation: Ints = 1,
                 groups: int = 1, bias: bool = True, conv_mode: str = "cross_correlation",
                 compute_mode: str = "default", eps: float = 1e-5, momentum: float = 0.9,
                 affine: bool = True, track_running_stats: bool = True):
        super().__init__()
        self.conv_transpose2d = ConvTranspose2d(
            in_channels, out_channels, kernel_size, stride, padding, output_padding, dilation,
            groups, bias, conv_mode, compute_mode)
        self.bn = BatchNorm2d(out_channels, eps, momentum, affine, track_running_stats)


class ConvTransposeBn2d(_ConvTransposeBnActivation2d):
    """bn(conv_transpose2d(x)), a `ConvTranspose2d` then a `BatchNorm2d`: MegEngine's arguments
    of both."""

    def forward(self, x: Tensor) -> Tensor:
        return self.bn(self.conv_transpose2d(x))


class ConvTransposeBnRelu2d(_ConvTransposeBnActivation2d):
    """relu(bn(conv_transpose2d(x))): MegEngine's arguments of `ConvTranspose2d` and
    `BatchNorm2d`."""

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(self.bn(self.conv_transpose2d(x)))
