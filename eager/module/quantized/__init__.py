"""int8 inference modules, as MegEngine's `megengine.module.quantized`: each made from its QAT
module (`eager.module.qat`) by `from_qat_module`, computing with integer arithmetic on quantized
tensors (`eager.functional.quantized`). `eager.quantization.quantize` converts a QAT model's
modules into these."""

from .batch_matmul_activation import BatchMatMulActivation
from .concat import Concat
from .conv import Conv2d, ConvRelu2d, ConvTranspose2d, ConvTransposeRelu2d
from .conv_bn import ConvBn2d, ConvBnRelu2d
from .conv_transpose_bn import ConvTransposeBn2d, ConvTransposeBnRelu2d
from .elemwise import Elemwise
from .linear import Linear, LinearRelu
from .linear_bn import LinearBn1d, LinearBnRelu1d
from .module import QuantizedModule, QuantizedTrainingError
from .quant_dequant import DequantStub, QuantStub

__all__ = [
    "QuantizedModule", "QuantizedTrainingError", "Conv2d", "ConvRelu2d", "ConvTranspose2d",
    "ConvTransposeRelu2d", "ConvBn2d", "ConvBnRelu2d", "ConvTransposeBn2d",
    "ConvTransposeBnRelu2d", "Linear", "LinearRelu", "LinearBn1d", "LinearBnRelu1d", "Elemwise",
    "Concat", "QuantStub", "DequantStub", "BatchMatMulActivation",
]
