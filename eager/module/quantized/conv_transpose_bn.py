"""int8 transposed convolution-BatchNorm modules (MegEngine's
`megengine.module.quantized.conv_transpose_bn`): the BatchNorm folded at conversion, then an
int8 `ConvTranspose2d`."""

from __future__ import annotations

from ...core.tensors import Tensor
from ..qat import conv_transpose_bn as QAT
from .conv import ConvTranspose2d
from .module import float_param, quantized_param


class _ConvTransposeBnActivation2d(ConvTranspose2d):
    @classmethod
    def from_qat_module(cls, qat_module: QAT._ConvTransposeBnActivation2d,
                        ) -> _ConvTransposeBnActivation2d:
        """The int8 form of `qat_module`: the folded weight quantized, the folded bias."""
        c = qat_module.conv_transpose2d
        q = cls(c.in_channels, c.out_channels, c.kernel_size, c.stride, c.padding,
                c.output_padding, c.dilation, c.groups, dtype=qat_module.get_activation_dtype())
        w_fold, b_fold = qat_module.fold_weight_bias(qat_module.bn.running_mean,
                                                     qat_module.bn.running_var)
        q.weight = quantized_param(w_fold, qat_module.get_weight_dtype())
        q.bias = float_param(b_fold, (1, c.out_channels, 1, 1))
        return q


class ConvTransposeBn2d(_ConvTransposeBnActivation2d):
    """An int8 `ConvTransposeBn2d`."""

    def forward(self, inp: Tensor) -> Tensor:
        return self.calc_conv_transpose2d_quantized(inp, nonlinear_mode="identity")


class ConvTransposeBnRelu2d(_ConvTransposeBnActivation2d):
    """An int8 `ConvTransposeBnRelu2d`."""

    def forward(self, inp: Tensor) -> Tensor:
        return self.calc_conv_transpose2d_quantized(inp, nonlinear_mode="relu")
