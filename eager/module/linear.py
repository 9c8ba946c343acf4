"""`Linear`, an affine map of the last axis, and the fused `LinearRelu` (MegEngine's
`megengine.module.linear`)."""

from __future__ import annotations

from .. import functional as F
from ..core.tensors import Tensor
from ._params import _bias, _weight
from .module import Module


class Linear(Module):
    """y = x @ weight.T + bias, weight (out_features, in_features); initialized as MegEngine's,
    weight N(0, 1 / in_features) and bias zeros. `compute_mode` is `F.linear`'s."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 compute_mode: str = "default"):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.compute_mode = compute_mode
        self.weight = _weight((out_features, in_features), in_features)
        self.bias = _bias((out_features,)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        return self.calc_linear(x, self.weight, self.bias)

    def calc_linear(self, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        """This layer with `weight` and `bias` in place of its own (MegEngine's, for its QAT
        modules)."""
        return F.linear(x, weight, bias, self.compute_mode)

    def _extra_repr(self) -> str:
        return f"{self.in_features}, {self.out_features}, bias={self.bias is not None}"


class LinearRelu(Linear):
    """relu(Linear(x)): the arguments and parameters of `Linear`."""

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(super().forward(x))
