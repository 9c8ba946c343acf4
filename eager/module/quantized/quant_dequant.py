"""int8 QuantStub and DequantStub (MegEngine's `megengine.module.quantized.quant_dequant`): the
model's input quantized to the activation's dtype, and its output dequantized to float32."""

from __future__ import annotations

from typing import Any

from ...core.tensors import Tensor
from ..qat import quant_dequant as QAT
from .module import QuantizedModule


class QuantStub(QuantizedModule):
    """Quantizes its input to `dtype` (round half away from zero, saturate)."""

    def __init__(self, dtype: Any = None):
        super().__init__()
        self.output_dtype = dtype

    def forward(self, inp: Tensor) -> Tensor:
        return inp.astype(self.output_dtype)

    @classmethod
    def from_qat_module(cls, qat_module: QAT.QuantStub) -> QuantStub:
        """The stub quantizing to `qat_module`'s activation dtype."""
        return cls(qat_module.get_activation_dtype())


class DequantStub(QuantizedModule):
    """Dequantizes its input to float32."""

    def forward(self, inp: Tensor) -> Tensor:
        return inp.astype("float32")

    @classmethod
    def from_qat_module(cls, qat_module: QAT.DequantStub) -> DequantStub:
        """A DequantStub."""
        return cls()
