"""Parameter-free layers: activations, pooling, dropout, flatten, identity."""

from __future__ import annotations

from typing import Any

from .. import functional as F
from ..tensor import Tensor
from .module import Module


def _activation(name: str, fn: Any, doc: str) -> type:
    return type(name, (Module,), {"forward": lambda self, x: fn(x), "__doc__": doc})


ReLU = _activation("ReLU", F.relu, "max(x, 0).")
GELU = _activation("GELU", F.gelu, "The exact (erf) GELU.")
SiLU = _activation("SiLU", F.silu, "x * sigmoid(x).")
Sigmoid = _activation("Sigmoid", F.sigmoid, "1 / (1 + exp(-x)).")
Tanh = _activation("Tanh", F.tanh, "tanh(x).")
Identity = _activation("Identity", lambda x: x, "Returns its input.")


class Flatten(Module):
    """Flatten axes start_axis..end_axis (default: all but the batch axis)."""

    def __init__(self, start_axis: int = 1, end_axis: int = -1):
        super().__init__()
        self.start_axis, self.end_axis = start_axis, end_axis

    def forward(self, x: Tensor) -> Tensor:
        return F.flatten(x, self.start_axis, self.end_axis)


class Dropout(Module):
    """Dropout with probability `drop_prob` in training mode; the identity in eval mode."""

    def __init__(self, drop_prob: float = 0.0):
        super().__init__()
        self.drop_prob = drop_prob

    def forward(self, x: Tensor) -> Tensor:
        return F.dropout(x, self.drop_prob, training=self.training)


class MaxPool2d(Module):
    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding

    def forward(self, x: Tensor) -> Tensor:
        return F.max_pool2d(x, self.kernel_size, self.stride, self.padding)


class AvgPool2d(Module):
    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0,
                 mode: str = "average_count_exclude_padding"):
        super().__init__()
        self.kernel_size, self.stride, self.padding, self.mode = kernel_size, stride, padding, mode

    def forward(self, x: Tensor) -> Tensor:
        return F.avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.mode)


class AdaptiveAvgPool2d(Module):
    def __init__(self, oshp: Any):
        super().__init__()
        self.oshp = oshp

    def forward(self, x: Tensor) -> Tensor:
        return F.adaptive_avg_pool2d(x, self.oshp)
