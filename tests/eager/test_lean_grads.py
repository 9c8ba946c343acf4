"""`lean_grads`: GELU and LayerNorm's standardisation with hand-written derivatives equal the
plain formulas differentiated by jax (values, gradients, second derivatives, over shapes and
dtypes), and keep one activation-sized value for the backward where jax keeps three or four."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from eager.core.ops.lean_grads import gelu, standardize

DTYPES = {"float32": (jnp.float32, 1e-5), "bfloat16": (jnp.bfloat16, 2e-2)}


def plain_gelu(x):
    return jax.nn.gelu(x, approximate=False)


def plain_standardize(x, axes, eps):
    mean = jnp.mean(x, axis=axes, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=axes, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + eps)


def _full_size_residuals(fn, x, w):
    """How many values of `x`'s size jax's vjp of `fn(x, w)` keeps for the backward."""
    _, pullback = jax.vjp(fn, x, w)
    return sum(1 for leaf in jax.tree.leaves(pullback) if np.size(leaf) == x.size)


shapes = st.lists(st.integers(1, 5), min_size=1, max_size=3).map(tuple)


@given(shape=shapes, dtype=st.sampled_from(sorted(DTYPES)), seed=st.integers(0, 2**16))
def test_gelu_value_gradient_and_second_derivative_are_jaxs(shape, dtype, seed):
    dt, tol = DTYPES[dtype]
    x = jnp.asarray(np.random.default_rng(seed).standard_normal(shape) * 3, dt)
    np.testing.assert_allclose(np.float32(gelu(x)), np.float32(plain_gelu(x)), rtol=tol,
                               atol=tol)
    for order in (1, 2):
        got, want = gelu, plain_gelu
        for _ in range(order):
            got, want = jax.grad(lambda v, f=got: f(v).sum()), jax.grad(
                lambda v, f=want: f(v).sum())
        np.testing.assert_allclose(np.float32(got(x)), np.float32(want(x)), rtol=tol * 10,
                                   atol=tol * 10, err_msg=f"derivative {order}")


@given(shape=st.lists(st.integers(1, 5), min_size=2, max_size=4).map(tuple),
       n_axes=st.integers(1, 2), dtype=st.sampled_from(sorted(DTYPES)),
       seed=st.integers(0, 2**16))
def test_standardize_value_gradient_and_second_derivative_are_jaxs(shape, n_axes, dtype, seed):
    dt, tol = DTYPES[dtype]
    rng = np.random.default_rng(seed)
    x = jnp.asarray(rng.standard_normal(shape) * 2 + 1, dt)
    axes = tuple(range(len(shape) - n_axes, len(shape)))
    np.testing.assert_allclose(np.float32(standardize(x, axes, 1e-5)),
                               np.float32(plain_standardize(x, axes, 1e-5)), rtol=tol,
                               atol=tol)
    ct = jnp.asarray(rng.standard_normal(shape), dt)
    got = jax.vjp(lambda v: standardize(v, axes, 1e-5), x)[1](ct)[0]
    want = jax.vjp(lambda v: plain_standardize(v, axes, 1e-5), x)[1](ct)[0]
    np.testing.assert_allclose(np.float32(got), np.float32(want), rtol=tol * 10,
                               atol=tol * 10)
    if dtype == "float32":  # the Hessian-vector product: a derivative of the derivative
        def hvp(f):
            return jax.jvp(jax.grad(lambda v: (f(v, axes, 1e-5) * ct).sum()), (x,), (ct,))[1]
        np.testing.assert_allclose(hvp(standardize), hvp(plain_standardize), rtol=1e-3,
                                   atol=1e-4)


@pytest.mark.parametrize("fn, plain, lean, jaxs", [
    (lambda x, w: gelu(x) * w, lambda x, w: plain_gelu(x) * w, 2, 4),
    (lambda x, w: standardize(x, (1,), 1e-5) * w,
     lambda x, w: plain_standardize(x, (1,), 1e-5) * w, 1, 3),
], ids=["gelu", "layer_norm"])
def test_the_backward_keeps_one_activation_sized_value(fn, plain, lean, jaxs):
    """Times a trained weight, as in a network: GELU keeps its input (and its output, which
    the weight's gradient reads), the standardisation its output (read by both gradients);
    jax's derivatives of the plain formulas keep two more."""
    x = jnp.asarray(np.random.default_rng(0).standard_normal((6, 7)), jnp.float32)
    w = jnp.linspace(0.5, 2.0, 7)
    assert _full_size_residuals(fn, x, w) == lean
    assert _full_size_residuals(plain, x, w) == jaxs
