"""MegEngine's Linear-BatchNorm modules (`megengine.module.linear_bn`): LinearBn1d and
LinearBnRelu1d.

In float they compute what their parts do; quantization-aware training folds the BatchNorm into
the Linear's weight (`eager.module.qat`). They hold a `linear` and a `bn` submodule, and, as
MegEngine's do, a `bias` parameter of their own (out_features,) that no computation reads: it
is kept so MegEngine's state dicts of these modules load key for key.
"""

from __future__ import annotations

from .. import functional as F
from ..core.tensors import Tensor
from ._params import _bias
from .batchnorm import BatchNorm1d
from .linear import Linear
from .module import Module


class _LinearBnActivation1d(Module):
    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 compute_mode: str = "default", eps: float = 1e-5, momentum: float = 0.9,
                 affine: bool = True, track_running_stats: bool = True):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.bias = _bias((out_features,)) if bias else None
        self.linear = Linear(in_features, out_features, bias, compute_mode)
        self.bn = BatchNorm1d(out_features, eps, momentum, affine, track_running_stats)


class LinearBn1d(_LinearBnActivation1d):
    """bn(linear(x)), a `Linear` then a `BatchNorm1d`: MegEngine's arguments of both."""

    def forward(self, x: Tensor) -> Tensor:
        return self.bn(self.linear(x))


class LinearBnRelu1d(_LinearBnActivation1d):
    """relu(bn(linear(x))): MegEngine's arguments of `Linear` and `BatchNorm1d`."""

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(self.bn(self.linear(x)))
