"""Fake quantization (MegEngine's `FakeQuant`, `TQT` and `LSQ` kernels): quantize to the integer
grid [qmin, qmax] and dequantize at once, so that training sees the rounding and saturation an
int8 model will have.

Rounding is half away from zero (C's `round`, what MegEngine's kernels use), not numpy's
half to even. The gradients are MegEngine's, measured against MegEngine 1.13 (its parity cases
in `tests/parity/cases_quantization.py`), which differ between the three in where the input's
gradient is masked:

- `fake_quant`: y = (clip(round(x / s) + z, qmin, qmax) - z) * s. The input's gradient passes
  where round(x / s) + z lies in [qmin, qmax] (the straight-through estimator); scale and zero
  point get none (they come from an observer).
- `tqt` (trained quantization thresholds): the scale is learned as its base-2 logarithm l,
  t = 2**l, y = clip(round(x / t), qmin, qmax) * t. The input's gradient passes where x / t lies
  in [qmin - 0.5, qmax + 0.5]; l's is the sum of g * (inside ? q - x/t : q) * t * ln 2.
- `lsq` (learned step size): v = x / s + z, y = (clip(round(v), qmin, qmax) - z) * s. The
  input's gradient passes where v lies in [qmin, qmax]; the step size's is the sum of
  g * grad_scale * (inside ? round(v) - v : qmin below, qmax above); zero point and grad_scale
  get none.

Each is a `jax.custom_vjp`, since a straight-through gradient is not the derivative of the
forward (which is zero almost everywhere); scale-like inputs may broadcast against x (a scalar,
or one per channel) and their gradients are summed back to their shapes.
"""

from __future__ import annotations

import functools as ft
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ..errors import OpArgumentError
from .checks import Check, Found, dims, float_only, missing
from .registry import defop


def round_half_away(v: jax.Array) -> jax.Array:
    """Round to the nearest integer, ties away from zero (MegEngine's rounding)."""
    return jax.lax.round(v, jax.lax.RoundingMethod.AWAY_FROM_ZERO)


def _summed_to(g: jax.Array, like: jax.Array) -> jax.Array:
    """`g`, the gradient of a value broadcast from `like`'s shape, summed back to that shape."""
    shape = jnp.shape(like)
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, n in enumerate(shape) if n == 1 and g.shape[lead + i] != 1)
    return jnp.sum(g, axis=axes).reshape(shape).astype(jnp.result_type(like))


def _fenced(*arrays: jax.Array) -> tuple:
    """The arrays behind an optimization barrier, which XLA's algebraic simplifier does not
    look through: inside a compiled region it would otherwise rewrite a division by a constant
    (or a value it can fold into one) as a multiplication by its reciprocal, one ulp off the
    division eager code does. Quantization magnifies that ulp: the symmetric observers' scale
    puts the largest value exactly on a rounding tie (max / (max / 127.5) = 127.5), where it
    flips the value by a grid step and the gradient mask with it."""
    return jax.lax.optimization_barrier(arrays)


def _fenced_like(x: jax.Array, *params: jax.Array) -> tuple:
    """Scale-like `params` in x's dtype, broadcast to x's shape before the barrier: XLA also
    turns x / broadcast(s) into x * broadcast(1 / s), which a fence on the scalar s alone
    would not stop."""
    return _fenced(*(jnp.broadcast_to(p.astype(x.dtype), x.shape) for p in params))


def _zeros(like: jax.Array) -> jax.Array:
    return jnp.zeros(jnp.shape(like), jnp.result_type(like))


# ----- fake_quant ------------------------------------------------------------------------------


@ft.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def _fake_quant(x, scale, zero_point, qmin, qmax):
    return _fake_quant_fwd(x, scale, zero_point, qmin, qmax)[0]


def _fake_quant_fwd(x, scale, zero_point, qmin, qmax):
    s, z = _fenced_like(x, scale, zero_point)
    # rounded before the shift, as MegEngine's kernel does: a tie at x / s = -0.5 goes to -1
    # whatever z is
    q = round_half_away(x / s) + z
    inside = (q >= qmin) & (q <= qmax)
    y = (jnp.clip(q, qmin, qmax) - z) * s
    return y, (inside, scale, zero_point)


def _fake_quant_bwd(qmin, qmax, res, g):
    inside, scale, zero_point = res
    return jnp.where(inside, g, jnp.zeros_like(g)), _zeros(scale), _zeros(zero_point)


_fake_quant.defvjp(_fake_quant_fwd, _fake_quant_bwd)


# ----- tqt -------------------------------------------------------------------------------------
@ft.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _tqt(x, log2_scale, qmin, qmax):
    return _tqt_fwd(x, log2_scale, qmin, qmax)[0]


def _tqt_fwd(x, log2_scale, qmin, qmax):
    (t,) = _fenced_like(x, jnp.exp2(log2_scale.astype(x.dtype)))
    v = x / t
    q = jnp.clip(round_half_away(v), qmin, qmax)
    return q * t, (v, q, t, log2_scale)


def _tqt_bwd(qmin, qmax, res, g):
    v, q, t, log2_scale = res
    # inside the grid's half-step margin the rounding error moves with t, outside the clipped
    # value does (d(q t)/dl = q t ln 2 there)
    inside = (v >= qmin - 0.5) & (v <= qmax + 0.5)
    per = g * jnp.where(inside, q - v, q) * t * np.log(2.0).astype(v.dtype)
    return jnp.where(inside, g, jnp.zeros_like(g)), _summed_to(per, log2_scale)


_tqt.defvjp(_tqt_fwd, _tqt_bwd)


# ----- lsq -------------------------------------------------------------------------------------
@ft.partial(jax.custom_vjp, nondiff_argnums=(4, 5))
def _lsq(x, step, zero_point, grad_scale, qmin, qmax):
    return _lsq_fwd(x, step, zero_point, grad_scale, qmin, qmax)[0]


def _lsq_fwd(x, step, zero_point, grad_scale, qmin, qmax):
    s, z = _fenced_like(x, step, zero_point)
    v = x / s + z
    r = round_half_away(v)
    y = (jnp.clip(r, qmin, qmax) - z) * s
    return y, (v, r, step, zero_point, grad_scale)


def _lsq_bwd(qmin, qmax, res, g):
    v, r, step, zero_point, grad_scale = res
    below, above = v < qmin, v > qmax
    inside = ~(below | above)
    per = g * jnp.where(inside, r - v, jnp.where(below, qmin, qmax).astype(v.dtype))
    per = per * grad_scale.astype(v.dtype)
    return (jnp.where(inside, g, jnp.zeros_like(g)), _summed_to(per, step),
            _zeros(zero_point), _zeros(grad_scale))


_lsq.defvjp(_lsq_fwd, _lsq_bwd)


# ----- checks and the ops ----------------------------------------------------------------------
def _check(names: Sequence[str]) -> Check:
    """Float tensors whose scale-like inputs broadcast against x, and qmin <= qmax (jax would
    take an integer input or an empty grid silently: the wrappers run it before the call)."""
    def check(inputs: Sequence, attrs: dict) -> Found:
        if (found := missing(inputs, names)) is not None:
            return found
        for x, what in zip(inputs, names):
            if (found := float_only(x, what)) is not None:
                return found
        if attrs["qmin"] > attrs["qmax"]:
            return OpArgumentError, (f"qmin={attrs['qmin']} is above qmax={attrs['qmax']}: "
                                     "the integer grid is empty.")
        x_shape = dims(inputs[0])
        for p, what in zip(inputs[1:], names[1:]):
            try:
                if np.broadcast_shapes(x_shape, dims(p)) != x_shape:
                    raise ValueError
            except ValueError:
                return OpArgumentError, (f"the {what} has shape {dims(p)}, which does not "
                                         f"broadcast to the input's {x_shape}: give a scalar "
                                         "or one value per channel.")
        return None
    return check


_FAKE_QUANT = _check(("input", "scale", "zero point"))


@defop("fake_quant", check=_FAKE_QUANT, before=_FAKE_QUANT, quick=True)
def fake_quant(x, scale, zero_point, *, qmin, qmax):
    """Quantize to [qmin, qmax] with scale and zero point and dequantize (MegEngine's
    `FakeQuant`); straight-through gradient for x."""
    return _fake_quant(x, jnp.asarray(scale), jnp.asarray(zero_point), qmin, qmax)


_TQT = _check(("input", "log2 scale"))


@defop("tqt", check=_TQT, before=_TQT, quick=True)
def tqt(x, log2_scale, *, qmin, qmax):
    """Fake quantization with the scale 2**log2_scale, learnable (MegEngine's `TQT`)."""
    return _tqt(x, jnp.asarray(log2_scale), qmin, qmax)


_LSQ = _check(("input", "step size", "zero point", "grad scale"))


@defop("lsq", check=_LSQ, before=_LSQ, quick=True)
def lsq(x, step_size, zero_point, grad_scale, *, qmin, qmax):
    """Fake quantization with a learnable step size (MegEngine's `LSQ`)."""
    return _lsq(x, jnp.asarray(step_size), jnp.asarray(zero_point), jnp.asarray(grad_scale),
                qmin, qmax)


@defop("minmax_qparams", differentiable=False, multi_output=True, quick=True)
def minmax_qparams(min_val, max_val, *, qmin, qmax, eps, symmetric):
    """(scale, zero point) for the range [min_val, max_val] widened to include 0 (MegEngine's
    min-max observers): symmetric, the larger side over half the grid (zero point 0);
    asymmetric, the whole range over the grid and qmin - round(min / scale); the scale at
    least `eps`. The grid's width is fenced (`_fenced`), so that a compiled region divides by
    it as eager code does."""
    lo = jnp.minimum(min_val, 0).astype(jnp.float32)
    hi = jnp.maximum(max_val, 0).astype(jnp.float32)
    if symmetric:
        (half,) = _fenced(jnp.float32((qmax - qmin) / 2))
        scale = jnp.maximum(jnp.maximum(-lo, hi) / half, jnp.float32(eps))
        return scale, jnp.zeros_like(scale)
    (width,) = _fenced(jnp.float32(qmax - qmin))
    scale = jnp.maximum((hi - lo) / width, jnp.float32(eps))
    return scale, jnp.float32(qmin) - round_half_away(lo / scale)
