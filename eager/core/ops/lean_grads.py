"""Functions whose jax derivative would keep several full-size intermediates for the backward,
written with `jax.custom_jvp` so that it keeps one.

Differentiated as written, exact GELU keeps three activation-sized values for its backward
(erfc's, exp's and a product), and LayerNorm with a weight three (the centred input, the
normalised values and their product with the per-row scale). They are held from forward to
backward by the tape, by a `partial_trace` segment's residuals and by an `xla_trace` step:
25.5 of the GPT workload backbone's 36.1 MiB of residuals. Here GELU keeps its input (the
backward recomputes the slope from it) and LayerNorm's standardisation its output and the
per-row scale. Measured on that workload, one CPU device: `partial_trace` residuals 22.6 MiB
and backward peak 29.8 (were 36.1 and 42.8), the whole `xla_trace` step's peak 34.6 MiB (was
45.1). The values are the same formulas; the derivatives are the same mathematics in fewer
intermediates (and are themselves differentiable: higher-order gradients go through them).
"""

from __future__ import annotations

import functools as ft
import math

import jax
import jax.numpy as jnp
from jax import lax

_SQRT_HALF = 1 / math.sqrt(2)
_INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)


@jax.custom_jvp
def gelu(x: jax.Array) -> jax.Array:
    """Exact GELU, `x * Φ(x)` with Φ the standard normal CDF (`jax.nn.gelu(x, False)`)."""
    return x * (lax.erfc(-x * _SQRT_HALF) / 2)


@gelu.defjvp
def _gelu_jvp(primals: tuple, tangents: tuple) -> tuple:
    (x,), (dx,) = primals, tangents
    # Under jax.checkpoint the slope is recomputed from x in the backward: x is what is kept.
    # Kept itself, the slope would be one more value than XLA needs in a whole compiled step,
    # where it recomputes elementwise work from x (the GPT step's peak: +4 MiB, measured).
    return gelu(x), jax.checkpoint(_scaled_by_slope)(x, dx)


def _scaled_by_slope(x: jax.Array, dx: jax.Array) -> jax.Array:
    cdf = lax.erfc(-x * _SQRT_HALF) / 2
    return dx * (cdf + x * jnp.exp(-0.5 * x * x) * _INV_SQRT_2PI)  # Φ(x) + x φ(x)


@ft.partial(jax.custom_jvp, nondiff_argnums=(1, 2))
def standardize(x: jax.Array, axes: tuple[int, ...], eps: float) -> jax.Array:
    """`(x - mean) / sqrt(var + eps)` over `axes` (biased variance), LayerNorm's core."""
    return _standardized(x, axes, eps)[0]


def _standardized(x: jax.Array, axes: tuple[int, ...], eps: float) -> tuple:
    mean = jnp.mean(x, axis=axes, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=axes, keepdims=True)
    scale = lax.rsqrt(var + eps)
    return (x - mean) * scale, scale


@standardize.defjvp
def _standardize_jvp(axes: tuple[int, ...], eps: float, primals: tuple, tangents: tuple
                     ) -> tuple:
    (x,), (dx,) = primals, tangents
    y, scale = _standardized(x, axes, eps)
    centred = dx - jnp.mean(dx, axis=axes, keepdims=True)
    # d[(x - m) r] = r (dx - mean(dx)) + (x - m) dr, dr = -r^3 mean((x - m)(dx - mean(dx)))
    return y, scale * (centred - y * jnp.mean(y * centred, axis=axes, keepdims=True))
