"""int8 Linear layers (MegEngine's `megengine.module.quantized.linear`): Linear and LinearRelu,
the int8 matrix product with int32 accumulation and a qint32 bias, requantized to the output
dtype (the relu fused into it)."""

from __future__ import annotations

from typing import Any

from ...core.tensors import Tensor
from ...functional import quantized as Q
from .conv import bias_qint32
from .module import QuantizedModule, float_param, quantized_param


class Linear(QuantizedModule):
    """An int8 `Linear` to `dtype` (None: the qint32 accumulator, as MegEngine's)."""

    def __init__(self, dtype: Any = None, **kwargs: Any):
        super().__init__()
        self.weight: Tensor | None = None
        self.bias: Tensor | None = None
        self.output_dtype = dtype

    def calc_linear_quantized(self, inp: Tensor, nonlinear_mode: str = "identity") -> Tensor:
        """The int8 layer with the activation `nonlinear_mode` ("identity" or "relu")."""
        assert self.weight is not None, "an int8 Linear is made by from_qat_module"
        bias = None if self.bias is None else bias_qint32(self.bias, inp, self.weight)
        return Q.linear(inp, self.weight, bias, self.output_dtype, nonlinear_mode)

    def forward(self, inp: Tensor) -> Tensor:
        return self.calc_linear_quantized(inp)

    @classmethod
    def from_qat_module(cls, qat_module: Any) -> Linear:
        """The int8 form of `qat_module`: weight quantized, bias kept in float."""
        q = cls(dtype=qat_module.get_activation_dtype())
        q.weight = quantized_param(qat_module.weight, qat_module.get_weight_dtype())
        if qat_module.bias is not None:
            q.bias = float_param(qat_module.bias, tuple(qat_module.bias.shape))
        return q


class LinearRelu(Linear):
    """An int8 `LinearRelu`."""

    def forward(self, inp: Tensor) -> Tensor:
        return self.calc_linear_quantized(inp, nonlinear_mode="relu")
