"""A convolution of a small feature map computed as a matrix product (`conv_forms`): values and
gradients equal XLA's convolution to float32 rounding over shapes, strides, padding and
dilation, in eager ops and compiled regions alike, and only where the rule says."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax import lax

import eager as eg
import eager.functional as F
from eager.autodiff import GradManager
from eager.core.ops import conv_forms
from partial import partial_trace

CPU = jax.default_backend() == "cpu"


def plain(x, w, stride, padding, dilation):
    return lax.conv_general_dilated(x, w, stride, [(p, p) for p in padding],
                                    rhs_dilation=dilation,
                                    dimension_numbers=("NCHW", "OIHW", "NCHW"))


def close(got, want, rtol=2e-6):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape
    scale = max(float(np.abs(want).max()), 1e-30)
    np.testing.assert_array_less(np.abs(got - want).max(), rtol * scale * 8 + 1e-30)


@st.composite
def convolutions(draw):
    n, c, o = draw(st.integers(1, 3)), draw(st.integers(1, 6)), draw(st.integers(1, 6))
    h, w = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    padding = (draw(st.integers(0, 2)), draw(st.integers(0, 2)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    out = [(s + 2 * p - d * (k - 1) - 1) // st_ + 1
           for s, k, st_, p, d in zip((h, w), (kh, kw), stride, padding, dilation)]
    if min(out) < 1:
        padding = (padding[0] + kh * dilation[0], padding[1] + kw * dilation[1])
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((o, c, kh, kw)).astype(np.float32)
    return x, wt, stride, padding, dilation


@settings(max_examples=40, deadline=None)
@given(convolutions())
def test_the_matrix_product_equals_the_convolution_and_its_gradients(case):
    x, w, stride, padding, dilation = case
    settings_ = dict(stride=stride, padding=padding, dilation=dilation)

    @jax.jit
    def both(x, w, g):  # one program per example: op by op, each primitive would compile
        out = []
        for form in (lambda x, w: conv_forms.conv_matmul(x, w, **settings_),
                     lambda x, w: plain(x, w, stride, padding, dilation)):
            y, vjp = jax.vjp(form, x, w)
            out.append((y, *vjp(g)))
        return out

    shape = jax.eval_shape(lambda: plain(x, w, stride, padding, dilation)).shape
    g = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    got, want = both(x, w, g)
    for a, b in zip(got, want):
        close(a, b)


@pytest.mark.skipif(not CPU, reason="the rule is XLA:CPU's")
def test_the_rule_takes_small_float32_maps_only():
    def takes(x_shape, w_shape, groups=1, dtype=jnp.float32, **kw):
        x, w = jnp.zeros(x_shape, dtype), jnp.zeros(w_shape, dtype)
        settings_ = dict(stride=(1, 1), padding=(1, 1), dilation=(1, 1), **kw)
        return conv_forms.as_matmul(x, w, groups=groups, **settings_)

    assert takes((2, 256, 2, 2), (256, 256, 3, 3))
    assert takes((2, 256, 4, 4), (720, 256, 3, 3))
    assert not takes((2, 256, 8, 8), (256, 256, 3, 3))  # XLA's convolution is as fast
    assert not takes((2, 8, 4, 4), (8, 4, 3, 3), groups=2)
    assert not takes((2, 8, 4, 4), (8, 8, 3, 3), dtype=jnp.float16)
    assert not takes((2, 8, 4, 4, 4), (8, 8, 3, 3, 3))  # 3-d


@pytest.mark.skipif(not CPU, reason="the rule is XLA:CPU's")
@pytest.mark.parametrize("stride", [1, 2])
def test_eager_and_compiled_small_convolutions_equal_the_plain_ones(stride, rewrites):
    rng = np.random.default_rng(0)
    x = eg.tensor(rng.standard_normal((2, 16, 4, 4)).astype(np.float32))
    w = eg.Parameter(rng.standard_normal((24, 16, 3, 3)).astype(np.float32) * 0.1)
    b = eg.Parameter(rng.standard_normal(24).astype(np.float32))

    def run(fn):
        gm = GradManager().attach([w, b])
        with gm:
            y = fn(x)
            gm.backward((y * y).sum())
        out = [y.numpy(), w.grad.numpy(), b.grad.numpy()]
        w.grad = b.grad = None
        return out

    def net(x):
        return F.relu(F.conv2d(x, w, b, stride=stride, padding=1))

    eager_form = run(net)
    compiled = run(partial_trace(net))
    eg.set_conv_rewrites(False)
    reference = run(net)
    for got, want in zip(eager_form, reference):
        close(got, want, rtol=1e-5)
    for got, want in zip(compiled, eager_form):
        close(got, want, rtol=1e-5)
