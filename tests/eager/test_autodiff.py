"""Autodiff semantics: GradManager attach/record/release, accumulation, fan-out, callbacks,
custom Functions, errors, and finite-difference checks of composite functions in float64."""

import gc
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eager as eg
import eager.functional as F
import eager.module as M
from eager.autodiff import Function, GradManager, no_grad

from .op_check import fd_check


def _p(*values):
    return eg.Parameter(np.asarray(values, np.float32))


def test_gradient_matches_jax_grad_for_a_small_network(rng):
    x = rng.standard_normal((5, 3)).astype(np.float32)
    w1, w2 = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal(4).astype(
        np.float32)

    def ref(a, b):
        return jnp.sum(jnp.tanh(x @ a) * b) ** 2

    pa, pb = eg.Parameter(w1), eg.Parameter(w2)
    gm = GradManager().attach([pa, pb])
    with gm:
        y = ((F.tanh(eg.tensor(x) @ pa) * pb).sum()) ** 2
        gm.backward(y)
    ga, gb = jax.grad(ref, argnums=(0, 1))(w1, w2)
    np.testing.assert_allclose(pa.grad.numpy(), ga, rtol=1e-5)
    np.testing.assert_allclose(pb.grad.numpy(), gb, rtol=1e-5)


def test_gradients_accumulate_across_backward_calls():
    w = _p(1.0, 2.0)
    gm = GradManager().attach([w])
    for _ in range(3):
        with gm:
            gm.backward((w * 3.0).sum())
    np.testing.assert_allclose(w.grad.numpy(), [9.0, 9.0])


def test_fan_out_sums_contributions():
    w = _p(2.0)
    gm = GradManager().attach(w)
    with gm:
        a = w * w
        gm.backward(a * w + a + w)  # w^3 + w^2 + w
    np.testing.assert_allclose(w.grad.numpy(), [3 * 4 + 2 * 2 + 1])


def test_gradient_to_an_attached_input_not_only_parameters():
    x = eg.tensor([1.0, -2.0, 3.0])
    net = M.Linear(3, 2)
    gm = GradManager().attach([x])
    with gm:
        gm.backward(net(x).sum())
    np.testing.assert_allclose(x.grad.numpy(), net.weight.numpy().sum(0), rtol=1e-6)
    assert net.weight.grad is None


def test_only_ops_inside_record_are_recorded():
    w = _p(1.0)
    gm = GradManager().attach([w])
    outside = w * 2.0
    with gm:
        inside = w * 5.0
        gm.backward(inside + outside)
    np.testing.assert_allclose(w.grad.numpy(), [5.0])


def test_attach_while_recording_takes_effect():
    a, b = _p(1.0), _p(2.0)
    gm = GradManager().attach([a])
    with gm:
        gm.attach([b])
        gm.backward(a * b)
    assert a.grad.item() == 2.0 and b.grad.item() == 1.0
    assert [id(t) for t in gm.attached_tensors()] == [id(a), id(b)]


def test_record_release_explicit_and_release_is_idempotent():
    w = _p(3.0)
    gm = GradManager().attach([w])
    gm.record()
    y = w * w
    gm.backward(y)
    gm.release()
    gm.release()
    assert w.grad.item() == 6.0
    assert (w * w)._node is None  # not recording any more


def test_backward_stops_recording_and_frees_the_graph():
    w = _p(1.0)
    gm = GradManager().attach([w])
    with gm:
        y = w * 2.0
        gm.backward(y)
        assert (w * 2.0)._node is None
    assert y._node.freed and y._node.vjp is None


def test_second_backward_over_freed_graph_raises():
    w = _p(1.0)
    gm = GradManager().attach([w])
    with gm:
        y = (w * w).sum()
        gm.backward(y)
    with gm, pytest.raises(eg.BackwardError, match="already freed"):
        gm.backward(y)


def test_backward_without_dy_on_non_scalar_raises():
    w = _p(1.0, 2.0)
    gm = GradManager().attach([w])
    with gm, pytest.raises(ValueError, match=r"one-element y, got shape \(2,\)"):
        gm.backward(w * 2.0)


def test_backward_with_dy_weights_the_output():
    w = _p(1.0, 2.0)
    gm = GradManager().attach([w])
    with gm:
        gm.backward(w * w, eg.tensor([10.0, 100.0]))
    np.testing.assert_allclose(w.grad.numpy(), [20.0, 400.0])


def test_backward_of_several_outputs():
    w = _p(1.0, 2.0)
    gm = GradManager().attach([w])
    with gm:
        a, b = F.split(w * 3.0, 2)
        gm.backward([a, b], [eg.tensor([1.0]), eg.tensor([2.0])])
    np.testing.assert_allclose(w.grad.numpy(), [3.0, 6.0])


def test_dy_shape_mismatch_and_backward_without_recording_raise():
    w = _p(1.0, 2.0)
    gm = GradManager().attach([w])
    with gm, pytest.raises(ValueError, match="dy has shape"):
        gm.backward(w * 1.0, eg.tensor([1.0]))
    with pytest.raises(eg.BackwardError, match="recording"):
        gm.backward((w * 1.0).sum())


def test_attaching_a_non_tensor_raises():
    with pytest.raises(TypeError, match="attach takes Tensors, got ndarray"):
        GradManager().attach([np.ones(3)])


def test_callbacks_run_in_order_before_accumulation():
    w = _p(1.0)
    seen = []

    def double(param, grad):
        seen.append(("double", param is w, grad.item()))
        return grad * 2.0

    def plus_one(param, grad):
        seen.append(("plus_one", param is w, grad.item()))
        return grad + 1.0

    gm = GradManager().attach([w], callbacks=[double, plus_one])
    w.grad = eg.tensor([100.0])
    with gm:
        gm.backward(w * 3.0)
    assert seen == [("double", True, 3.0), ("plus_one", True, 6.0)]
    assert w.grad.item() == 107.0


def test_callbacks_can_clip_gradients():
    w = _p(1.0, 1.0)
    clip = lambda p, g: F.clip(g, -0.5, 0.5)  # noqa: E731
    gm = GradManager().attach([w], callbacks=clip)
    with gm:
        gm.backward((w * eg.tensor([3.0, 0.1])).sum())
    np.testing.assert_allclose(w.grad.numpy(), [0.5, 0.1], rtol=1e-6)


def test_no_grad_and_detach_block_gradients():
    w = _p(2.0)
    gm = GradManager().attach([w])
    with gm:
        with no_grad():
            c = w * 10.0
        d = (w * 3.0).detach()
        gm.backward(w * c + d * w)
    np.testing.assert_allclose(w.grad.numpy(), [20.0 + 6.0])


def test_integer_and_comparison_ops_in_a_recorded_graph():
    w = _p(-1.0, 2.0, 3.0)
    gm = GradManager().attach([w])
    with gm:
        mask = w > 0
        idx = F.argmax(w)
        y = F.where(mask, w * w, 0.0).sum() + w[idx]
        gm.backward(y)
    np.testing.assert_allclose(w.grad.numpy(), [0.0, 4.0, 7.0])


def test_setitem_on_an_attached_leaf_keeps_gradients():
    w = _p(1.0, 2.0, 3.0)
    gm = GradManager().attach([w])
    with gm:
        w2 = w * 1.0
        w2[1] = w[0] * 5.0
        gm.backward((w2 * w2).sum())
    # w2 = [w0, 5 w0, w2]: d/dw0 = 2 w0 + 50 w0, d/dw1 = 0, d/dw2 = 2 w2
    np.testing.assert_allclose(w.grad.numpy(), [52.0, 0.0, 6.0])


def test_two_grad_managers_record_independently():
    a, b = _p(1.0), _p(2.0)
    gma, gmb = GradManager().attach([a]), GradManager().attach([b])
    with gma, gmb:
        y = a * b
        gma.backward(y)
    assert a.grad.item() == 2.0 and b.grad is None


def test_exception_inside_with_block_releases():
    gm = GradManager().attach([_p(1.0)])
    with pytest.raises(RuntimeError, match="boom"), gm:
        raise RuntimeError("boom")
    gm.record()  # not left recording
    gm.release()


# ----- custom Function ------------------------------------------------------------------------
class ScaledSquare(Function):
    def forward(self, x, scale):
        self.x, self.scale = x, scale
        return x * x * scale

    def backward(self, dy):
        return 2 * self.x * self.scale * dy, None


class SplitTwo(Function):
    def forward(self, x):
        return x * 2.0, x * 3.0

    def backward(self, da, db):
        return da * 2.0 + db * 3.0


def test_custom_function_gradient():
    w = _p(1.0, 2.0)
    gm = GradManager().attach([w])
    with gm:
        gm.backward(ScaledSquare()(w, eg.tensor(4.0)).sum())
    np.testing.assert_allclose(w.grad.numpy(), [8.0, 16.0])


def test_custom_function_with_several_outputs_and_an_unused_one():
    w = _p(1.0)
    gm = GradManager().attach([w])
    with gm:
        a, _ = SplitTwo()(w)
        gm.backward(a * 5.0)  # the second output gets a zero gradient
    np.testing.assert_allclose(w.grad.numpy(), [10.0])


def test_custom_function_forward_is_not_recorded():
    w = _p(1.0)
    gm = GradManager().attach([w])
    with gm:
        out = SplitTwo()(w)[0]
        assert out._node.name == "SplitTwo"
        gm.backward(out)


def test_custom_function_wrong_number_of_gradients_raises():
    class Bad(Function):
        def forward(self, x, y):
            return x + y

        def backward(self, dy):
            return dy

    w = _p(1.0)
    gm = GradManager().attach([w])
    with gm, pytest.raises(eg.BackwardError, match="returned 1 gradients for 2 inputs"):
        gm.backward(Bad()(w, w))


# ----- finite differences in float64 for composite functions -------------------------------------
def _r(rng, *shape):
    return rng.standard_normal(shape)


COMPOSITES = {
    "mlp": (lambda x, w, b: (F.gelu(F.linear(x, w, b)) ** 2).mean(), [(4, 3), (5, 3), (5,)]),
    "batch_norm_train": (
        lambda x, w, b: (F.batch_norm(x, None, None, w, b, training=True) ** 3).sum(),
        [(4, 3, 2, 2), (3,), (3,)]),
    "layer_norm": (lambda x, w, b: (F.layer_norm(x, 4, True, w, b) * x).sum(),
                   [(3, 4), (4,), (4,)]),
    "group_norm": (lambda x, w, b: (F.group_norm(x, 2, True, w, b) ** 2 * x).sum(),
                   [(2, 4, 3), (4,), (4,)]),
    "cross_entropy_smooth": (lambda x: F.cross_entropy(x, eg.tensor([1, 0, 2]), label_smooth=0.2),
                             [(3, 4)]),
    "conv2d": (lambda x, w: (F.conv2d(x, w, stride=2, padding=1) ** 2).sum(),
               [(1, 2, 5, 5), (3, 2, 3, 3)]),
    "conv_transpose2d": (lambda x, w: (F.conv_transpose2d(x, w, stride=2, padding=1) ** 2).sum(),
                         [(1, 2, 3, 3), (2, 3, 3, 3)]),
    "attention": (lambda q, k, v: (F.scaled_dot_product_attention(q, k, v, is_causal=True) ** 2)
                  .sum(), [(2, 4, 3), (2, 4, 3), (2, 4, 3)]),
    "matmul_transposed": (lambda a, b: (F.matmul(a, b, transpose_b=True) ** 2).sum(),
                          [(3, 4), (2, 4)]),
    "norm_std_var": (lambda x: F.norm(x, axis=1).sum() + F.std(x, 0, unbiased=True).sum()
                     + F.var(x).sum(), [(3, 4)]),
    "softmax_logsumexp": (lambda x: (F.softmax(x, 1) * F.logsumexp(x, 1, keepdims=True)).sum(),
                          [(3, 5)]),
    "split_concat_pad": (lambda x: (F.pad(F.concat(F.split(x, 2, 1)[::-1], 0),
                                          ((1, 0), (0, 1)), "reflect") ** 2).sum(), [(2, 4)]),
    "pooling": (lambda x: (F.max_pool2d(x, 2) ** 2).sum() + F.avg_pool2d(x, 3, 2, 1).sum()
                + F.adaptive_avg_pool2d(x, 3).sum(), [(1, 2, 6, 6)]),
    "indexing": (lambda x: (x[:, 1:] ** 2).sum() + x[0, np.array([2, 0, 2])].sum(), [(3, 4)]),
}


@pytest.mark.parametrize("name", sorted(COMPOSITES))
def test_composite_gradients_by_finite_differences(name, x64, rng):
    fn, shapes = COMPOSITES[name]
    fd_check(fn, [_r(rng, *s) for s in shapes])


@pytest.mark.slow
def test_multi_head_attention_by_finite_differences(x64, rng):
    mha = M.MultiHeadAttention(6, 2, batch_first=True)
    for _, p in mha.named_parameters():
        eg.rebind(p, jnp.asarray(p.numpy(), np.float64))

    def loss(x, w):
        mha.in_proj_weight = w
        return (mha(x, is_causal=True)[0] ** 2).sum()

    fd_check(loss, [_r(rng, 2, 3, 6), mha.in_proj_weight.numpy()])


# ----- what the manager holds -------------------------------------------------------------------
def test_attached_tensors_are_held_weakly_so_a_dropped_model_is_freed():
    net = M.Sequential(M.Linear(3, 4), M.Linear(4, 2))
    gm = GradManager().attach(net.parameters())
    kept = eg.Parameter([1.0])
    gm.attach([kept])
    version = gm.version
    refs = [weakref.ref(p) for p in net.parameters()]
    del net
    gc.collect()
    assert all(r() is None for r in refs)
    live = gm.attached_tensors()
    assert len(live) == 1 and live[0] is kept
    assert gm.version > version  # a compiled step that runs this manager's backward re-checks
    with gm:
        gm.backward((kept * 3).sum())
    assert kept.grad.numpy().tolist() == [3.0]


def test_a_tensor_dying_while_recording_leaves_the_manager_usable():
    a, b = eg.Parameter([1.0, 2.0]), eg.Parameter([3.0])
    gm = GradManager().attach([a, b])
    with gm:
        del b
        gc.collect()
        gm.backward((a * a).sum())
    assert a.grad.numpy().tolist() == [2.0, 4.0]
    assert a._tracked == 0


@pytest.mark.parametrize("value", [[1, 2], [True, False]])
def test_attaching_an_integer_or_bool_tensor_is_an_error(value):
    t = eg.tensor(value)
    with pytest.raises(eg.AttachError, match=f"{t.dtype}.*only floating"):
        GradManager().attach([t])
    with pytest.raises(TypeError, match="takes Tensors, got list"):
        GradManager().attach([[1.0]])


def test_a_second_backward_in_one_recording_says_the_graph_was_freed():
    w = eg.Parameter([1.0, 2.0])
    gm = GradManager().attach([w])
    with gm:
        loss = (w * w).sum()
        gm.backward(loss)
        with pytest.raises(eg.BackwardError, match="already called in this recording: it freed"):
            gm.backward(loss)
    with pytest.raises(eg.BackwardError, match="needs a recording manager"):
        GradManager().attach([w]).backward(loss)


def test_bfloat16_tensors_carry_gradients_like_float16():
    """numpy files bfloat16 under kind "V": it must still be recorded and differentiated."""
    from partial import partial_trace

    w0 = np.linspace(-1, 1, 6, dtype=np.float32).reshape(3, 2)
    x0 = np.linspace(0, 2, 12, dtype=np.float32).reshape(4, 3)
    expected = jax.grad(lambda w: jnp.tanh(jnp.asarray(x0, jnp.bfloat16) @ w)
                        .astype(jnp.float32).sum())(jnp.asarray(w0, jnp.bfloat16))
    for body in (lambda x, w: F.tanh(x @ w), partial_trace(lambda x, w: F.tanh(x @ w))):
        w = eg.Parameter(w0.astype(jnp.bfloat16))
        gm = GradManager().attach([w])
        with gm:
            gm.backward(body(eg.tensor(x0).astype(jnp.bfloat16), w).astype("float32").sum())
        assert w.grad.dtype == jnp.bfloat16
        np.testing.assert_allclose(w.grad.numpy().astype(np.float32),
                                   np.asarray(expected, np.float32), rtol=1e-2)
