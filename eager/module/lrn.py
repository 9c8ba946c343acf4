"""`LocalResponseNorm` (MegEngine's `megengine.module.lrn`)."""

from __future__ import annotations

from .. import functional as F
from ..core.tensors import Tensor
from .module import Module


class LocalResponseNorm(Module):
    """Local response normalization across channels (`F.local_response_norm`)."""

    def __init__(self, kernel_size: int = 5, k: float = 2.0, alpha: float = 1e-4,
                 beta: float = 0.75):
        super().__init__()
        self.kernel_size, self.k, self.alpha, self.beta = kernel_size, k, alpha, beta

    def forward(self, x: Tensor) -> Tensor:
        return F.local_response_norm(x, self.kernel_size, self.k, self.alpha, self.beta)

    def _extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, k={self.k}, alpha={self.alpha}, beta={self.beta}"
