"""int8 `Elemwise` (MegEngine's `megengine.module.quantized.elemwise`): MegEngine's quantized
elementwise modes ("qADD", "qFUSE_ADD_RELU", "qMUL", ...), each computed as its CPU kernel
does: the inputs dequantized, the float mode applied, the result quantized to the output
dtype (rounded half away from zero, saturated)."""

from __future__ import annotations

from typing import Any

from ...core.errors import OpArgumentError
from ...core.quantized_tensors import is_quantized
from ...core.tensors import Tensor
from ..elemwise import _MODES
from ..qat import elemwise as QAT
from .module import QuantizedModule


class Elemwise(QuantizedModule):
    """The quantized elementwise mode "q" + `method` to output `dtype`."""

    def __init__(self, method: str, dtype: Any = None):
        super().__init__()
        mode = str(method).upper()
        if mode not in _MODES:
            raise OpArgumentError(f"Elemwise: unknown mode {method!r}; MegEngine's modes are "
                                  f"{sorted(_MODES)}.")
        self.method = "q" + str(method)
        self._arity, self._fn = _MODES[mode]
        self.output_dtype = dtype

    def forward(self, *inps: Any) -> Tensor:
        values = [x.astype("float32") if is_quantized(getattr(x, "dtype", None)) else x
                  for x in inps]
        out = self._fn(*values)
        return out if self.output_dtype is None else out.astype(self.output_dtype)

    @classmethod
    def from_qat_module(cls, qat_module: QAT.Elemwise) -> Elemwise:
        """The int8 form of `qat_module`, quantizing to its activation dtype."""
        return cls(qat_module.method, qat_module.get_activation_dtype())
