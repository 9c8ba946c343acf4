"""Quantization-aware training modules, as MegEngine's `megengine.module.qat`: each the float
module of the same name (`eager.module`) with its weight and output observed and
fake-quantized from a `QConfig` (`QATModule`). `eager.quantization.quantize_qat` converts a
float model's modules into these; `eager.quantization.quantize` would then convert them to
int8 modules."""

from .batch_matmul_activation import BatchMatMulActivation
from .concat import Concat
from .conv import Conv2d, ConvRelu2d, ConvTranspose2d, ConvTransposeRelu2d
from .conv_bn import ConvBn2d, ConvBnRelu2d
from .conv_transpose_bn import ConvTransposeBn2d, ConvTransposeBnRelu2d
from .elemwise import Elemwise
from .linear import Linear, LinearRelu
from .linear_bn import LinearBn1d, LinearBnRelu1d
from .module import QATModule
from .quant_dequant import DequantStub, QuantStub

__all__ = [
    "QATModule", "Conv2d", "ConvRelu2d", "ConvTranspose2d", "ConvTransposeRelu2d", "ConvBn2d",
    "ConvBnRelu2d", "ConvTransposeBn2d", "ConvTransposeBnRelu2d", "Linear", "LinearRelu",
    "LinearBn1d", "LinearBnRelu1d", "Elemwise", "Concat", "QuantStub", "DequantStub",
    "BatchMatMulActivation",
]
