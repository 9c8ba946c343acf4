"""Shape, movement, ordering and selection functions (MegEngine signatures)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import ragged as _ragged
from ..errors import OpTypeError
from ..index_checks import check_range
from ..indexing import _shape_arg, mask_indices
from ..op_errors import bad_argument, number
from ..ops import OPS
from ..tensors import Tensor, apply


def _t(x: Any) -> Tensor:
    return x if isinstance(x, Tensor) else Tensor(x)


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
    return apply(OPS["expand_dims"], x, axis=_shape_arg((axis,)) if isinstance(axis, int)
                 else _shape_arg(axis))


def squeeze(x: Any, axis: int | Sequence[int] | None = None) -> Tensor:
    """Remove length-1 axes (all of them, or those in `axis`)."""
    axis = None if axis is None else _shape_arg((axis,) if isinstance(axis, int) else axis)
    return apply(OPS["squeeze"], x, axis=axis)


def broadcast_to(x: Any, shape: Sequence[int]) -> Tensor:
    return apply(OPS["broadcast_to"], x, shape=_shape_arg(shape))


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
    reps = _shape_arg(reps)
    if min(reps, default=0) < 0:  # jax would fail only when compiling, with an MLIR error
        raise bad_argument(f"tile: reps {reps} must be >= 0.")
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


def indexing_one_hot(src: Any, index: Any, axis: int = 1, keepdims: bool = False) -> Tensor:
    """Pick, along `axis`, the element at `index` (one per position): src[i, index[i]]. An
    index out of range raises `OpIndexError` in eager code (in a compiled region: nan)."""
    src = _t(src)
    axis = _axis("indexing_one_hot", src, axis)
    _check_along(src, axis, index, "indexing_one_hot")
    return apply(OPS["indexing_one_hot"], src, index, axis=axis, keepdims=keepdims)


def _check_along(x: Any, axis: int, index: Any, fn: str) -> None:
    shape = tuple(getattr(x, "shape", ()))
    if -len(shape) <= axis < len(shape):  # else the op itself says what is wrong
        check_range(fn, index, shape[axis], "index", size=f"axis {axis} of shape {shape}")


def copy(x: Any, device: Any = None) -> Tensor:
    """A copy of `x` (MegEngine's `F.copy`), on `device` when given. The copy keeps the
    gradient history; a move to another device has none (as `Tensor.to`)."""
    x = x if isinstance(x, Tensor) else Tensor(x)
    return x.clone() if device is None else x.to(device)


def one_hot(x: Any, num_classes: int, dtype: Any = "float32") -> Tensor:
    """One-hot encoding of integer `x` along a new last axis. A label outside
    [0, num_classes) raises `OpIndexError` in eager code (MegEngine aborts); in a compiled
    region its row is all zeros."""
    kind = np.dtype(x.dtype if hasattr(x, "dtype") else np.asarray(x).dtype)
    if kind.kind not in "iu":
        raise bad_argument(f"one_hot: x must hold integer class indices, got dtype {kind}; "
                           "convert it with .astype('int32').", OpTypeError)
    if int(num_classes) > 0:  # else the op says what is wrong with num_classes
        check_range("one_hot", x, int(num_classes), "label", size=f"{int(num_classes)} classes")
    return apply(OPS["one_hot"], x, num_classes=int(num_classes), dtype=np.dtype(dtype))


_PAD_MODES = {"constant": "constant", "edge": "edge", "replicate": "edge", "reflect": "reflect",
              "symmetric": "symmetric"}


def pad(x: Any, pad_width: Sequence[Sequence[int]], mode: str = "constant",
        constant_value: float = 0.0) -> Tensor:
    """Pad with (before, after) widths per axis; modes constant, edge/replicate, reflect,
    symmetric, in either case (MegEngine writes "CONSTANT")."""
    if not isinstance(mode, str) or mode.lower() not in _PAD_MODES:
        raise bad_argument(f"pad: unknown mode {mode!r}; use one of {sorted(_PAD_MODES)} "
                           "(in either case).")
    mode = mode.lower()
    widths = tuple((int(a), int(b)) for a, b in pad_width)
    return apply(OPS["pad"], x, pad_width=widths, mode=_PAD_MODES[mode],
                 constant_value=number(constant_value, "constant_value"))


# ----- ordering and scans along an axis ----------------------------------------------------------
def _last_axis(fn: str, x: Tensor) -> int:
    if x.ndim == 0:
        raise bad_argument(f"{fn}: needs at least one axis (it works along the last one), got "
                           "a 0-d tensor; reshape it to (1,) first.")
    return x.shape[-1]


def sort(x: Any, descending: bool = False) -> tuple[Tensor, Tensor]:
    """(values, int32 indices) sorted along the last axis; ties keep their order.

    >>> import eager as eg, eager.functional as F
    >>> [t.numpy().tolist() for t in F.sort(eg.tensor([3.0, 1.0, 2.0]), descending=True)]
    [[3.0, 2.0, 1.0], [0, 2, 1]]
    """
    x = _t(x)
    _last_axis("sort", x)
    return apply(OPS["sort"], x, descending=bool(descending))


def argsort(x: Any, descending: bool = False) -> Tensor:
    """The int32 indices that sort `x` along the last axis (stable)."""
    x = _t(x)
    _last_axis("argsort", x)
    return apply(OPS["argsort"], x, descending=bool(descending))


def topk(x: Any, k: Any, descending: bool = True, kth_only: bool = False,
         no_sort: bool = False) -> tuple[Tensor, Tensor]:
    """(values, int32 indices) of the `k` largest entries along the last axis (the smallest with
    `descending=False`), in order; MegEngine's default is descending too. With `kth_only` only
    the k-th one: the last axis is dropped. `no_sort` allows any order; the result here is
    always sorted.

    As in MegEngine, `k` may be a Tensor (its value is read), a `k` above the axis length gives
    the whole axis sorted, and a negative `k` gives the `-k` entries from the other end, in the
    order seen from there (`F.topk(x, -1)` is the smallest with `descending=True`).

    >>> import eager as eg, eager.functional as F
    >>> [t.numpy().tolist() for t in F.topk(eg.tensor([2.0, 4.0, 1.0, 3.0]), 2)]
    [[4.0, 3.0], [1, 3]]
    >>> [t.numpy().tolist() for t in F.topk(eg.tensor([2.0, 4.0, 1.0, 3.0]), -2)]
    [[1.0, 2.0], [2, 0]]
    """
    x = _t(x)
    n = _last_axis("topk", x)
    if isinstance(k, Tensor) and k.size == 1 and np.dtype(k.dtype).kind in "iu":
        k = k.item()
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k == 0:
        raise bad_argument(f"topk: k must be a nonzero int (or an int Tensor of one element), "
                           f"got {k!r}, for the last axis of shape {x.shape}.")
    if k < 0:
        k, descending = -k, not descending
    return apply(OPS["topk"], x, k=min(int(k), n), descending=bool(descending),
                 kth_only=bool(kth_only))


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


def _matrix(fn: str, x: Any) -> Tensor:
    x = _t(x)
    if x.ndim < 2:
        raise bad_argument(f"{fn}: needs a matrix (or a batch of them, the last two axes), "
                           f"got shape {x.shape}.")
    return x


def tril(x: Any, k: int = 0) -> Tensor:
    """The lower triangle of the last two axes: entries above diagonal `k` become 0 (k > 0
    keeps diagonals above the main one)."""
    return apply(OPS["tril"], _matrix("tril", x), k=int(k))


def triu(x: Any, k: int = 0) -> Tensor:
    """The upper triangle of the last two axes: entries below diagonal `k` become 0."""
    return apply(OPS["triu"], _matrix("triu", x), k=int(k))


# ----- selections with data-dependent sizes ------------------------------------------------------
# Their results are ragged (eager/ragged.py): padded to a capacity, the count read on the host in
# eager code (kept on the device for a small source) and traced inside a region. With ragged off
# (`eg.set_ragged_buckets(None)`) the count is read on the host (a region raises
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
    if x.ndim == 0:
        raise bad_argument("nonzero: needs at least one axis, got a 0-d tensor; reshape it "
                           "to (1,) first.")
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
    if mask.dtype != np.bool_:
        raise bad_argument(f"cond_take: mask must be a bool tensor, got dtype {mask.dtype}; "
                           "compare first (e.g. x > 0) or use mask.astype('bool').", OpTypeError)
    if mask.shape != x.shape:
        raise bad_argument(f"cond_take: mask of shape {mask.shape} must have the shape of x, "
                           f"{x.shape}.")
    if _ragged.enabled():
        (index,) = mask_indices(apply(OPS["reshape"], mask, shape=(-1,)), "F.cond_take() (its "
                                "output size is a count of the input's values)")
        return apply(OPS["getitem"], apply(OPS["reshape"], x, shape=(-1,)), index,
                     spec=("#",)), index
    return apply(OPS["cond_take"], mask, x, size=_count(mask, "F.cond_take()"))


__all__ = [
    "reshape", "flatten", "transpose", "expand_dims", "squeeze", "broadcast_to", "concat",
    "stack", "split", "tile", "repeat", "gather", "scatter", "indexing_one_hot", "one_hot", "pad",
    "copy",
    "sort", "argsort", "topk", "cumsum", "cumprod", "tril", "triu", "nonzero", "cond_take",
]
