"""Filled and evenly spaced arrays made on the host, exactly as jax's programs make them.

Outside a trace, `eg.full` / `eg.ones` / `eg.arange` used to run one XLA program per shape,
dtype and bounds: 25-270 ms of compiling each in a new process, on the main thread, before the
step can go on (RetinaNet's anchors alone compiled five aranges, its losses a fill, its
backward 29 zero cotangents). Where numpy computes the same bits as the program, an array of
at most `MAX_BYTES` is made with numpy and put on the device instead. Each function returns
None where it cannot promise that, or the array is larger; the caller then runs the kept
program.

Why a bound: once compiled, the program is faster, and a step pays the difference every time.
Zeros to the ready array on 2 cores (jax 0.10.2), host / program: 0.06 / 0.01 ms for 32 KB,
0.3 / 0.04 ms for 1 MB, 0.95 / 0.1 ms for 4 MB, 46 / 26 ms for 100 MB (Faster R-CNN's step made
two such zero arrays on the host: 85 ms a step). Below 4 MiB the difference is under a
millisecond a call; RetinaNet's first step fills 26 of its 29 distinct shapes below it.

What the programs compute, and why numpy matches it:

- `jnp.full(shape, value, dtype)` with `value` a program argument: jax passes a Python float as
  float32, an int as int32, a bool as bool, and XLA converts that to `dtype`. numpy's
  conversions are the same (round to nearest even between floats and from int to float,
  wrapping between ints, `!= 0` to bool), except float to int, which XLA saturates and numpy
  leaves undefined: that case keeps the program.
- `jnp.arange(start, stop, step, dtype)`: `start + step * iota` in `dtype` (float32 for
  narrower floats), then converted; XLA:CPU does not contract the multiply-add, so numpy's
  float32 multiply then add gives the same bits, as long as nothing is subnormal (which XLA
  flushes to zero): bounds nearer zero than 2 ** -100 keep the program
  (tests/eager/test_host_values.py checks both against jax's own).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

#: The largest array made on the host (bytes); a larger one runs the kept program.
MAX_BYTES = 4 * 2 ** 20
_INT32 = np.iinfo(np.int32)
# XLA:CPU flushes subnormal floats to zero, numpy does not: bounds at least this far from zero
# keep every operand, product and sum of a range normal (a sum of two float32 values above
# 2 ** -100 is 0 or at least 2 ** -123).
_TINY = 2.0 ** -100


def _argument(value: Any) -> np.ndarray | None:
    """`value` as jax passes it to a program (x64 off): float32, int32 or bool; None for a
    value whose conversion is not plain (numpy scalars of other widths)."""
    kind = type(value)
    if kind is bool or kind is np.bool_:
        return np.asarray(value, bool)
    if kind is int or kind is np.int32:
        return np.asarray(value, np.int32) if _INT32.min <= value <= _INT32.max else None
    if kind is float or kind is np.float32 or kind is np.float64:
        with np.errstate(over="ignore"):  # a float beyond float32 is inf, as in jax (quietly)
            return np.asarray(value, np.float32)
    return None


def fill_value(shape: tuple, value: Any, dtype: np.dtype) -> np.ndarray | None:
    """The scalar `jnp.full(shape, value, dtype)` fills with, or None where only the program
    says (a float converted to an integer or bool, or a numpy scalar of another width) or the
    array is larger than `MAX_BYTES`."""
    arg = _argument(value)
    kind = _kind(dtype)
    if (arg is None or math.prod(shape) * dtype.itemsize > MAX_BYTES or kind not in "fiub"
            or (arg.dtype.kind == "f" and kind != "f")):
        return None
    with np.errstate(over="ignore"):
        return arg.astype(_canonical(dtype))


def arange_values(start: Any, stop: Any, step: Any, dtype: np.dtype) -> np.ndarray | None:
    """`jnp.arange(start, stop, step, dtype)` for Python-number bounds, or None where only the
    program says (integers out of int32's range, float bounds for an integer dtype, dtypes
    other than floats and 32-bit integers) or the range is larger than `MAX_BYTES` (within
    the 2 ** 24 values float32 counts exactly)."""
    out = _canonical(dtype)
    working = np.dtype(np.float32) if _kind(out) == "f" and out.itemsize < 4 else out
    first, stride = _argument(start), _argument(step)
    if first is None or stride is None or working not in (np.float32, np.int32):
        return None
    kinds = {first.dtype.kind, stride.dtype.kind}
    if "b" in kinds or (working.kind == "i" and "f" in kinds):
        return None
    size = max(0, int(np.ceil((stop - start) / step)))
    if size * out.itemsize > MAX_BYTES or any(0 < abs(v) < _TINY for v in (start, step)):
        return None
    first, stride = first.astype(working), stride.astype(working)
    with np.errstate(over="ignore"):  # int32 wraps, as XLA's does
        return (first + stride * np.arange(size, dtype=working)).astype(out)


def _kind(dtype: np.dtype) -> str:
    """numpy's kind letter, with "f" for the floats numpy does not know (bfloat16)."""
    return "f" if jnp.issubdtype(dtype, jnp.floating) else dtype.kind


def _canonical(dtype: np.dtype) -> np.dtype:
    """The dtype jax makes for `dtype` with 64-bit types off (its default)."""
    return np.dtype(jax.dtypes.canonicalize_dtype(dtype))
