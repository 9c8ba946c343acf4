"""Image layers of MegEngine beyond layers.py's and simple.py's: InstanceNorm, Conv3d,
AdaptiveMaxPool2d, Pad, PixelShuffle and LocalResponseNorm."""

from __future__ import annotations

from typing import Any

from .. import functional as F
from ..creation import ones, zeros
from ..tensors import Parameter, Tensor
from .layers import Ints, _ConvNd
from .module import Module


class InstanceNorm(Module):
    """Instance normalization of NCHW input (`F.instance_norm`), with a per-channel `weight`
    (ones) and `bias` (zeros) of shape (C,) when `affine`."""

    def __init__(self, num_channels: int, eps: float = 1e-5, affine: bool = True):
        super().__init__()
        self.num_channels, self.eps, self.affine = num_channels, eps, affine
        self.weight = Parameter(ones(num_channels)) if affine else None
        self.bias = Parameter(zeros(num_channels)) if affine else None

    def forward(self, x: Tensor) -> Tensor:
        return F.instance_norm(x, self.affine, self.weight, self.bias, self.eps)

    def _extra_repr(self) -> str:
        return f"channels={self.num_channels}, eps={self.eps}, affine={self.affine}"


class Conv3d(_ConvNd):
    """3-d convolution over NCDHW; weight (out, in/groups, kd, kh, kw), bias (out,)."""

    _n = 3

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Ints, stride: Ints = 1,
                 padding: Ints = 0, dilation: Ints = 1, groups: int = 1, bias: bool = True,
                 conv_mode: str = "cross_correlation"):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias)
        self.conv_mode = conv_mode

    def forward(self, x: Tensor) -> Tensor:
        return F.conv3d(x, self.weight, self.bias, self.stride, self.padding, self.dilation,
                        self.groups, self.conv_mode)


class AdaptiveMaxPool2d(Module):
    """Max pooling of NCHW input to the output size `oshp` (`F.adaptive_max_pool2d`)."""

    def __init__(self, oshp: Ints):
        super().__init__()
        self.oshp = oshp

    def forward(self, x: Tensor) -> Tensor:
        return F.adaptive_max_pool2d(x, self.oshp)

    def _extra_repr(self) -> str:
        return f"oshp={self.oshp}"


class Pad(Module):
    """`F.pad` as a layer: (before, after) widths per axis, mode "constant" (with
    `constant_val`), "reflect" or "replicate"."""

    def __init__(self, pad_width: Any, mode: str = "constant", constant_val: float = 0.0):
        super().__init__()
        self.pad_width, self.mode, self.pad_val = pad_width, mode, constant_val

    def forward(self, x: Tensor) -> Tensor:
        return F.pad(x, self.pad_width, self.mode, self.pad_val)

    def _extra_repr(self) -> str:
        return f"pad_width={self.pad_width}, mode={self.mode!r}"


class PixelShuffle(Module):
    """(..., C * r * r, H, W) -> (..., C, H * r, W * r), r = `upscale_factor`
    (`F.pixel_shuffle`)."""

    def __init__(self, upscale_factor: int):
        super().__init__()
        self.upscale_factor = upscale_factor

    def forward(self, x: Tensor) -> Tensor:
        return F.pixel_shuffle(x, self.upscale_factor)

    def _extra_repr(self) -> str:
        return f"upscale_factor={self.upscale_factor}"


class LocalResponseNorm(Module):
    """Local response normalization across channels (`F.local_response_norm`)."""

    def __init__(self, kernel_size: int = 5, k: float = 2.0, alpha: float = 1e-4,
                 beta: float = 0.75):
        super().__init__()
        self.kernel_size, self.k, self.alpha, self.beta = kernel_size, k, alpha, beta

    def forward(self, x: Tensor) -> Tensor:
        return F.local_response_norm(x, self.kernel_size, self.k, self.alpha, self.beta)

    def _extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, k={self.k}, alpha={self.alpha}, beta={self.beta}"
