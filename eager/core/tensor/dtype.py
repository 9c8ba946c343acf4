"""MegEngine's `megengine.core.tensor.dtype`, the path MegEngine's code and users import the
quantized dtypes from: those of `eager/core/quant_dtype.py` (`eager.quantization.dtype` is
their public home).

>>> get_scale(qint8(0.25))
0.25
"""

from ..quant_dtype import (
    QuantDtypeMeta,
    _builtin_quant_dtypes,
    convert_from_qint1,
    convert_from_qint4,
    convert_from_qint8,
    convert_from_qint32,
    convert_from_quint4,
    convert_from_quint8,
    convert_to_qint1,
    convert_to_qint4,
    convert_to_qint8,
    convert_to_qint32,
    convert_to_quint4,
    convert_to_quint8,
    create_quantized_dtype,
    get_scale,
    get_zero_point,
    is_quantize,
    qint1,
    qint4,
    qint8,
    qint32,
    quint4,
    quint8,
)

__all__ = ["QuantDtypeMeta", "create_quantized_dtype", "qint8", "quint8", "qint32", "qint4",
           "quint4", "qint1", "get_scale", "get_zero_point", "is_quantize", "convert_to_qint8",
           "convert_from_qint8", "convert_to_quint8", "convert_from_quint8", "convert_to_qint32",
           "convert_from_qint32", "convert_to_qint4", "convert_from_qint4", "convert_to_quint4",
           "convert_from_quint4", "convert_to_qint1", "convert_from_qint1"]
_ = _builtin_quant_dtypes  # MegEngine code imports it from here
