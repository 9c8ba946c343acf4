"""QAT `Concat` (MegEngine's `megengine.module.qat.concat`): the concatenation observed and
fake-quantized."""

from __future__ import annotations

from collections.abc import Iterable

from ...core.tensors import Tensor
from .. import concat as Float
from .module import QATModule


class Concat(Float.Concat, QATModule):
    """A `Concat` with quantization-aware training of its output. As MegEngine's, it keeps the
    slots of a weight observer and fake quantizer, which it never uses."""

    def forward(self, inps: Iterable[Tensor], axis: int = 0) -> Tensor:
        return self.apply_quant_activation(super().forward(inps, axis))

    @classmethod
    def from_float_module(cls, float_module: Float.Concat) -> Concat:
        """A QAT Concat (the float one holds nothing to share)."""
        return cls()
