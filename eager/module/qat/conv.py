"""QAT convolutions (MegEngine's `megengine.module.qat.conv`): Conv2d, ConvRelu2d,
ConvTranspose2d and ConvTransposeRelu2d, convolving with the fake-quantized weight and a bias
fake-quantized to qint32, their output (after the relu) observed and fake-quantized."""

from __future__ import annotations

from ... import functional as F
from ...core.tensors import Tensor
from .. import conv as Float
from .module import QATModule


class Conv2d(Float.Conv2d, QATModule):
    """A `Conv2d` with quantization-aware training."""

    def calc_conv_qat(self, inp: Tensor) -> Tensor:
        """The convolution with the fake-quantized weight and bias, before the output's
        quantization."""
        w_qat = self.apply_quant_weight(self.weight)
        b_qat = self.apply_quant_bias(self.bias, inp, w_qat)
        return self.calc_conv(inp, w_qat, b_qat)

    @classmethod
    def from_float_module(cls, float_module: Float.Conv2d) -> Conv2d:
        """The QAT form of `float_module`, sharing its weight and bias."""
        m = float_module
        qat = cls(m.in_channels, m.out_channels, m.kernel_size, m.stride, m.padding, m.dilation,
                  m.groups, m.bias is not None, m.conv_mode, m.compute_mode, m.padding_mode)
        qat.weight, qat.bias = m.weight, m.bias
        return qat

    def forward(self, inp: Tensor) -> Tensor:
        return self.apply_quant_activation(self.calc_conv_qat(inp))


class ConvRelu2d(Conv2d):
    """A `ConvRelu2d` with quantization-aware training: the relu before the output's
    quantization."""

    def forward(self, inp: Tensor) -> Tensor:
        return self.apply_quant_activation(F.relu(self.calc_conv_qat(inp)))


class ConvTranspose2d(Float.ConvTranspose2d, QATModule):
    """A `ConvTranspose2d` with quantization-aware training."""

    def calc_conv_transpose2d_qat(self, inp: Tensor) -> Tensor:
        """The transposed convolution with the fake-quantized weight and bias."""
        w_qat = self.apply_quant_weight(self.weight)
        b_qat = self.apply_quant_bias(self.bias, inp, w_qat)
        return self.calc_conv_transpose2d(inp, w_qat, b_qat)

    @classmethod
    def from_float_module(cls, float_module: Float.ConvTranspose2d) -> ConvTranspose2d:
        """The QAT form of `float_module`, sharing its weight and bias."""
        m = float_module
        qat = cls(m.in_channels, m.out_channels, m.kernel_size, m.stride, m.padding,
                  m.output_padding, m.dilation, m.groups, m.bias is not None, m.conv_mode,
                  m.compute_mode)
        qat.weight, qat.bias = m.weight, m.bias
        return qat

    def forward(self, inp: Tensor) -> Tensor:
        return self.apply_quant_activation(self.calc_conv_transpose2d_qat(inp))


class ConvTransposeRelu2d(ConvTranspose2d):
    """A `ConvTransposeRelu2d` with quantization-aware training."""

    def forward(self, inp: Tensor) -> Tensor:
        return self.apply_quant_activation(F.relu(self.calc_conv_transpose2d_qat(inp)))
