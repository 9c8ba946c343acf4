"""`Pad` (MegEngine's `megengine.module.padding`)."""

from __future__ import annotations

from typing import Any

from .. import functional as F
from ..core.tensors import Tensor
from .module import Module


class Pad(Module):
    """`F.pad` as a layer: (before, after) widths per axis, mode "constant" (with
    `constant_val`), "reflect" or "replicate"."""

    def __init__(self, pad_width: Any, mode: str = "constant", constant_val: float = 0.0):
        super().__init__()
        self.pad_width, self.mode, self.pad_val = pad_width, mode, constant_val

    def forward(self, x: Tensor) -> Tensor:
        return F.pad(x, self.pad_width, self.mode, self.pad_val)

    def _extra_repr(self) -> str:
        return f"pad_width={self.pad_width}, mode={self.mode!r}"
