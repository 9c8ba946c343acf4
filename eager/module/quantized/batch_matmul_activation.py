"""int8 `BatchMatMulActivation` (MegEngine's
`megengine.module.quantized.batch_matmul_activation`): each batch element's matrix product as a
1x1 int8 convolution with its own weight (`batch_conv_bias_activation`), the bias added per
output feature in qint32, the activation fused into the requantization."""

from __future__ import annotations

from typing import Any

from ... import functional as F
from ...core.tensors import Parameter, Tensor
from ...functional import quantized as Q
from .. import batch_matmul_activation as Float
from ..qat import batch_matmul_activation as QAT
from .conv import bias_qint32
from .module import QuantizedModule, float_param


class BatchMatMulActivation(Float.BatchMatMulActivation, QuantizedModule):
    """An int8 `BatchMatMulActivation` to `dtype`: weight (batch, out, in, 1, 1), bias
    (1, out, 1, 1), input (batch, in, n). As MegEngine's, it adds the bias per output feature,
    where the float and QAT layers add it along the last axis: the two agree without a bias
    (or where every bias value is equal)."""

    def __init__(self, batch: int, in_features: int, out_features: int, bias: bool = True,
                 nonlinear_mode: str = "identity", dtype: Any = None, **kwargs: Any):
        super().__init__(batch, in_features, out_features, bias, nonlinear_mode)
        self.output_dtype = dtype

    def calc_bmm_quantized(self, inp: Tensor) -> Tensor:
        """The int8 batched product."""
        bias = bias_qint32(self.bias, inp, self.weight)  # type: ignore[arg-type]
        out = Q.batch_conv_bias_activation(
            F.expand_dims(inp, -1), self.weight, bias, dtype=self.output_dtype,
            nonlinear_mode=self.nonlinear_mode)
        return F.squeeze(out, -1)

    @classmethod
    def from_qat_module(cls, qat_module: QAT.BatchMatMulActivation) -> BatchMatMulActivation:
        """The int8 form of `qat_module`: weight quantized and given 1x1 kernels, bias (zeros
        without one) per output feature."""
        m = qat_module
        q = cls(m.batch, m.in_features, m.out_features, m.bias is not None, m.nonlinear_mode,
                dtype=m.get_activation_dtype())
        weight = m.weight.astype(m.get_weight_dtype()).numpy()
        q.weight = Parameter(weight.reshape(weight.shape + (1, 1)).view(weight.dtype))
        q.bias = float_param(m.bias, (1, m.out_features, 1, 1))
        return q

    def forward(self, inp: Tensor) -> Tensor:
        return self.calc_bmm_quantized(inp)
