"""Activation layers (MegEngine's `megengine.module.activation`): ReLU, GELU, SiLU, Sigmoid, Tanh,
and those with an argument or a parameter: LeakyReLU, PReLU, ELU, Softmax, and the
mobile-network pair ReLU6 and Hardswish."""

from __future__ import annotations

from typing import Any

from .. import functional as F
from ..core.creation import full
from ..core.errors import OpArgumentError
from ..core.tensors import Parameter, Tensor
from .module import Module


def _activation(name: str, fn: Any, doc: str) -> type:
    return type(name, (Module,), {"forward": lambda self, x: fn(x), "__doc__": doc})


ReLU = _activation("ReLU", F.relu, "max(x, 0).")
GELU = _activation("GELU", F.gelu, "The exact (erf) GELU.")
SiLU = _activation("SiLU", F.silu, "x * sigmoid(x).")
Sigmoid = _activation("Sigmoid", F.sigmoid, "1 / (1 + exp(-x)).")
Tanh = _activation("Tanh", F.tanh, "tanh(x).")


class LeakyReLU(Module):
    """x where x > 0, else `negative_slope * x`."""

    def __init__(self, negative_slope: float = 0.01):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: Tensor) -> Tensor:
        return F.leaky_relu(x, self.negative_slope)

    def _extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}"


class PReLU(Module):
    """LeakyReLU with a learned slope: one shared (`num_parameters=1`) or one per channel (axis 1).

    The weight has MegEngine's shape, `(1,)` shared or `(1, C, 1, 1)` per channel; a PyTorch
    state dict's `(C,)` weight loads into it too.
    """

    def __init__(self, num_parameters: int = 1, init: float = 0.25):
        super().__init__()
        if int(num_parameters) < 1:
            raise OpArgumentError(f"PReLU: num_parameters must be >= 1, got {num_parameters}")
        self.num_parameters = int(num_parameters)
        shape = (1,) if self.num_parameters == 1 else (1, self.num_parameters, 1, 1)
        self.weight = Parameter(full(shape, float(init), "float32"))

    def forward(self, x: Tensor) -> Tensor:
        return F.prelu(x, self.weight)  # checks that x has num_parameters channels on axis 1

    def _extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"


class ELU(Module):
    """x where x > 0, else `alpha * (exp(x) - 1)`."""

    def __init__(self, alpha: float = 1.0):
        super().__init__()
        self.alpha = alpha

    def forward(self, x: Tensor) -> Tensor:
        return F.elu(x, self.alpha)

    def _extra_repr(self) -> str:
        return f"alpha={self.alpha}"


class Softmax(Module):
    """Softmax along `axis` (MegEngine's name; PyTorch's `dim` is accepted too). With neither,
    MegEngine's default axis (0 for 0-, 1- and 3-d inputs, 1 otherwise)."""

    def __init__(self, axis: int | None = None, *, dim: int | None = None):
        super().__init__()
        if axis is not None and dim is not None and axis != dim:
            raise OpArgumentError(f"Softmax: got axis={axis} and dim={dim}; pass one of them")
        self.axis = axis if axis is not None else dim

    def forward(self, x: Tensor) -> Tensor:
        return F.softmax(x, self.axis)

    def _extra_repr(self) -> str:
        return f"axis={self.axis}"


class ReLU6(Module):
    """min(max(x, 0), 6)."""

    def forward(self, x: Tensor) -> Tensor:
        return F.relu6(x)


class Hardswish(Module):
    """x * relu6(x + 3) / 6 (MobileNetV3's hard swish)."""

    def forward(self, x: Tensor) -> Tensor:
        return F.hswish(x)
