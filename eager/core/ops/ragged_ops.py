"""Ops that make, combine or reorder ragged storage (`eager/core/ragged.py`) with lengths as runtime
inputs: a concatenation of selections, a scatter through a selection, an order of a selection's
rows, the padding rule itself. Each compiles once per storage size, never once per length.

A length is a Python int, an int32 device scalar or a traced int32 (inside a region); storage
rows at and past it are padding, copies of row 0 under `stop_gradient` (`edge`).
"""

import jax.numpy as jnp
import numpy as np
from jax import lax

from .registry import defop
from .shape import _build_index
from .sorting import _order


def valid_rows(n, cap, ndim):
    """A bool array of shape (cap, 1, ..., 1): True on the first `n` rows."""
    return lax.broadcasted_iota(jnp.int32, (cap,) + (1,) * (ndim - 1), 0) < n


def edge(a, n):
    """`a` with rows at and past `n` replaced by a copy of row 0, under `stop_gradient`: the
    padding invariant, and a zero cotangent for every padding row."""
    if a.ndim == 0 or a.shape[0] == 0:
        return a
    return jnp.where(valid_rows(n, a.shape[0], a.ndim), a, lax.stop_gradient(a[:1]))


def fit_rows(a, rows):
    """`a` trimmed or grown (copies of row 0, under `stop_gradient`) to `rows` rows: storage of
    one capacity lined up with another's, when the length fits both."""
    if a.shape[0] >= rows:
        return a[:rows]
    pad = jnp.broadcast_to(lax.stop_gradient(a[:1]), (rows - a.shape[0], *a.shape[1:]))
    return jnp.concatenate([a, pad])


def valid_first(order, n):
    """`order` (positions in a ragged storage of length `n`) with the valid positions first, in
    their order: a stable sort of the storage restricted to its valid rows is their own."""
    return order[jnp.argsort(order >= n, stable=True)]


@defop("ragged_fit")
def ragged_fit(x, *, rows):
    """Ragged storage moved to `rows` rows (its length fits both)."""
    return fit_rows(x, rows)


@defop("ragged_edge")
def ragged_edge(n, x):
    """`x` as ragged storage of length `n` (a draw or a fill made at a capacity)."""
    return edge(x, n)


@defop("ragged_concat", resizes=True)
def ragged_concat(*args, parts, rows):
    """The first `parts` arguments are lengths, the rest the storages of as many tensors: their
    logical rows one after another, in storage of `rows` rows (a gather from the storages, so
    the gradient of each row goes back to the row it came from)."""
    lengths = [jnp.asarray(n, jnp.int32) for n in args[:parts]]
    xs = args[parts:]
    stored = np.cumsum([0] + [x.shape[0] for x in xs[:-1]]).astype(np.int32)
    starts = jnp.cumsum(jnp.stack([jnp.int32(0)] + lengths[:-1]))
    total = starts[-1] + lengths[-1]
    p = jnp.arange(rows, dtype=jnp.int32)
    part = jnp.sum(p[:, None] >= starts[None, 1:], axis=1)  # the last part starting at or before p
    src = jnp.asarray(stored)[part] + p - starts[part]
    out = jnp.concatenate(xs)[jnp.where(p < total, src, 0)]
    return edge(out, total)


@defop("ragged_setitem")
def ragged_setitem(n, m, x, value, *index, spec, value_rows, ragged):
    """`x[index] = value` on storage. With `m` not None the leading index arrays are a
    selection's of length `m`: their padding rows write nowhere (an out-of-range index,
    dropped), so the gradient of each write goes to the value row that made it. `value_rows`:
    the value's axis 0 lines up with the index rows, and is trimmed or grown to their capacity.
    `ragged`: `x` itself is ragged, of length `n`."""
    if m is not None:
        first = index[0]
        index = (jnp.where(jnp.arange(first.shape[0]) < m, first, x.shape[0]), *index[1:])
    if value_rows:
        value = fit_rows(value, index[0].shape[0])
    out = x.at[_build_index(spec, index)].set(jnp.asarray(value, dtype=x.dtype), mode="drop")
    return edge(out, n) if ragged else out


@defop("ragged_topk", nondiff_outputs=(1,))
def ragged_topk(n, m, x, *, k, descending, ragged):
    """(values, int32 positions) of the first `k` rows of 1-d `x` in sorted order (stable), as
    storage of length `m`; a ragged `x` (length `n`) orders only its valid rows. Restricting a
    stable sort of the storage to the valid rows gives their own stable sort, so the rows agree
    with the exact array's `topk` / `sort`."""
    idx = _order(x, descending)
    if ragged:
        idx = valid_first(idx, n)
    idx = idx[:k]
    return edge(x[idx], m), edge(idx, m)
