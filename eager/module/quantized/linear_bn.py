"""int8 Linear-BatchNorm modules (MegEngine's `megengine.module.quantized.linear_bn`): the
BatchNorm folded into the weight and bias at conversion, then an int8 `Linear`."""

from __future__ import annotations

from ...core.tensors import Tensor
from ..qat import linear_bn as QAT
from .linear import Linear
from .module import float_param, quantized_param


class _LinearBnActivation1d(Linear):
    @classmethod
    def from_qat_module(cls, qat_module: QAT._LinearBnActivation1d) -> _LinearBnActivation1d:
        """The int8 form of `qat_module`: the folded weight quantized, the folded bias."""
        q = cls(dtype=qat_module.get_activation_dtype())
        w_fold, b_fold = qat_module.fold_weight_bias(qat_module.bn.running_mean,
                                                     qat_module.bn.running_var)
        q.weight = quantized_param(w_fold, qat_module.get_weight_dtype())
        q.bias = float_param(b_fold, (qat_module.linear.out_features,))
        return q


class LinearBn1d(_LinearBnActivation1d):
    """An int8 `LinearBn1d`."""

    def forward(self, inp: Tensor) -> Tensor:
        return self.calc_linear_quantized(inp, nonlinear_mode="identity")


class LinearBnRelu1d(_LinearBnActivation1d):
    """An int8 `LinearBnRelu1d`."""

    def forward(self, inp: Tensor) -> Tensor:
        return self.calc_linear_quantized(inp, nonlinear_mode="relu")
