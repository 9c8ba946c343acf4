"""Random draws: the framework key's split and the distributions, as non-differentiable ops
(but `random_shuffle`, whose gradient goes back to the tensor it permutes).

A draw takes a key (the framework's RNG state, split per draw) as an input, so regions compile
random code once and replay it with a new key on every call.
"""

import jax
import jax.numpy as jnp

from .registry import defop


@defop("random_key", differentiable=False)
def random_key(seed):
    return jax.random.key_data(jax.random.key(seed))


@defop("random_split", differentiable=False, multi_output=True)
def random_split(key):
    """Advance the framework key: returns (next key, a key to draw with)."""
    nxt, sub = jax.random.split(jax.random.wrap_key_data(key))
    return jax.random.key_data(nxt), jax.random.key_data(sub)


@defop("random_normal", differentiable=False)
def random_normal(key, mean, std, *, shape, dtype):
    return mean + std * jax.random.normal(jax.random.wrap_key_data(key), shape, dtype)


@defop("random_uniform", differentiable=False)
def random_uniform(key, low, high, *, shape, dtype):
    return jax.random.uniform(jax.random.wrap_key_data(key), shape, dtype, low, high)


@defop("random_permutation", differentiable=False)
def random_permutation(key, *, n, dtype):
    return jax.random.permutation(jax.random.wrap_key_data(key), n).astype(dtype)


@defop("random_randint", differentiable=False)
def random_randint(key, low, high, *, shape, dtype):
    return jax.random.randint(jax.random.wrap_key_data(key), shape, low, high, dtype)


# The distribution parameters are inputs (no recompile per value); `shape` is the draw's shape,
# to which they broadcast (MegEngine's `size + broadcast(parameters).shape`).
@defop("random_gamma", differentiable=False)
def random_gamma(key, concentration, scale, *, shape, dtype):
    k = jax.random.wrap_key_data(key)
    a = jnp.broadcast_to(jnp.asarray(concentration, dtype), shape)
    return jax.random.gamma(k, a, shape, dtype) * jnp.asarray(scale, dtype)


@defop("random_beta", differentiable=False)
def random_beta(key, a, b, *, shape, dtype):
    k = jax.random.wrap_key_data(key)
    return jax.random.beta(k, jnp.asarray(a, dtype), jnp.asarray(b, dtype), shape, dtype)


@defop("random_poisson", differentiable=False)
def random_poisson(key, lam, *, shape, dtype):
    """Counts as `dtype` (float32 by default, as MegEngine's `poisson` returns)."""
    k = jax.random.wrap_key_data(key)
    return jax.random.poisson(k, jnp.asarray(lam, jnp.float32), shape).astype(dtype)


@defop("random_shuffle")
def random_shuffle(key, x):
    """`x` with its rows (axis 0) in a random order; differentiable in `x` (the gradient goes
    back through the same permutation)."""
    return jax.random.permutation(jax.random.wrap_key_data(key), x, axis=0, independent=False)
