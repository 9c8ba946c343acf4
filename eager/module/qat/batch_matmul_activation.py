"""QAT `BatchMatMulActivation` (MegEngine's `megengine.module.qat.batch_matmul_activation`)."""

from __future__ import annotations

from ...core.tensors import Tensor
from .. import batch_matmul_activation as Float
from .module import QATModule


class BatchMatMulActivation(Float.BatchMatMulActivation, QATModule):
    """A `BatchMatMulActivation` with quantization-aware training: the fake-quantized weight, a
    bias fake-quantized to qint32, the output (after the activation) observed and
    fake-quantized."""

    def forward(self, inp: Tensor) -> Tensor:
        w_qat = self.apply_quant_weight(self.weight)
        b_qat = self.apply_quant_bias(self.bias, inp, w_qat)
        return self.apply_quant_activation(self._calc_linear(inp, w_qat, b_qat))

    @classmethod
    def from_float_module(
            cls, float_module: Float.BatchMatMulActivation) -> BatchMatMulActivation:
        """The QAT form of `float_module`, sharing its weight and bias."""
        m = float_module
        qat = cls(m.batch, m.in_features, m.out_features, m.bias is not None, m.nonlinear_mode)
        qat.weight, qat.bias = m.weight, m.bias
        return qat
