"""int8 `Concat` (MegEngine's `megengine.module.quantized.concat`): each input requantized to
the output dtype, then concatenated."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ... import functional as F
from ...core.tensors import Tensor
from ..qat import concat as QAT
from .module import QuantizedModule


class Concat(QuantizedModule):
    """Concatenation of inputs brought to one quantized dtype."""

    def __init__(self, dtype: Any = None):
        super().__init__()
        self.output_dtype = dtype

    def forward(self, inps: Iterable[Tensor], axis: int = 0) -> Tensor:
        return F.concat([x.astype(self.output_dtype) for x in inps], axis)

    @classmethod
    def from_qat_module(cls, qat_module: QAT.Concat) -> Concat:
        """The int8 form of `qat_module`, to its activation dtype."""
        return cls(qat_module.get_activation_dtype())
