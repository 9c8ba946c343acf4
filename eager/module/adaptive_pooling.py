"""Pooling to a given output size (MegEngine's `megengine.module.adaptive_pooling`)."""

from __future__ import annotations

from .. import functional as F
from ..core.tensors import Tensor
from ._params import Ints
from .module import Module


class AdaptiveAvgPool2d(Module):
    def __init__(self, oshp: Ints):
        super().__init__()
        self.oshp = oshp

    def forward(self, x: Tensor) -> Tensor:
        return F.adaptive_avg_pool2d(x, self.oshp)


class AdaptiveMaxPool2d(Module):
    """Max pooling of NCHW input to the output size `oshp` (`F.adaptive_max_pool2d`)."""

    def __init__(self, oshp: Ints):
        super().__init__()
        self.oshp = oshp

    def forward(self, x: Tensor) -> Tensor:
        return F.adaptive_max_pool2d(x, self.oshp)

    def _extra_repr(self) -> str:
        return f"oshp={self.oshp}"
