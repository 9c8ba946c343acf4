"""Mutation and state: in-place updates, escaping tensors, optimizer steps and the RNG inside a
region are outputs of the compiled code, written back after every call."""

import gc

import jax
import numpy as np
import pytest

import eager as eg
import eager.functional as F
import eager.module as M
import eager.optimizer as optim
from eager.autodiff import GradManager
from partial import partial_trace, xla_trace
from tests.helpers import randn

from .differential import World, check_against_eager


def _cnn():
    return M.Sequential(M.Conv2d(2, 4, 3, padding=1), M.BatchNorm2d(4), M.ReLU(),
                        M.AdaptiveAvgPool2d(1), M.Flatten())


def test_batchnorm_running_statistics_in_training_and_eval():
    def build(wrap):
        net = _cnn()
        region = wrap(lambda x: net(x))
        gm = GradManager().attach(net.parameters())

        def step(i):
            net.train(i != 2)  # the third step runs in eval mode: another entry
            with gm:
                gm.backward(region(randn(3, 2, 5, 5, seed=i)).sum())
            return [b for b in net.buffers()]

        return World(step, modules=[net], traced=[region])

    world = check_against_eager(build, steps=4)
    assert world.traced[0].cache_info().captures == 2


def test_in_place_updates_of_arguments_reach_the_callers_tensors():
    @partial_trace
    def bump(a, b):
        a[...] = a + 1
        b[0] = b[0] * 10

    for _ in range(3):
        a, b = eg.tensor([1.0, 2.0]), eg.tensor([3.0, 4.0])
        assert bump(a, b) is None
        np.testing.assert_array_equal(a.numpy(), [2.0, 3.0])
        np.testing.assert_array_equal(b.numpy(), [30.0, 4.0])
    assert bump.cache_info().captures == 1


def test_an_optimizer_step_inside_the_region_with_a_learning_rate_change():
    def build(wrap):
        net = M.Sequential(M.Linear(3, 5), M.Tanh(), M.Linear(5, 2))
        opt = optim.Adam(net.parameters(), lr=0.05, weight_decay=0.01)
        gm = GradManager().attach(net.parameters())

        @wrap
        def update():
            opt.step()
            opt.clear_grad()

        def step(i):
            with gm:
                loss = (net(randn(4, 3, seed=i)) ** 2).mean()
                gm.backward(loss)
            update()
            if i == 1:
                opt.param_groups[0]["lr"] = 0.01
                opt.param_groups[0]["betas"] = (0.8, 0.99)
            return loss

        return World(step, modules=[net], optimizers=[opt], traced=[update])

    world = check_against_eager(build, steps=5)
    assert world.traced[0].cache_info().captures == 1


def test_sgd_momentum_switched_on_later_creates_state_and_recaptures():
    def build(wrap):
        w = eg.Parameter([1.0, -2.0])
        opt = optim.SGD([w], lr=0.1)
        update = wrap(lambda: opt.step())

        def step(i):
            w.grad = w * 2
            if i == 2:
                opt.param_groups[0]["momentum"] = 0.9
            update()
            return w

        return World(step, optimizers=[opt], tensors={"w": w}, traced=[update])

    world = check_against_eager(build, steps=5)
    assert world.traced[0].cache_info().captures == 3  # plain, creating the buffer, reading it


def test_tensors_stored_on_modules_and_in_containers_escape_and_are_written_back():
    stash = []

    def build(wrap):
        net = M.Linear(3, 2)

        def region(x):
            h = net(x)
            net.last = h.sum(axis=1)
            stash.append(h * 2)
            return h

        region = wrap(region)

        def step(i):
            y = region(randn(2, 3, seed=i))
            return y, net.last

        return World(step, modules=[net])

    stash.clear()
    check_against_eager(build)
    appended = len(stash)  # 3 eager steps, then 1 compiled capture
    stash.clear()
    eg.random.seed(0)
    world = build(partial_trace)
    for i in range(3):
        y, last = world.step(i)
        np.testing.assert_allclose(stash[0].numpy(), (y * 2).numpy(), rtol=1e-6)
        np.testing.assert_allclose(last.numpy(), y.sum(axis=1).numpy(), rtol=1e-6)
    assert appended == 4 and len(stash) == 1  # the Python append ran at capture only


def test_dropout_draws_exactly_the_eager_masks_and_new_ones_each_call():
    def build(wrap):
        net = M.Sequential(M.Linear(4, 8), M.Dropout(0.5), M.ReLU())
        region = wrap(lambda x: F.dropout(net(x), 0.25))
        gm = GradManager().attach(net.parameters())

        def step(i):
            with gm:
                y = region(randn(6, 4))
                gm.backward(y.sum())
            return y

        return World(step, modules=[net])

    check_against_eager(build, rtol=0, atol=0)
    eg.random.seed(3)
    net = M.Sequential(M.Linear(4, 8), M.Dropout(0.5))
    f = partial_trace(lambda x: net(x))
    a, b = f(randn(6, 4)).numpy(), f(randn(6, 4)).numpy()
    assert not np.array_equal(a == 0, b == 0)


def test_random_draws_match_eager_bit_for_bit():
    def build(wrap):
        region = wrap(lambda x: (x + eg.random.normal(size=(3,)), eg.random.uniform(size=(2,)),
                                 eg.random.permutation(5)))
        return World(lambda i: region(eg.zeros(3)))

    check_against_eager(build, rtol=0, atol=0)


def test_no_tracer_leaks_out_of_a_region():
    net = M.Linear(2, 2)
    box = {}

    def region(x):
        h = net(x)
        box["h"] = h
        net.cache = [h * 2]
        return h

    f = partial_trace(region)
    f(randn(1, 2))
    for t in [box["h"], net.cache[0], net.weight, net.bias, eg.random.get_state()]:
        assert not isinstance(eg.read(t), jax.core.Tracer)
        t.numpy()


# ----- optimizer slots replaced between steps -----------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("whole_step", [False, True], ids=["partial_trace", "xla_trace"])
def test_a_replaced_momentum_buffer_is_the_one_used_and_updated(whole_step):
    def build(wrap):
        net = M.Linear(4, 3)
        params = net.parameters()
        opt = optim.SGD(params, lr=0.1, momentum=0.9)
        gm = GradManager().attach(params)
        old: dict = {}  # replaced buffers still referenced: they must no longer change

        def train(x):
            with gm:
                loss = (net(x) ** 2).mean()
                gm.backward(loss)
            return loss

        if whole_step:
            @wrap
            def step(x):
                loss = train(x)
                opt.step().clear_grad()
                return loss
        else:  # the update alone is compiled
            update = wrap(lambda: opt.step().clear_grad())

            def step(x):
                loss = train(x)
                update()
                return loss

        def run(i):
            if i in (2, 4):  # a new tensor in the slot, as a momentum reset does
                for j, p in enumerate(params):
                    if i == 2:  # the old buffer lives on ...
                        old[f"old_buffer{j}"] = opt.state[p]["momentum_buffer"]
                    opt.state[p]["momentum_buffer"] = eg.zeros_like(p)
                gc.collect()  # ... or dies, and its id is free for reuse
            return step(randn(5, 4, seed=i))

        return World(run, modules=[net], optimizers=[opt], tensors=old)

    check_against_eager(build, steps=6, compile=xla_trace if whole_step else partial_trace)
