"""Higher-order gradients with nested GradManagers (MegEngine's way): the inner backward is
recorded by the outer manager, whose backward differentiates the gradients again. Checked
against jax's own nested derivatives."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import eager as eg
import eager.functional as F
from eager.autodiff import Function, GradManager
from tests.helpers import examples

FAST = examples(8)

# Each pair: the eager function and the same in jnp, on a (3, 4) input and a (4, 5) weight.
BLOCKS = {
    "tanh": (F.tanh, jnp.tanh),
    "sin": (F.sin, jnp.sin),
    "exp": (lambda x: F.exp(x * 0.3), lambda x: jnp.exp(x * 0.3)),
    "square": (lambda x: x * x, lambda x: x * x),
    "sigmoid": (F.sigmoid, jax.nn.sigmoid),
    "softmax": (lambda x: F.softmax(x, axis=-1), lambda x: jax.nn.softmax(x, axis=-1)),
    "gelu": (F.gelu, lambda x: jax.nn.gelu(x, approximate=False)),
    "pow3": (lambda x: x ** 3, lambda x: x ** 3),
}


def _arrays(seed):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((3, 4)).astype(np.float32),
            rng.standard_normal((4, 5)).astype(np.float32) * 0.5,
            rng.standard_normal((4, 5)).astype(np.float32))


@pytest.mark.slow  # ~14 s of compiles
@FAST
@given(st.lists(st.sampled_from(sorted(BLOCKS)), min_size=1, max_size=3),
       st.integers(0, 2**16))
def test_hessian_vector_products_match_jax(names, seed):
    x, w, v = _arrays(seed)

    def f_jax(w_):
        h = x @ w_
        for n in names:
            h = BLOCKS[n][1](h)
        return h.sum()

    # jitted: run op by op, jax compiles every primitive of both derivatives for each shape
    hvp = jax.jit(jax.grad(lambda w_: jnp.vdot(jax.grad(f_jax)(w_), v)))(jnp.asarray(w))
    first = jax.jit(jax.grad(f_jax))(jnp.asarray(w))

    wt = eg.Parameter(w)
    outer, inner = GradManager().attach([wt]), GradManager().attach([wt])
    with outer:
        with inner:
            h = eg.tensor(x) @ wt
            for n in names:
                h = BLOCKS[n][0](h)
            inner.backward(h.sum())
        g = wt.grad
        np.testing.assert_allclose(g.numpy(), first, rtol=2e-5, atol=2e-6)
        wt.grad = None
        outer.backward((g * eg.tensor(v)).sum())
    np.testing.assert_allclose(wt.grad.numpy(), hvp, rtol=2e-4, atol=2e-5)


def test_gradient_penalty_on_the_input_matches_jax():
    """WGAN-GP: the norm of d(critic)/d(input), trained with respect to the parameters."""
    x, w, _ = _arrays(1)

    def critic(w_, x_):
        return jnp.tanh(x_ @ w_).sum()

    def penalty(w_):
        g = jax.grad(critic, argnums=1)(w_, jnp.asarray(x))
        return ((jnp.sqrt((g * g).sum(axis=1)) - 1.0) ** 2).mean()

    expected_loss, expected = jax.jit(jax.value_and_grad(penalty))(jnp.asarray(w))

    wt, xt = eg.Parameter(w), eg.tensor(x)
    outer, inner = GradManager().attach([wt]), GradManager().attach([xt])
    with outer:
        with inner:
            inner.backward(F.tanh(xt @ wt).sum())
        loss = ((F.sqrt((xt.grad * xt.grad).sum(axis=1)) - 1.0) ** 2).mean()
        outer.backward(loss)
    np.testing.assert_allclose(loss.item(), expected_loss, rtol=1e-5)
    np.testing.assert_allclose(wt.grad.numpy(), expected, rtol=1e-4, atol=1e-6)


def test_third_order_with_three_managers():
    x = eg.Parameter(2.0)
    gms = [GradManager().attach([x]) for _ in range(3)]
    with gms[0]:
        with gms[1]:
            with gms[2]:
                gms[2].backward(x ** 4)  # 4x^3 = 32
            d1, x.grad = x.grad, None
            gms[1].backward(d1)  # 12x^2 = 48
        d2, x.grad = x.grad, None
        gms[0].backward(d2)  # 24x = 48
    assert (d1.item(), d2.item(), x.grad.item()) == (32.0, 48.0, 48.0)


def test_without_an_outer_manager_the_backward_is_first_order_and_frees_the_graph():
    x = eg.Parameter(2.0)
    gm = GradManager().attach([x])
    with gm:
        gm.backward(x ** 3)
    assert x.grad.item() == 12.0 and x.grad._node is None


def test_a_custom_function_on_the_second_order_path_is_a_clear_error():
    class Cube(Function):
        def forward(self, x):
            self.x = x
            return x ** 3

        def backward(self, dy):
            return 3 * self.x ** 2 * dy

    x = eg.Parameter(2.0)
    outer, inner = GradManager().attach([x]), GradManager().attach([x])
    with outer, inner, pytest.raises(eg.BackwardError, match="Cube.*cannot be recorded"):
        inner.backward(Cube()(x))
    assert x.grad is None
