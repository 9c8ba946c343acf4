"""Normalizations other than BatchNorm (MegEngine's `megengine.module.normalization`):
GroupNorm, InstanceNorm and LayerNorm."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import functional as F
from ..core.creation import ones, zeros
from ..core.tensors import Parameter, Tensor
from ..serialization import layouts
from ._params import _tuple
from .module import Module


class GroupNorm(Module):
    """Normalization over groups of channels of an (N, C, ...) input."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True):
        super().__init__()
        self.num_groups, self.num_channels, self.eps, self.affine = (
            num_groups, num_channels, eps, affine)
        self.weight = Parameter(ones(num_channels)) if affine else None
        self.bias = Parameter(zeros(num_channels)) if affine else None

    def forward(self, x: Tensor) -> Tensor:
        return F.group_norm(x, self.num_groups, self.affine, self.weight, self.bias, self.eps)


class InstanceNorm(Module):
    """Instance normalization of NCHW input (`F.instance_norm`), with a per-channel `weight`
    (ones) and `bias` (zeros) of shape (C,) when `affine`."""

    def __init__(self, num_channels: int, eps: float = 1e-5, affine: bool = True):
        super().__init__()
        self.num_channels, self.eps, self.affine = num_channels, eps, affine
        self.weight = Parameter(ones(num_channels)) if affine else None
        self.bias = Parameter(zeros(num_channels)) if affine else None

    def forward(self, x: Tensor) -> Tensor:
        return F.instance_norm(x, self.affine, self.weight, self.bias, self.eps)

    def _extra_repr(self) -> str:
        return f"channels={self.num_channels}, eps={self.eps}, affine={self.affine}"


class LayerNorm(Module):
    """Normalization over the trailing `normalized_shape` axes, with weight and bias."""

    def __init__(self, normalized_shape: int | Sequence[int], eps: float = 1e-5,
                 affine: bool = True):
        super().__init__()
        self.normalized_shape = _tuple(normalized_shape, 1)
        self.eps, self.affine = eps, affine
        self.weight = Parameter(ones(self.normalized_shape)) if affine else None
        self.bias = Parameter(zeros(self.normalized_shape)) if affine else None

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, self.normalized_shape, self.affine, self.weight, self.bias, self.eps)

    def _load_layouts(self, state: dict[str, Any], prefix: str) -> None:
        """MegEngine stores the weight and bias of a 2-d or larger shape flattened."""
        super()._load_layouts(state, prefix)
        layouts.reshape(state, f"{prefix}weight", getattr(self, "weight", None), layouts.flat)
        layouts.reshape(state, f"{prefix}bias", getattr(self, "bias", None), layouts.flat)
