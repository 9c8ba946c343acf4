"""QAT transposed-convolution-BatchNorm modules (MegEngine's
`megengine.module.qat.conv_transpose_bn`): ConvTransposeBn2d and ConvTransposeBnRelu2d, the
BatchNorm folded into the transposed convolution's quantized weight (`_bn_fold`)."""

from __future__ import annotations

from typing import Any

from ... import functional as F
from ...core.tensors import Tensor
from .. import conv_transpose_bn as Float
from ._bn_fold import _BnFold


class _ConvTransposeBnActivation2d(Float._ConvTransposeBnActivation2d, _BnFold):
    def _layer(self) -> Any:
        return self.conv_transpose2d

    def _calc(self, inp: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        return self.conv_transpose2d.calc_conv_transpose2d(inp, weight, bias)

    def _scale_weight(self, weight: Tensor, factor: Tensor) -> Tensor:
        # the output channels are axis 1 of (in, out, kh, kw), axis 2 of the grouped
        # (groups, in/groups, out/groups, kh, kw)
        groups = self.conv_transpose2d.groups
        return weight * (factor.reshape(1, -1, 1, 1) if groups == 1
                         else factor.reshape(groups, 1, -1, 1, 1))

    def calc_conv_transpose2d_bn_qat(self, inp: Tensor, approx: bool = True) -> Tensor:
        """The transposed convolution and BatchNorm with the folded weight fake-quantized,
        before the output's quantization."""
        return self._calc_bn_qat(inp, approx)

    @classmethod
    def from_float_module(
            cls, float_module: Float._ConvTransposeBnActivation2d
    ) -> _ConvTransposeBnActivation2d:
        """The QAT form of `float_module`, sharing its layer's weight and bias and its
        BatchNorm."""
        c = float_module.conv_transpose2d
        qat = cls(c.in_channels, c.out_channels, c.kernel_size, c.stride, c.padding,
                  c.output_padding, c.dilation, c.groups, c.bias is not None, c.conv_mode,
                  c.compute_mode)
        qat.conv_transpose2d.weight, qat.conv_transpose2d.bias = c.weight, c.bias
        qat.bn = float_module.bn
        return qat


class ConvTransposeBn2d(_ConvTransposeBnActivation2d):
    """A `ConvTransposeBn2d` with quantization-aware training."""

    def forward(self, inp: Tensor) -> Tensor:
        return self.apply_quant_activation(self.calc_conv_transpose2d_bn_qat(inp))


class ConvTransposeBnRelu2d(_ConvTransposeBnActivation2d):
    """A `ConvTransposeBnRelu2d` with quantization-aware training: the relu before the output's
    quantization."""

    def forward(self, inp: Tensor) -> Tensor:
        return self.apply_quant_activation(F.relu(self.calc_conv_transpose2d_bn_qat(inp)))
