"""Guards and the cache: what compiles anew, what is reused, and what the user is told."""

import gc
import logging
import weakref

import numpy as np
import pytest

import eager as eg
import eager.functional as F
import eager.module as M
import eager.optimizer as optim
from eager.autodiff import GradManager
from partial import partial_trace
from tests.helpers import randn


def test_shapes_a_b_a_reuse_the_first_entry():
    net = M.Linear(3, 2)
    f = partial_trace(lambda x: net(x))
    for batch in (4, 7, 4, 7, 4):
        x = randn(batch, 3)
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
    x = randn(4, 3)
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
    x = randn(2, 3)
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
    x = randn(2, 3)
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


# ----- objects replaced between calls, whose ids the next new objects reuse -----------------------
class _Scaled(M.Module):
    """A Linear whose output goes through `act` (a callable attribute) and is multiplied by
    `scale` (a numpy scalar attribute): plain attributes a training loop may replace."""

    def __init__(self):
        super().__init__()
        self.lin = M.Linear(3, 2)
        self.scale = np.float32(1.0)
        self.act = lambda y: y

    def forward(self, x):
        return self.act(self.lin(x)) * self.scale


def _replace_scale(m, s):
    m.scale = np.float32(s)  # the old scalar dies here; its id is free for the next one


def _replace_act(m, s):
    m.act = lambda y: y * float(s)  # likewise for the old lambda


@pytest.mark.parametrize("replace", [_replace_scale, _replace_act], ids=["np.float32", "lambda"])
def test_a_plain_module_attribute_replaced_every_step_matches_eager(replace, frozen_gc):
    # Guards keyed by id() took the new object, which reused the dead one's id, for the old
    # one and ran a stale entry in most of these calls.
    eg.random.seed(0)
    m = _Scaled()
    f = partial_trace(lambda x: m(x))
    x = randn(2, 3)
    stale = []
    for s in range(1, 21):
        replace(m, s)
        gc.collect()  # free the replaced object now, so its id is the one reused next
        if not np.allclose(f(x).numpy(), m(x).numpy(), rtol=1e-6, atol=1e-6):
            stale.append(s)
    assert not stale, f"stale compiled results at steps {stale}"


def test_equal_plain_values_reuse_the_entry_and_new_callables_recapture():
    # Plain values are compared by value, so an equal np.float32 is not a change even though
    # it is another object; a callable is compared by (weak) identity, so a new one is.
    eg.random.seed(0)
    m = _Scaled()
    f = partial_trace(lambda x: m(x))
    x = randn(2, 3)
    keep = []  # keep the replaced objects alive: distinct ids, so id-keyed guards differ
    for _ in range(4):
        keep.append(m.scale)
        m.scale = np.float32(1.0)
        np.testing.assert_allclose(f(x).numpy(), m(x).numpy(), rtol=1e-6)
    assert f.cache_info().captures == 1
    for s in (2.0, 3.0, 4.0):
        keep.append(m.act)
        m.act = lambda y, s=s: y * s
        np.testing.assert_allclose(f(x).numpy(), m(x).numpy(), rtol=1e-6)
    assert f.cache_info().captures == 4


def test_entries_for_a_module_argument_die_with_the_module(frozen_gc):
    f = partial_trace(lambda m, x: F.relu(m(x)))
    x = randn(2, 3)
    most = 0
    for i in range(20):
        eg.random.seed(i)
        m = M.Linear(3, 2)
        np.testing.assert_allclose(f(m, x).numpy(), F.relu(m(x)).numpy(), rtol=1e-6)
        del m
        gc.collect()
        most = max(most, f.cache_info().entries)
    # Entries guard the module by weak reference and go with it (one may linger until the
    # next call looks at the cache); entries that held their module strongly all stayed
    # until LRU eviction.
    assert most <= 2, f"{most} entries held for modules that no longer exist"


def test_inline_wrappers_of_the_same_code_share_entries():
    captured = []

    def body(x):
        captured.append(1)  # Python side effects run only when the region is captured
        return F.relu(x) * 2

    x = randn(3, 2)
    for _ in range(5):  # a new wrapper of the same function each time
        np.testing.assert_allclose(partial_trace(body)(x).numpy(), (F.relu(x) * 2).numpy(),
                                   rtol=1e-6)
    assert len(captured) == 1
    assert partial_trace(body).cache_info().captures == 1

    captured.clear()
    net = M.Linear(2, 4)
    for _ in range(5):  # a new lambda each time, over the same objects
        y = partial_trace(lambda x: body(net(x)))(x)
        np.testing.assert_allclose(y.numpy(), (F.relu(net(x)) * 2).numpy(), rtol=1e-6)
    assert len(captured) == 1
