"""`SegmentFunction`: a compiled segment as one node of the eager tape."""

import jax
import jax.numpy as jnp
import numpy as np

import eager as eg
from autograd_bridge import SegmentFunction
from eager.autodiff import GradManager
from xla_segments import Segment


def _segment():
    def fn(x, w, b):
        h = jnp.tanh(x @ w)
        return h + b, (h * 0).astype(jnp.int32)

    rng = np.random.default_rng(1)
    arrays = [jnp.asarray(rng.standard_normal(s), jnp.float32) for s in [(2, 3), (3, 4), (4,)]]
    # output 0 depends on all three inputs; output 1 (integers) on none differentiably
    return fn, arrays, SegmentFunction(Segment(fn, arrays), [{0, 1, 2}, set()], "seg")


def test_recorded_call_gives_the_gradients_of_jax():
    fn, arrays, seg = _segment()
    x, w, b = eg.tensor(arrays[0]), eg.Parameter(arrays[1]), eg.Parameter(arrays[2])
    gm = GradManager().attach([w, b])
    with gm:
        y, k = seg(arrays, [x, w, b])
        gm.backward((y * y).sum())
    assert k.dtype == np.int32 and eg.hooks.history(k) == (None, 0)
    gw, gb = jax.grad(lambda w, b: (fn(arrays[0], w, b)[0] ** 2).sum(), (0, 1))(*arrays[1:])
    np.testing.assert_allclose(w.grad.numpy(), gw, rtol=1e-5)
    np.testing.assert_allclose(b.grad.numpy(), gb, rtol=1e-5)
    assert x.grad is None
    assert list(seg.segment.executables())[0].startswith("forward_vjp wrt=(1, 2)")


def test_unrecorded_call_runs_the_inference_forward_only():
    _, arrays, seg = _segment()
    y, _ = seg(arrays, [eg.tensor(a) for a in arrays])
    assert eg.hooks.history(y) == (None, 0)
    assert list(seg.segment.executables()) == ["forward"]


def test_two_calls_before_one_backward_keep_their_own_residuals():
    fn, arrays, seg = _segment()
    w = eg.Parameter(arrays[1])
    tensors = [eg.tensor(arrays[0]), w, eg.tensor(arrays[2])]
    x2 = arrays[0] * 2
    gm = GradManager().attach([w])
    with gm:
        a, _ = seg(arrays, tensors)
        c, _ = seg([x2, arrays[1], arrays[2]], [eg.tensor(x2), w, tensors[2]])
        gm.backward((a * c).sum())

    def loss(w):
        return (fn(arrays[0], w, arrays[2])[0] * fn(x2, w, arrays[2])[0]).sum()

    np.testing.assert_allclose(w.grad.numpy(), jax.grad(loss)(arrays[1]), rtol=1e-5)


def test_a_cotangent_the_backward_does_not_use_is_taken_as_it_is():
    # ceil's gradient is zero: the backward executable drops its cotangent (no placement for
    # it), which the check of the cotangents' layouts must pass over
    x = eg.Parameter(jnp.asarray([0.5, 1.5], jnp.float32))
    seg = SegmentFunction(Segment(lambda v: (jnp.ceil(v),), [x._data]), [{0}], "ceil")
    gm = GradManager().attach([x])
    with gm:
        (y,) = seg([x._data], [x])
        gm.backward(y.sum())
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 0.0])
