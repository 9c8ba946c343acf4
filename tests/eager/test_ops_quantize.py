"""The fake quantization ops (fake_quant, tqt, lsq) against jax references written here from
MegEngine 1.13's formulas: values, and the straight-through gradients as `jax.vjp` of a
reference whose value is the quantized one and whose derivative is MegEngine's (the
stop-gradient form below, independent of the ops' `custom_vjp`). Hypothesis draws shapes,
dtypes, scales (scalar, one element, per channel) and inputs with exact rounding ties; then
the errors bad arguments raise. The parity cases (`tests/parity/cases_quantization.py`) hold
the same numbers measured in MegEngine.
"""

import functools as ft

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import eager as eg
from eager.autodiff import GradManager
from eager.core.errors import OpArgumentError, OpTypeError
from eager.quantization.utils import (
    QuantMode,
    create_qparams,
    fake_quant_tensor,
    lsq_forward,
    tqt_forward,
)
from tests.helpers import examples

from .op_check import check_op

COVERED = {"fake_quant", "tqt", "lsq", "minmax_qparams"}
FAST = examples(4)
sg = jax.lax.stop_gradient
RANGES = [(-128, 127), (-127, 127), (0, 255), (-8, 7), (0, 15)]


# ----- references -------------------------------------------------------------------------------
def round_away(v):
    """Ties away from zero, written as numpy's half-to-even rounding corrected at the ties."""
    t = jnp.trunc(v)
    return jnp.where(jnp.abs(v - t) == 0.5, t + jnp.sign(v), jnp.round(v))


def through(x, mask):
    """0 in value, d/dx = mask: the straight-through part."""
    return jnp.where(mask, x - sg(x), 0)


def fake_quant_ref(x, s, z, *, qmin, qmax):
    s, z = s.astype(x.dtype), z.astype(x.dtype)
    grid = round_away(x / s) + z
    y = (jnp.clip(grid, qmin, qmax) - z) * s
    return sg(y) + through(x, (grid >= qmin) & (grid <= qmax)) + 0 * (s + z)


def tqt_ref(x, log2, *, qmin, qmax):
    t = jnp.exp2(log2.astype(x.dtype))
    v = x / t
    q = jnp.clip(round_away(v), qmin, qmax)
    inside = (v >= qmin - 0.5) & (v <= qmax + 0.5)
    slope = jnp.where(inside, q - v, q) * t * np.log(2.0).astype(x.dtype)
    return sg(q * t) + through(x, inside) + (log2 - sg(log2)).astype(x.dtype) * sg(slope)


def lsq_ref(x, step, z, gscale, *, qmin, qmax):
    s, zz = step.astype(x.dtype), z.astype(x.dtype)
    v = x / s + zz
    r = round_away(v)
    inside = (v >= qmin) & (v <= qmax)
    slope = jnp.where(inside, r - v, jnp.where(v < qmin, qmin, qmax).astype(x.dtype))
    slope = slope * gscale.astype(x.dtype)
    y = (jnp.clip(r, qmin, qmax) - zz) * s
    return (sg(y) + through(x, inside) + (step - sg(step)).astype(x.dtype) * sg(slope)
            + 0 * (z + gscale).astype(x.dtype))


# ----- drawn cases ------------------------------------------------------------------------------
@st.composite
def case(draw):
    """(x, scale-shaped array maker, qmin, qmax): x's values are multiples of scale / 2 near the
    grid's ends (ties and both saturations) plus noise."""
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=4)))
    dtype = draw(st.sampled_from([np.float32, np.float32, np.float16]))
    qmin, qmax = draw(st.sampled_from(RANGES))
    seed = draw(st.integers(0, 2**16))
    per_channel = len(shape) >= 2 and draw(st.booleans())
    pshape = (1, shape[1]) + (1,) * (len(shape) - 2) if per_channel else draw(
        st.sampled_from([(), (1,)]))
    return shape, dtype, qmin, qmax, seed, pshape


def _inputs(shape, dtype, qmin, qmax, seed, pshape):
    rng = np.random.default_rng(seed)
    scale = (2.0 ** rng.integers(-4, 1, pshape)).astype(np.float32)  # exact in float16 too
    half_steps = rng.integers(2 * qmin - 6, 2 * qmax + 7, shape)
    x = half_steps * scale / 2
    noisy = rng.random(shape) < 0.5
    x = np.where(noisy, x + rng.normal(0, 0.2, shape) * scale, x).astype(dtype)
    return x, scale


@FAST
@given(case())
def test_fake_quant(c):
    shape, dtype, qmin, qmax, seed, pshape = c
    x, scale = _inputs(*c)
    zp = np.full(pshape, float((qmin + qmax + 1) // 2 if qmin == 0 else 0), np.float32)
    check_op("fake_quant", [x, scale, zp], ft.partial(fake_quant_ref, qmin=qmin, qmax=qmax),
             {"qmin": qmin, "qmax": qmax},
             rtol=1e-6, atol=1e-6)


@FAST
@given(case())
def test_tqt(c):
    shape, dtype, qmin, qmax, seed, pshape = c
    x, scale = _inputs(*c)
    log2 = np.log2(scale).astype(np.float32)
    check_op("tqt", [x, log2], ft.partial(tqt_ref, qmin=qmin, qmax=qmax),
             {"qmin": qmin, "qmax": qmax}, rtol=1e-5, atol=1e-5,
             grad_rtol=1e-4, grad_atol=1e-4)


@FAST
@given(case())
def test_lsq(c):
    shape, dtype, qmin, qmax, seed, pshape = c
    x, scale = _inputs(*c)
    zp = np.full(pshape, float(qmin + 3 if qmin == 0 else 0), np.float32)
    gscale = np.full(pshape, 0.5, np.float32)
    check_op("lsq", [x, scale, zp, gscale], ft.partial(lsq_ref, qmin=qmin, qmax=qmax),
             {"qmin": qmin, "qmax": qmax}, rtol=1e-5,
             atol=1e-5, grad_rtol=1e-4, grad_atol=1e-4)


def test_megengine_rounding_and_masks_at_the_edges():
    """Numbers read off MegEngine 1.13 (qint4, scale 0.25, zero point 1): -0.125 / 0.25 = -0.5
    rounds to -1 before the shift; 1.825 (grid 8.3 -> 8) is outside, its gradient 0, and so is
    -2.5 (grid -9)."""
    x = eg.tensor(np.array([-0.125, 0.125, 1.5, 1.825, -2.25, -2.5], np.float32))
    s, z = eg.tensor([0.25]), eg.tensor([1.0])
    gm = GradManager().attach([x])
    with gm:
        y = eg.apply(eg.OPS["fake_quant"], x, s, z, qmin=-8, qmax=7)
        gm.backward(y.sum())
    assert y.numpy().tolist() == [-0.25, 0.25, 1.5, 1.5, -2.25, -2.25]
    assert x.grad.numpy().tolist() == [1, 1, 1, 0, 1, 0]


def minmax_qparams_ref(lo, hi, *, qmin, qmax, eps, symmetric):
    lo, hi = jnp.minimum(lo, 0), jnp.maximum(hi, 0)
    if symmetric:
        scale = jnp.maximum(jnp.maximum(-lo, hi) / np.float32((qmax - qmin) / 2), np.float32(eps))
        return scale, jnp.zeros_like(scale)
    scale = jnp.maximum((hi - lo) / np.float32(qmax - qmin), np.float32(eps))
    return scale, qmin - round_away(lo / scale)


@FAST
@given(st.sampled_from(RANGES), st.booleans(), st.floats(-50, 50, width=32),
       st.floats(-50, 50, width=32))
def test_minmax_qparams(grid, symmetric, a, b):
    qmin, qmax = grid
    attrs = {"qmin": qmin, "qmax": qmax, "eps": 1e-5, "symmetric": symmetric}
    lo, hi = np.float32(min(a, b)), np.float32(max(a, b))
    check_op("minmax_qparams", [np.asarray(lo), np.asarray(hi)],
             ft.partial(minmax_qparams_ref, **attrs), attrs, rtol=1e-6, atol=0, grad=False)


# ----- bad arguments ----------------------------------------------------------------------------
def test_bad_arguments_are_explained():
    x = eg.tensor(np.ones((2, 3), np.float32))
    with pytest.raises(OpArgumentError, match="qmin=5 is above qmax=1"):
        tqt_forward(5, 1, x, eg.tensor(1.0))
    with pytest.raises(OpArgumentError, match="does not broadcast"):
        eg.apply(eg.OPS["tqt"], x, eg.tensor(np.zeros(4, np.float32)), qmin=-8, qmax=7)
    with pytest.raises(OpArgumentError, match="does not broadcast"):
        lsq_forward(-8, 7, x, eg.tensor(np.ones(4, np.float32)))
    with pytest.raises(OpTypeError, match="float"):
        lsq_forward(-8, 7, eg.tensor(np.ones(3, np.int32)), eg.tensor(1.0))
    qparams = create_qparams(QuantMode.SYMMERTIC, "qint8", scale=None)
    with pytest.raises(OpArgumentError, match="a dtype_meta and a scale"):
        fake_quant_tensor(x, qparams)
