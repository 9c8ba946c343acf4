"""MegEngine's `megengine.functional.quantized`: the int8 inference kernels as functions.

Each takes quantized tensors (`x.astype(qint8(s))`, a quantized module's weight, a bias in
qint32 of scale input scale x weight scale) and returns one of `dtype`, computed with integer
arithmetic: int8 products accumulated in int32, requantized with MegEngine's rounding (half away
from zero) and saturation (`eager/core/ops/quantized.py`). `linear` is the int8 matrix product
the quantized Linear layers run (MegEngine's runs `F.linear` on quantized tensors).

>>> import eager as eg
>>> from eager.quantization.dtype import qint8, qint32
>>> x = eg.ones((1, 1, 3, 3)).astype(qint8(0.5))
>>> w = eg.ones((1, 1, 3, 3)).astype(qint8(0.25))
>>> b = eg.zeros((1, 1, 1, 1)).astype(qint32(0.125))
>>> y = conv_bias_activation(x, w, b, dtype=qint8(0.5))
>>> y.numpy().astype("int8").ravel().tolist(), y.astype("float32").item()
([18], 9.0)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.errors import OpArgumentError, OpTypeError
from ..core.op_errors import bad_argument
from ..core.ops import OPS
from ..core.quant_dtype import qint8, qint32, quint8
from ..core.quantized_tensors import grid, is_quantized, storage, tag
from ..core.tensors import Tensor, apply
from ._args import _pair

__all__ = ["conv_bias_activation", "batch_conv_bias_activation", "conv_transpose2d", "linear"]


def _qdtype(fn: str, x: Any, what: str) -> np.dtype:
    dtype = getattr(x, "dtype", None)
    if not isinstance(x, Tensor) or not is_quantized(dtype):
        raise bad_argument(f"{fn}: the {what} must be a quantized tensor (x.astype(qint8(scale)))"
                           f"; got {type(x).__name__} of dtype {dtype}.", OpTypeError)
    return dtype  # type: ignore[return-value]


def _requant(fn: str, x: Tensor, weight: Tensor, dtype: Any, nonlinear: str) -> dict:
    """The static attributes that requantize the accumulator of `x` times `weight` to `dtype`
    (None: qint32 of the accumulator's scale)."""
    sx, sw = grid(_qdtype(fn, x, "input")), grid(_qdtype(fn, weight, "weight"))
    if sw.zero_point != 0:
        raise bad_argument(f"{fn}: the weight must be symmetric (qint8), got a zero point.",
                           OpArgumentError)
    acc_scale = float(np.float32(sx.scale) * np.float32(sw.scale))
    out = grid(qint32(acc_scale) if dtype is None else _out_dtype(fn, dtype))
    return dict(in_zero_point=sx.zero_point, acc_scale=acc_scale, out_scale=out.scale,
                multiplier=float(np.float32(acc_scale) / np.float32(out.scale)),
                nonlinear=str(nonlinear).lower(), zero_point=out.zero_point, qmin=out.qmin,
                qmax=out.qmax, storage=out.storage)


def _out_dtype(fn: str, dtype: Any) -> np.dtype:
    if not is_quantized(dtype):
        raise bad_argument(f"{fn}: dtype must be a quantized dtype (qint8(scale), ...) for "
                           f"quantized inputs; got {dtype!r}.", OpTypeError)
    return np.dtype(dtype)


def _bias(fn: str, bias: Any, acc_scale: float) -> Tensor | None:
    """The bias's int32 storage on the accumulator's grid (MegEngine requires its scale to be
    the input's times the weight's; a float bias is quantized to it)."""
    if bias is None:
        return None
    if not isinstance(bias, Tensor):
        bias = Tensor(np.asarray(bias, np.float32))
    if bias._qdtype is None or not np.isclose(grid(bias._qdtype).scale, acc_scale, rtol=1e-5):
        bias = bias.astype(qint32(acc_scale))
    return storage(bias)


def _conv_attrs(stride: Any, padding: Any, dilation: Any, conv_mode: Any) -> dict:
    mode = str(getattr(conv_mode, "name", conv_mode)).lower()
    if mode not in ("cross_correlation", "convolution"):
        raise bad_argument(f"conv_mode must be 'cross_correlation' or 'convolution', got "
                           f"{conv_mode!r}.")
    return dict(stride=_pair(stride), padding=_pair(padding), dilation=_pair(dilation),
                flip=mode == "convolution")


def _result(out: Tensor, attrs: dict) -> Tensor:
    """The op's integer result as a tensor of the output's quantized dtype."""
    scale, kind = attrs["out_scale"], attrs["storage"]
    if kind == "int32":
        return tag(out, qint32(scale))
    return tag(out, quint8(scale, attrs["zero_point"]) if kind == "uint8" else qint8(scale))


def conv_bias_activation(inp: Tensor, weight: Tensor, bias: Tensor | None, dtype: Any = None,
                         stride: Any = 1, padding: Any = 0, dilation: Any = 1, groups: int = 1,
                         nonlinear_mode: str = "identity", conv_mode: Any = "cross_correlation",
                         compute_mode: Any = "default") -> Tensor:
    """int8 convolution + bias + activation ("identity", "relu", "h_swish") to `dtype`: the
    input (N, C, H, W) and weight (out, in, kh, kw), or (groups, out/groups, in/groups, kh, kw),
    quantized; the bias (1, out, 1, 1) in qint32 of scale input x weight scale (a float one is
    quantized to it)."""
    fn = "conv_bias_activation"
    requant = _requant(fn, inp, weight, dtype, nonlinear_mode)
    b = _bias(fn, bias, requant["acc_scale"])
    out = apply(OPS[fn], storage(inp), storage(weight), b, groups=int(groups),
                **_conv_attrs(stride, padding, dilation, conv_mode), **requant)
    return _result(out, requant)


def batch_conv_bias_activation(inp: Tensor, weight: Tensor, bias: Tensor | None,
                               dtype: Any = None, stride: Any = 1, padding: Any = 0,
                               dilation: Any = 1, groups: int = 1,
                               nonlinear_mode: str = "identity",
                               conv_mode: Any = "cross_correlation",
                               compute_mode: Any = "default") -> Tensor:
    """`conv_bias_activation` with a weight per sample: weight (N, out, in, kh, kw)."""
    fn = "batch_conv_bias_activation"
    if groups != 1:
        raise bad_argument(f"{fn}: groups must be 1 (as in MegEngine), got {groups}.")
    requant = _requant(fn, inp, weight, dtype, nonlinear_mode)
    b = _bias(fn, bias, requant["acc_scale"])
    out = apply(OPS[fn], storage(inp), storage(weight), b,
                **_conv_attrs(stride, padding, dilation, conv_mode), **requant)
    return _result(out, requant)


def conv_transpose2d(inp: Tensor, weight: Tensor, bias: Tensor | None = None, dtype: Any = None,
                     stride: Any = 1, padding: Any = 0, output_padding: Any = 0,
                     dilation: Any = 1, groups: int = 1, conv_mode: Any = "cross_correlation",
                     compute_mode: Any = "default") -> Tensor:
    """int8 transposed convolution to `dtype`, weight (in, out, kh, kw). Unlike MegEngine's,
    a qint32 bias is taken (MegEngine raises NotImplementedError); groups must be 1, as
    there."""
    fn = "conv_transpose2d"
    if groups != 1:
        raise bad_argument(f"{fn}: a grouped int8 transposed convolution is not supported (nor "
                           "in MegEngine); got groups={groups}.", OpArgumentError)
    attrs = _conv_attrs(stride, padding, dilation, conv_mode)
    if attrs.pop("flip"):
        raise bad_argument(f"{fn}: conv_mode must be 'cross_correlation', as in MegEngine.")
    requant = _requant(fn, inp, weight, dtype, "identity")
    b = _bias(fn, bias, requant["acc_scale"])
    out = apply(OPS["quantized_conv_transpose2d"], storage(inp), storage(weight), b,
                output_padding=_pair(output_padding), **attrs, **requant)
    return _result(out, requant)


def linear(inp: Tensor, weight: Tensor, bias: Tensor | None = None, dtype: Any = None,
           nonlinear_mode: str = "identity") -> Tensor:
    """int8 x (..., in) times weight (out, in), plus a qint32 bias (out,), to `dtype`
    (None: qint32 of the accumulator's scale), with the activation."""
    fn = "linear"
    requant = _requant(fn, inp, weight, dtype, nonlinear_mode)
    b = _bias(fn, bias, requant["acc_scale"])
    out = apply(OPS["quantized_linear"], storage(inp), storage(weight),
                None if b is None else b.reshape(-1), **requant)
    return _result(out, requant)
