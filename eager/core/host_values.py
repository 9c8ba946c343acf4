"""Filled and evenly spaced arrays made on the host, exactly as jax's programs make them.

Outside a trace, `eg.full` / `eg.ones` / `eg.arange` used to run one XLA program per shape,
dtype and bounds: 25-270 ms of compiling each in a new process, on the main thread, before the
step can go on (RetinaNet's anchors alone compiled five aranges, its losses a fill). Where numpy
computes the same bits as the program, the array is made with numpy and put on the device
instead, which costs what running the program does. Each function returns None where it
cannot promise that; the caller then runs the kept program.

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

from typing import Any

import numpy as np

_INT32 = np.iinfo(np.int32)
# Sizes up to which float32 counts 0, 1, 2, ... exactly (an iota of floats).
_EXACT_FLOAT32_COUNT = 2 ** 24
# XLA:CPU flushes subnormal floats to zero, numpy does not: bounds at least this far from zero
# keep every operand, product and sum of a range normal (a sum of two float32 values above
# 2 ** -100 is 0 or at least 2 ** -123).
_TINY = 2.0 ** -100


def _argument(value: Any) -> np.ndarray | None:
    """`value` as jax passes it to a program (x64 off): float32, int32 or bool; None for a
    value whose conversion is not plain (numpy scalars of other widths)."""
    with np.errstate(over="ignore"):  # a float beyond float32 is inf, as in jax (quietly)
        return _converted(value)


def _converted(value: Any) -> np.ndarray | None:
    kind = type(value)
    if kind is bool or kind is np.bool_:
        return np.asarray(value, bool)
    if kind is int or kind is np.int32:
        return np.asarray(value, np.int32) if _INT32.min <= value <= _INT32.max else None
    if kind is float or kind is np.float32 or kind is np.float64:
        return np.asarray(value, np.float32)
    return None


def fill_value(value: Any, dtype: np.dtype) -> np.ndarray | None:
    """The scalar `jnp.full(..., value, dtype)` fills with, or None where only the program
    says (a float converted to an integer or bool, or a numpy scalar of another width)."""
    arg = _argument(value)
    if arg is None or _kind(dtype) not in "fiub" or (arg.dtype.kind == "f" and _kind(dtype) != "f"):
        return None
    with np.errstate(over="ignore"):
        return arg.astype(_canonical(dtype))


def arange_values(start: Any, stop: Any, step: Any, dtype: np.dtype) -> np.ndarray | None:
    """`jnp.arange(start, stop, step, dtype)` for Python-number bounds, or None where only the
    program says (integers out of int32's range, float bounds for an integer dtype, more
    values than float32 counts exactly, dtypes other than floats and 32-bit integers)."""
    out = _canonical(dtype)
    working = np.dtype(np.float32) if _kind(out) == "f" and out.itemsize < 4 else out
    first, stride = _argument(start), _argument(step)
    if first is None or stride is None or working not in (np.float32, np.int32):
        return None
    kinds = {first.dtype.kind, stride.dtype.kind}
    if "b" in kinds or (working.kind == "i" and "f" in kinds):
        return None
    size = max(0, int(np.ceil((stop - start) / step)))
    if size > _EXACT_FLOAT32_COUNT or any(0 < abs(v) < _TINY for v in (start, step)):
        return None
    first, stride = first.astype(working), stride.astype(working)
    with np.errstate(over="ignore"):  # int32 wraps, as XLA's does
        return (first + stride * np.arange(size, dtype=working)).astype(out)


def _kind(dtype: np.dtype) -> str:
    """numpy's kind letter, with "f" for the floats numpy does not know (bfloat16)."""
    import jax.numpy as jnp

    return "f" if jnp.issubdtype(dtype, jnp.floating) else dtype.kind


def _canonical(dtype: np.dtype) -> np.dtype:
    """The dtype jax makes for `dtype` with 64-bit types off (its default)."""
    import jax

    return np.dtype(jax.dtypes.canonicalize_dtype(dtype))
