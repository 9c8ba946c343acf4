"""Fake quantizers (MegEngine's `megengine.quantization.fake_quant`): modules that quantize and
dequantize their input in training, so that the model learns under int8 rounding.

`FakeQuantize` takes its parameters from an observer (`forward(x, qparams)`); `TQT` learns its
scale as a base-2 logarithm, `LSQ` its step size, both as Parameters the optimizer updates. The
formulas and gradients are those of the ops in `eager/core/ops/quantize.py`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import functional as F
from ..core.errors import OpArgumentError
from ..core.quant_dtype import LSQParams, QParams, QuantDtypeMeta, QuantMode
from ..core.tensors import Parameter, Tensor, rebind
from ._quantizer import Quantizer
from .utils import (
    QParamsModuleMixin,
    create_qparams,
    fake_quant_tensor,
    lsq_forward,
    tqt_forward,
)

__all__ = ["FakeQuantize", "TQT", "LSQ"]

_F32 = np.float32


class _FakeQuantize(Quantizer):
    """What the fake quantizers share: the target dtype and `enable`/`disable` (disabled, the
    input passes unchanged)."""

    def fake_quant_forward(self, inp: Tensor, qparams: QParams | None = None) -> Tensor:
        raise NotImplementedError

    def normal_forward(self, inp: Tensor, qparams: QParams | None = None) -> Tensor:
        return inp

    def forward(self, inp: Tensor, qparams: QParams | None = None) -> Tensor:
        if self.enabled:
            return self.fake_quant_forward(inp, qparams=qparams)
        return self.normal_forward(inp, qparams=qparams)


class FakeQuantize(_FakeQuantize):
    """Quantize and dequantize with the scale and zero point an observer gives
    (`forward(x, observer.get_qparams())`)."""

    def fake_quant_forward(self, inp: Tensor, qparams: QParams | None = None) -> Tensor:
        if qparams is None or qparams.dtype_meta is not self.dtype:
            got = None if qparams is None else qparams.dtype_meta
            raise OpArgumentError(f"FakeQuantize of {self.dtype.name} was given qparams of "
                                  f"dtype {got}: pass the qparams of an observer of the same "
                                  "dtype.")
        return fake_quant_tensor(inp, qparams)


class TQT(_FakeQuantize, QParamsModuleMixin):
    """Trained quantization thresholds: symmetric fake quantization whose scale 2**`scale` is
    learned (`scale`, a Parameter, holds its base-2 logarithm)."""

    def __init__(self, dtype: str | QuantDtypeMeta, enable: bool = True, **kwargs: Any):
        super().__init__(dtype, enable, **kwargs)
        self.scale = Parameter(np.asarray(0.0, _F32))

    def fake_quant_forward(self, inp: Tensor, qparams: QParams | None = None) -> Tensor:
        return tqt_forward(self.qmin, self.qmax, inp, self.scale)

    def set_qparams(self, qparams: QParams) -> None:
        """Start from an observer's (symmetric) scale."""
        if qparams.mode != QuantMode.SYMMERTIC:
            raise OpArgumentError("TQT quantizes symmetrically; got qparams of mode "
                                  f"{qparams.mode}.")
        if qparams.scale is None:
            raise OpArgumentError("set_qparams needs qparams with a scale; got scale=None.")
        log2 = F.log(qparams.scale) / math.log(2)
        rebind(self.scale, log2.reshape(self.scale.shape).astype("float32").detach())

    def get_qparams(self) -> QParams:
        return create_qparams(QuantMode.SYMMERTIC, self.dtype, scale=2 ** self.scale)


class LSQ(_FakeQuantize, QParamsModuleMixin):
    """Learned step size quantization: fake quantization whose step size (|step_size| + eps, a
    Parameter) is learned, its gradient scaled by `grad_scale`."""

    def __init__(self, dtype: str | QuantDtypeMeta, enable: bool = True, eps: float = 1e-5,
                 **kwargs: Any):
        super().__init__(dtype=dtype, enable=enable, **kwargs)
        self.eps = Tensor(np.asarray(eps, _F32))
        self.step_size = Parameter(np.asarray(1.0, _F32))
        self.mode: QuantMode | None = None
        self.zero_point = Tensor(np.asarray(0.0, _F32))
        self.grad_scale = Tensor(np.asarray(1.0, _F32))

    def set_qparams(self, qparams: QParams) -> None:
        """Start from an observer's scale (and zero point, asymmetric); an `LSQParams` also
        gives the gradient's scale."""
        if qparams.scale is None:
            raise OpArgumentError("set_qparams needs qparams with a scale; got scale=None.")
        self.mode = qparams.mode
        if qparams.mode == QuantMode.ASYMMERTIC:
            self.zero_point = qparams.zero_point
        else:
            self.zero_point = Tensor(np.asarray(0.0, _F32))
        # the step size is |step_size| + eps: start it at scale - eps (0 for a smaller scale)
        scale = float(np.asarray(Tensor(qparams.scale).numpy()).reshape(-1)[0])
        eps = float(self.eps.numpy())
        rebind(self.step_size, Tensor(np.asarray(0.0 if scale < eps else scale - eps, _F32)))
        if isinstance(qparams, LSQParams):
            self.grad_scale = qparams.grad_scale

    def fake_quant_forward(self, inp: Tensor, qparams: QParams | None = None) -> Tensor:
        step_size = F.abs(self.step_size) + self.eps
        return lsq_forward(self.qmin, self.qmax, inp, step_size, self.zero_point,
                           self.grad_scale)

    def get_qparams(self) -> LSQParams:
        return LSQParams(mode=self.mode, dtype_meta=self.dtype,
                         scale=F.abs(self.step_size.detach()) + self.eps,
                         zero_point=self.zero_point, grad_scale=self.grad_scale)
