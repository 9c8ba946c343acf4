"""`xla_trace`: the whole training step (forward, backward, optimizer) as one executable that
updates the model in place, checked against the same step run eagerly."""

import gc

import numpy as np
import pytest

import eager as eg
import eager.functional as F
import eager.module as M
import eager.optimizer as optim
from benchmarks.workloads import NUM_CLASSES, build_model
from eager.autodiff import GradManager
from partial import (
    NotDifferentiableError,
    TraceError,
    UnsupportedInRegionError,
    ValueReadError,
    partial_trace,
    xla_trace,
)
from tests.helpers import randn, training_step

from .differential import World, check_against_eager, snapshot

HERE = "test_xla_trace.py"


def _labels(n, classes, seed=0):
    return eg.tensor(np.random.default_rng(seed).integers(0, classes, n).astype(np.int32))


def _xla(f, **options):
    return xla_trace(f, **options)


# ----- differential training --------------------------------------------------------------
@pytest.mark.parametrize("sgd", [dict(momentum=0.9), dict(momentum=0.9, nesterov=True),
                                 dict(momentum=0.9, weight_decay=0.05), dict()])
def test_mlp_with_sgd_variants_and_a_learning_rate_change(sgd):
    def build(wrap):
        net = M.Sequential(M.Linear(8, 16), M.ReLU(), M.Linear(16, 4))
        opt = optim.SGD(net.parameters(), lr=0.1, **sgd)

        @wrap
        def step(x, y):
            gm = GradManager().attach(net.parameters())
            return training_step(gm, opt, lambda: F.cross_entropy(net(x), y))

        def run(i):
            if i == 2:
                opt.param_groups[0]["lr"] = 0.02
            return step(randn(6, 8, seed=i), _labels(6, 4, seed=i))

        return World(run, modules=[net], optimizers=[opt], traced=[step])

    world = check_against_eager(build, steps=4, compile=_xla)
    assert world.traced[0].cache_info().captures == 1


@pytest.mark.slow
@pytest.mark.parametrize("name, optimizer", [("cnn", "adamw"), ("gpt", "adam")])
def test_workload_steps_with_adam_and_adamw(name, optimizer):
    shapes = {"cnn": (4, 3, 16, 16), "gpt": (2, 16)}

    def batch(i):
        rng = np.random.default_rng([i, 3])
        if name == "gpt":
            tokens = rng.integers(0, 256, (2, 17)).astype(np.int32)
            return eg.tensor(tokens[:, :-1]), eg.tensor(tokens[:, 1:].reshape(-1))
        return (eg.tensor(rng.standard_normal(shapes[name]).astype(np.float32)),
                eg.tensor(rng.integers(0, NUM_CLASSES[name], 4).astype(np.int32)))

    def build(wrap):
        model = build_model(name)
        cls = optim.AdamW if optimizer == "adamw" else optim.Adam
        opt = cls(model.parameters(), lr=1e-3)
        gm = GradManager().attach(model.parameters())

        @wrap
        def step(x, y):
            return training_step(gm, opt, lambda: F.cross_entropy(model(x), y))

        def run(i):
            if i == 2:
                opt.param_groups[0]["lr"] = 5e-4
            return step(*batch(i))

        return World(run, modules=[model], optimizers=[opt], traced=[step])

    world = check_against_eager(build, steps=4, rtol=5e-5, atol=5e-5, compile=_xla)
    assert world.traced[0].cache_info().captures == 1


def test_gradient_manager_callbacks_scale_and_clip_like_eager():
    def build(wrap):
        net = M.Sequential(M.Linear(5, 8), M.Tanh(), M.Linear(8, 2))
        opt = optim.SGD(net.parameters(), lr=0.5, momentum=0.5)
        gm = GradManager().attach(net.parameters(), callbacks=[
            lambda p, g: g * 0.5, lambda p, g: F.clip(g, -0.02, 0.02)])

        @wrap
        def step(x):
            with gm:
                loss = (net(x) ** 2).mean()
                gm.backward(loss)
            grads = [p.grad for p in net.parameters()]
            opt.step().clear_grad()
            return loss, grads

        return World(lambda i: step(randn(4, 5, seed=i)), modules=[net], optimizers=[opt])

    check_against_eager(build, steps=3, compile=_xla)


@pytest.mark.slow
def test_dropout_in_the_step_is_bit_identical_and_differs_between_steps():
    def build(wrap):
        net = M.Sequential(M.Linear(6, 32), M.Dropout(0.5), M.ReLU(), M.Linear(32, 1))
        opt = optim.SGD(net.parameters(), lr=0.01)
        gm = GradManager().attach(net.parameters())

        @wrap
        def step(x):
            with gm:
                h = net[1](net[0](x))
                loss = net[3](F.relu(h)).sum()
                gm.backward(loss)
            opt.step().clear_grad()
            return h

        return World(lambda i: step(randn(3, 6)), modules=[net], optimizers=[opt])

    check_against_eager(build, steps=3, rtol=0, atol=0, compile=_xla)
    eg.random.seed(1)
    world = build(xla_trace)
    a, b = world.step(0).numpy(), world.step(1).numpy()
    assert not np.array_equal(a == 0, b == 0)


# ----- what is written back -----------------------------------------------------------------
def test_grads_left_set_and_arguments_updated_in_place_are_written_back():
    def build(wrap):
        w = eg.Parameter([1.0, -1.0, 0.5])
        gm = GradManager().attach([w])

        @wrap
        def step(x, count):
            with gm:
                gm.backward(((x * w) ** 2).sum())  # .grad accumulates across steps
            count[...] = count + 1
            return w.grad

        count = eg.zeros(())

        def run(i):
            return step(randn(3, seed=i), count)

        return World(run, tensors={"w": w, "count": count})

    check_against_eager(build, steps=3, compile=_xla)


def test_the_seed_guides_fused_softmax():
    def softmax(inp):
        offset = inp.max(axis=-1, keepdims=True).detach()
        cached = F.exp(inp - offset)
        down = F.sum(cached, axis=-1, keepdims=True)
        return cached / down

    xla_fused_softmax = xla_trace(softmax)
    inp = eg.tensor(np.random.randn(8, 10, 10))
    xla_fused_softmax(inp)
    np.testing.assert_allclose(xla_fused_softmax(inp).numpy(), softmax(inp).numpy(),
                               rtol=1e-6, atol=1e-7)


def test_the_seed_guides_train_func_with_the_manager_inside():
    def build(wrap):
        # No conv bias before BatchNorm: its gradient is zero up to round-off, which Adam
        # would normalize into full-size steps that differ between any two implementations.
        model = M.Sequential(M.Conv2d(1, 4, 3, bias=False), M.BatchNorm2d(4), M.ReLU(),
                             M.AdaptiveAvgPool2d(1), M.Flatten(), M.Linear(4, 3))
        optimizer = optim.Adam(model.parameters(), lr=0.01)

        def train_func(data, label, *, opt, net):
            gm = GradManager()
            gm.attach(net.parameters())
            with gm:
                logits = net(data)
                loss = F.loss.cross_entropy(logits, label)
                gm.backward(loss)
            opt.step().clear_grad()
            return loss

        train_func = wrap(train_func)

        def run(i):
            return train_func(randn(5, 1, 6, 6, seed=i), _labels(5, 3, seed=i), opt=optimizer,
                              net=model)

        return World(run, modules=[model], optimizers=[optimizer], traced=[train_func])

    world = check_against_eager(build, steps=4, compile=_xla, capture_as_const=True)
    assert world.traced[0].cache_info().captures == 1


def test_a_partial_trace_backbone_inside_a_step_is_part_of_it():
    def build(wrap):
        net, head = M.Linear(4, 6), M.Linear(6, 2)
        opt = optim.SGD(net.parameters() + head.parameters(), lr=0.1)
        backbone = partial_trace(lambda x: F.gelu(net(x)))
        gm = GradManager().attach(net.parameters() + head.parameters())

        @wrap
        def step(x):
            return training_step(gm, opt, lambda: (head(backbone(x)) ** 2).mean())

        return World(lambda i: step(randn(3, 4, seed=i)), modules=[net, head], optimizers=[opt])

    check_against_eager(build, steps=3, compile=_xla)


# ----- donation ---------------------------------------------------------------------------
def _sgd_world(donate=True):
    net = M.Sequential(M.Linear(4, 8), M.ReLU(), M.Linear(8, 2))
    opt = optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    gm = GradManager().attach(net.parameters())

    @xla_trace(donate=donate)
    def step(x):
        return training_step(gm, opt, lambda: (net(x) ** 2).mean())

    return net, opt, step


def test_parameters_and_optimizer_state_are_donated_without_copies():
    net, opt, step = _sgd_world()
    state = net.parameters() + [t for s in opt.state.values() for t in s.values()]
    for i in range(4):
        # (eg.read would hand the arrays out, and then they are copied, not donated; held
        # here so that their ids cannot be reused by the new arrays)
        old = [eg.hooks.data(t) for t in state]
        ids = [id(a) for a in old]
        step(randn(3, 4, seed=i))
        assert all(id(eg.hooks.data(t)) not in ids for t in state)  # new buffers everywhere
    entry = step._cache.most_recent()
    # parameters and momentum buffers (the RNG key is not read) donated, none copied
    assert len(entry.donated) == 8 and entry.copies == 0


def test_buffers_still_referenced_elsewhere_are_copied_not_destroyed():
    net, opt, step = _sgd_world()
    step(randn(3, 4))
    kept = net[0].weight.detach()  # shares the parameter's buffer
    raw = eg.read(net[2].bias)  # a raw array the user holds
    before = kept.numpy(), np.asarray(raw).copy()
    step(randn(3, 4, seed=1))
    np.testing.assert_array_equal(kept.numpy(), before[0])
    np.testing.assert_array_equal(np.asarray(raw), before[1])
    assert not np.array_equal(net[0].weight.numpy(), before[0])
    assert step._cache.most_recent().copies == 2


def test_without_donation_nothing_is_consumed():
    net, opt, step = _sgd_world(donate=False)
    step(randn(3, 4))
    old = [eg.read(p) for p in net.parameters()]
    step(randn(3, 4, seed=1))
    assert not any(a.is_deleted() for a in old)
    assert step._cache.most_recent().donated == ()


def test_a_wrong_batch_after_a_good_step_raises_and_loses_nothing():
    eg.random.seed(0)
    net, opt, step = _sgd_world()
    step(randn(3, 4))
    world = World(step=None, modules=[net], optimizers=[opt])
    before = snapshot(world)
    with pytest.raises(TypeError):
        step(randn(3, 5))  # the first Linear expects 4 features
    after = snapshot(world)
    for k in before:
        if before[k] is None:
            assert after[k] is None
        else:
            np.testing.assert_array_equal(after[k], before[k], err_msg=k)
    step(randn(3, 4, seed=2))  # the next valid step works
    assert all(np.isfinite(p.numpy()).all() for p in net.parameters())
    gc.collect()


def test_a_value_read_in_the_step_raises_and_loses_nothing():
    net = M.Linear(3, 1)
    opt = optim.SGD(net.parameters(), lr=0.1)
    w0 = net.weight.numpy()

    @xla_trace
    def step(x):
        gm = GradManager().attach(net.parameters())
        with gm:
            loss = net(x).sum()
            gm.backward(loss)
        opt.step()
        if loss > 0:
            return loss
        return -loss

    with pytest.raises(ValueReadError, match="if loss > 0"):
        step(eg.ones((2, 3)))
    np.testing.assert_array_equal(net.weight.numpy(), w0)
    assert net.weight.grad is None


# ----- guards and the outer tape -------------------------------------------------------------
def test_shapes_a_b_a_and_the_learning_rate_do_not_recompile_needlessly():
    net, opt, step = _sgd_world()
    for i, batch in enumerate((3, 5, 3, 5, 3)):
        opt.param_groups[0]["lr"] = 0.1 / (i + 1)
        step(randn(batch, 4, seed=i))
    info = step.cache_info()
    assert (info.captures, info.hits) == (2, 3)


def test_calling_a_step_under_a_recording_manager_with_attached_inputs_raises():
    net, opt, step = _sgd_world()
    outer = GradManager().attach(net.parameters())
    with outer, pytest.raises(NotDifferentiableError, match="partial_trace"):
        step(randn(3, 4))
    step(randn(3, 4))  # works outside
    x = eg.Parameter(randn(3, 4).numpy())
    with GradManager().attach([x]), pytest.raises(TraceError):
        step(x)


@pytest.mark.parametrize("compiled", [False, True])
def test_freezing_a_layer_between_steps_is_seen_by_a_compiled_step(compiled):
    """`requires_grad_(False)` after the step was compiled: the frozen layer gets no gradient
    and SGD with momentum and weight decay leaves it alone, exactly as in eager."""
    eg.random.seed(3)
    net = M.Sequential(M.Linear(3, 4), M.ReLU(), M.Linear(4, 2))
    opt = optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=0.01)
    gm = GradManager().attach(net.parameters())

    def step(x):
        return training_step(gm, opt, lambda: (net(x) ** 2).mean())

    run = _xla(step) if compiled else step
    run(randn(5, 3))
    net[0].requires_grad_(False)
    frozen = [p.numpy().copy() for p in net[0].parameters()]
    moving = net[2].weight.numpy().copy()
    run(randn(5, 3, seed=1))
    run(randn(5, 3, seed=2))
    for p, before in zip(net[0].parameters(), frozen):
        np.testing.assert_array_equal(p.numpy(), before)
    assert not np.allclose(net[2].weight.numpy(), moving)
    if compiled:
        assert run.cache_info().captures == 2


# ----- what the step must watch: late attachments, hyper-parameters -------------------------------
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
            loss = step(randn(5, 4, seed=i))
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

    train(randn(3, 4), write=False)  # eagerly: momentum buffers and .grad exist before the call
    world = World(lambda i: None, modules=[net], optimizers=[opt])
    before, lr = snapshot(world), opt.param_groups[0]["lr"]
    with pytest.raises(UnsupportedInRegionError) as info:
        xla_trace(train)(randn(3, 4, seed=1))
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
            return training_step(gm, opt, lambda: (net(x) ** 2).mean())

        def run(i):
            if i == 3:
                opt.param_groups[0]["lr"] = 0.3
            loss = step(randn(5, 4, seed=i))
            sched.step()
            return loss

        return World(run, modules=[net], optimizers=[opt], traced=[step])

    world = check_against_eager(build, steps=5, compile=_xla)
    assert world.traced[0].cache_info().captures == 1
