"""`SlidingWindow` and `SlidingWindowTranspose` (MegEngine's `megengine.module.sliding_window`):
im2col and col2im as layers, over `F.sliding_window` and `F.sliding_window_transpose`."""

from __future__ import annotations

from .. import functional as F
from ..core.tensors import Tensor
from ._params import Ints
from .module import Module


class SlidingWindow(Module):
    """Every `kernel_size` window of an NCHW input, as (N, C, OH, OW, kh, kw)."""

    def __init__(self, kernel_size: Ints, padding: Ints = 0, stride: Ints = 1,
                 dilation: Ints = 1):
        super().__init__()
        self.kernel_size, self.padding = kernel_size, padding
        self.stride, self.dilation = stride, dilation

    def forward(self, x: Tensor) -> Tensor:
        return F.sliding_window(x, self.kernel_size, self.padding, self.stride, self.dilation)


class SlidingWindowTranspose(Module):
    """(N, C, OH, OW, kh, kw) windows summed back onto an (N, C, *output_size) image."""

    def __init__(self, output_size: Ints, kernel_size: Ints, padding: Ints = 0,
                 stride: Ints = 1, dilation: Ints = 1):
        super().__init__()
        self.output_size, self.kernel_size, self.padding = output_size, kernel_size, padding
        self.stride, self.dilation = stride, dilation

    def forward(self, x: Tensor) -> Tensor:
        return F.sliding_window_transpose(x, self.output_size, self.kernel_size, self.padding,
                                          self.stride, self.dilation)
