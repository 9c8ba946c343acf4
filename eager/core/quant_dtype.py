"""Quantized dtypes and quantization parameters (MegEngine's `megengine.core.tensor.dtype`,
quantized part, and the data classes of `megengine.quantization.utils`).

A quantized dtype is a numpy integer dtype whose `metadata["mgb_dtype"]` holds MegEngine's
C name, the scale and (unsigned types) the zero point, as MegEngine makes them, so that code
reading `dtype.metadata` or calling `get_scale(dtype)` works unchanged. The real value of an
integer q is scale * (q - zero_point).

`QuantMode`, `QParams` and `LSQParams` live here, at the bottom of the core, because every
Tensor carries a `qparams` (a `QParams` whose fields are None until fake quantization sets
them), and the Tensor cannot import the quantization package above it.

>>> d = qint8(0.5)
>>> get_scale(d), is_quantize(d), d.metadata["mgb_dtype"]["name"]
(0.5, True, 'QuantizedS8')
"""

from __future__ import annotations

from enum import Enum
from typing import Any, NamedTuple

import numpy as np

from .errors import OpArgumentError, OpTypeError


class QuantDtypeMeta(NamedTuple):
    """What a quantized dtype is: its unique `name`, MegEngine's C name `cname` (None: it
    cannot be dumped), the numpy storage `np_dtype_str`, the integer range [qmin, qmax] and
    whether it is unsigned (asymmetric, with a zero point)."""

    name: str
    cname: str | None
    np_dtype_str: str
    qmin: int
    qmax: int
    is_unsigned: bool

    # a meta is a singleton: FakeQuantize compares metas by identity, and copies of a module
    # (deepcopy of a QAT model) must still hold the same one
    def __copy__(self) -> QuantDtypeMeta:
        return self

    def __deepcopy__(self, memo: Any) -> QuantDtypeMeta:
        return self


def _meta(name: str, cname: str | None, storage: str, qmin: int, qmax: int) -> QuantDtypeMeta:
    return QuantDtypeMeta(name, cname, storage, qmin, qmax, storage.startswith("u"))


#: The built-in quantized dtypes by name ("qint8_narrow" leaves out -128, so that a sum of two
#: products of extremes cannot overflow int16: weights use it)
BUILTIN_QUANT_DTYPES: dict[str, QuantDtypeMeta] = {
    "quint8": _meta("quint8", "Quantized8Asymm", "uint8", 0, 255),
    "qint8": _meta("qint8", "QuantizedS8", "int8", -128, 127),
    "qint8_narrow": _meta("qint8_narrow", "QuantizedS8", "int8", -127, 127),
    "quint4": _meta("quint4", "Quantized4Asymm", "uint8", 0, 15),
    "qint4": _meta("qint4", "QuantizedS4", "int8", -8, 7),
    "qint1": _meta("qint1", "QuantizedS1", "int8", 0, 1),
    "qint32": _meta("qint32", "QuantizedS32", "int32", -(2 ** 31), 2 ** 31 - 1),
    "quint2": _meta("quint2", None, "uint8", 0, 3),  # no C name: not dumped
    "qint2": _meta("qint2", None, "int8", -2, 1),
}
_builtin_quant_dtypes = BUILTIN_QUANT_DTYPES  # MegEngine's spelling, which user code imports


def create_quantized_dtype(dtype_meta: QuantDtypeMeta, scale: float,
                           zp: int | float | None) -> np.dtype:
    """The numpy dtype of `dtype_meta` carrying `scale` (and, unsigned types only, the integer
    zero point `zp` within [qmin, qmax]; signed types take None)."""
    if dtype_meta.cname is None:
        raise OpArgumentError(f"the quantized dtype {dtype_meta.name} has no C name and cannot "
                              "be made into a dtype.")
    info: dict[str, Any] = {"name": dtype_meta.cname, "scale": float(scale)}
    if dtype_meta.is_unsigned:
        if zp is None or int(zp) != zp:
            raise OpArgumentError(f"{dtype_meta.name} needs an integer zero_point; got {zp!r}.")
        if not dtype_meta.qmin <= int(zp) <= dtype_meta.qmax:
            raise OpArgumentError(f"zero_point={zp} is outside [{dtype_meta.qmin}, "
                                  f"{dtype_meta.qmax}] of {dtype_meta.name}.")
        info["zero_point"] = int(zp)
    elif zp is not None:
        raise OpArgumentError(f"{dtype_meta.name} is symmetric and takes no zero_point; got "
                              f"{zp!r}: pass None.")
    return np.dtype(dtype_meta.np_dtype_str, metadata={"mgb_dtype": info})


def quint8(scale: float, zero_point: int) -> np.dtype:
    """Unsigned 8-bit quantized dtype: value = scale * (q - zero_point)."""
    return create_quantized_dtype(BUILTIN_QUANT_DTYPES["quint8"], scale, zero_point)


def qint8(scale: float) -> np.dtype:
    """Signed 8-bit quantized dtype: value = scale * q."""
    return create_quantized_dtype(BUILTIN_QUANT_DTYPES["qint8"], scale, None)


def qint32(scale: float) -> np.dtype:
    """Signed 32-bit quantized dtype (biases, accumulators): value = scale * q."""
    return create_quantized_dtype(BUILTIN_QUANT_DTYPES["qint32"], scale, None)


def quint4(scale: float, zero_point: int) -> np.dtype:
    """Unsigned 4-bit quantized dtype (stored in uint8): value = scale * (q - zero_point)."""
    return create_quantized_dtype(BUILTIN_QUANT_DTYPES["quint4"], scale, zero_point)


def qint4(scale: float) -> np.dtype:
    """Signed 4-bit quantized dtype (stored in int8): value = scale * q."""
    return create_quantized_dtype(BUILTIN_QUANT_DTYPES["qint4"], scale, None)


def qint1(scale: float) -> np.dtype:
    """1-bit quantized dtype (stored in int8): value = scale * q."""
    return create_quantized_dtype(BUILTIN_QUANT_DTYPES["qint1"], scale, None)


def _info(dtype: Any) -> dict | None:
    metadata = getattr(np.dtype(dtype), "metadata", None) if dtype is not None else None
    return None if not metadata else metadata.get("mgb_dtype")


def is_quantize(dtype: Any) -> bool:
    """Whether `dtype` is a quantized dtype (carries a scale)."""
    info = _info(dtype)
    return info is not None and "scale" in info


def get_scale(dtype: Any) -> float:
    """The scale of a quantized dtype."""
    if not is_quantize(dtype):
        raise OpTypeError(f"{dtype!r} is not a quantized dtype and has no scale.")
    return _info(dtype)["scale"]  # type: ignore[index]


def get_zero_point(dtype: Any) -> int:
    """The zero point of an asymmetric (unsigned) quantized dtype."""
    info = _info(dtype)
    if info is None or "zero_point" not in info:
        raise OpTypeError(f"{dtype!r} is not an asymmetric quantized dtype and has no zero "
                          "point.")
    return info["zero_point"]


def _meta_of(dtype: np.dtype, expected: QuantDtypeMeta) -> dict:
    info = _info(dtype)
    if info is None or info.get("name") != expected.cname:
        raise OpTypeError(f"expected a {expected.name} dtype, got {dtype!r}.")
    return info


def convert_to_quantized(arr: np.ndarray, dtype: np.dtype, meta: QuantDtypeMeta) -> np.ndarray:
    """`arr` quantized to `dtype` (of kind `meta`): round half away from zero, shift, clip."""
    info = _meta_of(dtype, meta)
    q = np.asarray(arr) / info["scale"]
    q = np.trunc(q + np.copysign(0.5, q)) + info.get("zero_point", 0)
    return q.clip(meta.qmin, meta.qmax).astype(dtype)


def convert_from_quantized(arr: np.ndarray, meta: QuantDtypeMeta) -> np.ndarray:
    """The float32 values of a quantized array of kind `meta`."""
    info = _meta_of(arr.dtype, meta)
    return (arr.astype(np.float32) - info.get("zero_point", 0)) * np.float32(info["scale"])


def _converters(name: str) -> tuple:
    meta = BUILTIN_QUANT_DTYPES[name]

    def to(arr: np.ndarray, q: np.dtype) -> np.ndarray:
        return convert_to_quantized(arr, q, meta)

    def back(arr: np.ndarray) -> np.ndarray:
        return convert_from_quantized(arr, meta)

    to.__doc__ = f"Quantize a float array to the {name} dtype `q`."
    back.__doc__ = f"Dequantize a {name} array to float32."
    return to, back


convert_to_qint8, convert_from_qint8 = _converters("qint8")
convert_to_quint8, convert_from_quint8 = _converters("quint8")
convert_to_qint32, convert_from_qint32 = _converters("qint32")
convert_to_qint4, convert_from_qint4 = _converters("qint4")
convert_to_quint4, convert_from_quint4 = _converters("quint4")
convert_to_qint1, convert_from_qint1 = _converters("qint1")


# ----- quantization parameters ------------------------------------------------------------------
class QuantMode(Enum):
    """Symmetric (zero point 0) or asymmetric quantization; MegEngine's member names."""

    SYMMERTIC = 1
    ASYMMERTIC = 2


class QParams:
    """How a tensor is (fake-)quantized: mode, dtype meta, scale and zero point (Tensors or
    None). A subclass with more fields lists them in `__slots__`."""

    __slots__ = ("mode", "dtype_meta", "scale", "zero_point")

    def __init__(self, mode: QuantMode | None, dtype_meta: QuantDtypeMeta | None,
                 scale: Any, zero_point: Any):
        self.mode = mode
        self.dtype_meta = dtype_meta
        self.scale = scale
        self.zero_point = zero_point

    def update(self, qparams: QParams) -> None:
        """Take every field of `qparams`."""
        for key in self.__slots__:
            setattr(self, key, getattr(qparams, key))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, QParams) or len(self.__slots__) != len(other.__slots__):
            return False
        # identity first: a Tensor's == is elementwise
        return all(hasattr(other, k) and _same(getattr(self, k), getattr(other, k))
                   for k in self.__slots__)

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={getattr(self, k)}" for k in self.__slots__)
        return f"{type(self).__name__}({fields})"


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if a is None or b is None:
        return False
    return bool(np.all(np.asarray(a) == np.asarray(b)))


class LSQParams(QParams):
    """`QParams` with LSQ's `grad_scale`."""

    __slots__ = ("mode", "dtype_meta", "scale", "zero_point", "grad_scale")

    def __init__(self, mode: QuantMode | None, dtype_meta: QuantDtypeMeta | None, scale: Any,
                 zero_point: Any, grad_scale: Any):
        super().__init__(mode, dtype_meta, scale, zero_point)
        self.grad_scale = grad_scale


def default_qparams() -> QParams:
    """What a Tensor's `qparams` is until fake quantization sets it: symmetric, all else None
    (MegEngine's `create_qparams()`)."""
    return QParams(QuantMode.SYMMERTIC, None, None, None)
