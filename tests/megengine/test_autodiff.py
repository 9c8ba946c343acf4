"""`megengine.autodiff`: GradManager attach/callbacks/record/backward semantics, nested managers
for second order, and custom `Function` gradients."""

import numpy as np
import pytest

import eager as mge
import eager.functional as F
from eager.autodiff import Function, GradManager
from eager.core.errors import BackwardError


def test_backward_of_a_scalar_fills_grad_of_attached_tensors():
    x = mge.Parameter([1.0, 2.0, 3.0])
    w = mge.Parameter([4.0, 5.0, 6.0])
    gm = GradManager().attach([x])      # w is not attached
    with gm:
        y = (x * w).sum()
        gm.backward(y)
    np.testing.assert_array_equal(x.grad.numpy(), [4.0, 5.0, 6.0])
    assert w.grad is None


def test_attach_returns_self_and_lists_attached_tensors():
    a, b = mge.Parameter([1.0]), mge.Parameter([2.0])
    gm = GradManager()
    assert gm.attach([a]) is gm
    gm.attach([b])
    attached = gm.attached_tensors()
    assert len(attached) == 2
    assert any(t is a for t in attached) and any(t is b for t in attached)


def test_callbacks_run_in_order_before_accumulation():
    x = mge.Parameter([3.0])
    order = []

    def double(param, grad):
        assert param is x
        order.append("double")
        return grad * 2

    def plus_one(param, grad):
        order.append("plus_one")
        return grad + 1

    gm = GradManager().attach([x], callbacks=[double, plus_one])
    with gm:
        gm.backward(x * x)               # dy/dx = 6
    assert order == ["double", "plus_one"]
    np.testing.assert_allclose(x.grad.numpy(), [13.0])


def test_attaching_again_appends_callbacks():
    x = mge.Parameter([3.0])
    gm = GradManager().attach([x], callbacks=[lambda p, g: g * 2])
    gm.attach([x], callbacks=[lambda p, g: g + 1])
    with gm:
        gm.backward(x * x)
    np.testing.assert_allclose(x.grad.numpy(), [13.0])


def test_backward_with_dy():
    x = mge.Parameter([2.0])
    gm = GradManager().attach([x])
    with gm:
        y = x * mge.tensor([1.0, 2.0])
        gm.backward(y, mge.tensor([1.0, 10.0]))
    np.testing.assert_allclose(x.grad.numpy(), [21.0])


def test_backward_of_several_outputs():
    x = mge.Parameter([2.0])
    gm = GradManager().attach([x])
    with gm:
        y1, y2 = x * 2, x * x
        gm.backward([y1, y2], [mge.tensor([1.0]), mge.tensor([3.0])])
    np.testing.assert_allclose(x.grad.numpy(), [2.0 + 3.0 * 4.0])


def test_gradients_accumulate_across_backward_calls():
    x = mge.Parameter([1.0])
    gm = GradManager().attach([x])
    for k in (2.0, 5.0):
        with gm:
            gm.backward(x * k)
    np.testing.assert_allclose(x.grad.numpy(), [7.0])
    x.grad = None
    with gm:
        gm.backward(x * 3)
    np.testing.assert_allclose(x.grad.numpy(), [3.0])


def test_record_and_release():
    x = mge.Parameter([2.0])
    gm = GradManager().attach([x])
    gm.record()
    y = x ** 3
    gm.backward(y)
    gm.release()
    np.testing.assert_allclose(x.grad.numpy(), [12.0])


def test_a_second_backward_in_one_recording_fails():
    x = mge.Parameter([2.0])
    gm = GradManager().attach([x])
    with gm:
        y = x * x
        gm.backward(y)
        with pytest.raises(mge.BackwardError, match="freed"):
            gm.backward(y)


def test_ops_outside_the_recording_are_not_differentiated():
    x = mge.Parameter([2.0])
    gm = GradManager().attach([x])
    z = x * 100                          # before recording starts
    with gm:
        y = z + x * 3
        gm.backward(y)
    np.testing.assert_allclose(x.grad.numpy(), [3.0])


def test_nested_managers_give_second_order_gradients():
    x = mge.tensor([2.0])
    gm = GradManager().attach([x])
    gm2 = GradManager().attach([x])
    with gm:
        with gm2:
            y = x ** 3
            gm2.backward(y)              # x.grad = 3 x^2, recorded by gm
        z = x.grad
        x.grad = None
        gm.backward(z)                   # d(3 x^2)/dx = 6 x
    np.testing.assert_allclose(z.numpy(), [12.0])
    np.testing.assert_allclose(x.grad.numpy(), [12.0])


def test_second_order_through_tanh():
    a = np.array([0.3, -0.7], np.float32)
    x = mge.tensor(a)
    outer, inner = GradManager().attach([x]), GradManager().attach([x])
    with outer:
        with inner:
            inner.backward(F.tanh(x).sum())
        g = x.grad
        x.grad = None
        outer.backward(g.sum())
    t = np.tanh(a)
    np.testing.assert_allclose(g.numpy(), 1 - t ** 2, rtol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), -2 * t * (1 - t ** 2), rtol=1e-5)


def test_a_manager_entered_later_does_not_record_an_earlier_ones_backward():
    """MegEngine nests by entry order: only managers that began recording before a backward's
    manager record that backward (real MegEngine 1.13 gives x.grad = -sin(x) here)."""
    a = np.array([0.5, 1.0, -2.0], np.float32)
    x = mge.tensor(a)
    gm, gm2 = GradManager().attach([x]), GradManager().attach([x])
    with gm2, gm:
        y = F.cos(x)
        gm2.backward(y, F.ones_like(y))
        assert gm._recording  # gm2's backward left gm recording
        gm.backward(x.grad, F.ones_like(x))  # x.grad has no history in gm: nothing added
    np.testing.assert_allclose(x.grad.numpy(), -np.sin(a), rtol=1e-6)


def test_forward_mode_by_differentiating_the_backward_in_dy():
    """d(x.grad)/d(dy) for x.grad = f'(x) * dy: the outer manager sees dy's use in the inner
    backward (MegEngine's forward-mode emulation; real MegEngine gives -sin(x) for cos)."""
    a = np.array([0.5, 1.0, -2.0], np.float32)
    x = mge.tensor(a)
    dy = F.ones_like(x) * 2.0
    outer, inner = GradManager().attach([dy]), GradManager().attach([x])
    with outer:
        with inner:
            y = F.cos(x)
            inner.backward(y, dy)
        outer.backward(x.grad, F.ones_like(x))
    np.testing.assert_allclose(x.grad.numpy(), -2.0 * np.sin(a), rtol=1e-6)
    np.testing.assert_allclose(dy.grad.numpy(), -np.sin(a), rtol=1e-6)


def test_a_one_element_dy_weights_a_scalar_output():
    x = mge.tensor([1.0, 2.0])
    gm = GradManager().attach([x])
    with gm:
        gm.backward((x * x).sum(), mge.tensor([2.0]))  # MegEngine accepts the (1,) dy
    np.testing.assert_allclose(x.grad.numpy(), [4.0, 8.0])
    with pytest.raises(ValueError, match=r"dy has shape \(2,\) but y has shape \(\)"), gm:
        gm.backward((x * x).sum(), mge.tensor([1.0, 1.0]))


def test_managers_joined_by_or_record_together():
    from eager.autodiff import GradManagerGroup

    a, b = mge.tensor([1.0]), mge.tensor([3.0])
    g1, g2 = GradManager().attach([a]), GradManager().attach([b])
    group = g1 | g2
    assert isinstance(group, GradManagerGroup) and (group | g1) is group  # no duplicates
    with group:
        assert g1._recording and g2._recording
        g1.backward(a * b)
        g2.backward(b * 2)
    assert not g1._recording and not g2._recording
    np.testing.assert_allclose(a.grad.numpy(), [3.0])
    np.testing.assert_allclose(b.grad.numpy(), [2.0])


def test_a_group_records_as_one_so_neither_records_the_others_backward():
    """MegEngine's group-visibility test: after `gm2.backward`, `gm.backward(x.grad)` finds
    no recorded history in `x.grad` (it would add cos's second derivative if gm had recorded
    gm2's backward, as an outer manager does in the nested case below)."""
    x = mge.tensor(np.linspace(-1.0, 2.0, 9, dtype="float32").reshape(3, 3))
    gm, gm2 = GradManager().attach(x), GradManager().attach(x)
    with gm | gm2:
        y = F.cos(x)
        gm2.backward(y, F.ones_like(y))
        np.testing.assert_allclose(x.grad.numpy(), -np.sin(x.numpy()), rtol=1e-6)
        gm.backward(x.grad, F.ones_like(x.grad))
        np.testing.assert_allclose(x.grad.numpy(), -np.sin(x.numpy()), rtol=1e-6)


def test_an_outer_manager_records_the_inner_ones_backward():
    """MegEngine's visibility-by-order test: entered first, gm2 differentiates gm's gradient."""
    x = mge.tensor(np.linspace(-1.0, 2.0, 9, dtype="float32").reshape(3, 3))
    gm, gm2 = GradManager().attach(x), GradManager().attach(x)
    with gm2:
        with gm:
            y = F.cos(x)
            gm.backward(y, F.ones_like(y))
        gm2.backward(x.grad, F.ones_like(x.grad))
    np.testing.assert_allclose(x.grad.numpy(), -np.sin(x.numpy()) - np.cos(x.numpy()),
                               rtol=1e-5)


def test_a_group_inside_an_outer_manager_is_still_recorded_by_it():
    x = mge.tensor(np.linspace(-1.0, 2.0, 9, dtype="float32").reshape(3, 3))
    outer, gm, gm2 = (GradManager().attach(x) for _ in range(3))
    with outer:
        with gm | gm2:
            y = F.cos(x)
            gm2.backward(y, F.ones_like(y))
            gm.backward(x.grad, F.ones_like(x.grad))  # nothing: gm2's backward is unseen
        outer.backward(x.grad, F.ones_like(x.grad))
    np.testing.assert_allclose(x.grad.numpy(), -np.sin(x.numpy()) - np.cos(x.numpy()),
                               rtol=1e-5)


def test_each_manager_of_a_group_backwards_the_same_output():
    """MegEngine keeps the graph until every manager of the group has run its backward."""
    from partial import partial_trace

    a, b = mge.Parameter([1.0, 2.0]), mge.Parameter([3.0, 4.0])
    g1, g2 = GradManager().attach([a]), GradManager().attach([b])
    region = partial_trace(lambda a, b: F.sin(a) * b)  # a compiled segment's node too
    with g1 | g2:
        y = (region(a, b) * a).sum()
        g1.backward(y)
        g2.backward(y)
    av, bv = np.array([1.0, 2.0]), np.array([3.0, 4.0])
    np.testing.assert_allclose(a.grad.numpy(), bv * (np.cos(av) * av + np.sin(av)), rtol=1e-5)
    np.testing.assert_allclose(b.grad.numpy(), np.sin(av) * av, rtol=1e-5)
    with g1:  # alone, a manager frees the graph at its backward
        y = (a * a).sum()
        g1.backward(y)
        with pytest.raises(BackwardError, match="already called in this recording"):
            g1.backward(y)


class MySigmoid(Function):
    def forward(self, x):
        y = 1 / (1 + F.exp(-x))
        self.y = y
        return y

    def backward(self, dy):
        y = self.y
        return dy * y * (1 - y)


def test_function_with_custom_backward():
    x = mge.tensor([0.0, 2.0])
    gm = GradManager().attach([x])
    with gm:
        y = MySigmoid()(x)
        gm.backward(y.sum())
    s = 1 / (1 + np.exp(-np.array([0.0, 2.0])))
    np.testing.assert_allclose(y.numpy(), s, rtol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), s * (1 - s), rtol=1e-6)


class ScaledGrad(Function):
    """A backward chosen freely (not the true derivative), and None for an input."""

    def forward(self, a, b):
        return a * b, a + b

    def backward(self, d_prod, d_sum):
        return d_prod * 10 + d_sum, None     # None: no gradient for b


def test_function_with_several_inputs_and_outputs():
    a, b = mge.tensor([2.0]), mge.tensor([3.0])
    gm = GradManager().attach([a, b])
    with gm:
        prod, total = ScaledGrad()(a, b)
        gm.backward(prod + total)
    np.testing.assert_array_equal(prod.numpy(), [6.0])
    np.testing.assert_array_equal(total.numpy(), [5.0])
    np.testing.assert_allclose(a.grad.numpy(), [11.0])
    assert b.grad is None
