"""`Segment`: compiled forward, vjp forward and backward agree with jax, and describe
themselves."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from xla_segments import Segment


def _fn(x, w, idx):
    h = jnp.tanh(x @ w)
    return h.sum(0), jnp.argmax(h, axis=1), h * idx[:, None]


def _inputs():
    rng = np.random.default_rng(0)
    return (jnp.asarray(rng.standard_normal((4, 3)), jnp.float32),
            jnp.asarray(rng.standard_normal((3, 5)), jnp.float32),
            jnp.arange(4, dtype=jnp.float32))


def test_forward_matches_the_function():
    args = _inputs()
    seg = Segment(_fn, args, name="f")
    for got, want in zip(seg.forward()(*args), _fn(*args)):
        np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("wrt, diff_outputs", [((0, 1), (0, 2)), ((1,), (0,)), ((0,), (2,))])
def test_vjp_matches_jax_vjp(wrt, diff_outputs):
    args = _inputs()
    seg = Segment(_fn, args)
    fwd, bwd = seg.vjp(wrt, diff_outputs)
    outs, residuals = fwd(*args)
    for got, want in zip(outs, _fn(*args)):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    cts = tuple(jnp.ones_like(outs[j]) * (j + 1) for j in diff_outputs)
    grads = bwd(residuals, cts)

    def selected(*d):
        full = list(args)
        for i, v in zip(wrt, d):
            full[i] = v
        outs = _fn(*full)
        return tuple(outs[j] for j in diff_outputs)

    _, pullback = jax.vjp(selected, *(args[i] for i in wrt))
    for got, want in zip(grads, pullback(cts)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_executables_are_built_once_and_describe_themselves():
    args = _inputs()
    seg = Segment(_fn, args, name="layer")
    assert seg.compile_seconds == 0 and seg.executables() == {}
    fwd = seg.forward()
    assert seg.forward() is fwd
    pair = seg.vjp((1,), (0,))
    assert seg.vjp((1,), (0,)) is pair
    assert len(seg.executables()) == 3 and seg.compile_seconds > 0
    assert "layer_forward" in fwd.as_text() and "HloModule" in fwd.as_text(optimized=True)
    assert fwd.cost_analysis() is not None
    mem = fwd.memory_analysis()
    assert mem is None or mem.argument_size_in_bytes > 0


def test_donated_inputs_are_consumed():
    x = jnp.ones((4,))
    seg = Segment(lambda a, b: (a + b,), [x, x], donate=(0,))
    a = jnp.ones((4,))
    (out,) = seg.forward()(a, jnp.ones((4,)))
    np.testing.assert_array_equal(out, 2.0)
    assert a.is_deleted()


def test_wrong_argument_types_are_refused_before_running():
    args = _inputs()
    seg = Segment(_fn, args)
    with pytest.raises(TypeError, match="Argument types differ"):
        seg.forward()(args[0][:2], args[1], args[2])
