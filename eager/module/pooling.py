"""Windowed pooling (MegEngine's `megengine.module.pooling`): MaxPool2d and AvgPool2d."""

from __future__ import annotations

from .. import functional as F
from ..core.tensors import Tensor
from ._params import Ints
from .module import Module


class MaxPool2d(Module):
    def __init__(self, kernel_size: Ints, stride: Ints | None = None, padding: Ints = 0):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding

    def forward(self, x: Tensor) -> Tensor:
        return F.max_pool2d(x, self.kernel_size, self.stride, self.padding)


class AvgPool2d(Module):
    def __init__(self, kernel_size: Ints, stride: Ints | None = None, padding: Ints = 0,
                 mode: str = "average_count_exclude_padding"):
        super().__init__()
        self.kernel_size, self.stride, self.padding, self.mode = kernel_size, stride, padding, mode

    def forward(self, x: Tensor) -> Tensor:
        return F.avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.mode)
