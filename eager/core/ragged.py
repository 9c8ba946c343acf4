"""Ragged tensors: a data-dependent leading axis kept as padded storage and a length, so that
XLA compiles a program per capacity bucket, not per count.

A data-dependent selection (`x[mask]`, `F.nonzero`, `F.cond_take`) returns a tensor whose axis 0
is stored padded to a *capacity*, with its logical length beside it (`Tensor._len`). From a
small source (at most `small_source` candidates) and inside regions, the capacity is the
source's size and the length is computed on the device (an int32 device scalar, read only when
Python asks for it; a traced int32 in a region). From a larger one, eager code reads the count
on the host and takes the capacity from a geometric ladder (powers of two by default, never
above the source's size); the length is then an int. Ops run on the storage with the length as
a runtime input, so each compiles once per capacity, never once per length.

The padding invariant: storage rows at and past the length hold copies of a row of real data
(the selection's indices are padded with its first index), so padding is finite wherever the
data is. Every op on ragged storage puts its output's padding back to a copy of its row 0
under `stop_gradient` (`edge`): the cotangent of a padding row is therefore always zero, and
since the values there are real values, no `0 * inf` reaches a gradient. Reductions over the
ragged axis are masked (`valid_rows`).

This module is pure jax plus the `Op` class: the ladder, the masks, and the variants of an op
that run on ragged storage. `ragged_dispatch.py` decides which variant a call takes.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from .context import bump_epoch, current
from .ops.ragged_ops import edge, fit_rows, valid_rows
from .ops.ragged_rules import HEAVY_ROWS, LOSS, MASKED, ROWS, SOURCE, WIDE_ROWS
from .ops.registry import Op

_ENV = "EAGER_RAGGED_BUCKETS"
_SMALL_ENV = "EAGER_RAGGED_SMALL_SOURCE"
# Below this many candidates an op's time on the CPU is its dispatch, not its work (measured:
# a gather, a slice and a masked smooth L1 of 256 to 4096 rows take the same 20-40 us on 2
# cores; at 16384 rows 2.5-4x that), so selecting at the full size wastes nothing that counts
# and saves the host read of the count and the programs of the other capacities.
_SMALL_DEFAULT = 4096


# ----- lengths read in eager code ----------------------------------------------------------
class RowCount(int):
    """The length of a ragged axis read in eager code (`x.shape[0]`): an int, which also holds
    the storage's capacity and the length itself, so that a tensor made with it as its first
    size (`F.zeros(x.shape)`, `F.full((len(x), 1), v)`) is ragged like `x`, with the same
    length, instead of an exact array that compiles its users once per count. Arithmetic on
    it gives plain ints."""

    capacity: int
    length: Any

    def __new__(cls, n: int, capacity: int, length: Any) -> RowCount:
        out = super().__new__(cls, n)
        out.capacity, out.length = capacity, length
        return out

    def __reduce__(self) -> Any:  # pickles, copies and deep copies as the plain int
        return int, (int(self),)


def rows_of(shape: Any) -> tuple[tuple, Any] | None:
    """(storage shape, length) when the first size of `shape` is a `RowCount` (a tensor made
    with it is ragged); None otherwise."""
    first = shape[0] if isinstance(shape, (tuple, list)) and shape else shape
    if not isinstance(first, RowCount) or not enabled() or first.capacity <= 0:
        return None
    rest = tuple(shape[1:]) if isinstance(shape, (tuple, list)) else ()
    return (first.capacity, *(int(s) for s in rest)), first.length


# ----- the capacity ladder --------------------------------------------------------------------
def _parse(spec: Any) -> tuple[float, tuple[int, ...]] | None:
    """(growth, explicit rungs) for a ladder spec; None turns ragged results off."""
    if spec is None or spec is False or (isinstance(spec, str) and spec.strip().lower() in
                                         ("0", "off", "false", "no", "none")):
        return None
    if isinstance(spec, str):
        spec = spec.strip()
        spec = [int(s) for s in spec.split(",")] if "," in spec else float(spec)
    if isinstance(spec, (int, float)) and not isinstance(spec, bool):
        if not spec > 1:
            raise ValueError(f"set_ragged_buckets: a growth factor must be > 1, got {spec}")
        return float(spec), ()
    rungs = tuple(sorted({int(r) for r in spec}))
    if not rungs or rungs[0] < 1:
        raise ValueError(f"set_ragged_buckets: capacities must be positive ints, got {spec!r}")
    return 2.0, rungs


def _parse_small(spec: Any) -> int:
    try:
        small = int(spec)
    except (TypeError, ValueError):
        small = -1
    if small < 0 or isinstance(spec, (bool, float)):
        raise ValueError(f"set_ragged_buckets: small_source ({_SMALL_ENV} in the environment) "
                         f"must be an int >= 0, got {spec!r}")
    return small


_ladder = [_parse(os.environ.get(_ENV, "2"))]
_small = [_parse_small(os.environ.get(_SMALL_ENV, _SMALL_DEFAULT))]


def set_ragged_buckets(ladder: float | Sequence[int] | None = 2.0, *,
                       small_source: int = _SMALL_DEFAULT) -> None:
    """Choose the capacities data-dependent selections are padded to, process-wide.

    `ladder` is a growth factor (2.0, the default: capacities 1, 2, 4, 8, ...; 1.25 wastes at
    most 25% of the work for about three times as many programs per op), an explicit list of
    capacities (lengths above the last one use the source's size), or None / False to turn
    ragged results off (selections return exact-size tensors, which compile once per length).
    A capacity is never above the size of the tensor selected from. The environment variable
    `EAGER_RAGGED_BUCKETS` sets the default ("2", "1.5", "64,256,1024" or "off").

    A selection from at most `small_source` candidates (4096 by default; the environment
    variable `EAGER_RAGGED_SMALL_SOURCE`) is padded to the candidates' count whatever it
    selects, and its length stays on the device until Python asks for it: no host read in the
    step, and one program per op for every count. 0 makes every selection follow the ladder.

    >>> import eager as eg
    >>> eg.set_ragged_buckets(None); eg.set_ragged_buckets(2.0)
    """
    small = _parse_small(small_source)
    _ladder[0] = _parse(ladder)
    _small[0] = small
    bump_epoch()  # compiled regions that select re-validate and compile anew


def ragged_buckets() -> tuple[float, tuple[int, ...]] | None:
    """The ladder in force: (growth factor, explicit capacities) or None when off."""
    return _ladder[0]


def enabled() -> bool:
    return _ladder[0] is not None


def selects_whole(limit: int) -> bool:
    """Whether a selection from `limit` candidates keeps their count as its capacity, its
    length computed on the device (no host read): ragged results on, `limit` small."""
    return _ladder[0] is not None and 0 < limit <= _small[0]


def capacity(n: int, limit: int) -> int:
    """The storage size for a length `n` selected from `limit` candidates: the smallest rung
    of the ladder at or above `n`, at most `limit`; 0 for an empty selection.

    >>> capacity(5, 100), capacity(64, 100), capacity(65, 100), capacity(0, 100)
    (8, 64, 100, 0)
    """
    if n <= 0:
        return 0
    growth, rungs = _ladder[0] or (2.0, ())
    if rungs:
        return min(next((r for r in rungs if r >= n), limit), limit)
    rung = 1
    while rung < n:
        rung = max(rung + 1, math.ceil(rung * growth))
    return min(rung, limit)


def fine_capacity(n: int, limit: int) -> int:
    """A rung of a fine ladder (8 to 16 per doubling: at most 1/8 wasted) at or above `n`, at
    most `limit`: where an op's rows are so costly that the padding of the main ladder's rung
    costs more than the programs of more rungs.

    >>> fine_capacity(1081, 4096), fine_capacity(976, 4096), fine_capacity(5, 4096)
    (1152, 1024, 5)
    """
    step = 1 << max(n.bit_length() - 4, 0)
    return min(-(-n // step) * step, limit)


def kind_of(op: Op, attrs: dict, ndim: int) -> str | None:
    """How `op` with `attrs` runs on ragged inputs of `ndim` axes (None: on exact arrays)."""
    rule = op.ragged
    return rule(attrs, ndim) if callable(rule) else rule


# ----- the variants of an op that run on storage --------------------------------------------
def variant(op: Op, kind: str) -> Op:
    """The op that runs `op` on ragged storage: its first input is the length."""
    cached = op.ragged_ops.get(kind)
    if cached is None:
        fwd = {ROWS: _rows, SOURCE: _rows, HEAVY_ROWS: _rows_upto, WIDE_ROWS: _rows_upto,
               MASKED: _masked,
               LOSS: _loss}[kind](op)
        cached = op.ragged_ops[kind] = Op(
            f"{op.name}[{kind}]", fwd, differentiable=op.differentiable,
            nondiff_outputs=op.nondiff_outputs, multi_output=op.multi_output,
            compiler_options=op.compiler_options)
        cached.persist = None if op.persist is None else (*op.persist, kind)
    return cached


def _rows(op: Op) -> Callable:
    def fwd(n: Any, *arrays: Any, **attrs: Any) -> Any:
        out = op._impl(*arrays, **attrs)
        return tuple(edge(o, n) for o in out) if op.multi_output else edge(out, n)
    return fwd


def _rows_upto(op: Op) -> Callable:
    """`_rows`, run only on the first `cap` rows of the ragged inputs at `positions` when the
    static attribute `upto=(cap, positions)` is given; the output's rows past `cap` are
    padding (copies of row 0 under `stop_gradient`), so XLA computes `cap` rows, not all."""
    rows = _rows(op)

    def fwd(n: Any, *arrays: Any, upto: tuple | None = None, **attrs: Any) -> Any:
        if upto is None:
            return rows(n, *arrays, **attrs)
        cap, positions = upto
        full = arrays[positions[0]].shape[0]
        out = rows(n, *(a[:cap] if i in positions else a for i, a in enumerate(arrays)), **attrs)
        return tuple(fit_rows(o, full) for o in out) if op.multi_output else fit_rows(out, full)
    return fwd


def _masked(op: Op) -> Callable:
    def fwd(n: Any, x: Any, **attrs: Any) -> Any:
        return op._impl(x, valid_rows(n, x.shape[0], x.ndim), **attrs)
    return fwd


def _loss(op: Op) -> Callable:
    def fwd(n: Any, *arrays: Any, reduction: str, **attrs: Any) -> Any:
        loss = op._impl(*arrays, reduction="none", **attrs)
        return masked_reduce(loss, n, reduction)
    return fwd


def masked_reduce(loss: Any, n: Any, reduction: str) -> Any:
    """A loss's reduction over its valid rows ("mean", "sum", "batchmean" or "none")."""
    if reduction == "none" or loss.ndim == 0:
        return loss
    valid = jnp.broadcast_to(valid_rows(n, loss.shape[0], loss.ndim), loss.shape)
    total = jnp.sum(loss, where=valid)
    if reduction == "sum":
        return total
    if reduction == "batchmean":
        return total / jnp.maximum(n, 1).astype(total.dtype)
    return jnp.mean(loss, where=valid)


# ----- the length of a ragged tensor ---------------------------------------------------------
class TracedDim:
    """The length of a ragged axis inside a region: a size that exists only when the compiled
    code runs. It compares equal to itself (tensors selected by one mask share it); using its
    value (`int()`, arithmetic, comparing it with a number) is a value read, which the region
    refuses with its `ValueReadError` naming the line, as for `.item()`."""

    __slots__ = ("n", "owner")

    def __init__(self, n: Any, owner: Any):
        self.n, self.owner = n, owner

    def _read(self, *_: Any) -> Any:
        value_read(self.owner, "the size of a data-dependent selection (.shape, len())")
        raise TypeError("the size of a data-dependent selection is unknown inside a region")

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, TracedDim) and other.n is self.n:
            return True
        return self._read()

    def __ne__(self, other: Any) -> bool:
        return not self == other

    def __hash__(self) -> int:  # equal only to itself: one bucket for all is correct
        return hash(TracedDim)

    def __repr__(self) -> str:
        return "<data-dependent>"

    __index__ = __int__ = __bool__ = __float__ = _read
    __lt__ = __le__ = __gt__ = __ge__ = _read
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _read
    __floordiv__ = __rfloordiv__ = __truediv__ = __rtruediv__ = __mod__ = __neg__ = _read


def value_read(t: Any, what: str) -> None:
    """Report a read of `t`'s data-dependent size to the active capture (which raises)."""
    if (h := current()) is not None:
        h.value_read(t, what)


def length_dim(t: Any) -> Any:
    """The logical length of ragged `t`: a `RowCount`, or a `TracedDim` inside a region."""
    n = host_length(t)
    return TracedDim(t._len, t) if n is None else RowCount(n, t._data.shape[0], t._len)


def host_length(t: Any) -> int | None:
    """The length of ragged `t` as an int (a device length is read, once: jax keeps the
    value), or None inside a region, where it is traced."""
    return host_int(t._len)


def host_int(n: Any) -> int | None:
    """A length (an int, a device scalar, a traced value) as an int; None when traced."""
    if isinstance(n, int):
        return n
    return None if isinstance(n, jax.core.Tracer) else int(n)
