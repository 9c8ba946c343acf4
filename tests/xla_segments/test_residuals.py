"""A segment's training forward hands its backward each broadcast residual at its size before
the broadcast (an attention mask), and the gradients stay jax's."""

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from xla_segments import Segment


def _grads_are_jaxs(fn, args, wrt):
    seg = Segment(fn, args)
    fwd, bwd = seg.vjp(wrt, (0,))
    outs, residuals = fwd(*args)
    want, pullback = jax.vjp(lambda *d: fn(*[d[wrt.index(i)] if i in wrt else a
                                             for i, a in enumerate(args)]),
                             *(args[i] for i in wrt))
    np.testing.assert_allclose(outs[0], want[0], rtol=1e-5, atol=1e-6)
    ct = jnp.asarray(np.random.default_rng(1).standard_normal(want[0].shape), jnp.float32)
    for got, exp in zip(bwd(residuals, (ct,)), pullback((ct,))):
        np.testing.assert_allclose(got, exp, rtol=1e-5, atol=1e-6)
    return seg


def test_a_causal_mask_is_kept_at_its_own_size():
    """jax's vjp of `where(tril, scores, -inf)` keeps the [T, T] mask broadcast to [B, H, T, T];
    inside a nested jit (as jnp's functions and the ops are) its source is still reached."""
    b, h, t = 4, 3, 16

    @jax.jit
    def masked(s):
        return jnp.where(jnp.tril(jnp.ones((t, t), bool)), s, -jnp.inf)

    def attention(s, v):
        return (jax.nn.softmax(masked(s), axis=-1) @ v,)

    rng = np.random.default_rng(0)
    s = jnp.asarray(rng.standard_normal((b, h, t, t)), jnp.float32)
    v = jnp.asarray(rng.standard_normal((b, h, t, 8)), jnp.float32)
    seg = _grads_are_jaxs(attention, [s, v], (0, 1))
    fwd, _ = seg.vjp((0, 1), (0,))
    kept = [info for info in jax.tree.leaves(fwd.lowered.out_info[1])]
    assert not [i for i in kept if i.dtype == jnp.bool_ and i.shape == (b, h, t, t)], kept
    assert [i for i in kept if i.dtype == jnp.bool_ and i.shape == (t, t)], kept


@given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=4).map(tuple),
       keep=st.lists(st.booleans(), min_size=4, max_size=4), seed=st.integers(0, 2**16))
def test_broadcast_conditions_and_constants_give_jaxs_gradients(shape, keep, seed):
    """Any condition broadcast over any axes, a constant on either side, gradients of both
    the selected input and a weight applied after."""
    rng = np.random.default_rng(seed)
    cond_shape = tuple(n if k else 1 for n, k in zip(shape, keep))
    cond = jnp.asarray(rng.random(cond_shape) > 0.5)
    x = jnp.asarray(rng.standard_normal(shape), jnp.float32)
    w = jnp.asarray(rng.standard_normal(shape[-1:]), jnp.float32)

    def fn(x, w, cond):
        return (jnp.where(cond, x, 0.5) * w + jnp.where(cond, -1.0, x),)

    _grads_are_jaxs(fn, [x, w, cond], (0, 1))


def test_a_constant_residual_and_no_broadcast_at_all():
    """A residual that is a literal (the pullback of a product with a constant array) and a
    function without broadcasts go through unchanged."""
    x = jnp.arange(6.0).reshape(2, 3)
    _grads_are_jaxs(lambda x: (x * jnp.float32(3.0) + 1.0,), [x], (0,))
    _grads_are_jaxs(lambda x: (jnp.sin(x),), [x], (0,))


def test_the_pullback_rebuilt_before_the_forward_was_traced():
    """`rebuild` finds which residuals are narrowed by tracing the forward itself when asked
    first (a backward lowered for a forward read from disk)."""
    from xla_segments.residuals import slim

    b, t = 2, 8
    mask = jnp.tril(jnp.ones((t, t), bool))

    def fwd(s):
        return jax.vjp(lambda s: (jnp.where(mask, s, 0.0) ** 2,), s)

    s = jnp.asarray(np.random.default_rng(3).standard_normal((b, t, t)), jnp.float32)
    avals = [jax.ShapeDtypeStruct(s.shape, s.dtype)]
    _, residuals = jax.jit(slim(fwd, avals, (0,))[0])(s)
    forward, rebuild = slim(fwd, avals, (0,))  # a pair whose forward is not traced yet
    ct = jnp.ones((b, t, t), jnp.float32)
    got = jax.jit(lambda res: rebuild(res)((ct,)))(residuals)
    want = jax.vjp(lambda s: (jnp.where(mask, s, 0.0) ** 2,), s)[1]((ct,))
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    assert [r.shape for r in residuals] == [(t, t), (b, t, t)]  # the mask at its own size
