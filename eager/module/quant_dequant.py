"""MegEngine's `megengine.module.quant_dequant`: QuantStub and DequantStub, the points where a
quantized model's input enters int8 and its output leaves it.

In float they return their input; `eager.quantization.quantize_qat` swaps them for their QAT
versions (`eager.module.qat`), of which QuantStub fake-quantizes what it passes.
"""

from __future__ import annotations

from ..core.tensors import Tensor
from .module import Module


class QuantStub(Module):
    """Returns its input; marks where a quantized model's input is quantized."""

    def forward(self, inp: Tensor) -> Tensor:
        return inp


class DequantStub(Module):
    """Returns its input; marks where a quantized model's output is dequantized."""

    def forward(self, inp: Tensor) -> Tensor:
        return inp
