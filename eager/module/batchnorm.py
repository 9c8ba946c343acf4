"""Batch normalization (MegEngine's `megengine.module.batchnorm`): BatchNorm1d, BatchNorm2d and
SyncBatchNorm."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from .. import functional as F
from ..core import frozen
from ..core.context import atomic
from ..core.creation import ones, zeros
from ..core.errors import OpArgumentError
from ..core.ops import OPS, collective
from ..core.process_group import get_world_size
from ..core.tensors import Parameter, Tensor, apply, rebind
from .module import Module


class _BatchNorm(Module):
    """Batch normalization over axis 1.

    Statistics are kept and computed in float32; float16 and bfloat16 inputs are normalized in
    float32 and come back in their own dtype. `track_running_stats` is read at each call, so
    turning it off later means: batch statistics in training and in eval, and no update of the
    running statistics (MegEngine; PyTorch would still use existing buffers in eval). The
    running statistics and the affine parameters have MegEngine's shape (1, C, 1, 1) (code such
    as `bn.running_var[...] = v * ones((1, C, 1, 1))` runs as written), and `state_dict()` gives
    them as (C,), as MegEngine's does; either layout loads (`Module.load_state_dict`).

    With `freeze=True` (MegEngine's; read at each call) it normalizes with the running
    statistics in training too, never updates them, and passes no gradient to `weight` and
    `bias`; the input still gets its gradient.
    """

    _ndims: tuple[int, ...] = (4,)

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.9,
                 affine: bool = True, track_running_stats: bool = True, freeze: bool = False):
        super().__init__()
        if freeze and not track_running_stats:
            raise OpArgumentError(f"{type(self).__name__}: freeze=True normalizes with the "
                                  "running statistics, so it needs track_running_stats=True")
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats, self.freeze = affine, track_running_stats, freeze
        shape = (1, num_features, 1, 1)  # MegEngine's, for every input rank
        self.weight = Parameter(ones(shape)) if affine else None
        self.bias = Parameter(zeros(shape)) if affine else None
        self.running_mean = zeros(shape) if track_running_stats else None
        self.running_var = ones(shape) if track_running_stats else None
        frozen.register(self)

    def constant_parameters(self) -> list[Tensor]:
        """With `freeze`, the affine parameters: read as constants, they get no gradient (an
        optimizer predicting its first step asks, `eager.core.frozen`)."""
        return [p for p in (self.weight, self.bias) if p is not None] if self.freeze else []

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim not in self._ndims:
            dims = " or ".join(map(str, self._ndims))
            raise OpArgumentError(f"{type(self).__name__} expects a {dims}-d input, got shape "
                                  f"{x.shape}")
        dtype = np.dtype(x.dtype)
        low = jnp.issubdtype(dtype, jnp.floating) and dtype.itemsize < 4
        x = x.astype(np.float32) if low else x
        y = self._frozen(x) if self.freeze else self._normalize(x)
        return y.astype(dtype) if low else y

    def _frozen(self, x: Tensor) -> Tensor:
        """`freeze`: the running statistics, and the affine parameters as constants."""
        weight, bias = (None if p is None else p.detach() for p in (self.weight, self.bias))
        return F.batch_norm(x, self.running_mean, self.running_var, weight, bias,
                            training=False, eps=self.eps)

    def _tracking(self) -> bool:
        """Whether this call uses and updates running statistics: the flag as it is now. A
        module built without them has no buffers to track them in (MegEngine refuses too)."""
        if not self.track_running_stats:
            return False
        if self.running_mean is None or self.running_var is None:
            raise OpArgumentError(
                f"{type(self).__name__} was built with track_running_stats=False, so it has no "
                "running statistics to track; build it with track_running_stats=True (or set "
                "running_mean and running_var first)")
        return True

    def _normalize(self, x: Tensor) -> Tensor:
        track = self._tracking()
        return F.batch_norm(
            x, self.running_mean if track else None, self.running_var if track else None,
            self.weight, self.bias, training=self.training or not track,
            momentum=self.momentum, eps=self.eps,
        )

    def _extra_repr(self) -> str:
        return f"{self.num_features}, eps={self.eps}, momentum={self.momentum}"

    def _state_array(self, t: Tensor) -> np.ndarray:
        """MegEngine's BatchNorm state dict holds its per-channel tensors flattened, (C,)."""
        return t.numpy().reshape(-1)


class BatchNorm1d(_BatchNorm):
    """BatchNorm over (N, C) or (N, C, L); MegEngine momentum, as BatchNorm2d."""

    _ndims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """BatchNorm over NCHW; MegEngine momentum (running = m*running + (1-m)*batch)."""


class SyncBatchNorm(_BatchNorm):
    """BatchNorm whose batch statistics cover the batches of every rank of the process group
    (MegEngine's `SyncBatchNorm`): the same as `BatchNorm2d` on the whole batch, with running
    statistics identical on every rank. Over (N, C), (N, C, L) or (N, C, H, W).

    A batch sharded over a mesh (`dist.shard_batch`) needs nothing more: its statistics are over
    the global batch already, as for any BatchNorm.
    """

    _ndims = (2, 3, 4)

    def _normalize(self, x: Tensor) -> Tensor:
        world, track = get_world_size(), self._tracking()
        if world == 1 or not (self.training or not track):
            return super()._normalize(x)
        axes = (0, *range(2, x.ndim))
        count = (x.size // x.shape[1]) * world
        channel = (1, x.shape[1]) + (1,) * (x.ndim - 2)
        mean = apply(collective.all_reduce_sum, x.sum(axis=axes)) / count
        centered = x - mean.reshape(channel)
        var = apply(collective.all_reduce_sum, (centered * centered).sum(axis=axes)) / count
        y = centered * F.rsqrt(var + self.eps).reshape(channel)
        if self.weight is not None:
            y = y * self.weight.reshape(channel)
        if self.bias is not None:
            y = y + self.bias.reshape(channel)
        if track and self.training:
            assert self.running_mean is not None and self.running_var is not None  # _tracking()
            new_mean, new_var = apply(OPS["running_stats_update"], self.running_mean,
                                      self.running_var, mean, var * (count / max(count - 1, 1)),
                                      momentum=float(self.momentum))
            with atomic():  # both statistics, or (a signal before) neither
                rebind(self.running_mean, new_mean)
                rebind(self.running_var, new_var)
        return y
