"""QAT Linear layers (MegEngine's `megengine.module.qat.linear`): Linear and LinearRelu."""

from __future__ import annotations

from ... import functional as F
from ...core.tensors import Tensor
from .. import linear as Float
from .module import QATModule


class Linear(Float.Linear, QATModule):
    """A `Linear` with quantization-aware training: the fake-quantized weight, a bias
    fake-quantized to qint32, the output observed and fake-quantized."""

    def calc_linear_qat(self, inp: Tensor) -> Tensor:
        """The layer with the fake-quantized weight and bias, before the output's
        quantization."""
        w_qat = self.apply_quant_weight(self.weight)
        b_qat = self.apply_quant_bias(self.bias, inp, w_qat)
        return self.calc_linear(inp, w_qat, b_qat)

    def forward(self, inp: Tensor) -> Tensor:
        return self.apply_quant_activation(self.calc_linear_qat(inp))

    @classmethod
    def from_float_module(cls, float_module: Float.Linear) -> Linear:
        """The QAT form of `float_module`, sharing its weight and bias."""
        m = float_module
        qat = cls(m.in_features, m.out_features, m.bias is not None, m.compute_mode)
        qat.weight, qat.bias = m.weight, m.bias
        return qat


class LinearRelu(Linear):
    """A `LinearRelu` with quantization-aware training: the relu before the output's
    quantization."""

    def forward(self, inp: Tensor) -> Tensor:
        return self.apply_quant_activation(F.relu(self.calc_linear_qat(inp)))
