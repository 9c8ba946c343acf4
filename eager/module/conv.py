"""Convolutions (MegEngine's `megengine.module.conv`): Conv1d, Conv2d, Conv3d, ConvTranspose2d
and the fused ConvRelu2d and ConvTransposeRelu2d.

Parameters are stored in MegEngine's shapes, so its state dicts and optimizer checkpoints load
by position: a grouped convolution's weight (`groups > 1`) has a leading groups axis,
(groups, out/groups, in/groups, *kernel), or (groups, in/groups, out/groups, *kernel)
transposed; a bias is (1, out, 1, ...). PyTorch's flat weights and (out,) biases load into
them too (`_load_layouts`). Weights start as MegEngine's, N(0, 1 / fan_in), and
biases at zero.
"""

from __future__ import annotations

import math
from typing import Any

from .. import functional as F
from ..core.errors import OpArgumentError
from ..core.tensors import Tensor
from ..serialization import layouts
from . import init
from ._params import Ints, _bias, _tuple, _weight
from .module import Module


class _ConvNd(Module):
    _n = 2

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Ints, stride: Ints = 1,
                 padding: Ints = 0, dilation: Ints = 1, groups: int = 1, bias: bool = True):
        super().__init__()
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"{type(self).__name__}: channels {in_channels} -> {out_channels} "
                             f"are not divisible by groups={groups}")
        n = self._n
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size, self.stride = _tuple(kernel_size, n), _tuple(stride, n)
        self.padding, self.dilation = _tuple(padding, n), _tuple(dilation, n)
        shape, fan_in = self._weight_shape()
        self.weight = _weight(shape, fan_in)
        if groups > 1:
            init.mark_grouped(self.weight)
        # MegEngine's layout, (1, out, 1, ...): its code and optimizer checkpoints rely on it
        self.bias = _bias((1, out_channels) + (1,) * n) if bias else None

    def _weight_shape(self) -> tuple[tuple[int, ...], int]:
        """The weight's shape, and the fan_in MegEngine draws it with: every input channel
        times the kernel's size, whatever the groups (so a depthwise weight starts small)."""
        cin_g = self.in_channels // self.groups
        return (_grouped(self.groups, self.out_channels, cin_g, self.kernel_size),
                self.in_channels * math.prod(self.kernel_size))

    def _load_layouts(self, state: dict[str, Any], prefix: str) -> None:
        """A grouped weight stored flat (PyTorch's), or a flat one grouped, of these groups."""
        super()._load_layouts(state, prefix)
        groups = self.groups
        # `getattr`: a reparametrisation (the zoo's spectral norm) may delete `weight`
        layouts.reshape(state, f"{prefix}weight", getattr(self, "weight", None),
                        lambda got, want: layouts.grouped(got, want) and
                        (got if len(got) > len(want) else want)[0] == groups)

    def _extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, padding={self.padding}")


def _grouped(groups: int, rows: int, cols: int, kernel: tuple[int, ...]) -> tuple[int, ...]:
    """A weight's shape as MegEngine stores it: (rows, cols, *kernel), or grouped,
    (groups, rows / groups, cols, *kernel); the functions take either."""
    if groups == 1:
        return (rows, cols, *kernel)
    return (groups, rows // groups, cols, *kernel)


class Conv1d(_ConvNd):
    """1-d convolution over (N, C, L); weight (out, in/groups, k)."""

    _n = 1

    def forward(self, x: Tensor) -> Tensor:
        return F.conv1d(x, self.weight, self.bias, self.stride, self.padding, self.dilation,
                        self.groups)


_PADDING_MODES = ("zeros", "reflect", "replicate")


class Conv2d(_ConvNd):
    """2-d convolution over NCHW; weight (out, in/groups, kh, kw).

    `padding_mode` fills the `padding` border with zeros, the mirror image of the edge rows
    ("reflect", the edge itself not repeated) or copies of the edge ("replicate"), as `F.pad`.
    `conv_mode` and `compute_mode` are `F.conv2d`'s.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Ints, stride: Ints = 1,
                 padding: Ints = 0, dilation: Ints = 1, groups: int = 1, bias: bool = True,
                 conv_mode: str = "cross_correlation", compute_mode: str = "default",
                 padding_mode: str = "zeros"):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias)
        self.conv_mode, self.compute_mode = conv_mode, compute_mode
        self.padding_mode = _padding_mode(padding_mode)

    def forward(self, x: Tensor) -> Tensor:
        return self.calc_conv(x, self.weight, self.bias)

    def calc_conv(self, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        """This convolution with `weight` and `bias` in place of its own (MegEngine's: a QAT
        module convolves with its fake-quantized or BatchNorm-folded weight)."""
        padding = self.padding
        if _padding_mode(self.padding_mode) != "zeros":
            (ph, pw), padding = padding, (0, 0)
            x = F.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), self.padding_mode)
        return F.conv2d(x, weight, bias, self.stride, padding, self.dilation,
                        self.groups, self.conv_mode, self.compute_mode)


def _padding_mode(mode: str) -> str:
    if mode not in _PADDING_MODES:
        raise OpArgumentError(f"Conv2d: padding_mode must be one of {_PADDING_MODES}, got "
                              f"{mode!r}")
    return mode


class _ConvTransposeNd(_ConvNd):
    """A transposed convolution: weight (in, out/groups, *kernel), and `output_padding`."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Ints, stride: Ints = 1,
                 padding: Ints = 0, output_padding: Ints = 0, dilation: Ints = 1, groups: int = 1,
                 bias: bool = True):
        self.output_padding = _tuple(output_padding, self._n)
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias)

    def _weight_shape(self) -> tuple[tuple[int, ...], int]:
        cout_g = self.out_channels // self.groups
        return (_grouped(self.groups, self.in_channels, cout_g, self.kernel_size),
                self.out_channels * math.prod(self.kernel_size))


class ConvTranspose2d(_ConvTransposeNd):
    """Transposed 2-d convolution over NCHW; weight (in, out/groups, kh, kw).

    `conv_mode` and `compute_mode` are MegEngine's arguments, kept so its code (and its QAT
    conversion) runs; the convolution is a cross-correlation, MegEngine's only mode for it.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Ints, stride: Ints = 1,
                 padding: Ints = 0, output_padding: Ints = 0, dilation: Ints = 1, groups: int = 1,
                 bias: bool = True, conv_mode: str = "cross_correlation",
                 compute_mode: str = "default"):
        if str(conv_mode).lower() != "cross_correlation":
            raise OpArgumentError(f"ConvTranspose2d: conv_mode must be 'cross_correlation', got "
                                  f"{conv_mode!r}")
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, output_padding,
                         dilation, groups, bias)
        self.conv_mode, self.compute_mode = conv_mode, compute_mode

    def forward(self, x: Tensor) -> Tensor:
        return self.calc_conv_transpose2d(x, self.weight, self.bias)

    def calc_conv_transpose2d(self, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        """This transposed convolution with `weight` and `bias` in place of its own
        (MegEngine's, for its QAT modules)."""
        return F.conv_transpose2d(x, weight, bias, self.stride, self.padding,
                                  self.output_padding, self.dilation, self.groups)


class Conv3d(_ConvNd):
    """3-d convolution over NCDHW; weight (out, in/groups, kd, kh, kw), bias (1, out, 1, 1, 1)."""

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


class ConvTranspose3d(_ConvTransposeNd):
    """Transposed 3-d convolution over NCDHW; weight (in, out/groups, kd, kh, kw)."""

    _n = 3

    def forward(self, x: Tensor) -> Tensor:
        return F.conv_transpose3d(x, self.weight, self.bias, self.stride, self.padding,
                                  self.output_padding, self.dilation, self.groups)


class ConvRelu2d(Conv2d):
    """relu(Conv2d(x)): the arguments and parameters of `Conv2d`."""

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(super().forward(x))


class ConvTransposeRelu2d(ConvTranspose2d):
    """relu(ConvTranspose2d(x)): the arguments and parameters of `ConvTranspose2d`."""

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(super().forward(x))


class DeformableConv2d(_ConvNd):
    """Deformable 2-d convolution (`F.deformable_conv2d`): `forward(inp, offset, mask)`, the
    offsets and mask computed by the caller (usually by a Conv2d of the same input).

    The parameters are `Conv2d`'s. `conv_mode` and `compute_mode` are
    `F.deformable_conv2d`'s.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Ints, stride: Ints = 1,
                 padding: Ints = 0, dilation: Ints = 1, groups: int = 1, bias: bool = True,
                 conv_mode: str = "cross_correlation", compute_mode: str = "default"):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias)
        self.conv_mode, self.compute_mode = conv_mode, compute_mode

    def forward(self, inp: Tensor, offset: Tensor, mask: Tensor) -> Tensor:
        return F.deformable_conv2d(inp, self.weight, offset, mask, self.bias, self.stride,
                                   self.padding, self.dilation, self.groups, self.conv_mode,
                                   self.compute_mode)
