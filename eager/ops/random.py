"""Random draws: the framework key's split and the distributions, as non-differentiable ops.

A draw takes a key (the framework's RNG state, split per draw) as an input, so regions compile
random code once and replay it with a new key on every call.
"""

import jax

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
