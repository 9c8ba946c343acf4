"""QAT Linear-BatchNorm modules (MegEngine's `megengine.module.qat.linear_bn`): LinearBn1d and
LinearBnRelu1d, the BatchNorm folded into the Linear's quantized weight (`_bn_fold`)."""

from __future__ import annotations

from typing import Any

from ... import functional as F
from ...core.tensors import Tensor
from .. import linear_bn as Float
from ._bn_fold import _BnFold


class _LinearBnActivation1d(Float._LinearBnActivation1d, _BnFold):
    def _layer(self) -> Any:
        return self.linear

    def _calc(self, inp: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        return self.linear.calc_linear(inp, weight, bias)

    def _scale_weight(self, weight: Tensor, factor: Tensor) -> Tensor:
        return weight * factor.reshape(-1, 1)  # weight (out, in)

    def _bias_shape(self) -> tuple[int, ...]:
        return (self.bn.num_features,)

    def calc_linear_bn_qat(self, inp: Tensor, approx: bool = True) -> Tensor:
        """The Linear and BatchNorm with the folded weight fake-quantized, before the output's
        quantization."""
        return self._calc_bn_qat(inp, approx)

    @classmethod
    def from_float_module(
            cls, float_module: Float._LinearBnActivation1d) -> _LinearBnActivation1d:
        """The QAT form of `float_module`, sharing its Linear's weight and bias and its
        BatchNorm."""
        lin, bn = float_module.linear, float_module.bn
        qat = cls(lin.in_features, lin.out_features, lin.bias is not None, lin.compute_mode,
                  bn.eps, bn.momentum, bn.affine, bn.track_running_stats)
        qat.linear.weight, qat.linear.bias = lin.weight, lin.bias
        qat.bn = bn
        return qat


class LinearBn1d(_LinearBnActivation1d):
    """A `LinearBn1d` with quantization-aware training."""

    def forward(self, inp: Tensor) -> Tensor:
        return self.apply_quant_activation(self.calc_linear_bn_qat(inp))


class LinearBnRelu1d(_LinearBnActivation1d):
    """A `LinearBnRelu1d` with quantization-aware training: the relu before the output's
    quantization."""

    def forward(self, inp: Tensor) -> Tensor:
        return self.apply_quant_activation(F.relu(self.calc_linear_bn_qat(inp)))
