"""Tensor functions (MegEngine's `megengine.functional.tensor`): creation, shape and movement
(reshape, transpose, concat, split, roll, ...), gathering and scattering along an axis, scans,
triangles and the selections whose size depends on the values (`cond_take`, `nonzero`).

>>> import eager as eg, eager.functional as F
>>> F.tensor.concat([eg.tensor([1, 2]), eg.tensor([3])]).numpy().tolist()
[1, 2, 3]
>>> F.roll(eg.tensor([[1, 2], [3, 4], [5, 6]]), 1, 0).numpy().tolist()
[[5, 6], [1, 2], [3, 4]]
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ..core import ragged as _ragged
from ..core.creation import (  # defined once, for `eg.zeros` and `F.zeros` alike
    arange,
    eye,
    full,
    full_like,
    linspace,
    ones,
    ones_like,
    zeros,
    zeros_like,
)
from ..core.errors import OpTypeError
from ..core.index_checks import check_range
from ..core.indexing import mask_indices
from ..core.op_errors import bad_argument, require
from ..core.ops import OPS
from ..core.tensor_methods import shape_arg
from ..core.tensors import Tensor, apply
from ._args import _is_int, _t


def reshape(x: Any, shape: Sequence[int]) -> Tensor:
    """`x` with a new shape; one entry may be -1."""
    return _t(x).reshape(shape)


def flatten(x: Any, start_axis: int = 0, end_axis: int = -1) -> Tensor:
    """Merge axes start_axis..end_axis into one."""
    return _t(x).flatten(start_axis, end_axis)


def transpose(x: Any, pattern: Sequence[int | str]) -> Tensor:
    """Permute the axes of `x` by `pattern`; an `"x"` in it inserts an axis of length 1 there
    (MegEngine's broadcastable axis): `transpose(x, ("x", 1, 0))` of a (2, 3) tensor is
    (1, 3, 2)."""
    return _t(x).transpose(*pattern)


def expand_dims(x: Any, axis: int | Sequence[int]) -> Tensor:
    """Insert length-1 axes at `axis` (an int or a list)."""
    return apply(OPS["expand_dims"], x, axis=shape_arg((axis,)) if isinstance(axis, int)
                 else shape_arg(axis))


def squeeze(x: Any, axis: int | Sequence[int] | None = None) -> Tensor:
    """Remove length-1 axes (all of them, or those in `axis`)."""
    axis = None if axis is None else shape_arg((axis,) if isinstance(axis, int) else axis)
    return apply(OPS["squeeze"], x, axis=axis)


def broadcast_to(x: Any, shape: Sequence[int]) -> Tensor:
    return apply(OPS["broadcast_to"], x, shape=shape_arg(shape))


def concat(inps: Sequence[Any], axis: int = 0) -> Tensor:
    """Join tensors along an existing axis. Among 1-d pieces, a Python number counts as one
    element, so shape arithmetic as MegEngine's model zoo writes it works
    (`F.concat([shape[:-2], hidden_size])`).

    >>> import eager as eg, eager.functional as F
    >>> F.concat([eg.tensor([2, 3, 4])[:-1], 5]).numpy().tolist()
    [2, 3, 5]
    """
    inps = list(inps)
    if all(isinstance(t, (int, float, np.number)) or np.ndim(t) == 1 for t in inps):
        inps = [[t] if isinstance(t, (int, float, np.number)) else t for t in inps]
    return apply(OPS["concat"], *inps, axis=int(axis))


def stack(inps: Sequence[Any], axis: int = 0) -> Tensor:
    """Join tensors along a new axis."""
    return apply(OPS["stack"], *inps, axis=int(axis))


def split(x: Any, nsplits_or_sections: int | Sequence[int], axis: int = 0) -> list[Tensor]:
    """Split into `n` parts (an int: equal, or the first ones one longer when `n` does not
    divide the axis) or at the given indices (a list), as MegEngine."""
    x = _t(x)
    if isinstance(nsplits_or_sections, (int, np.integer)):
        n, total = int(nsplits_or_sections), x.shape[axis]
        if not 1 <= n <= total:
            raise bad_argument(f"split: axis {axis} of size {total} cannot be split into {n} "
                               f"parts (a count in [1, {total}]).")
        # as MegEngine: the first `total % n` parts are one longer (7 into 3: 3, 2, 2)
        sizes = [total // n + (i < total % n) for i in range(n)]
        indices = tuple(int(i) for i in np.cumsum(sizes)[:-1])
    else:
        indices = tuple(int(i) for i in nsplits_or_sections)
    return list(apply(OPS["split"], x, indices=indices, axis=int(axis)))


def tile(x: Any, reps: Sequence[int]) -> Tensor:
    reps = shape_arg(reps)
    require("tile", x, reps=reps)
    return apply(OPS["tile"], x, reps=reps)


def repeat(x: Any, repeats: int, axis: int | None = None) -> Tensor:
    """Repeat each element `repeats` times along `axis` (flattened if None)."""
    return apply(OPS["repeat"], x, repeats=int(repeats), axis=axis)


def gather(x: Any, axis: int, index: Any) -> Tensor:
    """out[i][j] = x[index[i][j]][j] for axis 0 (PyTorch's gather); a negative axis counts from
    the last. An index outside
    [0, x.shape[axis]) raises `OpIndexError` in eager code (in a compiled region: nan)."""
    x = _t(x)
    axis = _axis("gather", x, axis)
    _check_along(x, axis, index, "gather")
    return apply(OPS["gather"], x, index, axis=axis)


def scatter(x: Any, axis: int, index: Any, source: Any) -> Tensor:
    """A copy of x with out[index[i][j]][j] = source[i][j] for axis 0 (PyTorch's scatter). An
    index out of range raises `OpIndexError` in eager code (in a compiled region: no write)."""
    x = _t(x)
    axis = _axis("scatter", x, axis)
    _check_along(x, axis, index, "scatter")
    return apply(OPS["scatter"], x, index, source, axis=axis)


def _check_along(x: Any, axis: int, index: Any, fn: str) -> None:
    shape = tuple(getattr(x, "shape", ()))
    if -len(shape) <= axis < len(shape):  # else the op itself says what is wrong
        check_range(fn, index, shape[axis], "index", size=f"axis {axis} of shape {shape}")


def copy(x: Any, device: Any = None) -> Tensor:
    """A copy of `x` (MegEngine's `F.copy`), on `device` when given. The copy keeps the
    gradient history; a move to another device has none (as `Tensor.to`)."""
    x = x if isinstance(x, Tensor) else Tensor(x)
    return x.clone() if device is None else x.to(device)


def where(mask: Any, x: Any, y: Any) -> Tensor:
    """x where mask is true, else y (with broadcasting)."""
    return apply(OPS["where"], mask, x, y)


def _axis(fn: str, x: Tensor, axis: int) -> int:
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) \
            or not -max(x.ndim, 1) <= axis < max(x.ndim, 1):
        raise bad_argument(f"{fn}: axis must be an int in [{-x.ndim}, {x.ndim - 1}] for a "
                           f"tensor of shape {x.shape}, got {axis!r}.")
    return int(axis) % max(x.ndim, 1)


def cumsum(x: Any, axis: int) -> Tensor:
    """Running sum along `axis`: out[i] = x[0] + ... + x[i]."""
    x = _t(x)
    return apply(OPS["cumsum"], x, axis=_axis("cumsum", x, axis))


def cumprod(x: Any, axis: int) -> Tensor:
    """Running product along `axis`: out[i] = x[0] * ... * x[i]."""
    x = _t(x)
    return apply(OPS["cumprod"], x, axis=_axis("cumprod", x, axis))


def tril(x: Any, k: int = 0) -> Tensor:
    """The lower triangle of the last two axes: entries above diagonal `k` become 0 (k > 0
    keeps diagonals above the main one)."""
    require("tril", x)
    return apply(OPS["tril"], x, k=int(k))


def triu(x: Any, k: int = 0) -> Tensor:
    """The upper triangle of the last two axes: entries below diagonal `k` become 0."""
    require("triu", x)
    return apply(OPS["triu"], x, k=int(k))


# ----- diagonals, rolls, axis swaps and grids -----------------------------------------------------
def _named_axis(fn: str, name: str, x: Tensor, axis: Any) -> int:
    """`axis` of `x` made non-negative, or an error naming `fn`, the argument and the shape."""
    if x.ndim == 0:
        raise bad_argument(f"{fn}: a 0-d tensor has no axis {axis!r}; reshape it first.")
    if not _is_int(axis) or not -x.ndim <= axis < x.ndim:
        raise bad_argument(f"{fn}: {name} must be an int in [{-x.ndim}, {x.ndim - 1}] for a "
                           f"tensor of shape {x.shape}, got {axis!r}.")
    return int(axis) % x.ndim


def diag(inp: Any, k: int = 0) -> Tensor:
    """A 1-d `inp` (n,) placed on diagonal `k` of an (n + |k|, n + |k|) matrix of zeros, or
    diagonal `k` of a 2-d `inp` as a 1-d tensor; k > 0 is above the main diagonal, k < 0 below.

    >>> import eager as eg, eager.functional as F
    >>> F.diag(eg.tensor([[0, 1, 2], [3, 4, 5]]), k=1).numpy().tolist()
    [1, 5]
    """
    x = _t(inp)
    if not _is_int(k):
        raise bad_argument(f"diag: k must be an int, got {k!r}.", OpTypeError)
    require("diag", x, k=int(k))
    return apply(OPS["diag"], x, k=int(k))


def _roll_pairs(x: Tensor, shift: Any, axis: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(shifts, axes) of a `roll`, each shift reduced modulo its axis's length (zeros dropped)."""
    if _is_int(shift) != _is_int(axis) or not all(_is_int(v) or isinstance(v, (tuple, list))
                                                  for v in (shift, axis)):
        raise bad_argument(f"roll: shift {shift!r} and axis {axis!r} must both be ints or both "
                           "tuples of ints of the same length.", OpTypeError)
    shifts = (shift,) if _is_int(shift) else tuple(shift)
    axes = (axis,) if _is_int(axis) else tuple(axis)
    if len(shifts) != len(axes):
        raise bad_argument(f"roll: shift {shift!r} and axis {axis!r} must be as long as each "
                           "other: one shift per axis.")
    if not all(_is_int(s) for s in shifts):
        raise bad_argument(f"roll: the shifts must be ints, got {shift!r}.", OpTypeError)
    pairs = []
    for s, a in zip(shifts, axes):
        a = _named_axis("roll", "axis", x, a)
        if x.shape[a] and s % x.shape[a]:
            pairs.append((int(s) % x.shape[a], a))
    return tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)


def roll(inp: Any, shift: int | Iterable[int], axis: int | Iterable[int] | None = None
         ) -> Tensor:
    """Roll `inp` by `shift` places along `axis`: elements pushed past the end come back at the
    start. Tuples roll by each shift along its axis (an axis may repeat); axis None rolls the
    flattened tensor by an int `shift` and restores the shape."""
    x = _t(inp)
    if axis is None:
        if not _is_int(shift):
            raise bad_argument(f"roll: with axis=None, shift must be an int, got {shift!r}; "
                               "give an axis for each shift.")
        return apply(OPS["roll"], x, shift=int(shift) % x.size if x.size else 0, axis=None)
    shifts, axes = _roll_pairs(x, shift, axis)
    return apply(OPS["roll"], x, shift=shifts, axis=axes)


def swapaxes(inp: Any, axis1: int, axis2: int) -> Tensor:
    """`inp` with axes `axis1` and `axis2` interchanged (negative axes count from the last)."""
    x = _t(inp)
    pattern = list(range(x.ndim))
    a = _named_axis("swapaxes", "axis1", x, axis1)
    b = _named_axis("swapaxes", "axis2", x, axis2)
    pattern[a], pattern[b] = b, a
    return apply(OPS["transpose"], x, axes=tuple(pattern))


def meshgrid(*inputs: Any, indexing: str = "xy") -> tuple[Tensor, ...]:
    """Coordinate grids from 1-d tensors of one dtype (a 0-d one counts as length 1): N inputs
    of lengths n1, n2, ... give N tensors of shape (n2, n1, n3, ...) with Cartesian indexing
    "xy", (n1, n2, n3, ...) with matrix indexing "ij" (a tuple, as MegEngine returns).

    >>> import eager as eg, eager.functional as F
    >>> [g.numpy().tolist() for g in F.meshgrid(eg.tensor([1, 2, 3]), eg.tensor([4, 5]))]
    [[[1, 2, 3], [1, 2, 3]], [[4, 4, 4], [5, 5, 5]]]
    """
    if indexing not in ("xy", "ij"):
        raise bad_argument(f"meshgrid: indexing must be 'xy' or 'ij', got {indexing!r}.")
    xs = [_t(x) for x in inputs]
    require("meshgrid", *xs, indexing=indexing)
    return apply(OPS["meshgrid"], *xs, indexing=indexing)


# ----- selections with data-dependent sizes ------------------------------------------------------
# Their results are ragged (eager/core/ragged.py): padded to a capacity, the count read on the
# host in eager code (kept on the device for a small source) and traced inside a region. With
# ragged off (`eg.set_ragged_buckets(None)`) the count is read on the host (a region raises
# `ValueReadError` there, or breaks) and becomes a static attribute: one program per count.
def _count(x: Tensor, fn: str) -> int:
    return int(apply(OPS["count_nonzero"], x)._scalar(f"{fn} (its output size is a count of "
                                                      "the input's values)"))


def nonzero(x: Any, as_tuple: bool = False) -> Tensor | tuple[Tensor, ...]:
    """The int32 coordinates of the nonzero elements in row-major order: an (n, ndim) tensor,
    or with `as_tuple` one length-n tensor per axis (usable as an index).

    >>> import eager as eg, eager.functional as F
    >>> F.nonzero(eg.tensor([[0, 3], [5, 0]])).numpy().tolist()
    [[0, 1], [1, 0]]
    """
    x = _t(x)
    require("nonzero", x)  # the op's rule, whether the op or a ragged selection computes it
    if _ragged.enabled():
        coords = mask_indices(apply(OPS["not_equal"], x, 0), "F.nonzero() (its output size "
                              "is a count of the input's values)")
        return tuple(coords) if as_tuple else apply(OPS["stack"], *coords, axis=1)
    out = apply(OPS["nonzero"], x, size=_count(x, "F.nonzero()"), as_tuple=bool(as_tuple))
    return out if as_tuple else out[0]


def cond_take(mask: Any, x: Any) -> tuple[Tensor, Tensor]:
    """(values, indices): the elements of `x` where the bool `mask` (of x's shape) is true, and
    their int32 positions in the flattened `x`, both 1-d (MegEngine).

    >>> import eager as eg, eager.functional as F
    >>> mask = eg.tensor([[True, False], [False, True]])
    >>> v, i = F.cond_take(mask, eg.tensor([[1.0, 2.0], [3.0, 4.0]]))
    >>> v.numpy().tolist(), i.numpy().tolist()
    ([1.0, 4.0], [0, 3])
    """
    mask, x = _t(mask), _t(x)
    require("cond_take", mask, x)  # the op's rule, whether the op or a ragged selection runs
    if _ragged.enabled():
        (index,) = mask_indices(apply(OPS["reshape"], mask, shape=(-1,)), "F.cond_take() (its "
                                "output size is a count of the input's values)")
        return apply(OPS["getitem"], apply(OPS["reshape"], x, shape=(-1,)), index,
                     spec=("#",)), index
    return apply(OPS["cond_take"], mask, x, size=_count(mask, "F.cond_take()"))


__all__ = [
    "zeros", "ones", "full", "zeros_like", "ones_like", "full_like", "arange", "linspace", "eye",
    "reshape", "flatten", "transpose", "expand_dims", "squeeze", "broadcast_to", "concat",
    "stack", "split", "tile", "repeat", "gather", "scatter", "copy", "where", "cumsum",
    "cumprod", "tril", "triu", "diag", "roll", "swapaxes", "meshgrid", "nonzero", "cond_take",
]
