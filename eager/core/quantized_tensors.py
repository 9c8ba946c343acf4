"""Quantized tensors, as MegEngine's: a Tensor whose `dtype` is a quantized dtype (qint8(scale),
quint8(scale, zero_point), qint32(scale)) holds the integer storage in its array and the dtype
in `_qdtype`. `astype` quantizes to one (round half away from zero, saturate), requantizes
between two and dequantizes to a float type; `numpy()` gives the storage viewed as the quantized
numpy dtype, and `Tensor` of such an array (or `Tensor(x, dtype=qint8(s))`) makes one again.

The ops that run on a quantized tensor are those MegEngine runs on one: the int8 kernels
(`eager.functional.quantized`, `eager.module.quantized`), the ops that only move or select
values (reshape, transpose, concatenation of tensors of one dtype, indexing, ...), which keep
the dtype, and the pooling and relu family, which run on the grid (the storage minus the zero
point) and round back to it. Any other op refuses a quantized tensor: its meaning would depend
on the scale, which MegEngine's kernels do not guess either.

`tensors.apply` sends a call here only once a quantized tensor exists (`tensors.QUANTIZED`),
so ordinary tensors pay nothing. The dtype rides on the Python Tensor, not on the array, so it
survives a capture (`partial`): the ops record integer arrays and the scales as attributes.

>>> import eager as eg
>>> from eager.core.quant_dtype import qint8
>>> q = eg.tensor([0.26, -1.0, 100.0]).astype(qint8(0.5))
>>> q.dtype.metadata["mgb_dtype"]["scale"], q.numpy().astype("int8").tolist()
(0.5, [1, -2, 127])
>>> q.reshape(3, 1).astype("float32").numpy().ravel().tolist()
[0.5, -1.0, 63.5]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from .errors import OpTypeError
from .ops import OPS, Op
from .ops.quantized import reciprocal
from .quant_dtype import BUILTIN_QUANT_DTYPES, convert_from_quantized
from .tensors import QUANTIZED, Tensor, _wrap_from, above, apply, rebind

#: ops that only move or select values: the result has the input's quantized dtype
_MOVES = frozenset({"reshape", "transpose", "broadcast_to", "expand_dims", "squeeze", "getitem",
                    "concat", "stack", "split", "tile", "repeat", "roll", "pixel_shuffle"})
#: ops computed on the grid (storage minus zero point, exact in float32) and rounded back to it
_ON_GRID = frozenset({"max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "relu", "pad", "max",
                      "min", "mean", "interpolate"})


class Grid(NamedTuple):
    """What a quantized dtype means: value = scale * (q - zero_point), q in [qmin, qmax],
    stored as `storage`."""

    scale: float
    zero_point: int
    qmin: int
    qmax: int
    storage: str


def grid(qdtype: np.dtype) -> Grid:
    """The `Grid` of a quantized numpy dtype."""
    info = qdtype.metadata["mgb_dtype"]  # type: ignore[index]
    meta = next(m for m in BUILTIN_QUANT_DTYPES.values() if m.cname == info["name"])
    return Grid(float(info["scale"]), int(info.get("zero_point", 0)), meta.qmin, meta.qmax,
                meta.np_dtype_str)


def _meta(qdtype: np.dtype) -> Any:
    name = qdtype.metadata["mgb_dtype"]["name"]  # type: ignore[index]
    return next(m for m in BUILTIN_QUANT_DTYPES.values() if m.cname == name)


def tag(t: Tensor, qdtype: np.dtype) -> Tensor:
    """Mark `t`, integer storage, as holding `qdtype`."""
    t._qdtype = qdtype
    QUANTIZED[0] = True
    return t


def is_quantized(dtype: Any) -> bool:
    """Whether `dtype` (a numpy dtype or anything else) is a quantized one."""
    metadata = getattr(dtype, "metadata", None)
    if not metadata or "mgb_dtype" not in metadata:
        return False
    return "scale" in metadata["mgb_dtype"]


def same_grid(a: np.dtype, b: np.dtype) -> bool:
    """Whether two quantized dtypes mean the same values (numpy's == ignores the metadata)."""
    return grid(a) == grid(b)


def _quantized_init(data: Any, dtype: Any) -> tuple[Any, Any, np.dtype]:
    """`Tensor(data, dtype)` where data or dtype is quantized: (storage, None, its dtype)."""
    target = np.dtype(dtype) if is_quantized(dtype) else None
    if isinstance(data, Tensor):
        source = data._qdtype
        if target is None:
            assert source is not None  # (Tensor only sends a quantized data or dtype here)
            return data, None, source
        if source is not None and same_grid(source, target):
            return data, None, target
        return data.astype(target), None, target
    host = np.asarray(data)
    if is_quantized(host.dtype):
        if target is None or same_grid(host.dtype, target):
            return host.view(_meta(host.dtype).np_dtype_str), None, host.dtype
        host = convert_from_quantized(host, _meta(host.dtype))
    if target is None:
        raise OpTypeError(f"cannot make a quantized tensor of {dtype!r}.")
    g = grid(target)
    v = host.astype(np.float32) * reciprocal(g.scale)  # as the quantize op, on the host
    q = np.sign(v) * np.floor(np.abs(v) + np.float32(0.5)) + g.zero_point
    return np.clip(q, g.qmin, g.qmax).astype(g.storage), None, target


def _quantized_astype(t: Tensor, dtype: Any) -> Tensor:
    """`t.astype(dtype)` where either is quantized."""
    source = t._qdtype
    if is_quantized(dtype):
        target = np.dtype(dtype)
        g = grid(target)
        out_attrs = dict(zero_point=g.zero_point, qmin=g.qmin, qmax=g.qmax, storage=g.storage)
        if source is None:
            return tag(apply(OPS["quantize"], t, scale=g.scale, **out_attrs), target)
        if same_grid(source, target):
            return t
        s = grid(source)
        multiplier = float(np.float32(s.scale) / np.float32(g.scale))
        return tag(apply(OPS["requantize"], storage(t), in_zero_point=s.zero_point,
                         multiplier=multiplier, **out_attrs), target)
    s = grid(source)  # type: ignore[arg-type]
    out = apply(OPS["dequantize"], storage(t), scale=s.scale, zero_point=s.zero_point)
    return out if np.dtype(dtype) == np.float32 else out.astype(dtype)


def load_quantized(t: Tensor, arr: np.ndarray) -> None:
    """`load_state_dict` of `arr` into `t` where either is quantized, as MegEngine's, which
    takes the saved tensor with its dtype: a quantized array as it is (storage and dtype); else,
    into a quantized `t`, an integer array as storage of `t`'s dtype (a checkpoint keeps the
    storage, not the scale), a float one quantized to it."""
    own = t._qdtype
    if is_quantized(arr.dtype):
        new = Tensor(arr)
    elif own is None:  # (the caller sends one of the two quantized)
        raise OpTypeError(f"cannot load an array of dtype {arr.dtype} as quantized.")
    elif arr.dtype.kind in "iu":
        new = Tensor(arr.astype(grid(own).storage).view(own))
    else:
        new = Tensor(arr.astype(np.float32)).astype(own)
    rebind(t, new)
    tag(t, new._qdtype)  # type: ignore[arg-type]


def storage(x: Any) -> Any:
    """A quantized tensor's storage as an ordinary integer tensor (sharing its array); anything
    else as it is."""
    return _wrap_from(x) if isinstance(x, Tensor) and x._qdtype is not None else x


def _dispatch_quantized(op: Op, attrs: dict, inputs: Sequence) -> Any:
    """`apply(op, *inputs, **attrs)` where an input is quantized."""
    if op.name == "astype":
        return _quantized_astype(inputs[0], attrs["dtype"])
    dtypes = [x._qdtype for x in inputs if isinstance(x, Tensor) and x._qdtype is not None]
    first = dtypes[0]
    if op.name in _MOVES:
        if any(not same_grid(d, first) for d in dtypes) or len(dtypes) < sum(
                isinstance(x, Tensor) for x in inputs):
            raise OpTypeError(f"{op.name}: the tensors have different dtypes ({first} and "
                              "another); astype them to one quantized dtype first.")
        out = apply(op, *[storage(x) for x in inputs], **attrs)
        return tuple(tag(o, first) for o in out) if op.multi_output else tag(out, first)
    if op.name in _ON_GRID and len(dtypes) == 1 and inputs[0] is not None and \
            getattr(inputs[0], "_qdtype", None) is not None:
        g = grid(first)
        values = apply(OPS["dequantize"], storage(inputs[0]), scale=1.0, zero_point=g.zero_point)
        out = apply(op, values, *inputs[1:], **attrs)
        return tag(apply(OPS["quantize"], out, scale=1.0, zero_point=g.zero_point, qmin=g.qmin,
                         qmax=g.qmax, storage=g.storage), first)
    raise OpTypeError(
        f"{op.name} does not take quantized tensors (dtype {_describe(first)}): its result "
        "would depend on the scale. Dequantize with .astype('float32') first, or use the int8 "
        "ops of eager.functional.quantized and the modules of eager.module.quantized.")


def _describe(qdtype: np.dtype) -> str:
    g = grid(qdtype)
    zp = f", zero_point={g.zero_point}" if _meta(qdtype).is_unsigned else ""
    return f"{_meta(qdtype).name}(scale={g.scale:g}{zp})"


above.quantized_init = _quantized_init
above.quantized_astype = _quantized_astype
above.dispatch_quantized = _dispatch_quantized
