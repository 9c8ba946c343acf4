"""Indices: `x[idx]` split into a static structure and its dynamic parts, for `Tensor.__getitem__`
and `__setitem__` (which reach `parse_index` through `tensors.above`) and the functional
wrappers. (Shapes and axes given as arguments: `tensor_methods.shape_arg`, `axis_arg`.)"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from . import ragged as _ragged
from . import ragged_dispatch
from . import tensors as _t
from .context import current
from .device import commit
from .errors import OpIndexError
from .index_checks import check_range
from .op_errors import bad_argument
from .ops import OPS
from .tensor_methods import TensorMethods


def parse_index(x: Any, index: Any) -> tuple[tuple, list]:
    """Split an index into a static structure and its dynamic parts (ints, integer arrays).

    Boolean masks become integer index tensors here: ragged ones, padded to a capacity
    (`eager/core/ragged.py`), their count kept on the device (a small mask), read on the host (a
    larger one) in eager code, and traced inside a region.
    Python ints are bounds-checked, as in numpy and PyTorch.
    """
    items = index if isinstance(index, tuple) else (index,)
    consumed = sum(_dims_consumed(i) for i in items)
    spec: list = []
    dynamic: list = []
    dim = 0
    for item in items:
        if item is None or item is Ellipsis:
            spec.append(item)
            if item is Ellipsis:
                dim += x.ndim - consumed
        elif isinstance(item, slice):
            spec.append(("slice", *(_slice_int(v) for v in (item.start, item.stop, item.step))))
            dim += 1
        elif isinstance(item, (int, np.integer)) and not isinstance(item, (bool, np.bool_)):
            dynamic.append(_check_bound(int(item), x.shape, dim))
            spec.append("#")
            dim += 1
        else:
            arrays = _index_arrays(item, x.shape, dim)
            dynamic.extend(arrays)
            spec.extend("#" * len(arrays))
            dim += len(arrays)
    return tuple(spec), dynamic


def _dims_consumed(item: Any) -> int:
    if item is None or item is Ellipsis:
        return 0
    if isinstance(item, (TensorMethods, np.ndarray)) and np.dtype(item.dtype) == np.bool_:
        return item.ndim
    return 1


def _slice_int(v: Any) -> int | None:
    return None if v is None else int(v)


def _check_bound(i: int, shape: tuple, dim: int) -> int:
    _check_dim(shape, dim)
    n = shape[dim]
    if not -n <= i < n:
        raise bad_argument(f"indexing: index {i} is out of range for axis {dim} of a tensor of "
                           f"shape {shape}; indices must lie in [{-n}, {n - 1}].", OpIndexError)
    return i % n


def _check_dim(shape: tuple, dim: int) -> None:
    if dim >= len(shape):
        raise bad_argument(f"indexing: too many indices for a tensor of shape {shape}.",
                           OpIndexError)


def _on_device(host: np.ndarray) -> Any:
    """A host index array on the device, committed like the tensors it indexes (Note
    [committed arrays] in device.py); `device_put` rather than `jnp.asarray`, which compiles a
    staging program for every new shape (a mask's count changes every step)."""
    return commit(jax.device_put(host))


def _index_arrays(item: Any, shape: tuple, dim: int) -> list:
    """The integer index arrays `item` stands for at axis `dim` (a mask: one per axis it
    covers), checked against `shape` in eager code."""
    if isinstance(item, TensorMethods):  # every Tensor is one
        if item.dtype == np.bool_:
            _check_mask_rank(item.ndim)
            return mask_indices(item)
        arrays = [item]
    else:
        arr = np.asarray(item)
        if arr.dtype == np.bool_:
            _check_mask_rank(arr.ndim)
            return ragged_dispatch.index_tensors(np.nonzero(arr), arr.size)
        if arr.dtype.kind not in "iu":
            raise bad_argument(
                f"indexing: tensors are indexed by ints, slices, None, ..., boolean masks and "
                f"integer arrays, not {type(item).__name__} of dtype {arr.dtype}.", OpIndexError)
        arrays = [_on_device(arr)]
    _check_dim(shape, dim)
    if np.dtype(item.dtype if isinstance(item, TensorMethods) else arr.dtype).kind in "iu":
        check_range("indexing", item, shape[dim], "index", negative=True,
                    size=f"axis {dim} of a tensor of shape {shape}")
    return arrays


def _check_mask_rank(ndim: int) -> None:
    if ndim == 0:
        raise bad_argument(
            "indexing: a 0-d boolean index (x[True], x[t > 0] for a 0-d t) is not supported; "
            "index with None to add an axis (x[None]), or select with a mask of one or more "
            "axes.", OpIndexError)


def mask_indices(mask: Any, what: str = "a boolean mask index") -> list:
    """The index tensors of a bool tensor's true elements: computed by the device at the mask's
    size inside a region that allows it and for a small mask in eager code (no value read, one
    program for every count), else from a host read of the mask.
    Selections by the same mask share them (`out[pos]`, `tgt[pos]`): one read, and one length,
    which ops combining the two selections can rely on."""
    h = current()
    array = mask._data if h is None else h.read(mask)
    memo = ragged_dispatch.selections(h)
    for hit in memo:  # compared by identity: each entry holds its array, so none is stale
        if hit[0] is array and hit[1] is mask._len:
            return ragged_dispatch.rewrap(*hit[2:])
    if (h.traced_lengths and isinstance(array, jax.core.Tracer) if h is not None
            else _ragged.selects_whole(int(np.prod(array.shape)))):
        out = ragged_dispatch.device_index_tensors(mask)
    else:
        host = mask._host(what)
        out = ragged_dispatch.index_tensors(np.nonzero(host), host.size)
    if h is None:
        memo.clear()
    # arrays, not tensors (a capture would see tensors kept alive as escaping the region)
    memo.append((array, mask._len, [t._data for t in out], out[0]._len))
    return out


def mask_assigned(x: Any, index: Any, value: Any) -> Any:
    """`x` after `x[mask] = value`, computed as a select (`mask_setitem`) where that is the same
    assignment, else None (the caller assigns by indices): `mask` a bool tensor over `x`'s
    leading axes, neither ragged, and `value` the same for every selected element (a number, or
    of a shape that broadcasts to the trailing axes, maybe with an axis of 1 in front). No count
    of the selection is needed: no host read in eager code, no graph break in a region (MegEngine
    code sets labels this way: `labels[iou < low] = 0`)."""
    mask = index[0] if type(index) is tuple and len(index) == 1 else index
    if not (isinstance(mask, _t.Tensor) and mask.dtype == np.bool_ and 0 < mask.ndim <= x.ndim
            and x._len is None and mask._len is None and x._qdtype is None
            and tuple(x.shape[:mask.ndim]) == tuple(mask.shape)):
        return None
    rest = tuple(x.shape[mask.ndim:])
    shape = _value_shape(value)
    if shape is None:
        return None
    lead = len(shape) == len(rest) + 1 and shape[0] == 1
    each = shape[1:] if lead else shape
    if len(each) > len(rest) or any(v not in (1, r) for v, r in zip(each[::-1], rest[::-1])):
        return None
    return _t.apply(OPS["mask_setitem"], x, value, mask, lead=lead)


def _value_shape(value: Any) -> tuple | None:
    """The shape of an assigned value (a number, an array, a tensor not ragged); None for
    anything else."""
    if isinstance(value, (bool, int, float, np.generic)):
        return ()
    if isinstance(value, _t.Tensor):
        return tuple(value.shape) if value._len is None else None
    if isinstance(value, np.ndarray):
        return value.shape
    return None


_t.above.parse_index = parse_index
_t.above.mask_assigned = mask_assigned
