"""`PixelShuffle` (MegEngine's `megengine.module.pixel_shuffle`)."""

from __future__ import annotations

from .. import functional as F
from ..core.tensors import Tensor
from .module import Module


class PixelShuffle(Module):
    """(..., C * r * r, H, W) -> (..., C, H * r, W * r), r = `upscale_factor`
    (`F.pixel_shuffle`)."""

    def __init__(self, upscale_factor: int):
        super().__init__()
        self.upscale_factor = upscale_factor

    def forward(self, x: Tensor) -> Tensor:
        return F.pixel_shuffle(x, self.upscale_factor)

    def _extra_repr(self) -> str:
        return f"upscale_factor={self.upscale_factor}"
