"""The pieces quantization is built from (MegEngine's `megengine.quantization.utils`): quantization
modes and parameters, the quantized dtype metas, and fake quantization of a tensor and of a bias.

`fake_quant_tensor`, `tqt_forward` and `lsq_forward` each run one op of
`eager/core/ops/quantize.py`, whose docstring gives the formulas and MegEngine's gradients.

>>> import eager as eg
>>> qp = create_qparams(QuantMode.SYMMERTIC, "qint8", scale=eg.tensor(0.5))
>>> fake_quant_tensor(eg.tensor([0.3, 1.0, 100.0]), qp).numpy().tolist()
[0.5, 1.0, 63.5]
"""

from __future__ import annotations

import abc
from typing import Any

import numpy as np

from ..core.errors import OpArgumentError, OpTypeError
from ..core.op_errors import require
from ..core.ops import OPS
from ..core.quant_dtype import (
    BUILTIN_QUANT_DTYPES,
    LSQParams,
    QParams,
    QuantDtypeMeta,
    QuantMode,
    create_quantized_dtype,
)
from ..core.tensors import Tensor, apply

__all__ = ["QuantMode", "QParams", "LSQParams", "QParamsModuleMixin", "QuantDtypeMeta",
           "create_qparams", "fake_quant_tensor", "fake_quant_bias", "tqt_forward",
           "lsq_forward", "get_dtype_meta"]


def get_dtype_meta(dtype: str | QuantDtypeMeta | None) -> QuantDtypeMeta | None:
    """The meta of a quantized dtype given by name ("qint8", "qint8_narrow", "quint8", ...) or
    as a meta; None stays None."""
    if dtype is None or isinstance(dtype, QuantDtypeMeta):
        return dtype
    if isinstance(dtype, str) and dtype in BUILTIN_QUANT_DTYPES:
        return BUILTIN_QUANT_DTYPES[dtype]
    raise OpArgumentError(f"unknown quantized dtype {dtype!r}: give one of "
                          f"{sorted(BUILTIN_QUANT_DTYPES)} or a QuantDtypeMeta.")


def _tensor(value: Any) -> Tensor:
    return value if isinstance(value, Tensor) else Tensor(np.asarray(value, np.float32))


class QParamsModuleMixin(abc.ABC):
    """What observers and learnable fake quantizers share: `get_qparams()`, and the quantized
    dtype those parameters describe."""

    def get_quantized_dtype(self) -> np.dtype:
        """The numpy quantized dtype of `get_qparams()` (reads the scale on the host)."""
        qparams = self.get_qparams()
        scale = None if qparams.scale is None else float(np.asarray(qparams.scale.numpy()))
        zero_point = (None if qparams.zero_point is None
                      else int(np.asarray(qparams.zero_point.numpy())))
        return create_quantized_dtype(qparams.dtype_meta, scale, zero_point)  # type: ignore

    @abc.abstractmethod
    def get_qparams(self) -> QParams:
        """The current quantization parameters."""


def create_qparams(mode: QuantMode | None = QuantMode.SYMMERTIC,
                   dtype_meta: str | QuantDtypeMeta | None = None, scale: Tensor | None = None,
                   zero_point: Tensor | None = None) -> QParams:
    """A `QParams`; `dtype_meta` may be a dtype's name."""
    if mode is not None and not isinstance(mode, QuantMode):
        raise OpTypeError(f"mode must be a QuantMode (or None); got {mode!r}.")
    return QParams(mode, get_dtype_meta(dtype_meta), scale, zero_point)


def _range(qparams: QParams) -> tuple[int, int]:
    meta = qparams.dtype_meta
    if meta is None or qparams.scale is None:
        raise OpArgumentError("fake quantization needs qparams with a dtype_meta and a scale; "
                              f"got {qparams!r}.")
    return int(meta.qmin), int(meta.qmax)


def fake_quant_tensor(inp: Tensor, qparams: QParams) -> Tensor:
    """`inp` quantized with `qparams` (mode, dtype range, scale, zero point: asymmetric only)
    and dequantized; the gradient passes straight through inside the range."""
    qmin, qmax = _range(qparams)
    zero_point = (_tensor(qparams.zero_point) if qparams.mode == QuantMode.ASYMMERTIC
                  else np.float32(0.0))
    scale = _tensor(qparams.scale)
    require("fake_quant", inp, scale, zero_point, qmin=qmin, qmax=qmax)
    return apply(OPS["fake_quant"], inp, scale, zero_point, qmin=qmin, qmax=qmax)


def tqt_forward(qmin: int, qmax: int, inp: Tensor, scale: Tensor) -> Tensor:
    """TQT fake quantization with the scale 2**`scale` (`scale` is its base-2 logarithm)."""
    scale = _tensor(scale)
    require("tqt", inp, scale, qmin=int(qmin), qmax=int(qmax))
    return apply(OPS["tqt"], inp, scale, qmin=int(qmin), qmax=int(qmax))


def lsq_forward(qmin: int, qmax: int, inp: Tensor, step_size: Tensor,
                zero_point: Tensor | None = None, scale_grad: Tensor | None = None) -> Tensor:
    """LSQ fake quantization with step size `step_size`; `scale_grad` scales the step size's
    gradient (1 by default), `zero_point` is 0 by default."""
    zp = np.float32(0.0) if zero_point is None else _tensor(zero_point)
    gs = np.float32(1.0) if scale_grad is None else _tensor(scale_grad)
    step_size = _tensor(step_size)
    require("lsq", inp, step_size, zp, gs, qmin=int(qmin), qmax=int(qmax))
    return apply(OPS["lsq"], inp, step_size, zp, gs, qmin=int(qmin), qmax=int(qmax))


def _bias_scale_ok(inp_params: QParams, w_params: QParams) -> bool:
    """Whether a bias can be fake-quantized from these: both symmetric int8 with scales (what
    MegEngine supports; otherwise the bias stays as it is)."""
    return (inp_params.scale is not None and w_params.scale is not None
            and inp_params.mode == QuantMode.SYMMERTIC and w_params.mode == inp_params.mode
            and inp_params.dtype_meta is not None and w_params.dtype_meta is not None
            and inp_params.dtype_meta.np_dtype_str == "int8"
            and w_params.dtype_meta.np_dtype_str == "int8")


def fake_quant_bias(bias: Tensor | None, inp: Tensor, w_qat: Tensor) -> Tensor | None:
    """`bias` fake-quantized to qint32 with scale inp's scale * weight's scale (read from their
    `qparams`), as an int8 kernel accumulates; unchanged unless both are symmetric int8."""
    if bias is None:
        return bias
    inp_params = getattr(inp, "qparams", None)
    w_params = getattr(w_qat, "qparams", None)
    if inp_params is None or w_params is None or not _bias_scale_ok(inp_params, w_params):
        return bias
    b_params = create_qparams(w_params.mode, BUILTIN_QUANT_DTYPES["qint32"],
                              scale=inp_params.scale * w_params.scale)
    out = fake_quant_tensor(bias, b_params)
    out.qparams.update(b_params)
    return out
