"""Guards and the cache: what compiles anew, what is reused, and what the user is told."""

import gc
import logging
import weakref

import numpy as np

import eager as eg
import eager.functional as F
import eager.module as M
import eager.optimizer as optim
from eager.autodiff import GradManager
from partial import partial_trace


def _x(*shape, seed=0):
    return eg.tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def test_shapes_a_b_a_reuse_the_first_entry():
    net = M.Linear(3, 2)
    f = partial_trace(lambda x: net(x))
    for batch in (4, 7, 4, 7, 4):
        x = _x(batch, 3)
        np.testing.assert_allclose(f(x).numpy(), net(x).numpy(), rtol=1e-6)
    info = f.cache_info()
    assert (info.captures, info.hits, info.entries) == (2, 3, 2)
    assert info.compile_seconds > 0


def test_dtype_changes_compile_anew():
    f = partial_trace(lambda x: x * 2)
    f(eg.tensor([1.0]))
    f(eg.tensor([1.0], dtype="float16"))
    f(eg.tensor([1]))
    assert f.cache_info().captures == 3


def test_the_cache_is_bounded_least_recently_used_first():
    f = partial_trace(lambda x: x + 1, cache_size=2)
    for n in (1, 2, 1, 3):  # 2 is the least recently used when 3 arrives
        f(eg.zeros(n))
    assert f.cache_info().entries == 2
    f(eg.zeros(1))
    assert f.cache_info().captures == 3
    f(eg.zeros(2))
    assert f.cache_info().captures == 4


def test_cache_clear_drops_every_entry():
    scale = [2.0]
    f = partial_trace(lambda x: x * scale[0])
    assert f(eg.ones(1)).item() == 2.0
    scale[0] = 5.0  # a Python value the region reads: baked in until cache_clear
    assert f(eg.ones(1)).item() == 2.0
    f.cache_clear()
    assert f.cache_info().entries == 0
    assert f(eg.ones(1)).item() == 5.0


def test_recompile_warning_past_the_limit_names_the_argument(caplog):
    def backbone(x, depth):
        return x * depth

    f = partial_trace(backbone, recompile_limit=2)
    with caplog.at_level(logging.WARNING, logger="partial"):
        f(eg.zeros((2, 3)), 1)
        f(eg.zeros((4, 3)), 1)
        assert not caplog.records
        f(eg.zeros((4, 5)), 1)
        f(eg.zeros((4, 5)), 2)
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2
    assert "argument x changed from Tensor[4, 3] float32 to Tensor[4, 5] float32" in messages[0]
    assert "backbone" in messages[0] and "recompile_limit=2" in messages[0]
    assert "argument depth changed from 1 to 2" in messages[1]


def test_training_mode_switches_reuse_one_entry_per_mode(caplog):
    net = M.Sequential(M.Linear(3, 3), M.BatchNorm1d(3), M.Dropout(0.5))
    f = partial_trace(lambda x: net(x), recompile_limit=1)
    x = _x(4, 3)
    with caplog.at_level(logging.WARNING, logger="partial"):
        for mode in (True, False, True, False):
            net.train(mode)
            y = f(x)
        net.train(False)
        np.testing.assert_allclose(y.numpy(), net(x).numpy(), rtol=1e-6)
    assert f.cache_info().captures == 2
    assert "training changed from True to False" in caplog.records[0].getMessage()


def test_a_module_attribute_rebound_outside_the_region_is_seen():
    net = M.Sequential(M.Linear(3, 4), M.ReLU())
    f = partial_trace(lambda x: net(x))
    x = _x(2, 3)
    f(x)
    net[0] = M.Linear(3, 4)  # a new layer, while the old one lives on in `old`
    np.testing.assert_allclose(f(x).numpy(), net(x).numpy(), rtol=1e-6)
    net[0].bias = None
    np.testing.assert_allclose(f(x).numpy(), net(x).numpy(), rtol=1e-6)
    assert f.cache_info().captures == 3


def test_a_plain_attribute_change_is_seen():
    class Scale(M.Module):
        def __init__(self):
            super().__init__()
            self.factor = 2.0

        def forward(self, x):
            return x * self.factor

    m = Scale()
    f = partial_trace(lambda x: m(x))
    assert f(eg.ones(1)).item() == 2.0
    m.factor = 3.0
    assert f(eg.ones(1)).item() == 3.0


def test_a_lifted_tensor_that_changes_shape_is_seen():
    w = eg.tensor([1.0, 2.0])
    f = partial_trace(lambda x: (x * w).sum())
    assert f(eg.ones(1)).item() == 3.0
    eg.rebind(w, eg.read(eg.tensor([1.0, 2.0, 3.0])))
    assert f(eg.ones(1)).item() == 6.0
    assert f.cache_info().captures == 2


def test_learning_rate_schedules_do_not_recompile():
    net = M.Linear(2, 1)
    opt = optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    sched = optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    gm = GradManager().attach(net.parameters())
    update = partial_trace(lambda: opt.step().clear_grad())
    for _ in range(4):
        with gm:
            gm.backward(net(eg.ones((1, 2))).sum())
        update()
        sched.step()
    assert update.cache_info().captures == 1 and update.cache_info().hits == 3


def test_a_scheduler_created_after_the_first_call_does_not_recompile():
    net = M.Linear(2, 1)
    opt = optim.SGD(net.parameters(), lr=0.1)
    update = partial_trace(lambda: opt.step())
    net.weight.grad, net.bias.grad = eg.ones((1, 2)), eg.ones(1)
    update()
    optim.lr_scheduler.StepLR(opt, step_size=1)  # adds "initial_lr" to the param group
    update()
    opt.param_groups[0]["nesterov"] = False  # an existing setting the region baked in
    update()
    assert update.cache_info().captures == 1
    opt.param_groups[0]["weight_decay"] = 0.0  # read as an input: no recompilation
    update()
    assert update.cache_info().captures == 1


def test_grad_presence_is_a_guard():
    w = eg.Parameter([1.0, 2.0])
    f = partial_trace(lambda: w * 2 if w.grad is None else w.grad * 3)
    np.testing.assert_allclose(f().numpy(), [2.0, 4.0])
    w.grad = eg.tensor([1.0, 1.0])
    np.testing.assert_allclose(f().numpy(), [3.0, 3.0])
    w.grad = eg.tensor([2.0, 0.0])
    np.testing.assert_allclose(f().numpy(), [6.0, 0.0])
    assert f.cache_info().captures == 2


def test_a_different_module_argument_gets_its_own_entry():
    f = partial_trace(lambda m, x: F.relu(m(x)))
    a, b = M.Linear(3, 2), M.Linear(3, 2)
    x = _x(2, 3)
    for m in (a, b, a):
        np.testing.assert_allclose(f(m, x).numpy(), F.relu(m(x)).numpy(), rtol=1e-6)
    assert f.cache_info().captures == 2


def test_a_cached_entry_does_not_keep_the_model_alive():
    f = partial_trace(lambda m, x: m(x))
    net = M.Linear(64, 64)
    f(net, eg.ones((1, 64)))
    ref = weakref.ref(net)
    del net
    gc.collect()
    assert ref() is None  # the entry holds weak references to modules and tensors
    assert f.cache_info().entries == 1
    f(M.Linear(64, 64), eg.ones((1, 64)))  # a new model of the same shape: a new entry
    assert f.cache_info().captures == 2


def test_wrappers_of_one_function_share_entries_and_other_settings_do_not():
    def body(x):
        return x + 1

    f, g = partial_trace(body), partial_trace(body)
    f(eg.ones(1))
    assert f.cache_info().captures == 1 and g.cache_info().captures == 1  # one shared cache
    del f
    gc.collect()
    g(eg.ones(1))
    assert (g.cache_info().captures, g.cache_info().hits) == (1, 1)
    other = partial_trace(body, cache_size=3)  # other settings: a cache of its own
    other(eg.ones(1))
    assert other.cache_info().captures == 1 and g.cache_info().captures == 1


def test_modules_built_inside_a_region_are_not_model_changes_or_guards():
    net = M.Sequential(M.Linear(3, 4), M.ReLU(), M.Linear(4, 2))

    @partial_trace
    def f(x):
        return net[:2](x).sum() + net[2:](net[:2](x)).sum()  # slices: new Sequentials

    x = eg.ones((2, 3))
    want = net[:2](x).sum() + net(x).sum()
    for _ in range(3):
        np.testing.assert_allclose(f(x).numpy(), want.numpy(), rtol=1e-6)
    assert (f.cache_info().captures, f.cache_info().hits) == (1, 2)
