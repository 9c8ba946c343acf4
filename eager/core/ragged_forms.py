"""Ops on ragged tensors (`eager/core/ragged.py`) whose result's length is not their input's: a
concatenation of selections, a slice of one, its top-k or sort, NMS over it, a scatter through
it, and tensors made at a count read from the data (`F.zeros(x.shape)`, `uniform(size=n)`,
`F.topk(x, k=count)`). Each keeps its result ragged, with the new length beside the storage,
so that a detection head compiles once per capacity, not once per count.

Lengths are combined in Python when they are ints (eager code that read them) and as int32
device scalars or traced values otherwise; the ops that use them are in `ops/ragged_ops.py`.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence
from typing import Any

import jax.numpy as jnp

from . import ragged as _r
from . import ragged_dispatch as _d
from . import tensors as _t
from .ops import OPS
from .ops.persistent import Kept
from .ops.ragged_rules import ROWS, SOURCE, indexing

_FULL = ("slice", None, None, None)


def _form(name: str) -> Callable[[Callable], Callable]:
    """Register `fn(op, key, inputs) -> result or None (not this form: the op's own rule)` as
    how op `name` runs when an input is ragged."""
    def register(fn: Callable) -> Callable:
        _d.FORMS[name] = fn
        return fn
    return register


def _known(*ns: Any) -> bool:
    return all(isinstance(n, int) for n in ns)


# Lengths kept on the device are combined by programs kept on disk with the eager ops' (a new
# process loads them, rather than compiling jax's own per process).
_ADD = Kept("ragged_plus", jnp.add, ())
_MIN = Kept("ragged_min", jnp.minimum, ())
_CLIP = Kept("ragged_clip", lambda a, top: jnp.clip(a, 0, top), ())


def _plus(a: Any, b: Any) -> Any:
    return a + b if _known(a, b) else _ADD(a, b)


def _min(a: Any, b: Any) -> Any:
    return builtins.min(a, b) if _known(a, b) else _MIN(a, b)


def _clip(a: Any, top: Any) -> Any:
    """`a` clipped to [0, top]."""
    return builtins.max(builtins.min(a, top), 0) if _known(a, top) else _CLIP(a, top)


def _length(x: Any) -> Any:
    """A tensor's length along axis 0: its ragged length, or its static size."""
    return x._len if _d.is_ragged(x) else x._data.shape[0]


def _mark(out: Any, n: Any) -> Any:
    for o in out if isinstance(out, tuple) else (out,):
        o._len = n
    return out


def storage_rows(x: Any) -> int:
    """The rows of `x`'s storage along axis 0: its capacity when ragged, else its size."""
    return x._data.shape[0]


# ----- combining and cutting --------------------------------------------------------------------
@_form("concat")
def _concat(op: Any, key: tuple, inputs: Sequence) -> Any:
    """`F.concat` along axis 0 of ragged and dense tensors: ragged, of the summed length, in
    storage of the ladder's capacity for it (the summed storages when a length is on the
    device)."""
    if not all(isinstance(x, _t.Tensor) for x in inputs):
        return None
    ndim = inputs[0]._data.ndim
    trailing = {tuple(x._data.shape[1:]) for x in inputs}
    if ndim == 0 or dict(key)["axis"] % ndim or len(trailing) != 1 \
            or any(x._data.ndim != ndim for x in inputs):
        return None
    lengths = [_length(x) for x in inputs]
    stored = sum(storage_rows(x) for x in inputs)
    total = lengths[0]
    for n in lengths[1:]:
        total = _plus(total, n)
    # a read total: the ladder's rung for it, not the inputs' summed rungs (which move with
    # how the rows split between them, and would compile the ops downstream for each split)
    rows = _r.capacity(total, 1 << 62) if _known(total) and total else stored
    out = _t.run_op(OPS["ragged_concat"], (("parts", len(inputs)), ("rows", rows)),
                    (*lengths, *inputs))
    return _mark(out, total)


@_form("getitem")
def _slice(op: Any, key: tuple, inputs: Sequence) -> Any:
    """`x[a:b, ...]` of ragged `x` with a >= 0 and no step: the storage from row `a`, of length
    `min(b, n) - a` (b < 0 counts from the length)."""
    x, spec = inputs[0], dict(key)["spec"]
    if not _d.is_ragged(x) or not spec or not isinstance(spec[0], tuple) or spec[0] == _FULL \
            or any(_d.is_ragged(i) for i in inputs[1:]):
        return None
    _, start, stop, step = spec[0]
    start = start or 0
    if step not in (None, 1) or start < 0 or start >= storage_rows(x):
        return None
    if indexing({"spec": (_FULL, *spec[1:])}, x._data.ndim) != SOURCE:
        return None
    rest = (("slice", start or None, None, None), *spec[1:])
    n = x._len
    end = n if stop is None else _min(stop, n) if stop >= 0 else _plus(n, stop)
    m = _clip(_plus(end, -start), n)
    new = (("spec", rest),)
    if _d._plan(op, new, ROWS, inputs) != (0,):
        return None
    return _mark(_t.run_op(_r.variant(op, ROWS), new, (m, *inputs)), m)


@_form("setitem")
def _setitem(op: Any, key: tuple, inputs: Sequence) -> Any:
    """`x[index] = value` where `x`, the index arrays (a selection's) or the value are ragged:
    a scatter on the storage, whose padding index rows write nowhere."""
    x, value, *index = inputs
    spec = dict(key)["spec"]
    ragged_x = _d.is_ragged(x)
    if ragged_x and indexing({"spec": spec}, x._data.ndim) != SOURCE:
        return None
    lined = [i for i in index if _d.is_ragged(i)]
    if not lined:
        if _d.is_ragged(value):
            return None
        return _scatter(x, value, index, spec, False, None)
    arrays = spec[:len(index)]
    if len(lined) != len(index) or arrays != ("#",) * len(index):
        return None  # ragged index arrays must be the leading items (a mask's coordinates)
    n = _d._common_length(lined + ([value] if _d.is_ragged(value) else []))
    if n is None:
        return None
    rows = _d.is_ragged(value) or _dense_rows(value, x._data.ndim - len(index) + 1, n)
    if rows is None:
        return None
    return _scatter(x, value, index, spec, rows, n)


def _dense_rows(value: Any, ndim: int, n: Any) -> bool | None:
    """Whether a dense value's axis 0 lines up with `n` index rows (None: it cannot tell)."""
    shape = jnp.shape(value._data if isinstance(value, _t.Tensor) else value)
    if len(shape) < ndim or shape[0] == 1:
        return False
    length = _r.host_int(n)
    if length is None:
        return None
    return shape[0] == length and length != 1


def _scatter(x: Any, value: Any, index: Sequence, spec: tuple, rows: bool, m: Any) -> Any:
    ragged_x = _d.is_ragged(x)
    key = (("spec", spec), ("value_rows", bool(rows)), ("ragged", ragged_x))
    out = _t.run_op(OPS["ragged_setitem"], key,
                    (x._len if ragged_x else 0, m, x, value, *index))
    return _mark(out, x._len) if ragged_x else out


# ----- order ------------------------------------------------------------------------------------
def topk(x: Any, k: int, descending: bool, counted: bool) -> tuple[Any, Any]:
    """`F.topk` of 1-d `x` (ragged, or with `k` read from a tensor, `counted`): ragged (values,
    positions) of length min(k, len(x)), in storage of k's capacity rung (`counted`) or k
    rows, never more than `x`'s storage."""
    ragged = _d.is_ragged(x)
    n, stored = _length(x), storage_rows(x)
    rows = builtins.min(_r.capacity(k, stored) if counted else k, stored)
    m = _min(k, n)
    key = (("k", rows), ("descending", bool(descending)), ("ragged", ragged))
    return _mark(_t.run_op(OPS["ragged_topk"], key, (n if ragged else 0, m, x)), m)


def order(x: Any, descending: bool) -> tuple[Any, Any]:
    """(sorted values, positions) of ragged 1-d `x`: ragged, of its length."""
    key = (("k", storage_rows(x)), ("descending", bool(descending)), ("ragged", True))
    return _mark(_t.run_op(OPS["ragged_topk"], key, (x._len, x._len, x)), x._len)


def ragged_rows(x: Any) -> bool:
    """Whether `x` is 1-d and ragged: its sorts and top-k keep it ragged."""
    return _d.is_ragged(x) and x._data.ndim == 1 and _r.enabled()


def counted(k: Any) -> bool:
    """Whether `k` (a top-k size) came from the data: a tensor, or a ragged tensor's length."""
    return isinstance(k, (_t.Tensor, _r.RowCount)) and _r.enabled()


@_form("nms_keep")
def _nms(op: Any, key: tuple, inputs: Sequence) -> Any:
    """NMS over ragged boxes and scores: only the valid rows take part."""
    boxes, scores = inputs
    if not (_d.is_ragged(boxes) and _d.is_ragged(scores)):
        return None
    n = _d._common_length([boxes, scores])
    return None if n is None else _t.run_op(op, key, (boxes, scores, n))


# ----- made at a count ------------------------------------------------------------------------
def made(shape: Any, make: Callable[[tuple], Any]) -> Any | None:
    """`make(storage shape)` as a ragged tensor when `shape` starts with a `RowCount` (None
    otherwise): a fill or a draw as long as the tensor whose length it is."""
    found = _r.rows_of(shape)
    if found is None:
        return None
    storage, n = found
    out = _t.run_op(OPS["ragged_edge"], (), (n, make(storage)))
    return _mark(out, n)


def count_of(size: Any) -> Any:
    """A draw's `size` given as a one-element int tensor (MegEngine's `uniform(size=n)` with
    `n = mask.sum()`): a `RowCount` at the ladder's capacity for its value; else `size`."""
    if isinstance(size, _t.Tensor) and size.size == 1 and jnp.issubdtype(size.dtype,
                                                                         jnp.integer):
        n = int(size.item())
        if n > 0 and _r.enabled():
            return _r.RowCount(n, _r.capacity(n, 1 << 62), n)
        return n
    return size


__all__ = ["topk", "order", "ragged_rows", "counted", "made", "count_of", "storage_rows"]
