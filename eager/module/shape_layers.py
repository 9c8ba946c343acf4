"""PyTorch's shape layers that MegEngine lacks: Flatten and Upsample."""

from __future__ import annotations

from typing import Any

from .. import functional as F
from ..core.errors import OpArgumentError
from ..core.tensors import Tensor
from .module import Module


class Flatten(Module):
    """Flatten axes start_axis..end_axis (default: all but the batch axis)."""

    def __init__(self, start_axis: int = 1, end_axis: int = -1):
        super().__init__()
        self.start_axis, self.end_axis = start_axis, end_axis

    def forward(self, x: Tensor) -> Tensor:
        return F.flatten(x, self.start_axis, self.end_axis)


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
