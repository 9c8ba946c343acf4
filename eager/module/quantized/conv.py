"""int8 convolutions (MegEngine's `megengine.module.quantized.conv`): Conv2d, ConvRelu2d,
ConvTranspose2d and ConvTransposeRelu2d, each one kernel of `eager.functional.quantized` on an
int8 input, with its int8 weight and its float bias quantized to qint32 of scale input scale x
weight scale at each call, as MegEngine does."""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import functional as F
from ...core.quant_dtype import get_scale, qint32
from ...core.tensors import Tensor
from ...functional import quantized as Q
from .. import conv as Float
from .module import QuantizedModule, float_param, quantized_param


def bias_qint32(bias: Tensor, inp: Tensor, weight: Tensor) -> Tensor:
    """`bias` quantized to qint32 of scale input scale x weight scale, the accumulator's grid."""
    scale = float(np.float32(get_scale(inp.dtype)) * np.float32(get_scale(weight.dtype)))
    return bias.astype(qint32(scale))


class Conv2d(Float.Conv2d, QuantizedModule):
    """An int8 `Conv2d` to `dtype`, the output quantized dtype."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1,
                 padding: Any = 0, dilation: Any = 1, groups: int = 1,
                 conv_mode: str = "cross_correlation", compute_mode: str = "default",
                 dtype: Any = None, padding_mode: str = "zeros", **kwargs: Any):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, True, conv_mode, compute_mode, padding_mode)
        self.output_dtype = dtype

    def calc_conv_quantized(self, inp: Tensor, nonlinear_mode: str = "identity") -> Tensor:
        """The int8 convolution with the activation `nonlinear_mode`."""
        padding = self.padding
        if self.padding_mode != "zeros":  # the border filled on the grid, then no padding
            (ph, pw) = padding
            inp = F.pad(inp, ((0, 0), (0, 0), (ph, ph), (pw, pw)), self.padding_mode)
            padding = (0, 0)
        return Q.conv_bias_activation(
            inp, self.weight, bias_qint32(self.bias, inp, self.weight),  # type: ignore[arg-type]
            self.output_dtype,
            self.stride, padding, self.dilation, self.groups, nonlinear_mode=nonlinear_mode,
            conv_mode=self.conv_mode, compute_mode=self.compute_mode)

    @classmethod
    def from_qat_module(cls, qat_module: Any) -> Conv2d:
        """The int8 form of `qat_module`: its weight quantized to its weight dtype, its bias
        (zeros without one) kept in float, its activation dtype the output's."""
        m = qat_module
        qconv = cls(m.in_channels, m.out_channels, m.kernel_size, m.stride, m.padding,
                    m.dilation, m.groups, dtype=m.get_activation_dtype(),
                    padding_mode=m.padding_mode)
        qconv.weight = quantized_param(m.weight, m.get_weight_dtype())
        qconv.bias = float_param(m.bias, (1, m.out_channels, 1, 1))
        return qconv

    def forward(self, inp: Tensor) -> Tensor:
        return self.calc_conv_quantized(inp, nonlinear_mode="identity")


class ConvRelu2d(Conv2d):
    """An int8 `ConvRelu2d`: the relu fused into the requantization."""

    def forward(self, inp: Tensor) -> Tensor:
        return self.calc_conv_quantized(inp, nonlinear_mode="relu")


class ConvTranspose2d(Float.ConvTranspose2d, QuantizedModule):
    """An int8 `ConvTranspose2d` to `dtype`. MegEngine's raises NotImplementedError for a bias;
    this one adds it in qint32."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1,
                 padding: Any = 0, output_padding: Any = 0, dilation: Any = 1, groups: int = 1,
                 bias: bool = True, conv_mode: str = "cross_correlation",
                 compute_mode: str = "default", dtype: Any = None, **kwargs: Any):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding,
                         output_padding, dilation, groups, bias, conv_mode, compute_mode)
        self.output_dtype = dtype

    def calc_conv_transpose2d_quantized(self, inp: Tensor, nonlinear_mode: str) -> Tensor:
        """The int8 transposed convolution; a relu (ConvTransposeRelu2d) on its int8 result."""
        bias = None if self.bias is None else bias_qint32(self.bias, inp, self.weight)
        out = Q.conv_transpose2d(inp, self.weight, bias, self.output_dtype, self.stride,
                                 self.padding, self.output_padding, self.dilation, self.groups,
                                 self.conv_mode, self.compute_mode)
        return F.relu(out) if nonlinear_mode == "relu" else out

    @classmethod
    def from_qat_module(cls, qat_module: Any) -> ConvTranspose2d:
        """The int8 form of `qat_module` (weight quantized, bias kept in float)."""
        m = qat_module
        q = cls(m.in_channels, m.out_channels, m.kernel_size, m.stride, m.padding,
                m.output_padding, m.dilation, m.groups, m.bias is not None, m.conv_mode,
                m.compute_mode, dtype=m.get_activation_dtype())
        q.weight = quantized_param(m.weight, m.get_weight_dtype())
        q.bias = None if m.bias is None else float_param(m.bias, tuple(m.bias.shape))
        return q

    def forward(self, inp: Tensor) -> Tensor:
        return self.calc_conv_transpose2d_quantized(inp, nonlinear_mode="identity")


class ConvTransposeRelu2d(ConvTranspose2d):
    """An int8 `ConvTransposeRelu2d`."""

    def forward(self, inp: Tensor) -> Tensor:
        return self.calc_conv_transpose2d_quantized(inp, nonlinear_mode="relu")
