"""The first call of a region that breaks: its capture hands what it traced so far to the lazy
engine at the first break, wherever the break is, so the code before it runs once. Every run
is checked against the same code run eagerly."""

import logging

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import eager as eg
import eager.functional as F
import eager.module as M
import eager.optimizer as optim
from eager.autodiff import GradManager
from partial import exclude_from_trace, partial_trace, xla_trace
from partial import exclude_from_trace as eager_block
from tests.helpers import examples, labelled_batch, training_step

from .differential import World, check_against_eager, snapshot


def _log_mean(log, h):
    with eager_block():  # an alias, in a helper: nothing in the region's code names it
        log.append(round(h.mean().item(), 5))


class _Logging(M.Module):
    def __init__(self, log):
        super().__init__()
        self.log = log

    def forward(self, h):
        with exclude_from_trace():
            self.log.append(round(h.mean().item(), 5))
        return h


def _breaks(where, log):
    """A break of kind `where`, as a function of the tensor it looks at."""
    if where == "helper":
        return lambda h: (_log_mean(log, h), h)[1]
    if where == "module":
        return _Logging(log)
    if where == "value read":
        return lambda h: (log.append(bool(h.mean() > 0)), h)[1]
    raise ValueError(where)


@pytest.mark.parametrize("where", ["helper", "module", "value read"])
@pytest.mark.parametrize("compile", [partial_trace, xla_trace], ids=["partial", "xla"])
def test_the_code_before_the_first_break_runs_once_per_call(where, compile):
    def build(wrap):
        net = M.Sequential(M.Linear(8, 16), M.BatchNorm1d(16), M.ReLU(), M.Dropout(0.25),
                           M.Linear(16, 4))
        params = net.parameters()
        opt = optim.SGD(params, lr=0.05, momentum=0.9)
        gm = GradManager().attach(params)
        log, runs = [], []
        look = _breaks(where, log)

        def forward(x):
            runs.append(1)  # the Python before the break
            return net[3:](look(net[:3](x)))

        def train_step(x, y):  # the whole step, for xla_trace
            return training_step(gm, opt, lambda: F.cross_entropy(forward(x), y))

        if compile is xla_trace:
            step_fn = wrap(train_step)
        else:
            region = wrap(forward)

            def step_fn(x, y):
                return training_step(gm, opt, lambda: F.cross_entropy(region(x), y))

        def step(i):
            loss = step_fn(*labelled_batch((i, 5)))
            return loss, list(log), len(runs)

        return World(step, modules=[net], optimizers=[opt],
                     traced=[step_fn if compile is xla_trace else region])

    options = {"graph_breaks": True} if where == "value read" else {}
    world = check_against_eager(build, steps=4, compile=compile, **options)
    assert "first found" in world.traced[0].explain()


def test_a_failure_after_the_handover_leaves_the_state_as_before_the_call():
    net = M.Sequential(M.Linear(8, 8), M.BatchNorm1d(8), M.Dropout(0.5))
    box = M.Linear(8, 8)
    fail = [True]

    @partial_trace
    def f(x):
        h = net(x)  # rebinds the running statistics and the RNG key
        box.cached = h  # a module attribute written before the break
        with exclude_from_trace():
            if fail[0]:
                raise ValueError("in the block")
        return h * 2

    world = World(lambda i: None, modules=[net])
    before = snapshot(world)
    x = labelled_batch((0, 5))[0]
    with pytest.raises(ValueError, match="in the block"):
        f(x)
    after = snapshot(world)
    for k, v in before.items():
        np.testing.assert_array_equal(after[k], v, err_msg=k)
    fail[0] = False
    out = f(x)
    assert out.shape == (6, 8) and np.isfinite(out.numpy()).all()


def test_arguments_their_aliases_and_no_grad_across_the_handover():
    def build(wrap):
        lin = M.Linear(8, 8)
        x = eg.tensor(np.linspace(-1, 1, 48, dtype=np.float32).reshape(6, 8))
        gm = GradManager().attach(lin.parameters())
        log = []

        def region(x):
            d = x.detach()  # an alias of the argument, held across the break
            with eg.no_grad():  # spans the break: nothing in it records
                h = lin(x)
                with exclude_from_trace():
                    log.append(round(h.sum().item(), 4))
                h2 = lin(h)
            y = lin(x) * 2 + h2 + d
            x[0] = y[0].detach()  # the argument is written after the break
            return y

        f = wrap(region)

        def step(i):
            with gm:
                y = f(x)
                gm.backward((y * y).sum())
            grads = [p.grad for p in lin.parameters()]
            for p in lin.parameters():
                p.grad = None
            return y, grads, list(log)

        return World(step, modules=[lin], tensors={"x": x}, traced=[f])

    check_against_eager(build, steps=3)


def test_an_xla_trace_step_breaking_after_backward_runs_its_python_once(caplog):
    net = M.Linear(8, 4)
    opt = optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    runs, seen, grads = [], [], []

    def step(x, y):
        runs.append(1)
        gm = GradManager().attach(net.parameters())
        with gm:
            loss = F.cross_entropy(net(x), y)
            gm.backward(loss)  # the capture replays this at the handover
        g = net.weight.grad
        with exclude_from_trace():
            seen.append(loss.item())
            grads.append(g.numpy().copy())
        opt.step().clear_grad()
        return loss

    compiled = xla_trace(step)
    with caplog.at_level(logging.WARNING, logger="partial"):
        for i in range(3):
            compiled(*labelled_batch((i, 5)))
    assert len(runs) == 3 and len(seen) == 3
    assert "ran twice" not in caplog.text


@pytest.mark.slow
@pytest.mark.parametrize("pattern", ["accumulate", "two steps", "two managers"])
def test_a_step_with_several_backwards_before_its_break_runs_its_python_once(pattern, caplog):
    """Gradient accumulation over micro-batches, or several optimizer steps in one call: every
    backward before the first break is replayed at the handover, in order."""
    runs = []

    def build(wrap):
        # no bias before BatchNorm: its gradient is 0 up to rounding, which Adam scales to lr-sized
        # steps, so eager and compiled rounding differences (on a GPU) would move it apart
        net = M.Sequential(M.Linear(8, 16, bias=False), M.BatchNorm1d(16), M.ReLU(),
                           M.Linear(16, 4))
        params = net.parameters()
        opt = optim.Adam(params, lr=0.01)
        gms = [GradManager().attach(params)]
        if pattern == "two managers":
            gms.append(GradManager().attach(params[-2:]))  # the head only
        log = []

        def train_step(x, y):
            runs.append(1)
            for k, half in enumerate((slice(0, 3), slice(3, 6))):
                gm = gms[k % len(gms)]
                with gm:
                    loss = F.cross_entropy(net(x[half]), y[half])
                    gm.backward(loss * 0.5)
                if pattern != "accumulate":
                    opt.step().clear_grad()
            g = params[0].grad if pattern == "accumulate" else loss
            _log_mean(log, g)  # the first break, after every backward
            if pattern == "accumulate":
                opt.step().clear_grad()
            return loss

        step_fn = wrap(train_step)
        return World(lambda i: (step_fn(*labelled_batch((i, 5))), list(log)), modules=[net],
                     optimizers=[opt], traced=[step_fn])

    with caplog.at_level(logging.WARNING, logger="partial"):
        check_against_eager(build, steps=3, compile=xla_trace)
    assert len(runs) == 3 + 3  # each call ran its Python once, compiled and eagerly
    assert "ran twice" not in caplog.text


def test_a_parameter_updated_in_a_stretch_and_used_again_gets_its_gradient():
    """Two optimizer steps between breaks: the second forward reads parameters the first
    step updated lazily, and their gradients must reach them (not the placeholder)."""
    def build(wrap):
        net = M.Linear(8, 4)
        opt = optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        gm = GradManager().attach(net.parameters())
        log = []

        def train_step(x, y):
            _log_mean(log, x)  # breaks at once: the rest runs lazily
            for _ in range(2):
                with gm:
                    gm.backward(F.cross_entropy(net(x), y))
                opt.step().clear_grad()
            return net.weight * 1

        step_fn = wrap(train_step)
        return World(lambda i: step_fn(*labelled_batch((i, 5))), modules=[net], optimizers=[opt],
                     traced=[step_fn])

    check_against_eager(build, steps=3, compile=xla_trace)


@pytest.mark.parametrize("compile", [partial_trace, xla_trace], ids=["partial", "xla"])
def test_tensors_made_from_plain_values_before_the_break_are_handed_over(compile, caplog):
    """`eg.zeros`, `eg.tensor([...])`, `eg.arange` inside a region are tracers to the capture;
    at the handover they become the constants eager code would have made."""
    def build(wrap):
        net = M.Linear(8, 4)
        log, runs = [], []

        def region(x):
            runs.append(1)
            weights = eg.tensor([1.0, 2.0, 3.0, 4.0])
            scale = weights + eg.arange(4) * 0.5
            bias = eg.zeros(4) + eg.full((4,), 0.25) + eg.eye(4)[0] + eg.ones_like(scale)
            h = net(x) * scale + bias
            _log_mean(log, h)
            log.append(float(weights.numpy().sum()))  # made from plain values: readable
            return h * 2

        f = wrap(region)
        gm = GradManager().attach(net.parameters())
        opt = optim.SGD(net.parameters(), lr=0.1)

        def step(i):
            with gm:
                out = f(labelled_batch((i, 5))[0])
                gm.backward((out * out).mean())
            opt.step().clear_grad()
            return out, list(log), len(runs)

        return World(step, modules=[net], optimizers=[opt], traced=[f])

    # The loss grows: by step 2 outputs reach 270, and jax 0.12's compiled update rounds
    # differently from eager's (8e-5 on an element near 3 that cancels large terms: 3e-7 of the
    # outputs' scale), so the absolute tolerance follows that scale.
    with caplog.at_level(logging.WARNING, logger="partial"):
        check_against_eager(build, steps=3, compile=compile, atol=1e-4)
    assert "ran twice" not in caplog.text


def test_a_frozen_batchnorm_is_handed_over_and_later_calls_reuse_its_stretch(caplog):
    """A frozen BatchNorm (MegEngine's `freeze=True`, a detector backbone's) normalizes with
    `weight.detach()`: the cut of a lifted parameter's real array, which the handover takes as
    the stretch's input. A tensor made in the region and then written into (an image padded
    by `setitem`) is not an output of the stretch, so the second call, recorded lazily, is
    the same piece as the handed-over first one: nothing compiles again."""
    def build(wrap):
        net = M.Sequential(M.Conv2d(3, 4, 3), M.BatchNorm2d(4, freeze=True), M.ReLU())
        log = []

        def pad(x):
            padded = eg.zeros((2, 3, 10, 10))
            padded[:, :, :8, :8] = x
            return padded

        def region(x):
            h = net(pad(x))  # the padded image is gone by the break
            log.append(bool(h.mean() > 0))  # a value read: the break
            return h * 2

        f = wrap(region)
        gm = GradManager().attach(net.parameters())
        opt = optim.SGD(net.parameters(), lr=0.1)

        def step(i):
            x = eg.tensor(np.random.default_rng(i).normal(size=(2, 3, 8, 8)).astype("float32"))
            with gm:
                out = f(x)
                gm.backward((out * out).mean())
            opt.step().clear_grad()
            return out, list(log)

        return World(step, modules=[net], optimizers=[opt], traced=[f])

    with caplog.at_level(logging.WARNING, logger="partial"):
        world = check_against_eager(build, steps=3, compile=partial_trace, graph_breaks=True)
    assert "ran twice" not in caplog.text
    info = world.traced[0].cache_info()
    assert info.captures == 2 and info.segments == 2, info  # the stretches of the first call


def test_a_capture_that_cannot_be_handed_over_runs_the_call_again_lazily(monkeypatch, caplog):
    """The fallback for a log the handover cannot describe: the call starts again with graph
    breaks, says that its Python before the break ran twice, and matches eager."""
    from partial.lazy import Handover

    monkeypatch.setattr(Handover, "__call__", lambda self, cap, what, where: "an undescribable op")

    def build(wrap):
        net = M.Sequential(M.Linear(8, 16), M.BatchNorm1d(16), M.ReLU(), M.Linear(16, 4))
        log = []

        def region(x):
            h = net(x)
            _log_mean(log, h)
            return h

        f = wrap(region)
        return World(lambda i: (f(labelled_batch((i, 5))[0]), list(log)), modules=[net], traced=[f])

    with caplog.at_level(logging.WARNING, logger="partial"):
        world = check_against_eager(build, steps=3)
    assert "after an undescribable op" in caplog.text and "ran twice in this call" in caplog.text
    assert world.traced[0].cache_info().breaks


# ----- random regions: state, no_grad, detach and a break anywhere ----------------------------
class _Net(M.Module):
    def __init__(self):
        super().__init__()
        self.lin = M.Linear(4, 4)
        self.bn = M.BatchNorm1d(4)
        self.drop = M.Dropout(0.3)
        self.acc = eg.zeros(4)  # a module tensor the region writes in place


def _no_grad_branch(net, h):
    with eg.no_grad():
        side = net.lin(h)
    return h + side


def _accumulate(net, h):
    net.acc[:] = net.acc * 0.5 + h.mean(axis=0).detach()
    return h + net.acc


STEPS = {
    "lin": lambda net, h: net.lin(h),
    "relu": lambda net, h: F.relu(h),
    "bn": lambda net, h: net.bn(h),
    "drop": lambda net, h: net.drop(h),
    "detach": lambda net, h: h.detach() * 0.5 + h,
    "no_grad": _no_grad_branch,
    "acc": _accumulate,
}


def _region(net, steps, at, kind, log, runs):
    def region(x):
        runs.append(1)
        h = x
        for i, name in enumerate(steps):
            if i == at:
                if kind == "read":
                    h = h * 2 if h.mean() > 0 else h  # a value read (graph_breaks=True)
                else:
                    _log_mean(log, h)
            h = STEPS[name](net, h)
        return h

    return region


@pytest.mark.slow  # long random runs: .ci/run runs them after the README's command
@examples(20)
@given(steps=st.lists(st.sampled_from(sorted(STEPS)), min_size=1, max_size=6),
       at=st.integers(0, 5), kind=st.sampled_from(["block", "read"]))
def test_random_regions_that_break_match_eager_from_the_first_call(steps, at, kind):
    at = at % len(steps)

    def build(wrap):
        net = _Net()
        log, runs = [], []
        f = wrap(_region(net, steps, at, kind, log, runs))
        params = net.parameters()
        gm = GradManager().attach(params)
        opt = optim.SGD(params, lr=0.1, momentum=0.9)

        def step(i):
            x = labelled_batch((i, 5))[0][:, :4]
            with gm:
                out = f(x)
                gm.backward((out * out).mean())
            grads = [p.grad for p in params]
            opt.step().clear_grad()
            return out, grads, list(log), len(runs)

        return World(step, modules=[net], optimizers=[opt], tensors={"acc": net.acc},
                     traced=[f])

    options = {"graph_breaks": True} if kind == "read" else {}
    check_against_eager(build, steps=3, rtol=1e-4, atol=1e-4, **options)  # (as below)


@pytest.mark.slow
@examples(15)
@given(steps=st.lists(st.sampled_from(sorted(STEPS)), min_size=1, max_size=5),
       at=st.integers(0, 6), kind=st.sampled_from(["block", "read"]),
       adam=st.booleans(), micro=st.sampled_from([1, 1, 2]), step_each=st.booleans())
def test_random_xla_steps_breaking_before_or_after_backward_match_eager(steps, at, kind, adam,
                                                                      micro, step_each):
    """`micro` backwards per call (gradient accumulation), with an optimizer step after each
    or once at the end; the break comes anywhere in the first forward, or after them all."""
    at = min(at, len(steps))  # len(steps): the break comes after every gm.backward

    def build(wrap):
        net = _Net()
        log, runs = [], []
        params = net.parameters()
        gm = GradManager().attach(params)
        opt = optim.Adam(params, lr=0.01) if adam else optim.SGD(params, lr=0.1, momentum=0.9)
        bodies = [_region(net, steps, at if k == 0 else -1, kind, log, []) for k in range(micro)]

        def train_step(x):
            runs.append(1)
            for body in bodies:
                with gm:
                    out = body(x)
                    loss = (out * out).mean()
                    gm.backward(loss)
                if step_each:
                    opt.step().clear_grad()
            if at == len(steps):
                seen = net.lin.weight.grad if "lin" in steps and not step_each else loss
                if kind == "read":
                    log.append(bool(seen.mean() > 0))
                else:
                    _log_mean(log, seen)
            opt.step().clear_grad()
            return out

        step_fn = wrap(train_step)

        def step(i):
            out = step_fn(labelled_batch((i, 5))[0][:, :4])
            return out, list(log), len(runs)

        return World(step, modules=[net], optimizers=[opt], tensors={"acc": net.acc},
                     traced=[step_fn])

    options = {"graph_breaks": True} if kind == "read" else {}
    # BatchNorm over 6 rows of a tensor written in place several times amplifies the rounding
    # of fused reductions to ~2e-5; a wrong replay is off by 1e-2 or more.
    check_against_eager(build, steps=3, compile=xla_trace, rtol=1e-4, atol=1e-4, **options)


def test_an_xla_trace_step_breaking_after_backward_matches_eager():
    def build(wrap):
        # no bias before BatchNorm: its gradient is 0 up to rounding, which Adam scales to lr-sized
        # steps, so eager and compiled rounding differences (on a GPU) would move it apart
        net = M.Sequential(M.Linear(8, 16, bias=False), M.BatchNorm1d(16), M.ReLU(), M.Dropout(0.2),
                           M.Linear(16, 4))
        params = net.parameters()
        opt = optim.Adam(params, lr=0.01)
        gm = GradManager().attach(params)
        log = []

        def train_step(x, y):
            with gm:
                loss = F.cross_entropy(net(x), y)
                gm.backward(loss)
            _log_mean(log, loss)  # the break comes after backward: replayed at the handover
            opt.step().clear_grad()
            return loss

        step_fn = wrap(train_step)
        return World(lambda i: (step_fn(*labelled_batch((i, 5))), list(log)), modules=[net],
                     optimizers=[opt], traced=[step_fn])

    check_against_eager(build, steps=3, compile=xla_trace)
