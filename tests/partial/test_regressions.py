"""Regression tests for issue 12: one test per defect that made compiled code silently differ
from eager code (id() reuse, zero gradients for unused outputs, what `xla_trace` froze, output
structure, how the break mode is chosen, inline wrappers and `partial_trace(module)`).

Each test failed on the code before the fix. Where state matters, the compiled run is compared
with the same program run eagerly (`differential.check_against_eager`)."""

import gc

import numpy as np
import pytest

import eager as eg
import eager.functional as F
import eager.module as M
import eager.optimizer as optim
from eager.autodiff import GradManager
from partial import (
    TraceError,
    UnsupportedInRegionError,
    exclude_from_trace,
    partial_trace,
    xla_trace,
)
from partial import exclude_from_trace as keep_eager  # the alias point 7 is about

from .differential import World, assert_trees_close, check_against_eager, snapshot, to_numpy

HERE = "test_regressions.py"


def _x(*shape, seed=0):
    return eg.tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def _xla(f, **options):
    return xla_trace(f, **options)


# ----- 1. id() reuse ------------------------------------------------------------------------
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
    x = _x(2, 3)
    stale = []
    for s in range(1, 21):  # before the fix 30-37 of 40 calls were stale
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
    x = _x(2, 3)
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
            return step(_x(5, 4, seed=i))

        return World(run, modules=[net], optimizers=[opt], tensors=old)

    check_against_eager(build, steps=6, compile=_xla if whole_step else partial_trace)


def test_entries_for_a_module_argument_die_with_the_module(frozen_gc):
    f = partial_trace(lambda m, x: F.relu(m(x)))
    x = _x(2, 3)
    most = 0
    for i in range(20):
        eg.random.seed(i)
        m = M.Linear(3, 2)
        np.testing.assert_allclose(f(m, x).numpy(), F.relu(m(x)).numpy(), rtol=1e-6)
        del m
        gc.collect()
        most = max(most, f.cache_info().entries)
    # Entries guard the module by weak reference and go with it (one may linger until the
    # next call looks at the cache); before the fix all of them stayed until LRU eviction.
    assert most <= 2, f"{most} entries held for modules that no longer exist"


def test_a_float_argument_is_an_input_and_other_plain_values_are_static():
    seen = []

    def body(x, s, flag=None):
        # runs only when captured
        seen.append((isinstance(s, eg.Tensor), getattr(s, "shape", None),
                     getattr(s, "dtype", None)))
        return x * s + (1.0 if flag else 0.0)

    f = partial_trace(body)
    x = _x(3)
    for _ in range(5):  # NaN != NaN: a key holding the value never matched
        assert np.isnan(f(x, float("nan")).numpy()).all()
    assert f.cache_info().captures == 1
    for s in (0.5, 0.25):
        np.testing.assert_allclose(f(x, s).numpy(), x.numpy() * np.float32(s), rtol=1e-6)
    assert f.cache_info().captures == 1
    assert seen == [(True, (), np.dtype(np.float32))]  # a 0-d float32 Tensor inside

    # int, bool, str and None are static: every new value is a new entry.
    g = partial_trace(lambda x, k, flag, tag: x * k if flag else x * (k + len(tag or "")))
    for k, flag, tag in [(2, True, None), (2, True, None), (3, True, None),
                         (3, False, None), (3, False, "ab"), (3, False, "ab")]:
        want = x.numpy() * (k if flag else k + len(tag or ""))
        np.testing.assert_allclose(g(x, k, flag, tag).numpy(), want, rtol=1e-6)
    assert g.cache_info().captures == 4


# ----- 2. outputs the loss does not reach ---------------------------------------------------
@pytest.mark.parametrize("make_opt", [
    lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.1),
    lambda ps: optim.Adam(ps, lr=0.01, weight_decay=0.01),
], ids=["sgd-momentum-wd", "adam"])
def test_parameters_that_only_feed_an_unused_output_get_no_gradient(make_opt):
    def build(wrap):
        trunk, head_a, head_b = M.Linear(4, 5), M.Linear(5, 3), M.Linear(5, 2)
        net = M.Sequential(trunk, head_a, head_b)  # for the snapshot only
        params = net.parameters()
        opt = make_opt(params)
        gm = GradManager().attach(params)

        @wrap
        def region(x):
            h = F.relu(trunk(x))
            return head_a(h), head_b(h)

        def step(i):
            opt.clear_grad()  # first: the last step's .grad stays for the snapshot to compare
            with gm:
                a, b = region(_x(6, 4, seed=i))
                gm.backward((a ** 2).mean())  # b (and so head_b) is not part of the loss
            no_grad = [p.grad is None for p in params]  # head_b's: True, as in eager
            opt.step()
            return no_grad, a, b

        return World(step, modules=[net], optimizers=[opt])

    check_against_eager(build, steps=3)


# ----- 3. what xla_trace must watch -----------------------------------------------------------
def test_parameters_attached_after_the_first_call_are_trained():
    def build(wrap):
        a, b = M.Linear(4, 3), M.Linear(4, 3)
        net = M.Sequential(a, b)
        opt = optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        gm = GradManager().attach(a.parameters())

        @wrap
        def step(x):
            opt.clear_grad()  # first: the last step's .grad stays for the snapshot to compare
            with gm:
                loss = ((a(x) + b(x)) ** 2).mean()
                gm.backward(loss)
            opt.step()
            return loss

        def run(i):
            if i == 1:
                gm.attach(b.parameters())  # from now on b gets gradients and is updated
            loss = step(_x(5, 4, seed=i))
            return [p.grad is None for p in net.parameters()], loss

        return World(run, modules=[net], optimizers=[opt], traced=[step])

    world = check_against_eager(build, steps=3, compile=_xla)
    assert world.traced[0].cache_info().captures == 2


@pytest.mark.parametrize("line", ["sched.step()", 'opt.param_groups[0]["lr"] = 0.01'],
                         ids=["sched.step", "lr-write"])
def test_a_hyper_parameter_write_inside_a_step_raises_and_changes_nothing(line):
    eg.random.seed(0)
    net = M.Sequential(M.Linear(4, 6), M.Dropout(0.5), M.Linear(6, 2))  # the step uses the RNG
    opt = optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    sched = optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    gm = GradManager().attach(net.parameters())

    def train(x, write=True):
        with gm:
            loss = (net(x) ** 2).mean()
            gm.backward(loss)
        if not write:
            pass
        elif line == "sched.step()":
            sched.step()
        else:
            opt.param_groups[0]["lr"] = 0.01
        opt.step()
        return loss

    train(_x(3, 4), write=False)  # eagerly: momentum buffers and .grad exist before the call
    world = World(lambda i: None, modules=[net], optimizers=[opt])
    before, lr = snapshot(world), opt.param_groups[0]["lr"]
    with pytest.raises(UnsupportedInRegionError) as info:
        xla_trace(train)(_x(3, 4, seed=1))
    assert isinstance(info.value, TraceError)
    message = str(info.value)
    assert HERE in message and line in message, message  # the user's line
    assert "exclude_from_trace" in message, message
    assert opt.param_groups[0]["lr"] == lr
    after = snapshot(world)
    assert after.keys() == before.keys()
    for k, v in before.items():
        if v is None:
            assert after[k] is None, k
        else:
            np.testing.assert_array_equal(after[k], v, err_msg=k)


def test_hyper_parameter_changes_outside_the_step_apply_without_recompiling():
    def build(wrap):
        net = M.Linear(4, 3)
        opt = optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        sched = optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
        gm = GradManager().attach(net.parameters())

        @wrap
        def step(x):
            with gm:
                loss = (net(x) ** 2).mean()
                gm.backward(loss)
            opt.step().clear_grad()
            return loss

        def run(i):
            if i == 3:
                opt.param_groups[0]["lr"] = 0.3
            loss = step(_x(5, 4, seed=i))
            sched.step()
            return loss

        return World(run, modules=[net], optimizers=[opt], traced=[step])

    world = check_against_eager(build, steps=5, compile=_xla)
    assert world.traced[0].cache_info().captures == 1


# ----- 6. output structure --------------------------------------------------------------------
@pytest.mark.parametrize("compile", [partial_trace, _xla], ids=["partial_trace", "xla_trace"])
def test_the_output_structure_is_kept_exactly(compile):
    x = _x(2, 3)
    for make in (lambda x: [x * 2], lambda x: (x * 2,), lambda x: {"a": x * 2},
                 lambda x: x * 2, lambda x: ([x * 2], {"b": (x + 1,)})):
        want, got = make(x), compile(make)(x)
        assert type(got) is type(want), f"{type(got).__name__} for a {type(want).__name__}"
        assert_trees_close(to_numpy(got), to_numpy(want), 1e-6, 1e-6, "outputs")


# ----- 7. break mode chosen by names ----------------------------------------------------------
def _eager_block(y, log):
    with exclude_from_trace():
        log.append(y.sum().item())


def _region_with_alias(before, log):
    def region(x):
        before.append(1)
        y = x + 1
        with keep_eager():
            log.append(y.sum().item())
        return y * 2

    return region


def _region_with_helper(before, log):
    def region(x):
        before.append(1)
        y = x + 1
        _eager_block(y, log)
        return y * 2

    return region


@pytest.mark.parametrize("make", [_region_with_alias, _region_with_helper],
                         ids=["aliased-import", "helper-function"])
def test_code_before_an_exclude_block_runs_once_per_call(make):
    before, log = [], []
    f = partial_trace(make(before, log))
    for i in range(3):
        np.testing.assert_allclose(f(eg.full((2,), float(i))).numpy(), [2.0 * (i + 1)] * 2)
    assert log == [2.0, 4.0, 6.0]
    assert len(before) == 3, f"the Python before the block ran {len(before)} times in 3 calls"


# ----- 8. inline wrappers and partial_trace(module) -------------------------------------------
def test_inline_wrappers_of_the_same_code_share_entries():
    captured = []

    def body(x):
        captured.append(1)  # Python side effects run only when the region is captured
        return F.relu(x) * 2

    x = _x(3, 2)
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


def test_partial_trace_of_a_module_is_still_that_module():
    eg.random.seed(0)
    lin = M.Linear(3, 2)
    w = partial_trace(lin)
    assert isinstance(w, M.Module)
    assert w.weight is lin.weight and w.bias is lin.bias
    assert len(w.parameters()) == 2
    assert all(a is b for a, b in zip(w.parameters(), lin.parameters()))
    assert set(w.state_dict()) == set(lin.state_dict()) == {"weight", "bias"}
    w.eval()
    assert lin.training is False
    w.train()
    assert lin.training is True
    x = _x(4, 3)
    for _ in range(2):
        np.testing.assert_allclose(w(x).numpy(), lin(x).numpy(), rtol=1e-6)
    assert w.cache_info().captures == 1
