"""QAT convolution-BatchNorm modules (MegEngine's `megengine.module.qat.conv_bn`): ConvBn2d
and ConvBnRelu2d, the BatchNorm folded into the convolution's quantized weight (`_bn_fold`)."""

from __future__ import annotations

from typing import Any

from ... import functional as F
from ...core.tensors import Tensor
from .. import conv_bn as Float
from ._bn_fold import _BnFold


class _ConvBnActivation2d(Float._ConvBnActivation2d, _BnFold):
    def _layer(self) -> Any:
        return self.conv

    def _calc(self, inp: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        return self.conv.calc_conv(inp, weight, bias)

    def _scale_weight(self, weight: Tensor, factor: Tensor) -> Tensor:
        # a grouped weight is (groups, out/groups, in/groups, kh, kw)
        groups = self.conv.groups
        return weight * (factor.reshape(-1, 1, 1, 1) if groups == 1
                         else factor.reshape(groups, -1, 1, 1, 1))

    def calc_conv_bn_qat(self, inp: Tensor, approx: bool = True) -> Tensor:
        """The convolution and BatchNorm with the folded weight fake-quantized, before the
        output's quantization."""
        return self._calc_bn_qat(inp, approx)

    @classmethod
    def from_float_module(cls, float_module: Float._ConvBnActivation2d) -> _ConvBnActivation2d:
        """The QAT form of `float_module`, sharing its convolution's weight and bias and its
        BatchNorm."""
        c = float_module.conv
        qat = cls(c.in_channels, c.out_channels, c.kernel_size, c.stride, c.padding, c.dilation,
                  c.groups, c.bias is not None, c.conv_mode, c.compute_mode,
                  padding_mode=c.padding_mode)
        qat.conv.weight, qat.conv.bias = c.weight, c.bias
        qat.bn = float_module.bn
        return qat


class ConvBn2d(_ConvBnActivation2d):
    """A `ConvBn2d` with quantization-aware training."""

    def forward(self, inp: Tensor) -> Tensor:
        return self.apply_quant_activation(self.calc_conv_bn_qat(inp))


class ConvBnRelu2d(_ConvBnActivation2d):
    """A `ConvBnRelu2d` with quantization-aware training: the relu before the output's
    quantization."""

    def forward(self, inp: Tensor) -> Tensor:
        return self.apply_quant_activation(F.relu(self.calc_conv_bn_qat(inp)))
