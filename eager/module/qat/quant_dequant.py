"""QAT QuantStub and DequantStub (MegEngine's `megengine.module.qat.quant_dequant`): QuantStub
observes and fake-quantizes the model's input; DequantStub returns its input, the model's
output leaving quantization."""

from __future__ import annotations

from ...core.tensors import Tensor
from .. import quant_dequant as Float
from .module import QATModule


class QuantStub(Float.QuantStub, QATModule):
    """Fake-quantizes its input with the activation's observer and quantizer; quantizes it
    once converted to int8."""

    with_weight = False

    def forward(self, inp: Tensor) -> Tensor:
        return self.apply_quant_activation(inp)

    @classmethod
    def from_float_module(cls, float_module: Float.QuantStub) -> QuantStub:
        """A QAT QuantStub."""
        return cls()


class DequantStub(Float.DequantStub, QATModule):
    """Returns its input; dequantizes it once converted to int8."""

    with_weight = False
    with_act = False

    def forward(self, inp: Tensor) -> Tensor:
        return inp

    @classmethod
    def from_float_module(cls, float_module: Float.DequantStub) -> DequantStub:
        """A QAT DequantStub."""
        return cls()
