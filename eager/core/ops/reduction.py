"""Reductions over axes: `axis` is None (all axes), an int or a tuple of ints; static.

Each takes an optional second input `valid`, a bool array that broadcasts against `x`: only the
elements where it holds take part. Ragged tensors (`eager/core/ragged.py`) pass the mask of their
valid rows when a reduction covers their ragged axis 0 (`ragged=along()`); everything else
passes None, the plain reduction.
"""

import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp

from ..amp_policy import FLOAT32
from ..errors import OpArgumentError
from .checks import Found
from .ragged_rules import MASKED, NONEMPTY, along
from .registry import defop


def _lowest(dtype):
    return -jnp.inf if jnp.issubdtype(dtype, jnp.inexact) else (
        False if dtype == jnp.bool_ else jnp.iinfo(dtype).min)


def _highest(dtype):
    return jnp.inf if jnp.issubdtype(dtype, jnp.inexact) else (
        True if dtype == jnp.bool_ else jnp.iinfo(dtype).max)


def _fill(x, valid, value):
    """`x` with the elements outside `valid` set to `value` (a select: no gradient there)."""
    return x if valid is None else jnp.where(valid, x, jnp.asarray(value, x.dtype))


for _name, _fn in {"sum": jnp.sum, "mean": jnp.mean, "prod": jnp.prod}.items():
    defop(_name, ragged=along(), amp=FLOAT32)(
        lambda x, valid=None, *, axis, keepdims, _fn=_fn: _fn(x, axis=axis, keepdims=keepdims,
                                                              where=valid))


@defop("max", ragged=along(inside=NONEMPTY))
def max_(x, valid=None, *, axis, keepdims):
    return jnp.max(_fill(x, valid, _lowest(x.dtype)), axis=axis, keepdims=keepdims)


@defop("min", ragged=along(inside=NONEMPTY))
def min_(x, valid=None, *, axis, keepdims):
    return jnp.min(_fill(x, valid, _highest(x.dtype)), axis=axis, keepdims=keepdims)


@defop("any", differentiable=False, ragged=along())
def any_(x, valid=None, *, axis, keepdims):
    return jnp.any(_fill(x, valid, False), axis=axis, keepdims=keepdims)


@defop("all", differentiable=False, ragged=along())
def all_(x, valid=None, *, axis, keepdims):
    return jnp.all(_fill(x, valid, True), axis=axis, keepdims=keepdims)


@defop("var", ragged=along(), amp=FLOAT32)
def var(x, valid=None, *, axis, keepdims, ddof):
    return jnp.var(x, axis=axis, keepdims=keepdims, ddof=ddof, where=valid)


@defop("std", ragged=along(), amp=FLOAT32)
def std(x, valid=None, *, axis, keepdims, ddof):
    return jnp.std(x, axis=axis, keepdims=keepdims, ddof=ddof, where=valid)


@defop("logsumexp", ragged=along(), amp=FLOAT32)
def logsumexp(x, valid=None, *, axis, keepdims):
    if valid is not None:
        valid = jnp.broadcast_to(valid, x.shape)
    return jax.nn.logsumexp(x, axis=axis, keepdims=keepdims, where=valid)


def vector_norm(x, ord=2.0, axis=None, keepdims=False, *, valid=None, zero_safe=False):
    """The vector p-norm of `x` over `axis` (None: all of it): the project's one p-norm, used by
    the `norm`, `normalize` and `clip_grad_norm` ops and by LAMB's trust ratio.

    `ord` is a Python number: +-inf (the largest / smallest |x|), 0 (the count of nonzeros), or
    p > 0, (sum |x|**p) ** (1/p); an empty vector's norm is 0 (-inf: an error). Only the elements
    where the bool array `valid` holds (if given; it broadcasts against `x`) take part. The
    root's derivative at 0 is infinite, so the gradient at a zero vector is nan; with `zero_safe`
    it is 0 there (the root is taken of 1 and the result dropped), and a nan sum then gives 0.
    """
    a = jnp.abs(x)
    if ord == float("inf"):  # an initial only where needed: it would take a share of ties at 0
        return jnp.max(_fill(a, valid, 0), axis=axis, keepdims=keepdims,
                       initial=0 if a.size == 0 else None)
    if ord == float("-inf"):
        return jnp.min(_fill(a, valid, jnp.inf), axis=axis, keepdims=keepdims)
    x, a = _fill(x, valid, 0), _fill(a, valid, 0)
    if ord == 0:
        return jnp.sum((x != 0).astype(x.dtype), axis=axis, keepdims=keepdims)
    s = jnp.sum(x * x if ord == 2 else a**ord, axis=axis, keepdims=keepdims)
    if not zero_safe:
        return jnp.sqrt(s) if ord == 2 else s ** (1.0 / ord)
    positive = s > 0
    s = jnp.where(positive, s, jnp.ones_like(s))
    return jnp.where(positive, jnp.sqrt(s) if ord == 2 else s ** (1.0 / ord), jnp.zeros_like(s))


def ord_check(inputs: Sequence, attrs: dict) -> Found:
    """A p-norm's order, p >= 0 or +-inf (MegEngine's rule; jax would compute any p)."""
    p = attrs["ord"]
    if not (p in (math.inf, -math.inf) or p >= 0):
        return OpArgumentError, f"ord must be >= 0 or +-inf, got {p}."
    return None


@defop("norm", ragged=lambda attrs, ndim: along(
    inside=NONEMPTY if abs(attrs["ord"]) == float("inf") else MASKED)(attrs, ndim), amp=FLOAT32,
    before=ord_check)
def norm(x, valid=None, *, ord, axis, keepdims):
    return vector_norm(x, ord, axis, keepdims, valid=valid)


def _arg_reduce(fn, x, axis, keepdims):
    """`fn` (jnp.argmax / argmin) over one axis, or over several as one: the index counts
    row-major through the chosen axes, as numpy's argmax of the array with them flattened
    into one (MegEngine instead reduces them one after the other: see the guide's Porting)."""
    if not isinstance(axis, tuple):
        return fn(x, axis=axis, keepdims=keepdims)
    axes = sorted({a % x.ndim for a in axis})
    kept = [d for d in range(x.ndim) if d not in axes]
    moved = jnp.transpose(x, kept + axes).reshape([x.shape[d] for d in kept] + [-1])
    index = fn(moved, axis=-1)
    if keepdims:
        index = jnp.expand_dims(index, axes)
    return index


@defop("argmax", differentiable=False, ragged=along(inside=NONEMPTY))
def argmax(x, valid=None, *, axis, keepdims):
    return _arg_reduce(jnp.argmax, _fill(x, valid, _lowest(x.dtype)), axis, keepdims)


@defop("argmin", differentiable=False, ragged=along(inside=NONEMPTY))
def argmin(x, valid=None, *, axis, keepdims):
    return _arg_reduce(jnp.argmin, _fill(x, valid, _highest(x.dtype)), axis, keepdims)
