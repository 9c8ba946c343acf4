"""Order along an axis: sort, argsort and top-k over the last axis, and the running scans
cumsum and cumprod.

Sorted values are gathered from the input at the sorted positions, so their gradient is jax's
scatter of the cotangent back to where each value came from. Indices are int32 (MegEngine's
dtype) and carry no gradient. Ties keep their input order everywhere: sort and argsort are
stable, and `lax.top_k` puts the lower index first.
"""

from collections.abc import Sequence

import jax.numpy as jnp
from jax import lax

from ..amp_policy import FLOAT32
from ..errors import OpArgumentError
from .checks import Found, dims
from .ragged_rules import ROWS, along
from .registry import defop


def _last_axis(attrs, ndim):
    """Ops along the last axis: row-independent unless that axis is the ragged one."""
    return ROWS if ndim >= 2 else None


def _axis_check(inputs: Sequence, attrs: dict) -> Found:
    if not dims(inputs[0]):
        return OpArgumentError, ("needs at least one axis (it works along the last one), got a "
                                 "0-d tensor; reshape it to (1,) first.")
    return None


def _order(x, descending):
    return jnp.argsort(x, axis=-1, stable=True, descending=descending).astype(jnp.int32)


@defop("sort", nondiff_outputs=(1,), ragged=_last_axis, check=_axis_check,
       before=_axis_check)
def sort(x, *, descending):
    idx = _order(x, descending)
    return jnp.take_along_axis(x, idx, axis=-1), idx


defop("argsort", differentiable=False, ragged=_last_axis, check=_axis_check,
      before=_axis_check)(
    lambda x, *, descending: _order(x, descending))


def _key(x, descending):
    """What `lax.top_k` (which picks the largest) ranks: `x`, or for the smallest a key that
    reverses its order: `-x` for floats, `~x` for integers (where `-x` would overflow at the
    most negative value and wrap for unsigned types)."""
    if x.dtype == jnp.bool_:
        x = x.astype(jnp.int8)
    if descending:
        return x
    return -x if jnp.issubdtype(x.dtype, jnp.inexact) else ~x


@defop("topk", nondiff_outputs=(1,), ragged=_last_axis, check=_axis_check,
       before=_axis_check)
def topk(x, *, k, descending, kth_only):
    _, idx = lax.top_k(_key(x, descending), k)
    idx = idx.astype(jnp.int32)
    if kth_only:
        idx = idx[..., -1:]
    values = jnp.take_along_axis(x, idx, axis=-1)
    return (values[..., 0], idx[..., 0]) if kth_only else (values, idx)


defop("cumsum", ragged=along(inside=None), amp=FLOAT32)(
    lambda x, *, axis: jnp.cumsum(x, axis=axis))
defop("cumprod", ragged=along(inside=None), amp=FLOAT32)(
    lambda x, *, axis: jnp.cumprod(x, axis=axis))
