"""Small helpers the ops' argument checks share (`defop(..., check=, before=)`).

A check takes an op's inputs and static attributes and returns `(error class, text)` for the
first problem it finds, or None. It reads only shapes and dtypes, so it works on Tensors, jax
arrays, numpy arrays and abstract values alike.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from ..errors import OpArgumentError, OpTypeError

#: What a check returns: the error class and its text, or None when the arguments are fine.
Found = tuple[type, str] | None
#: `(inputs, attrs) -> Found`: an op's argument check, as `defop(..., check=, before=)` take it
Check = Callable[[Sequence, dict], Found]
_BFLOAT16 = np.dtype(jax.numpy.bfloat16)


def shape_of(x: Any) -> tuple | None:
    """The shape of a tensor, array, nested list or number; None for anything else."""
    shape = getattr(x, "shape", None)
    if shape is not None:
        return tuple(shape)
    if isinstance(x, (bool, int, float, complex, list, tuple)):
        return np.shape(x)
    return None


def dims(x: Any) -> tuple:
    """`shape_of(x)` where a shape is expected (`missing` ruled None out): one that is not
    fails the check, which `Op.explain` turns into None."""
    shape = shape_of(x)
    assert shape is not None, x
    return shape


def dtype_of(x: Any) -> np.dtype:
    """The dtype of a tensor or an array, or the one numpy gives a list or a number."""
    dtype = getattr(x, "dtype", None)
    return np.asarray(x).dtype if dtype is None else np.dtype(dtype)


def integers(x: Any, text: str) -> Found:
    """Integer indices or labels, where `x` (a tensor, or a list as numpy reads it) holds
    anything else: an `OpTypeError` with `text`, which may name the `{dtype}` found."""
    dtype = dtype_of(x)
    return None if dtype.kind in "iu" else (OpTypeError, text.format(dtype=dtype))


def kind(x: Any) -> str:
    """numpy's kind of `x`'s dtype ("f" for bfloat16 too, whose numpy kind is "V")."""
    if not hasattr(x, "dtype"):
        return ""
    dtype = np.dtype(x.dtype)
    return "f" if dtype == _BFLOAT16 else dtype.kind


def missing(inputs: Sequence, names: Sequence[str]) -> Found:
    """A required tensor argument that is None or has no shape."""
    for i, (x, what) in enumerate(zip(inputs, names)):
        if x is None:
            return OpTypeError, f"argument {i + 1} ({what}) is None, where a tensor is needed."
        if shape_of(x) is None:
            return OpTypeError, (f"argument {i + 1} ({what}) is a {type(x).__name__}, where a "
                                 "tensor is needed.")
    return None


def float_only(x: Any, what: str) -> Found:
    """A tensor that should hold floats (or complex numbers) and does not."""
    if kind(x) not in ("f", "c", ""):
        return OpTypeError, (f"the {what} has dtype {np.dtype(x.dtype)}; this op needs float "
                             f"tensors: convert it with .astype('float32').")
    return None


def window(attrs: dict, positive: Sequence[str]) -> Found:
    """Sliding-window attributes: those named in `positive` >= 1, padding >= 0."""
    for name in positive:
        if any(v < 1 for v in attrs.get(name, ())):
            return OpArgumentError, f"{name}={attrs[name]} must be >= 1."
    if any(p < 0 for p in attrs.get("padding", ())):
        return OpArgumentError, f"padding={attrs['padding']} must be >= 0."
    return None


def out_size(sizes: Sequence[int], kernel: Sequence[int], stride: Sequence[int],
             padding: Sequence[int], dilation: Sequence[int] | None = None) -> tuple[int, ...]:
    """A sliding window's output size along each spatial axis (input `sizes`, `kernel` sizes),
    for convolutions and pooling alike (no `dilation`: 1)."""
    dilation = (1,) * len(kernel) if dilation is None else dilation
    return tuple((n + 2 * p - d * (k - 1) - 1) // s + 1 for n, k, s, p, d in zip(
        sizes, kernel, stride, padding, dilation))


def float_tensor(x: Any, what: str) -> Found:
    """A tensor that should hold floats (bfloat16 too) and does not."""
    if kind(x) != "f":
        return OpTypeError, (f"the {what} has dtype {np.dtype(x.dtype)}; it must be a float "
                             "tensor: convert it with .astype('float32').")
    return None


def numeric(x: Any, what: str) -> Found:
    """A tensor that should hold numbers (not bools)."""
    if kind(x) not in "fiu":
        return OpTypeError, f"{what} has dtype {np.dtype(x.dtype)}; it must hold numbers."
    return None


def image(x: Any, what: str = "inp", layout: str = "NCHW") -> Found:
    """A 4-d float image batch, `what` in the message, laid out as `layout` says."""
    if len(dims(x)) != 4:
        return OpArgumentError, (f"{what} must be a 4-d {layout} image batch, got shape "
                                 f"{dims(x)}.")
    return float_tensor(x, what)
