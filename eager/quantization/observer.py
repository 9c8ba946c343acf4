"""Observers (MegEngine's `megengine.quantization.observer`): modules that pass their input
through and record its range, from which `get_qparams()` computes a scale and zero point.

Their statistics are buffers (`min_val`, `max_val`, ...) that `forward` replaces by ops alone,
never reading a value on the host, so that an observer inside `partial_trace` or `xla_trace`
updates them in the compiled program, as state the step writes back (or, if it fails, leaves
as it was). The histogram observer is the exception: its bins are re-gridded on the host, as
MegEngine's are, so it reads its input (a graph break in a compiled region); it is meant for
calibration, which runs eagerly.
"""

from __future__ import annotations

from abc import abstractmethod
from copy import deepcopy
from typing import Any

import numpy as np

from .. import functional as F
from ..core.context import atomic
from ..core.errors import OpArgumentError
from ..core.ops import OPS
from ..core.process_group import is_distributed
from ..core.quant_dtype import QParams, QuantDtypeMeta, QuantMode
from ..core.tensors import Tensor, apply, rebind
from ..functional.distributed import all_reduce_max, all_reduce_min
from ..module.module import Module
from ._histogram import combine, non_linear_search
from ._quantizer import Quantizer
from .utils import QParamsModuleMixin, create_qparams

__all__ = ["Observer", "MinMaxObserver", "SyncMinMaxObserver", "ExponentialMovingAverageObserver",
           "SyncExponentialMovingAverageObserver", "HistogramObserver", "PassiveObserver"]

_F32 = np.float32


def _scalar(value: float) -> Tensor:
    return Tensor(np.asarray(value, _F32))


class Observer(Quantizer, QParamsModuleMixin):
    """Base of the observers: the quantized dtype whose range they compute parameters for, and
    `enable`/`disable` (also set by `train`/`eval`, as in MegEngine)."""

    def train(self, mode: bool = True, recursive: bool = True) -> Module:
        out = super().train(mode, recursive)
        self.enable() if mode else self.disable()
        return out

    @abstractmethod
    def forward(self, x: Tensor) -> Tensor:
        """Record `x`'s statistics and return it."""


class MinMaxObserver(Observer):
    """Records the running minimum and maximum of its inputs; the scale spreads that range
    (widened to include 0) over the dtype's grid, at least `eps`."""

    def __init__(self, mode: QuantMode = QuantMode.SYMMERTIC, eps: float = 0.00001,
                 dtype: str | QuantDtypeMeta = "qint8", **kwargs: Any):
        super().__init__(dtype, **kwargs)
        self.mode = mode
        self.min_val = _scalar(np.finfo(_F32).max)
        self.max_val = _scalar(np.finfo(_F32).min)
        self.scale_limit = eps

    def _calculate_qparams(self, inp_min_val: Tensor, inp_max_val: Tensor) -> QParams:
        symmetric = self.mode == QuantMode.SYMMERTIC
        scale, zero_point = apply(OPS["minmax_qparams"], inp_min_val, inp_max_val,
                                  qmin=int(self.qmin), qmax=int(self.qmax),
                                  eps=float(self.scale_limit), symmetric=symmetric)
        return create_qparams(self.mode, self.dtype, scale=scale,
                              zero_point=None if symmetric else zero_point)

    def get_qparams(self) -> QParams:
        return self._calculate_qparams(self.min_val, self.max_val)

    def _batch_range(self, x: Tensor) -> tuple[Tensor, Tensor]:
        return x.min(), x.max()

    def forward(self, x_orig: Tensor) -> Tensor:
        if self.enabled:
            low, high = self._batch_range(x_orig.detach())
            new_min, new_max = F.minimum(self.min_val, low), F.maximum(self.max_val, high)
            with atomic():  # both statistics, or (a signal before) neither
                rebind(self.min_val, new_min)
                rebind(self.max_val, new_max)
        return x_orig


def _world_range(x: Tensor) -> tuple[Tensor, Tensor]:
    """x's minimum and maximum over all ranks (this rank's when not distributed)."""
    low, high = x.min(), x.max()
    if is_distributed():
        low, high = all_reduce_min(low), all_reduce_max(high)
    return low, high


class SyncMinMaxObserver(MinMaxObserver):
    """A `MinMaxObserver` whose range is taken over every rank's batch."""

    def _batch_range(self, x: Tensor) -> tuple[Tensor, Tensor]:
        return _world_range(x)


class ExponentialMovingAverageObserver(MinMaxObserver):
    """A `MinMaxObserver` whose range is an exponential moving average of the batches' ranges
    (`momentum` of the old one); the first batch's range is taken as it is."""

    def __init__(self, momentum: float = 0.9, mode: QuantMode = QuantMode.SYMMERTIC,
                 eps: float = 0.00001, dtype: str | QuantDtypeMeta = "qint8", **kwargs: Any):
        super().__init__(mode, eps, dtype, **kwargs)
        self.momentum = _scalar(momentum)
        # 0 until the first batch, then `momentum`: the first update needs no branch, which a
        # compiled region could not take on a value
        self.runtime_momentum = _scalar(0.0)

    def set_momentum(self, momentum: float) -> None:
        self.momentum = _scalar(momentum)

    def forward(self, x_orig: Tensor) -> Tensor:
        if self.enabled:
            low, high = self._batch_range(x_orig.detach())
            m = self.runtime_momentum
            new_min = self.min_val * m + (1 - m) * low
            new_max = self.max_val * m + (1 - m) * high
            new_m = self.momentum + 0  # a value of its own, not the momentum buffer
            with atomic():
                rebind(self.min_val, new_min)
                rebind(self.max_val, new_max)
                rebind(self.runtime_momentum, new_m)
        return x_orig


class SyncExponentialMovingAverageObserver(ExponentialMovingAverageObserver):
    """An `ExponentialMovingAverageObserver` whose batch range is taken over every rank."""

    def _batch_range(self, x: Tensor) -> tuple[Tensor, Tensor]:
        return _world_range(x)


class HistogramObserver(MinMaxObserver):
    """A `MinMaxObserver` that also keeps a histogram of its inputs (`bins` bins over the running
    range, re-gridded as the range grows, interpolated at `upsample_rate`); `get_qparams` picks
    the range that minimizes the L2 quantization error, cutting outliers. For calibration: it
    works on the host (see the module's docstring)."""

    def __init__(self, bins: int = 2048, upsample_rate: int = 128,
                 mode: QuantMode = QuantMode.SYMMERTIC, eps: float = 0.00001,
                 dtype: str | QuantDtypeMeta = "qint8", **kwargs: Any):
        super().__init__(mode, eps, dtype, **kwargs)
        self.bins = bins
        self.upsample_rate = upsample_rate
        self.dst_nbins = self.qmax - self.qmin + 1
        # -1 in the first bin: no batch seen yet
        self.histogram = Tensor(np.asarray([-1.0] + [0.0] * (bins - 1), _F32))

    def get_qparams(self) -> QParams:
        low, high = float(self.min_val.numpy()), float(self.max_val.numpy())
        start, end = non_linear_search(self.histogram.numpy(), low, high, self.dst_nbins)
        width = (high - low) / self.bins
        new_min = self.min_val + _scalar(width * start)
        new_max = self.min_val + _scalar(width * (end + 1))
        return self._calculate_qparams(new_min, new_max)

    def forward(self, x_orig: Tensor) -> Tensor:
        x = x_orig.numpy()
        hist, low, high = combine(self.histogram.numpy(), float(self.min_val.numpy()),
                                  float(self.max_val.numpy()), x, self.bins,
                                  self.upsample_rate)
        with atomic():
            rebind(self.histogram, Tensor(np.asarray(hist, _F32)))
            rebind(self.min_val, _scalar(low))
            rebind(self.max_val, _scalar(high))
        return x_orig


class PassiveObserver(Observer):
    """An observer whose parameters are set, not observed (`set_qparams`, or `scale = ...`);
    `apply_easy_quant` tunes them."""

    def __init__(self, dtype: str | QuantDtypeMeta, **kwargs: Any):
        super().__init__(dtype, **kwargs)
        self.qparams: QParams | None = None
        self.orig_scale: np.ndarray | None = None

    def _params(self) -> QParams:
        if self.qparams is None:
            raise OpArgumentError("this PassiveObserver has no qparams yet: call "
                                  "set_qparams(...) first.")
        return self.qparams

    @property
    def scale(self) -> Tensor:
        return self._params().scale

    @scale.setter
    def scale(self, value: Any) -> None:
        if not np.all(np.asarray(value) > 0):
            raise OpArgumentError(f"a scale must be positive; got {value!r}.")
        params = self._params()
        params.scale[...] = Tensor(np.asarray(value, _F32))

    def get_qparams(self) -> QParams:
        return self._params()

    def set_qparams(self, qparams: QParams) -> None:
        """Take a copy of `qparams` (which must have a scale; its dtype, if given, must be
        this observer's)."""
        if qparams.scale is None:
            raise OpArgumentError("set_qparams needs qparams with a scale; got scale=None.")
        if qparams.dtype_meta is not None and qparams.dtype_meta is not self.dtype:
            raise OpArgumentError(f"the qparams' dtype {qparams.dtype_meta.name} is not this "
                                  f"observer's {self.dtype.name}.")
        self.qparams = deepcopy(qparams)
        if self.qparams.dtype_meta is None:
            self.qparams.dtype_meta = self.dtype
        self.orig_scale = np.asarray(qparams.scale.numpy())

    def forward(self, x: Tensor) -> Tensor:
        return x

