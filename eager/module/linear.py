"""`Linear`: an affine map of the last axis (MegEngine's `megengine.module.linear`)."""

from __future__ import annotations

from .. import functional as F
from ..core.tensors import Tensor
from ._params import _bias, _weight
from .module import Module


class Linear(Module):
    """y = x @ weight.T + bias, weight (out_features, in_features); initialized as MegEngine's,
    weight N(0, 1 / in_features) and bias zeros."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = _weight((out_features, in_features), in_features)
        self.bias = _bias((out_features,)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight, self.bias)

    def _extra_repr(self) -> str:
        return f"{self.in_features}, {self.out_features}, bias={self.bias is not None}"
