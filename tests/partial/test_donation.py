"""Donation in `xla_trace` steps and after regions decided by the framework's ownership record
(`eager.core.ownership`): holders beyond the ones in test_xla_trace.py's donation tests (a detached
tensor, a raw array) keep their values, and the step makes no copies once they let go."""

import jax.numpy as jnp
import numpy as np

import eager as eg
import eager.module as M
import eager.optimizer as optim
from eager.autodiff import GradManager
from partial import partial_trace, xla_trace
from tests.helpers import randn, training_step


def _world(weight=None):
    net = M.Sequential(M.Linear(4, 8), M.ReLU(), M.Linear(8, 2))
    if weight is not None:
        net[0].weight = eg.Parameter(weight)
    opt = optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    gm = GradManager().attach(net.parameters())

    @xla_trace
    def step(x):
        training_step(gm, opt, lambda: (net(x) ** 2).mean())
        return net[2].bias  # a result that is also written back

    return net, gm, step


def test_a_result_that_is_also_the_new_state_survives_the_next_step():
    acc = eg.tensor(np.zeros(4, np.float32))

    @xla_trace
    def accumulate(x):
        new = acc + x
        acc.set_value(new)  # written back (its buffer donated next call) and returned
        return new

    accumulate(eg.ones(4))
    kept = accumulate(eg.ones(4))
    accumulate(eg.ones(4))
    np.testing.assert_array_equal(kept.numpy(), 2.0)
    np.testing.assert_array_equal(acc.numpy(), 3.0)
    entry = accumulate._cache.most_recent()
    assert entry.donated
    del kept
    copies = entry.copies
    for _ in range(2):  # (each result dropped at once)
        accumulate(eg.ones(4))
    assert entry.copies == copies
    np.testing.assert_array_equal(acc.numpy(), 5.0)


def test_a_parameter_made_from_the_users_jax_array_leaves_that_array_alone():
    users = jnp.ones((8, 4)) * 0.1
    net, _, step = _world(users)
    step(randn(3, 4))
    step(randn(3, 4, seed=1))
    assert not users.is_deleted()
    np.testing.assert_allclose(np.asarray(users), 0.1)


def test_a_graph_recorded_outside_keeps_the_parameters_it_read():
    net, gm, step = _world()
    x = randn(3, 4)
    step(x)
    with gm:
        loss = (net(x) ** 2).mean()  # recorded, not yet differentiated
    old = [p.numpy() for p in net.parameters()]
    step(randn(3, 4, seed=1))
    with gm:
        gm.backward(loss)  # runs on the parameters as they were
    for p, before in zip(net.parameters(), old):
        assert not eg.hooks.data(p).is_deleted()
        assert p.grad is not None and not np.array_equal(p.numpy(), before)


def test_a_parameters_detached_value_kept_from_a_region_with_breaks_is_not_consumed():
    """Its first call hands the capture over to the lazy engine; later calls record lazily:
    either way the detached tensor shares the parameter's array, and eager updates copy."""
    net = M.Linear(4, 4)
    opt = optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    gm = GradManager().attach(net.parameters())

    @partial_trace(graph_breaks=True)
    def forward(x):
        kept = net.weight.detach()
        y = net(x)
        if y.sum().item() > 1e9:  # a value read: the capture hands over here
            y = y * 2
        return y, kept

    for i in range(3):
        with gm:
            y, kept = forward(eg.tensor(np.full((2, 4), 0.1 * i, np.float32)))
            gm.backward((y ** 2).mean())
        value = kept.numpy()
        opt.step().clear_grad()
        np.testing.assert_array_equal(kept.numpy(), value)
