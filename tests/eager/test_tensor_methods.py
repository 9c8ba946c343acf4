"""Tensor methods in PyTorch's and MegEngine's spellings (eager/core/tensor_methods.py): shape
views, copies and casts, `to`, in-place arithmetic (eager, under a GradManager, and inside regions
against eager) and `requires_grad` / `detach_`.

Values are checked against numpy and gradients against `jax.vjp` of an independent jnp
reference; in-place updates in regions are checked against the same code run eagerly."""

import hypothesis.extra.numpy as hnp
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import eager as eg
import eager.module as M
import eager.optimizer as optim
from eager.autodiff import GradManager
from eager.core.errors import OpArgumentError, OpTypeError
from partial import partial_trace, xla_trace
from tests.helpers import examples, randn_array
from tests.partial.differential import World, check_against_eager


def check_method(method, ref, x, seed=1):
    """`method(Tensor)` against `ref(jnp array)`: the value, and the gradient for a random
    cotangent against `jax.vjp(ref)`."""
    t = eg.Tensor(x)
    gm = GradManager().attach([t])
    with gm:
        y = method(t)
        expected, pullback = jax.vjp(ref, jnp.asarray(x))
        np.testing.assert_array_equal(y.numpy(), np.asarray(expected))
        dy = np.random.default_rng(seed).standard_normal(y.shape).astype(np.float32)
        gm.backward(y, eg.tensor(dy))
    np.testing.assert_allclose(t.grad.numpy(), np.asarray(pullback(jnp.asarray(dy))[0]),
                               rtol=1e-6)


# ----- shape ----------------------------------------------------------------------------------
shapes = hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=4)


@examples(4)
@given(shape=shapes, data=st.data())
def test_view_permute_unsqueeze_against_numpy(shape, data):
    x = randn_array(*shape)
    perm = data.draw(st.permutations(range(len(shape))))
    axis = data.draw(st.integers(-len(shape) - 1, len(shape)))
    check_method(lambda t: t.view(-1, shape[-1]), lambda a: a.reshape(-1, shape[-1]), x)
    check_method(lambda t: t.permute(*perm), lambda a: a.transpose(perm), x)
    check_method(lambda t: t.unsqueeze(axis), lambda a: a[..., None] if axis == -1 else
                 jnp.moveaxis(a[None], 0, axis % (len(shape) + 1)), x)


def test_view_and_permute_take_one_tuple_too():
    t = eg.tensor(randn_array(2, 3, 4))
    np.testing.assert_array_equal(t.view((4, 6)).numpy(), t.numpy().reshape(4, 6))
    np.testing.assert_array_equal(t.permute([2, 0, 1]).numpy(), t.numpy().transpose(2, 0, 1))
    np.testing.assert_array_equal(t.permute(-1, 0, 1).numpy(), t.numpy().transpose(2, 0, 1))


@examples(4)
@given(shape=hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=2))
def test_squeeze_all_and_by_axis(shape):
    x = randn_array(*shape)
    ones = [i for i, s in enumerate(shape) if s == 1]
    check_method(lambda t: t.squeeze(), lambda a: a.reshape([s for s in shape if s != 1]), x)
    if ones:
        kept = [s for i, s in enumerate(shape) if i != ones[-1]]
        check_method(lambda t: t.squeeze(ones[-1] - len(shape)), lambda a: a.reshape(kept), x)
        np.testing.assert_array_equal(eg.tensor(x).squeeze(tuple(ones)).numpy(),
                                      x.reshape([s for s in shape if s != 1]))


def test_expand_keeps_minus_one_axes_and_adds_leading_ones():
    x = randn_array(3, 1)
    check_method(lambda t: t.expand(2, -1, 4), lambda a: jnp.tile(a[None], (2, 1, 4)), x)
    check_method(lambda t: t.expand((3, 5)), lambda a: jnp.tile(a, (1, 5)), x)
    check_method(lambda t: t.expand(-1, -1), lambda a: a * 1, x)


def test_flatten_and_T_still_work():  # noqa: N802 (T: the attribute's name)
    x = randn_array(2, 3, 4)
    check_method(lambda t: t.flatten(1), lambda a: a.reshape(2, 12), x)
    check_method(lambda t: t.flatten(), lambda a: a.reshape(-1), x)
    check_method(lambda t: t.T, lambda a: a.transpose(), x)
    assert eg.tensor(2.0).flatten().shape == (1,)


@pytest.mark.parametrize("call, match", [
    (lambda t: t.permute(0, 1), "each of its 3 axes"),
    (lambda t: t.permute(0, 0, 1), "each of its 3 axes"),
    (lambda t: t.permute(0, 1, 3), "each of its 3 axes"),
    (lambda t: t.squeeze(1), "length-1 axes"),
    (lambda t: t.squeeze(5), "out of range"),
    (lambda t: t.unsqueeze(4), "out of range"),
    (lambda t: t.expand(-1, 3), "at least"),
    (lambda t: t.expand(3, 4), "at least"),
    (lambda t: t.expand(-1, 2, 4, 5), "-1 not on new axes"),
])
def test_shape_errors_name_the_method_and_the_shape(call, match):
    t = eg.zeros((2, 3, 1))
    with pytest.raises(OpArgumentError, match=match) as e:
        call(t)
    assert "(2, 3, 1)" in str(e.value) or "out of range" in str(e.value)
    assert "test_tensor_methods.py" in str(e.value)  # the user's line


def test_view_refuses_non_integers():
    with pytest.raises(OpTypeError, match="Tensor.view takes integers"):
        eg.zeros((2, 3)).view(3.0, 2)


def test_expand_to_an_incompatible_shape_raises_an_eager_error():
    with pytest.raises(OpArgumentError):
        eg.zeros((2, 3)).expand(4, 3)


# ----- copies and conversions -----------------------------------------------------------------
def test_clone_copies_storage_and_keeps_history_unlike_detach():
    w = eg.Parameter([1.0, 2.0])
    gm = GradManager().attach([w])
    with gm:
        c = (w * 3).clone()
        d = (w * 5).detach()
        gm.backward((c * c + d).sum())
    np.testing.assert_allclose(w.grad.numpy(), 2 * 9 * np.array([1.0, 2.0]))
    x = eg.tensor([1.0, 2.0])
    y = x.clone()
    assert y is not x and eg.read(y) is not eg.read(x)
    y += 1
    assert x.tolist() == [1.0, 2.0] and y.tolist() == [2.0, 3.0]


def test_tolist_gives_python_values():
    assert eg.tensor([[1, 2], [3, 4]]).tolist() == [[1, 2], [3, 4]]
    assert eg.tensor(2.5).tolist() == 2.5
    assert isinstance(eg.tensor([True]).tolist()[0], bool)


def test_cast_shortcuts_coexist_with_the_python_builtins():
    t = eg.tensor([1.7, -2.2])
    assert t.float().dtype == np.float32 and t.half().dtype == np.float16
    assert t.bfloat16().dtype == jnp.bfloat16
    assert t.int().tolist() == [1, -2] and t.int().dtype == np.int32
    assert t.long().dtype == jax.dtypes.canonicalize_dtype(np.int64)
    assert t.double().dtype == jax.dtypes.canonicalize_dtype(np.float64)
    assert t.bool().tolist() == [True, True]
    s = eg.tensor(3.75)
    assert float(s) == 3.75 and int(s) == 3 and bool(s) is True
    assert isinstance(float(s), float) and isinstance(int(s), int)


def test_cast_shortcuts_keep_gradient_history():
    w = eg.Parameter([1.5, 2.0])
    gm = GradManager().attach([w])
    with gm:
        gm.backward((w.half().float() * 2).sum())
    np.testing.assert_allclose(w.grad.numpy(), [2.0, 2.0])


def test_to_takes_a_dtype_a_device_a_tensor_or_keywords():
    t = eg.tensor([1.0, 2.0])
    dev = eg.get_default_device()
    assert t.to("float16").dtype == np.float16
    assert t.to(np.int32).dtype == np.int32
    assert t.to(dev).device == dev and t.to(dev) is not t
    assert t.to(eg.tensor([1], dtype="int32")).dtype == np.int32
    assert t.to(device=dev, dtype="float16").dtype == np.float16
    assert t.to(jax.devices()[0]).tolist() == [1.0, 2.0]
    w = eg.Parameter([1.0, 2.0])
    gm = GradManager().attach([w])
    with gm:
        gm.backward((w.to(dev) * w.to("float32")).sum())
    np.testing.assert_allclose(w.grad.numpy(), [2.0, 4.0])


def test_to_an_unknown_device_raises_a_device_error():
    with pytest.raises(eg.DeviceError):
        eg.tensor([1.0]).to("tpu7")


# ----- in-place arithmetic --------------------------------------------------------------------
def test_inplace_operators_rebind_storage_in_place():
    x = eg.tensor([2.0, 4.0])
    alias = x
    x += 1
    x -= eg.tensor([1.0, 2.0])
    x *= 3
    x /= 2
    assert x is alias
    np.testing.assert_allclose(x.numpy(), ((np.array([2.0, 4.0]) + 1 - [1, 2]) * 3) / 2)
    i = eg.tensor([7, 9])
    i //= 2
    i %= 3
    i **= 2  # in place, x keeps its dtype: integers (where `i ** 2` is MegEngine's float32)
    assert i.tolist() == [0, 1] and i.dtype == np.int32
    big = eg.tensor([3, 5])
    big **= eg.tensor([19, 10])  # exact, past float32's 2**24
    assert big.tolist() == [3**19, 5**10]
    with pytest.raises(eg.OpTypeError, match="negative power"):
        big **= -1
    m = eg.tensor([True, False])
    m |= eg.tensor([False, True])
    m &= eg.tensor([True, False])
    m ^= eg.tensor([True, True])
    assert m.tolist() == [False, True]


def test_inplace_through_an_index_updates_the_tensor():
    x = eg.zeros((2, 3))
    x[1] += 5
    assert x.tolist() == [[0.0] * 3, [5.0] * 3]


def test_inplace_keeps_the_dtype_within_its_kind_and_refuses_a_wider_kind():
    h = eg.tensor([1.0, 2.0], dtype="float16")
    h += eg.tensor([0.5, 0.5])  # float32: cast back, as PyTorch does
    assert h.dtype == np.float16 and h.tolist() == [1.5, 2.5]
    i = eg.tensor([1, 2])
    with pytest.raises(OpTypeError, match=r"x = x \+ y"):
        i += 0.5
    with pytest.raises(OpTypeError, match="int32"):
        i /= 2
    assert i.tolist() == [1, 2]  # a refused update changes nothing


def test_inplace_refuses_to_change_the_shape():
    x = eg.zeros((3,))
    with pytest.raises(OpArgumentError, match=r"keeps x's shape"):
        x += eg.ones((2, 3))
    assert x.shape == (3,)


def test_gradient_flows_through_inplace_updates():
    w = eg.Parameter([1.0, -2.0, 3.0])
    b = eg.Parameter([0.5, 0.5, 0.5])
    gm = GradManager().attach([w, b])
    with gm:
        h = eg.zeros(3)
        h += w * 2  # h has no history yet: it takes the sum's
        h *= w
        h -= b
        h /= 2
        gm.backward((h * h).sum())
    wn, bn = np.array([1.0, -2.0, 3.0]), np.full(3, 0.5)

    def ref(w, b):
        return ((((2 * w) * w - b) / 2) ** 2).sum()

    gw, gb = jax.grad(ref, argnums=(0, 1))(jnp.asarray(wn), jnp.asarray(bn))
    np.testing.assert_allclose(w.grad.numpy(), gw, rtol=1e-6)
    np.testing.assert_allclose(b.grad.numpy(), gb, rtol=1e-6)


def test_inplace_on_an_attached_leaf_differentiates_through_its_old_value():
    w = eg.Parameter([1.0, 2.0])
    gm = GradManager().attach([w])
    with gm:
        w *= 3  # w's new value depends on its old one, as `w[:] = w * 3` would
        gm.backward((w * w).sum())
    np.testing.assert_allclose(w.numpy(), [3.0, 6.0])
    np.testing.assert_allclose(w.grad.numpy(), [18.0, 36.0])  # d/dw0 of (3 w0)^2


def _inplace_world(wrap):
    net = M.Linear(3, 2)
    acc = eg.zeros(2)
    opt = optim.SGD(net.parameters(), lr=0.1)
    gm = GradManager().attach(net.parameters())

    @wrap
    def step(x):
        with gm:
            h = net(x).sum(0)
            h += acc  # a tensor from outside the region
            h *= 2
            gm.backward((h * h).sum())
        opt.step().clear_grad()
        return h

    def run(i):
        return step(eg.tensor(randn_array(4, 3, seed=i)))

    return World(run, modules=[net], optimizers=[opt], tensors={"acc": acc})


def test_inplace_in_a_whole_xla_trace_step_matches_eager():
    check_against_eager(_inplace_world, steps=3, compile=xla_trace)


@pytest.mark.parametrize("compile", [partial_trace, xla_trace])
def test_inplace_on_an_outside_tensor_in_a_region_is_written_back(compile):
    def build(wrap):
        total = eg.zeros(2)
        count = eg.tensor([0, 0])

        @wrap
        def step(x):
            total.__iadd__(x * 2)  # `total += ...` on a closed-over name
            count.__iadd__(1)
            return total * 1

        return World(lambda i: step(eg.tensor(randn_array(2, seed=i))),
                     tensors={"total": total, "count": count})

    world = check_against_eager(build, steps=3, compile=compile)
    assert world.tensors["count"].tolist() == [3, 3]


def test_inplace_gradient_inside_a_partial_trace_segment_matches_eager():
    def build(wrap):
        net = M.Linear(3, 3)
        gm = GradManager().attach(net.parameters())
        region = wrap(lambda x: _inplace_body(net, x))

        def run(i):
            with gm:
                y = region(eg.tensor(randn_array(2, 3, seed=i)))
                gm.backward((y * y).sum())
            return y

        return World(run, modules=[net])

    check_against_eager(build, steps=2)


def _inplace_body(net, x):
    h = net(x)
    h += x
    h *= h
    return h


# ----- requires_grad and detach_ --------------------------------------------------------------
def test_requires_grad_defaults():
    assert eg.Parameter([1.0]).requires_grad is True
    assert eg.tensor([1.0]).requires_grad is False
    assert eg.Parameter([1]).requires_grad is False  # integers have no gradient
    w = eg.Parameter([1.0])
    x = eg.tensor([2.0])
    gm = GradManager().attach([x])
    with gm:
        assert x.requires_grad is True  # tracked by a recording manager
        assert (w * 2).requires_grad is False  # w is not attached: nothing records it
        assert (x * 2).requires_grad is True
        assert (x * 2).detach().requires_grad is False
    assert x.requires_grad is False


def test_requires_grad_false_freezes_a_parameter_for_a_grad_manager():
    w, b = eg.Parameter([1.0, 2.0]), eg.Parameter([3.0])
    assert w.requires_grad_(False) is w and w.requires_grad is False
    gm = GradManager().attach([w, b])
    with gm:
        gm.backward((w * b).sum())
    assert w.grad is None
    np.testing.assert_allclose(b.grad.numpy(), [3.0])
    w.requires_grad = True
    with gm:
        gm.backward((w * b).sum())
    np.testing.assert_allclose(w.grad.numpy(), [3.0, 3.0])
    assert [p for p in (w, b) if p.requires_grad] == [w, b]


def test_requires_grad_refuses_integers_and_non_leaves():
    with pytest.raises(OpTypeError, match="only floating"):
        eg.tensor([1, 2]).requires_grad = True
    eg.tensor([1, 2]).requires_grad = False  # harmless
    x = eg.tensor([1.0])
    x.requires_grad_()
    assert x.requires_grad is True
    gm = GradManager().attach([x])
    with gm:
        y = x * 2
        with pytest.raises(OpArgumentError, match="detach"):
            y.requires_grad = False
        y.requires_grad = True  # already true: fine


def test_detach_inplace_cuts_the_history():
    w = eg.Parameter([1.0, 2.0])
    gm = GradManager().attach([w])
    with gm:
        h = w * 2
        assert h.detach_() is h and h.requires_grad is False
        gm.backward((h * w).sum())
    np.testing.assert_allclose(w.grad.numpy(), [2.0, 4.0])  # h counted as a constant
    np.testing.assert_allclose(h.numpy(), [2.0, 4.0])


def test_detach_inplace_inside_a_region_matches_eager():
    def build(wrap):
        net = M.Linear(2, 2)
        gm = GradManager().attach(net.parameters())

        def body(x):
            h = net(x)
            h.detach_()
            return net(h) + h

        region = wrap(body)

        def run(i):
            with gm:
                y = region(eg.tensor(randn_array(3, 2, seed=i)))
                gm.backward(y.sum())
            return y

        return World(run, modules=[net])

    check_against_eager(build, steps=2)
