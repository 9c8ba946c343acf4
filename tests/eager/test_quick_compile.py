"""Small cheap programs (elementwise maps, optimizer updates) compile with
`xla_segments.quick_compile_options()` where the jaxlib has them, and compute exactly what the
default-compiled program does, on values that stress the emitters (NaN, infinities, denormals,
huge and tiny numbers); ops where those options would slow the program keep the defaults."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import xla_segments
from eager.core.ops import OPS

NASTY = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-42, -1e-42, 3e38, -3e38, 1.5, -2.25,
                  7.0, 1e-7, 0.5, -0.5, 88.7], np.float32).reshape(4, 4)


def both(op_name, *args, **attrs):
    """The op's program as eager compiles it (its options) and with XLA's defaults."""
    op = OPS[op_name]
    key = tuple(sorted(attrs.items()))
    fn = jax.jit(lambda *a: op.fwd(*a, **attrs))
    tuned = jax.jit(lambda *a: op.fwd(*a, **attrs)).lower(*args).compile(
        compiler_options=op.options(key) or None)
    return tuned(*args), fn(*args)


@pytest.mark.parametrize("name", ["add", "mul", "exp", "sigmoid", "maximum", "tanh"])
def test_an_elementwise_map_is_bit_identical(name):
    args = (NASTY,) if name in ("exp", "sigmoid", "tanh") else (NASTY, NASTY.T.copy())
    quick, plain = both(name, *args)
    np.testing.assert_array_equal(np.asarray(quick), np.asarray(plain))


def test_an_update_is_bit_identical():
    p, g, m = (jnp.asarray(NASTY[i]) for i in range(3))
    got, want = both("sgd_update", p, g, m, 0.1, 0.9, 1e-4, n=1, nesterov=False)
    for a, b2 in zip(got, want):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b2))


def test_only_cheap_ops_take_them():
    quick = xla_segments.quick_compile_options()
    assert OPS["add"].quick and OPS["adam_update"].quick and OPS["running_stats_update"].quick
    # slower under them, or (a reduction: batch norm's statistics) one rounding apart
    for name in ("conv", "transpose", "softmax", "matmul", "batch_norm_train", "sum"):
        assert not OPS[name].quick
    if quick:
        assert OPS["add"].options(()) == quick
