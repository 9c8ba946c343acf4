"""Inputs found, not declared: closed-over and global tensors are lifted, read afresh at every
call, and receive gradients; `capture_as_const=True` bakes them in instead."""

import numpy as np
import pytest

import eager as eg
import eager.module as M
import eager.optimizer as optim
from eager.autodiff import GradManager
from partial import partial_trace
from tests.helpers import randn, training_step

from .differential import World, check_against_eager

GLOBAL_SCALE = eg.Parameter([2.0, 3.0])


def test_closure_and_global_tensors_are_read_fresh_at_every_call():
    w = eg.tensor([1.0, 1.0])
    f = partial_trace(lambda x: x * w * GLOBAL_SCALE)
    x = randn(2)
    np.testing.assert_allclose(f(x).numpy(), (x * w * GLOBAL_SCALE).numpy())
    w[...] = eg.tensor([5.0, -1.0])  # in place: the same tensor, a new value
    old = GLOBAL_SCALE.numpy()
    eg.rebind(GLOBAL_SCALE, eg.read(eg.tensor([1.0, 0.5])))
    try:
        np.testing.assert_allclose(f(x).numpy(), (x * w * GLOBAL_SCALE).numpy())
    finally:
        eg.rebind(GLOBAL_SCALE, eg.read(eg.tensor(old)))
    assert f.cache_info().captures == 1


def test_gradients_reach_closure_global_and_argument_tensors():
    def build(wrap):
        w = eg.Parameter(np.arange(6, dtype=np.float32).reshape(2, 3) / 10)
        x = eg.Parameter(randn(4, 2).numpy())  # an attached non-parameter input
        region = wrap(lambda x: (x @ w) * GLOBAL_SCALE.sum())
        gm = GradManager().attach([w, x, GLOBAL_SCALE])

        def step(i):
            for t in (w, x, GLOBAL_SCALE):
                t.grad = None
            with gm:
                y = region(x)
                gm.backward((y**2).mean())
            return y

        return World(step, tensors={"w": w, "x": x, "scale": GLOBAL_SCALE})

    check_against_eager(build)


def test_optimizer_updates_between_calls_are_seen():
    def build(wrap):
        net = M.Sequential(M.Linear(3, 4), M.Tanh(), M.Linear(4, 1))
        opt = optim.SGD(net.parameters(), lr=0.5, momentum=0.9)
        gm = GradManager().attach(net.parameters())
        region = wrap(lambda x: net(x))

        def step(i):
            return training_step(gm, opt, lambda: region(randn(5, 3, seed=i)).sum())

        return World(step, modules=[net], optimizers=[opt])

    check_against_eager(build, steps=4)


def test_a_grad_manager_passed_as_an_argument_trains_as_eagerly():
    """MegEngine code passes the manager to its traced step: `step(x, gm=gm)`."""
    from partial import xla_trace

    def build(wrap):
        net = M.Sequential(M.Linear(3, 4), M.Tanh(), M.Linear(4, 1))
        opt = optim.SGD(net.parameters(), lr=0.5, momentum=0.9)
        gm = GradManager().attach(net.parameters())

        def whole(x, *, gm):
            return training_step(gm, opt, lambda: (net(x) ** 2).mean())

        traced = wrap(whole)
        return World(lambda i: traced(randn(5, 3, seed=i), gm=gm), modules=[net],
                     optimizers=[opt], traced=[traced])

    world = check_against_eager(build, steps=3, compile=xla_trace)
    assert world.traced[0].cache_info().captures == 1
    net = world.modules[0]
    before = [p.numpy() for p in net.parameters()]
    world.traced[0](randn(5, 3), gm=GradManager())  # attached to nothing: no gradient, no update
    assert world.traced[0].cache_info().captures == 2  # another manager is another program
    for p, b in zip(net.parameters(), before):
        np.testing.assert_array_equal(p.numpy(), b)


def test_capture_as_const_bakes_closed_over_tensors_but_not_module_arguments():
    w = eg.tensor([1.0, 2.0])
    net = M.Linear(2, 2)
    f = partial_trace(lambda m, x: m(x) * w, capture_as_const=True)
    x = randn(3, 2)
    first = f(net, x).numpy()
    np.testing.assert_allclose(first, (net(x) * w).numpy(), rtol=1e-6)
    w[...] = eg.tensor([10.0, 10.0])  # baked: not seen
    np.testing.assert_allclose(f(net, x).numpy(), first, rtol=1e-6)
    net.weight[...] = net.weight * 2  # a Module argument's parameter: an input, seen
    np.testing.assert_allclose(f(net, x).numpy(), (net(x) * eg.tensor([1.0, 2.0])).numpy(),
                               rtol=1e-6)
    assert f.cache_info().captures == 1


@pytest.mark.parametrize("form", ["module", "method"])
def test_capture_as_const_never_bakes_the_traced_modules_own_parameters(form):
    """`partial_trace(net, capture_as_const=True)`: the module is the region's argument in all
    but name, so its parameters are inputs (they were baked, and training went stale)."""
    net = M.Linear(2, 1)
    traced = partial_trace(net if form == "module" else net.forward, capture_as_const=True)
    x = randn(1, 2)
    traced(x)
    net.weight[...] = net.weight * 0
    np.testing.assert_allclose(traced(x).numpy(), net(x).numpy(), rtol=1e-6)


def test_capture_as_const_still_updates_what_the_region_rebinds():
    counter = eg.tensor(0.0)

    def bump(x):
        counter[...] = counter + 1
        return x + counter

    f = partial_trace(bump, capture_as_const=True)
    outs = [f(eg.tensor(0.0)).item() for _ in range(3)]
    assert outs == [1.0, 2.0, 3.0] and counter.item() == 3.0


def test_aliases_of_one_array_are_separate_inputs():
    a = eg.tensor([1.0, 2.0])
    b = a.detach()  # shares a's array
    f = partial_trace(lambda x: x * a + b)
    x = eg.tensor([1.0, 1.0])
    np.testing.assert_allclose(f(x).numpy(), [2.0, 4.0])
    a[...] = eg.tensor([3.0, 3.0])  # rebinds a only
    np.testing.assert_allclose(f(x).numpy(), [4.0, 5.0])


def test_tensors_created_inside_are_constants():
    f = partial_trace(lambda x: x + eg.arange(3) * eg.ones(3))
    np.testing.assert_allclose(f(eg.zeros(3)).numpy(), [0.0, 1.0, 2.0])
    np.testing.assert_allclose(f(eg.ones(3)).numpy(), [1.0, 2.0, 3.0])
