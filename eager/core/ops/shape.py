"""Shape, movement and indexing ops. Shapes, axes and index structure are static attributes."""

import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..errors import OpArgumentError, OpTypeError
from .checks import Found, dims, dtype_of, integers, shape_of
from .ragged_rules import MASKED, ROWS, along, indexing
from .registry import defop

_OTHER_AXES = along(inside=None)  # row-independent unless it works along axis 0


def _reshape_check(inputs: Sequence, attrs: dict) -> Found:
    xs, shape = dims(inputs[0]), tuple(attrs.get("shape", ()))
    n, known = math.prod(xs), math.prod(s for s in shape if s != -1)
    if sum(s == -1 for s in shape) > 1 or any(s < -1 for s in shape):
        return OpArgumentError, (f"the shape {shape} may hold one -1 (to infer that axis) and "
                                 "otherwise sizes >= 0.")
    if (-1 in shape and (known == 0 or n % known)) or (-1 not in shape and known != n):
        return OpArgumentError, (
            f"cannot reshape a tensor of shape {xs} ({n} elements) into {shape} ({known} "
            "elements); the new shape must hold as many elements (use -1 for one axis to "
            "infer it).")
    return None


defop("reshape", check=_reshape_check)(lambda x, *, shape: jnp.reshape(x, shape))
defop("transpose", ragged=lambda attrs, ndim: ROWS if attrs["axes"][0] == 0 else None)(
    lambda x, *, axes: jnp.transpose(x, axes))
defop("expand_dims", ragged=ROWS)(lambda x, *, axis: jnp.expand_dims(x, axis))
defop("squeeze", ragged=ROWS)(lambda x, *, axis: jnp.squeeze(x, axis))
defop("broadcast_to")(lambda x, *, shape: jnp.broadcast_to(x, shape))
defop("concat", ragged=_OTHER_AXES)(lambda *xs, axis: jnp.concatenate(xs, axis=axis))
# stack's axis counts the output's axes, one more than its inputs'
defop("stack", ragged=lambda attrs, ndim: ROWS if attrs["axis"] % (ndim + 1) else None)(
    lambda *xs, axis: jnp.stack(xs, axis=axis))
defop("split", multi_output=True, ragged=_OTHER_AXES)(
    lambda x, *, indices, axis: tuple(jnp.split(x, indices, axis)))


def _tile_check(inputs: Sequence, attrs: dict) -> Found:
    """Counts >= 0: jax would fail on a negative one only when compiling, with an MLIR error."""
    reps = attrs["reps"]
    return (OpArgumentError, f"reps {reps} must be >= 0.") if min(reps, default=0) < 0 else None


defop("tile", before=_tile_check)(lambda x, *, reps: jnp.tile(x, reps))
defop("repeat", ragged=_OTHER_AXES)(lambda x, *, repeats, axis: jnp.repeat(x, repeats, axis=axis))
def _one_hot_check(inputs: Sequence, attrs: dict) -> Found:
    """Integer class indices: jax would compare floats with the classes silently."""
    return integers(inputs[0], "x must hold integer class indices, got dtype {dtype}; convert "
                               "it with .astype('int32').")


defop("one_hot", differentiable=False, ragged=ROWS, before=_one_hot_check)(
    lambda x, *, num_classes, dtype: jax.nn.one_hot(x, num_classes, dtype=dtype)
)


@defop("pad", ragged=lambda attrs, ndim: ROWS if tuple(attrs["pad_width"][0]) == (0, 0)
       else None)
def pad(x, *, pad_width, mode, constant_value):
    if mode == "constant":
        return jnp.pad(x, pad_width, mode="constant", constant_values=constant_value)
    return jnp.pad(x, pad_width, mode=mode)


def _fit_to(x, index, axis):
    """Trim `x` to `index`'s extent on every axis but `axis` (PyTorch gather/scatter rule)."""
    return x[tuple(slice(None) if d == axis else slice(0, n) for d, n in enumerate(index.shape))]


@defop("gather", ragged=ROWS)
def gather(x, index, *, axis):
    return jnp.take_along_axis(_fit_to(x, index, axis), index, axis=axis)


@defop("scatter")
def scatter(x, index, src, *, axis):
    return jnp.put_along_axis(x, index, _fit_to(src, index, axis), axis, inplace=False)


@defop("indexing_one_hot", ragged=_OTHER_AXES)
def indexing_one_hot(src, index, *, axis, keepdims):
    picked = jnp.take_along_axis(src, jnp.expand_dims(index, axis), axis=axis)
    return picked if keepdims else jnp.squeeze(picked, axis)


# Index structure for getitem / setitem: a tuple whose items are None, Ellipsis,
# ("slice", start, stop, step), or "#" for the next dynamic index (an int or an integer array)
# passed as an input. Ints are inputs, not attributes, so `x[i]` in a loop compiles once.
def _build_index(spec, dynamic):
    it = iter(dynamic)
    out = []
    for item in spec:
        if item == "#":
            out.append(next(it))
        elif isinstance(item, tuple):
            out.append(slice(*item[1:]))
        else:
            out.append(item)
    return tuple(out)


@defop("getitem", ragged=indexing)
def getitem(x, *index, spec):
    return x[_build_index(spec, index)]


def _setitem_check(inputs: Sequence, attrs: dict) -> Found:
    x, value, *index = inputs
    try:  # the shape of the part assigned to: that of `x[index]`
        part = getitem.jitted((("spec", attrs["spec"]),))
        target = jax.eval_shape(part, *(_abstract(a) for a in (x, *index))).shape
    except (TypeError, ValueError, IndexError, KeyError):
        return None
    vs = dims(value)
    try:
        if np.broadcast_shapes(vs, target) == target:
            return None
    except ValueError:
        pass
    return OpArgumentError, (f"cannot assign a value of shape {vs} to a part of shape {target} "
                             f"of a tensor of shape {shape_of(x)}; the value must broadcast to "
                             f"{target}.")


def _abstract(x: Any) -> Any:
    if not hasattr(x, "dtype") or not hasattr(x, "shape"):
        return x  # a Python number or None
    return jax.ShapeDtypeStruct(tuple(x.shape), np.dtype(x.dtype))


@defop("setitem", check=_setitem_check)
def setitem(x, value, *index, spec):
    return x.at[_build_index(spec, index)].set(jnp.asarray(value, dtype=x.dtype))


@defop("mask_setitem")
def mask_setitem(x, value, mask, *, lead):
    """`x[mask] = value` for a bool `mask` over `x`'s leading axes and a `value` that every
    selected element takes alike (of `x`'s trailing shape, or broadcasting to it; `lead`: with
    an axis of 1 in front, for the selection): a select, which needs no count of the selection."""
    value = jnp.asarray(value, dtype=x.dtype)
    if lead:
        value = value.reshape(value.shape[1:])
    return jnp.where(mask.reshape(mask.shape + (1,) * (x.ndim - mask.ndim)), value, x)




def _matrix_check(inputs: Sequence, attrs: dict) -> Found:
    xs = dims(inputs[0])
    if len(xs) < 2:
        return OpArgumentError, (f"needs a matrix (or a batch of them, the last two axes), got "
                                 f"shape {xs}.")
    return None


defop("tril", ragged=ROWS, check=_matrix_check, before=_matrix_check)(
    lambda x, *, k: jnp.tril(x, k))
defop("triu", ragged=ROWS, check=_matrix_check, before=_matrix_check)(
    lambda x, *, k: jnp.triu(x, k))

# Data-dependent output sizes: the functional wrapper reads the count (one value read) and passes
# it as the static `size`, so each op compiles once per distinct count.
defop("count_nonzero", differentiable=False)(
    lambda x: jnp.count_nonzero(x).astype(jnp.int32)
)


def _nonzero_check(inputs: Sequence, attrs: dict) -> Found:
    if not dims(inputs[0]):  # a coordinate needs an axis
        return OpArgumentError, ("needs at least one axis, got a 0-d tensor; reshape it to (1,) "
                                 "first.")
    return None


@defop("nonzero", differentiable=False, multi_output=True, check=_nonzero_check,
       before=_nonzero_check)
def nonzero(x, *, size, as_tuple):
    """The int32 coordinates of the first `size` nonzero elements, in row-major order: one array
    per axis, or (as_tuple=False) a 1-tuple holding them as the columns of a (size, ndim) array."""
    coords = tuple(c.astype(jnp.int32) for c in jnp.nonzero(x, size=size))
    return coords if as_tuple else (jnp.stack(coords, axis=1),)


def _cond_take_check(inputs: Sequence, attrs: dict) -> Found:
    """A bool mask of x's shape (jax would take any other silently: nonzero, or flattened)."""
    mask, x = inputs
    if dtype_of(mask) != np.bool_:
        return OpTypeError, (f"mask must be a bool tensor, got dtype {dtype_of(mask)}; compare "
                             "first (e.g. x > 0) or use mask.astype('bool').")
    if dims(mask) != dims(x):
        return OpArgumentError, f"mask of shape {dims(mask)} must have the shape of x, {dims(x)}."
    return None


@defop("cond_take", nondiff_outputs=(1,), before=_cond_take_check)
def cond_take(mask, x, *, size):
    """The elements of `x` where `mask` holds (row-major) and their flat int32 positions."""
    idx = jnp.flatnonzero(mask, size=size).astype(jnp.int32)
    return jnp.ravel(x)[idx], idx


# Ragged tensors (eager/core/ragged.py): the exact rows of a padded storage, and a selection's
# coordinates at a fixed capacity inside a region.
defop("ragged_exact")(lambda x, *, n: x[:n])


@defop("mask_indices", differentiable=False, multi_output=True, ragged=MASKED)
def mask_indices(mask, valid=None, *, size):
    """The int32 coordinates of the true elements of `mask` (one array per axis, row-major),
    padded to `size` with the first one's, and their count. `valid` (a ragged mask's valid
    rows) excludes padding."""
    if valid is not None:
        mask = mask & valid
    # the k-th true element lands in slot k through a running count and one scatter: on the
    # CPU half the time of jnp.nonzero(size=...) (112 against 211 us for 4096 elements)
    flat = mask.reshape(-1)
    running = jnp.cumsum(flat, dtype=jnp.int32)
    count = running[-1] if flat.size else jnp.int32(0)
    slot = jnp.where(flat, running - 1, size)  # out of range: dropped
    idx = jnp.zeros(size, jnp.int32).at[slot].set(
        jnp.arange(flat.size, dtype=jnp.int32), mode="drop")
    idx = jnp.where(jnp.arange(size) < count, idx, idx[:1])
    coords = jnp.unravel_index(idx, mask.shape) if mask.ndim else ()
    return (*(c.astype(jnp.int32) for c in coords), count)
