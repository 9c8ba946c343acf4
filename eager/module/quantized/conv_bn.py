"""int8 convolution-BatchNorm modules (MegEngine's `megengine.module.quantized.conv_bn`): the
BatchNorm's running statistics folded into the convolution's weight and bias once, at
conversion; then an int8 `Conv2d`."""

from __future__ import annotations

from ...core.tensors import Tensor
from ..qat import conv_bn as QAT
from .conv import Conv2d
from .module import float_param, quantized_param


class _ConvBnActivation2d(Conv2d):
    @classmethod
    def from_qat_module(cls, qat_module: QAT._ConvBnActivation2d) -> _ConvBnActivation2d:
        """The int8 form of `qat_module`: the folded weight quantized, the folded bias."""
        c = qat_module.conv
        q = cls(c.in_channels, c.out_channels, c.kernel_size, c.stride, c.padding, c.dilation,
                c.groups, dtype=qat_module.get_activation_dtype(), padding_mode=c.padding_mode)
        w_fold, b_fold = qat_module.fold_weight_bias(qat_module.bn.running_mean,
                                                     qat_module.bn.running_var)
        q.weight = quantized_param(w_fold, qat_module.get_weight_dtype())
        q.bias = float_param(b_fold, (1, c.out_channels, 1, 1))
        return q


class ConvBn2d(_ConvBnActivation2d):
    """An int8 `ConvBn2d`."""

    def forward(self, inp: Tensor) -> Tensor:
        return self.calc_conv_quantized(inp, nonlinear_mode="identity")


class ConvBnRelu2d(_ConvBnActivation2d):
    """An int8 `ConvBnRelu2d`."""

    def forward(self, inp: Tensor) -> Tensor:
        return self.calc_conv_quantized(inp, nonlinear_mode="relu")
