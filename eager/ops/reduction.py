"""Reductions over axes: `axis` is None (all axes), an int or a tuple of ints; static."""

import jax
import jax.numpy as jnp

from .registry import defop

for _name, _fn in {"sum": jnp.sum, "mean": jnp.mean, "max": jnp.max, "min": jnp.min,
                   "prod": jnp.prod}.items():
    defop(_name)(lambda x, *, axis, keepdims, _fn=_fn: _fn(x, axis=axis, keepdims=keepdims))


for _name, _fn in {"any": jnp.any, "all": jnp.all}.items():
    defop(_name, differentiable=False)(
        lambda x, *, axis, keepdims, _fn=_fn: _fn(x, axis=axis, keepdims=keepdims))


@defop("var")
def var(x, *, axis, keepdims, ddof):
    return jnp.var(x, axis=axis, keepdims=keepdims, ddof=ddof)


@defop("std")
def std(x, *, axis, keepdims, ddof):
    return jnp.std(x, axis=axis, keepdims=keepdims, ddof=ddof)


@defop("logsumexp")
def logsumexp(x, *, axis, keepdims):
    return jax.nn.logsumexp(x, axis=axis, keepdims=keepdims)


@defop("norm")
def norm(x, *, ord, axis, keepdims):
    a = jnp.abs(x)
    if ord == float("inf"):
        return jnp.max(a, axis=axis, keepdims=keepdims)
    if ord == float("-inf"):
        return jnp.min(a, axis=axis, keepdims=keepdims)
    if ord == 0:
        return jnp.sum((x != 0).astype(x.dtype), axis=axis, keepdims=keepdims)
    if ord == 2:
        return jnp.sqrt(jnp.sum(x * x, axis=axis, keepdims=keepdims))
    return jnp.sum(a**ord, axis=axis, keepdims=keepdims) ** (1.0 / ord)


@defop("argmax", differentiable=False)
def argmax(x, *, axis, keepdims):
    return jnp.argmax(x, axis=axis, keepdims=keepdims)


@defop("argmin", differentiable=False)
def argmin(x, *, axis, keepdims):
    return jnp.argmin(x, axis=axis, keepdims=keepdims)
