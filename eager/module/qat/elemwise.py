"""QAT `Elemwise` (MegEngine's `megengine.module.qat.elemwise`): the output observed and
fake-quantized; there is no weight."""

from __future__ import annotations

from typing import Any

from ...core.tensors import Tensor
from .. import elemwise as Float
from .module import QATModule


class Elemwise(Float.Elemwise, QATModule):
    """An `Elemwise` with quantization-aware training of its output."""

    with_weight = False

    def forward(self, *inps: Any) -> Tensor:
        return self.apply_quant_activation(super().forward(*inps))

    @classmethod
    def from_float_module(cls, float_module: Float.Elemwise) -> Elemwise:
        """The QAT form of `float_module`, of the same mode."""
        return cls(float_module.method)
