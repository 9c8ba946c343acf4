"""Clear errors for bad op arguments: what `apply` raises instead of jax's own errors.

`apply` calls `translate` only when an op fails, so none of this costs anything on the eager
hot path. A message names the function the user called, what its arguments were (shapes and
dtypes, or their kind), why they do not fit (the op's own check, `defop(..., check=)`, or jax's
one-line reason) and the user's line: the innermost stack frame outside this project's packages.

>>> import eager as eg
>>> try:
...     eg.ones((3, 7)) @ eg.ones((8, 2))
... except eg.OpArgumentError as e:
...     print(str(e).split(". ")[0])
matmul: the inner dimensions do not match: (3, 7) @ (8, 2) needs 7 == 8
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from . import device as _device
from .errors import AllocationError, OpArgumentError, OpTypeError
from .ops import OPS
from .ops.checks import Found
from .user_frame import PROJECT, describe_location, find_user_frame, location, project_dirs

# Project functions that are not what the user called (a Module's `forward` is named by its op).
_INTERNAL = frozenset({"apply", "run_op", "dispatch", "translate", "locate", "checked_shape",
                       "checked_dtype", "check_size", "check_range", "require", "bad_argument",
                       "forward"})
# Argument kinds an op may take besides tensors (anything else is the wrong kind of argument).
_ARRAY_KINDS = (bool, int, float, complex, np.generic, np.ndarray, jax.Array)


# ----- where: the user's line and the function they called ---------------------------------------
def locate(depth: int = 1) -> tuple[Any, tuple[str, int, str] | None]:
    """The innermost frame of the project's public functions on the stack (the function the
    user called, or None) and the user's (file, line, source) (None when not found)."""
    entry = None

    def passing(frame: Any) -> None:
        nonlocal entry
        name = frame.f_code.co_name
        if (entry is None and not name.startswith("_") and name not in _INTERNAL
                and name != "<lambda>"):
            entry = frame

    where = location(find_user_frame(depth + 1, passing))
    return entry, where


def where_text(where: tuple[str, int, str] | None) -> str:
    """' At file.py:12: `y = x @ w`.' for a message's end ('' when unknown)."""
    return "" if where is None else f" At {describe_location(where)}."


def _entry_name(entry: Any, fallback: str) -> str:
    # A wrapper made by a factory (`_unary("exp")`) is named after its op, not its code.
    if entry is None or "<locals>" in entry.f_code.co_qualname:
        return fallback
    return entry.f_code.co_name


def _help_ref(entry: Any) -> str:
    if entry is None or "<locals>" in entry.f_code.co_qualname:
        return ""
    module = entry.f_globals.get("__name__", "")
    return f" (help({module}.{entry.f_code.co_qualname}))"


def bad_argument(message: str, cls: type[OpArgumentError] = OpArgumentError) -> OpArgumentError:
    """`cls(message)` with the user's line appended: for the checks functional wrappers make
    themselves (`raise bad_argument("dropout: drop_prob must be in [0, 1), got 1.5")`)."""
    return cls(message + where_text(locate(2)[1]))


def number(value: Any, name: str) -> float:
    """`float(value)` for a numeric attribute of a functional wrapper (`negative_slope`, `eps`),
    or an `OpTypeError` naming the function, the attribute and the user's line."""
    try:
        return float(value)
    except (TypeError, ValueError):
        entry, where = locate(2)
        raise OpTypeError(f"{_entry_name(entry, 'op')}: {name} must be a number, got "
                          f"{value!r:.60}.{where_text(where)}") from None


def explain(op_name: str, inputs: Sequence, attrs: dict) -> Found:
    """The problem the check of op `op_name` (`defop(..., check=)`) finds with `inputs`, or
    None.

    >>> import numpy as np
    >>> explain("reshape", (np.ones((3, 7)),), {"shape": (4, 5)})[1].split(";")[0]
    'cannot reshape a tensor of shape (3, 7) (21 elements) into (4, 5) (20 elements)'
    """
    return OPS[op_name].explain(inputs, attrs)


def require(op_name: str, *inputs: Any, **attrs: Any) -> None:
    """Raise the problem the before-the-call check of op `op_name` (`defop(..., before=)`)
    finds with `inputs`, if any, named after the function the user called: a wrapper's check
    of its tensor arguments, in the op's words (an integer convolution, which the op would
    accept silently)."""
    found = OPS[op_name].check_before(inputs, attrs)
    if found is not None:
        entry, where = locate(2)
        cls, text = found
        raise cls(f"{_entry_name(entry, op_name)}: {text}{where_text(where)}")


# ----- describing arguments ----------------------------------------------------------------------
def describe(x: Any) -> str:
    """'(3, 7) float32' for an array-like value, else what kind of value it is."""
    shape, dtype = getattr(x, "shape", None), getattr(x, "dtype", None)
    if shape is not None and dtype is not None:
        return f"{tuple(shape)} {np.dtype(dtype)}"
    if x is None or isinstance(x, (bool, int, float, complex)):
        return f"{type(x).__name__} {x!r}" if x is not None else "None"
    if isinstance(x, str):
        return f"the string {x[:40]!r}"
    if isinstance(x, (list, tuple)):
        return f"a {type(x).__name__} of {len(x)} items"
    return f"a {type(x).__name__}"


def enumerate_text(items: Sequence[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _arguments(inputs: Sequence, attrs: dict) -> str:
    shown = [describe(x) for x in inputs]
    tensors = all(hasattr(x, "shape") for x in inputs)
    if len(inputs) == 1:
        head = f"an argument {'of shape ' if tensors else ''}{shown[0]}"
    else:
        head = f"arguments {'of shapes ' if tensors else ''}{enumerate_text(shown)}"
    public = [f"{k}={v!r}" for k, v in attrs.items() if not k.startswith("_")]
    return head + (f" with {', '.join(public)}" if public else "")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0].strip() if text else type(exc).__name__
    return line.rstrip(".")


# ----- the translation ---------------------------------------------------------------------------
def from_project(exc: BaseException) -> bool:
    """Whether `exc` is one of the project's own errors (raised on purpose: it passes as is)."""
    return type(exc).__module__.partition(".")[0] in PROJECT


def translate(op: Any, inputs: Sequence, key: tuple, exc: BaseException) -> BaseException:
    """The error `apply` raises when `op` failed on `inputs` with the static attributes `key`
    and jax raised `exc` (a TypeError or ValueError): `exc` itself when the project raised it on
    purpose, else an `OpTypeError` / `OpArgumentError` that says what was wrong and where."""
    if from_project(exc):
        return exc
    err = _translated(op, inputs, key, exc)
    if _raised_in_project(exc):  # a bug in an op's own code, not jax refusing the arguments
        err.__cause__ = exc
    return err


def _translated(op: Any, inputs: Sequence, key: tuple, exc: BaseException) -> OpArgumentError:
    entry, where = locate(3)
    name = _entry_name(entry, op.name)
    at = where_text(where)
    for i, x in enumerate(inputs):
        if not (x is None or hasattr(x, "shape") or isinstance(x, (*_ARRAY_KINDS, list, tuple))):
            return OpTypeError(f"{name}: argument {i + 1} is {describe(x)}, where a tensor or a "
                               f"number is needed.{at} Pass a Tensor (eg.tensor(...)).")
    attrs = dict(key)
    found = op.explain(inputs, attrs)
    if found is not None:
        cls, text = found
        # Still a TypeError where jax raised one, so that code catching it keeps working.
        return (OpTypeError if isinstance(exc, TypeError) else cls)(f"{name}: {text}{at}")
    culprit = _none_culprit(op, inputs, key)
    if culprit is not None:
        return OpTypeError(f"{name}: argument {culprit + 1} is None, where a tensor is needed.{at}"
                           " Pass a Tensor there.")
    cls = OpTypeError if isinstance(exc, TypeError) else OpArgumentError
    return cls(f"{name}: {_arguments(inputs, attrs)} do{'es' * (len(inputs) == 1)} not fit: "
               f"{_first_line(exc)}.{at} Check the shapes and dtypes `{name}` takes"
               f"{_help_ref(entry)}.")


def _raised_in_project(exc: BaseException) -> bool:
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and tb.tb_frame.f_code.co_filename.startswith(project_dirs())


def _abstract(x: Any) -> Any:
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return jax.ShapeDtypeStruct(tuple(x.shape), np.dtype(x.dtype))
    if isinstance(x, (list, tuple)):
        return np.asarray(x)
    return x


def _none_culprit(op: Any, inputs: Sequence, key: tuple) -> int | None:
    """The position of a None argument that the op cannot take: the op traces once it is
    replaced by a scalar (None where the op accepts it, an optional bias, stays blameless)."""
    nones = [i for i, x in enumerate(inputs) if x is None]
    if not nones:
        return None
    try:
        args = [_abstract(x) for x in inputs]
    except (TypeError, ValueError):
        return None
    fn = op.jitted(key)
    for i in nones:
        probe = list(args)
        probe[i] = jax.ShapeDtypeStruct((), np.float32, weak_type=True)
        try:
            jax.eval_shape(fn, *probe)
        except Exception:  # noqa: BLE001  (any failure: the None is not the only problem)
            continue
        return i
    return None


# ----- creation sizes ----------------------------------------------------------------------------
# Below this many bytes a request is never refused (and the device is not asked for its memory).
_SMALL = 1 << 30


def checked_shape(shape: Any, dtype: Any = np.float32) -> tuple[int, ...]:
    """`shape` (an int or a sequence of ints) as a tuple, refused with a clear error when an
    entry is not an integer, is negative, or the tensor would not fit in the device's memory.
    (The stack is looked at only to word an error.)

    >>> checked_shape((2, 3))
    (2, 3)
    """
    try:
        # a size in a region (`TracedDim`) converts as one int: a value read, named as such
        one = isinstance(shape, (int, np.integer)) or getattr(shape, "ndim", None) == 0 \
            or (hasattr(shape, "__index__") and not hasattr(shape, "__iter__"))
        out = (int(shape),) if one else tuple(int(s) for s in shape)
    except (TypeError, ValueError) as e:
        raise _creation_error(OpTypeError, f"the shape {shape!r} must be an int or a sequence "
                              f"of ints ({_first_line(e)}).") from None
    dtype = checked_dtype(dtype)
    if any(s < 0 for s in out):
        raise _creation_error(OpArgumentError, f"shape {out} has a negative size; sizes must "
                              "be >= 0.")
    check_size(out, dtype)
    return out


def checked_dtype(dtype: Any) -> np.dtype:
    """`dtype` as a numpy dtype, or an `OpTypeError` naming it and the user's line.

    >>> checked_dtype("float32")
    dtype('float32')
    """
    try:
        return np.dtype(dtype)
    except TypeError as e:
        raise _creation_error(OpTypeError, f"{dtype!r} is not a dtype ({_first_line(e)}); use "
                              "e.g. 'float32' or 'int32'.") from None


def check_size(shape: tuple[int, ...], dtype: Any) -> None:
    """Refuse a tensor of `shape` and `dtype` that the default device could not hold."""
    nbytes = math.prod(shape) * np.dtype(dtype).itemsize
    if nbytes < _SMALL:
        return
    limit = _device_bytes()
    if nbytes > limit:
        raise _creation_error(AllocationError, (
            f"a tensor of shape {shape} {np.dtype(dtype)} needs {_bytes(nbytes)}, more than the "
            f"{_bytes(limit)} of memory of the device."), " Ask for a smaller shape (or split "
            "the work into batches).")


def check_range(start: Any, stop: Any, step: Any, dtype: Any) -> None:
    """Refuse an `arange` with a zero or non-numeric step, or too many elements to hold."""
    try:
        count = math.ceil((float(stop) - float(start)) / float(step))
    except (TypeError, ValueError, ZeroDivisionError, OverflowError) as e:
        raise _creation_error(OpArgumentError, (
            f"start={start!r}, stop={stop!r} and step={step!r} must be finite numbers and step "
            f"not 0 ({_first_line(e)}).")) from None
    check_size((max(count, 0),), dtype)


def _creation_error(cls: type, text: str, advice: str = "") -> OpArgumentError:
    entry, where = locate(2)
    return cls(f"{_entry_name(entry, 'creation')}: {text}{where_text(where)}{advice}")


def _device_bytes() -> int:
    """The memory of the default device: its allocator's limit, else the host's RAM."""
    dev = _device.default() or jax.devices()[0]
    stats = None
    with contextlib.suppress(Exception):  # CPU devices may not report memory statistics
        stats = dev.memory_stats()
    if stats and stats.get("bytes_limit"):
        return int(stats["bytes_limit"])
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _bytes(n: int) -> str:
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n} bytes"
