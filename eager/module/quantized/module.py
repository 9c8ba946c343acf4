"""`QuantizedModule` (MegEngine's `megengine.module.quantized.module`): the base of the int8
inference modules, each made from its QAT module by `from_qat_module`."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...core.errors import EagerError
from ...core.tensors import Parameter, Tensor
from ..module import Module


class QuantizedTrainingError(EagerError, ValueError):
    """An int8 module was called in training mode: it only infers (call `.eval()`)."""


class QuantizedModule(Module):
    """An int8 module: inference only (calling it in training mode raises
    `QuantizedTrainingError`, a ValueError as MegEngine's), converted from a QAT module with
    `from_qat_module`."""

    def __call__(self, *inputs: Any, **kwargs: Any) -> Any:
        if self.training:
            raise QuantizedTrainingError(
                f"{type(self).__name__} is an int8 module and only infers: call .eval() on the "
                "model first (as in MegEngine, quantized modules do not train).")
        return super().__call__(*inputs, **kwargs)

    def __repr__(self) -> str:
        return "Quantized." + super().__repr__()

    @classmethod
    def from_qat_module(cls, qat_module: Any) -> QuantizedModule:
        """The int8 module computing what `qat_module` computes."""
        raise NotImplementedError(f"{cls.__name__} does not define from_qat_module")


def quantized_param(value: Tensor, dtype: np.dtype) -> Parameter:
    """A Parameter holding `value` quantized to `dtype` (a weight on its int8 grid)."""
    return Parameter(value.astype(dtype).numpy())


def float_param(value: Tensor | None, shape: tuple[int, ...]) -> Parameter:
    """A float Parameter of `value`, or zeros of `shape` for a layer without a bias (the int8
    kernels always add one)."""
    if value is None:
        return Parameter(np.zeros(shape, np.float32))
    return Parameter(value.numpy().reshape(shape))
