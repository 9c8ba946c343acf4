"""Parameter-free layers: activations, pooling, dropout, flatten, identity, upsampling."""

from __future__ import annotations

from typing import Any

from .. import functional as F
from .. import random
from ..errors import OpArgumentError
from ..tensors import Tensor
from .layers import Ints
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


class Dropout2d(Module):
    """Channel dropout over NCHW input: in training each (sample, channel) plane is zeroed with
    probability `drop_prob` and the kept ones scaled by 1/(1-drop_prob); the identity in eval.

    Whole feature maps are dropped because neighbouring pixels are correlated, so dropping single
    pixels regularizes convolutional features little.
    """

    def __init__(self, drop_prob: float = 0.0):
        super().__init__()
        self.drop_prob = drop_prob

    def forward(self, x: Tensor) -> Tensor:
        p = float(self.drop_prob)
        if not 0.0 <= p < 1.0:
            raise OpArgumentError(f"Dropout2d: drop_prob must be in [0, 1), got {p}")
        if x.ndim != 4:
            raise OpArgumentError(f"Dropout2d: expects an NCHW (4-d) input, got shape {x.shape}")
        if not self.training or p == 0.0:
            return x
        keep = random.uniform(size=(x.shape[0], x.shape[1], 1, 1)) >= p
        return x * (keep.astype(x.dtype) * (1.0 / (1.0 - p)))

    def _extra_repr(self) -> str:
        return f"drop_prob={self.drop_prob}"


class Upsample(Module):
    """Resize NCHW input to `size` or by `scale_factor` (`F.interpolate`); "nearest" by default."""

    def __init__(self, size: Any = None, scale_factor: Any = None, mode: str = "nearest",
                 align_corners: bool | None = None):
        super().__init__()
        if (size is None) == (scale_factor is None):
            raise OpArgumentError(f"Upsample: give exactly one of size and scale_factor, got "
                                  f"size={size!r}, scale_factor={scale_factor!r}")
        self.size, self.scale_factor = size, scale_factor
        self.mode, self.align_corners = mode, align_corners

    def forward(self, x: Tensor) -> Tensor:
        return F.interpolate(x, self.size, self.scale_factor, self.mode, self.align_corners)

    def _extra_repr(self) -> str:
        what = f"size={self.size}" if self.size is not None else f"scale_factor={self.scale_factor}"
        return f"{what}, mode={self.mode!r}"


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


class AdaptiveAvgPool2d(Module):
    def __init__(self, oshp: Ints):
        super().__init__()
        self.oshp = oshp

    def forward(self, x: Tensor) -> Tensor:
        return F.adaptive_avg_pool2d(x, self.oshp)
