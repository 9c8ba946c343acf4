"""MegEngine's `megengine.module.concat`: `Concat`, `F.concat` as a module, so that
quantization can observe and fake-quantize its output (`eager.module.qat.Concat`)."""

from __future__ import annotations

from collections.abc import Iterable

from .. import functional as F
from ..core.tensors import Tensor
from .module import Module


class Concat(Module):
    """`F.concat(inps, axis)`."""

    def forward(self, inps: Iterable[Tensor], axis: int = 0) -> Tensor:
        return F.concat(list(inps), axis)
