"""Dropout layers (MegEngine's `megengine.module.dropout`, and PyTorch's channel-wise Dropout2d)."""

from __future__ import annotations

from .. import functional as F
from .. import random
from ..core.errors import OpArgumentError
from ..core.tensors import Tensor
from .module import Module


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
