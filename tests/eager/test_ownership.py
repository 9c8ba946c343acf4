"""Donation by ownership (`eager.core.ownership`): an optimizer update consumes a parameter's buffer
only when the framework's record says nothing else holds it, and copies it otherwise.

Each holder the framework knows is checked both ways: while it holds the array, the update
copies (the held value stays readable and unchanged); once it lets go, the update is in place
again (the buffer's address is kept). A state machine mixes them in random orders.
"""

import copy
import pickle

import hypothesis.strategies as st
import jax.numpy as jnp
import numpy as np
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import eager as eg
from eager import GradManager
from eager import optimizer as optim
from eager.core.ownership import sole

SHAPE = (16, 16)


def _world():
    w = eg.Parameter(np.ones(SHAPE, np.float32))
    opt = optim.SGD([w], lr=0.1, momentum=0.9)
    return w, opt


def _address(t):
    return eg.hooks.data(t).unsafe_buffer_pointer()  # (eg.read would hand the array out)


def _step(w, opt):
    """One update; True when it was in place (the buffer donated), False when copied."""
    w.grad = eg.full(SHAPE, 0.5)
    before = _address(w)
    opt.step()
    return _address(w) == before


def test_an_op_result_is_its_arrays_only_holder():
    w, opt = _world()
    _step(w, opt)  # now w holds an update's result
    assert sole(w) and _step(w, opt) and _step(w, opt)


def test_a_detached_tensor_keeps_the_array_until_it_dies():
    w, opt = _world()
    _step(w, opt)
    kept = w.detach()
    value = kept.numpy()
    assert not _step(w, opt)
    np.testing.assert_array_equal(kept.numpy(), value)
    assert _step(w, opt)  # w holds a new result; kept holds the old array
    kept = w.detach()
    del kept
    assert _step(w, opt)


def test_a_shallow_copy_and_a_tensor_made_from_a_tensor_share_the_array():
    w, opt = _world()
    _step(w, opt)
    for make in (copy.copy, eg.Tensor):
        kept = make(w)
        value = kept.numpy()
        assert not _step(w, opt)
        np.testing.assert_array_equal(kept.numpy(), value)
        del kept
        assert _step(w, opt)


def test_a_pickled_copy_is_its_own_arrays_only_holder():
    w, opt = _world()
    _step(w, opt)
    w.detach()  # a group in the record: not pickled (weak references)
    back = pickle.loads(pickle.dumps(w))
    assert sole(back) and isinstance(back, eg.Parameter)
    np.testing.assert_array_equal(back.numpy(), w.numpy())


def test_arrays_handed_out_are_never_consumed():
    w, opt = _world()
    for hand_out in (eg.read, jnp.asarray, lambda t: jnp.from_dlpack(t)):
        _step(w, opt)
        raw = hand_out(w)
        value = np.array(raw)
        assert not _step(w, opt)
        np.testing.assert_array_equal(np.asarray(raw), value)
        del raw  # dropped, but the framework cannot know: w's next result is what frees it
        assert _step(w, opt)


def test_a_tensor_made_from_the_users_jax_array_does_not_consume_it():
    users = jnp.ones(SHAPE)
    w = eg.Parameter(users)
    opt = optim.SGD([w], lr=0.1, momentum=0.9)
    assert not _step(w, opt)
    np.testing.assert_array_equal(np.asarray(users), 1.0)
    assert _step(w, opt)


def test_a_raw_array_rebound_into_a_tensor_is_not_consumed():
    w, opt = _world()
    users = jnp.full(SHAPE, 2.0)
    eg.rebind(w, users)
    assert not _step(w, opt)
    np.testing.assert_array_equal(np.asarray(users), 2.0)
    assert _step(w, opt)


def test_a_recorded_node_keeps_its_inputs_until_backward_frees_it():
    w, opt = _world()
    gm = GradManager().attach([w])
    _step(w, opt)
    old = w.numpy()
    with gm:
        loss = (w * w).sum()
        assert not _step(w, opt)  # the node still needs the old w
        w.grad = None
        gm.backward(loss)
    np.testing.assert_allclose(w.grad.numpy(), 2 * old, rtol=1e-6)
    assert _step(w, opt)


def test_a_custom_functions_node_keeps_its_inputs_until_backward_frees_it():
    class Square(eg.Function):
        def forward(self, x):
            self.x = x
            return x * x

        def backward(self, dy):
            return 2 * self.x * dy

    w, opt = _world()
    gm = GradManager().attach([w])
    _step(w, opt)
    with gm:
        loss = Square()(w).sum()
        assert not _step(w, opt)
        gm.backward(loss)
    assert _step(w, opt)


class Holders(RuleBasedStateMachine):
    """Detached tensors, copies and raw arrays taken and dropped in any order between
    updates: what is still held never changes, and an update is in place exactly when
    nothing holds the parameter's array (an array handed out counts until the next update)."""

    def __init__(self):
        super().__init__()
        self.w, self.opt = _world()
        _step(self.w, self.opt)
        self.kept = []  # (tensor or raw array, its value, the update it was taken after)
        self.updates = 0
        self.handed_out = False

    @rule(make=st.sampled_from(["detach", "copy", "tensor"]))
    def keep_a_tensor(self, make):
        w = self.w
        t = {"detach": w.detach, "copy": lambda: copy.copy(w), "tensor": lambda: eg.Tensor(w)}[
            make]()
        self.kept.append((t, t.numpy(), self.updates))

    @rule()
    def hand_out(self):
        raw = eg.read(self.w)
        self.kept.append((raw, np.array(raw), self.updates))
        self.handed_out = True

    @precondition(lambda self: self.kept)
    @rule(data=st.data())
    def drop(self, data):
        self.kept.pop(data.draw(st.integers(0, len(self.kept) - 1)))

    @rule()
    def update(self):
        held = self.handed_out or any(when == self.updates for _, _, when in self.kept)
        assert _step(self.w, self.opt) is not held
        self.updates += 1
        self.handed_out = False

    @invariant()
    def what_is_held_is_unchanged(self):
        for x, value, _ in self.kept:
            np.testing.assert_array_equal(np.asarray(x), value)


Holders.TestCase.settings = settings(max_examples=30, stateful_step_count=20, deadline=None)
TestHolders = Holders.TestCase
