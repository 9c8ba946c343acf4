"""MegEngine's `megengine.module.batch_matmul_activation`: `BatchMatMulActivation`, a batch of
matrix products with a learned weight per batch element, then an optional relu."""

from __future__ import annotations

from .. import functional as F
from ..core.errors import OpArgumentError
from ..core.tensors import Tensor
from ._params import _bias, _weight
from .module import Module

_MODES = ("identity", "relu")


class BatchMatMulActivation(Module):
    """activation(weight @ x + bias) for x of shape (batch, in_features, n): weight
    (batch, out_features, in_features), drawn N(0, 1 / in_features) as MegEngine does, and bias
    (out_features,), zeros, added with broadcasting against the last axis as MegEngine adds it
    (so it fits n == out_features or n == 1). `nonlinear_mode` is "identity" or "relu", in any
    case; nothing is transposed.
    """

    def __init__(self, batch: int, in_features: int, out_features: int, bias: bool = True,
                 nonlinear_mode: str = "identity"):
        super().__init__()
        mode = str(nonlinear_mode).lower()
        if mode not in _MODES:
            raise OpArgumentError(f"BatchMatMulActivation: nonlinear_mode must be one of "
                                  f"{_MODES}, got {nonlinear_mode!r}")
        self.batch, self.in_features, self.out_features = batch, in_features, out_features
        self.nonlinear_mode = mode
        self.weight = _weight((batch, out_features, in_features), in_features)
        self.bias = _bias((out_features,)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        return self._calc_linear(x, self.weight, self.bias)

    def _calc_linear(self, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        """The layer with `weight` and `bias` in place of its own (for its QAT version)."""
        y = F.matmul(weight, x)
        if bias is not None:
            y = y + bias
        return F.relu(y) if self.nonlinear_mode == "relu" else y

    def _extra_repr(self) -> str:
        return (f"batch={self.batch}, in_features={self.in_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")
