"""Graph breaks: `exclude_from_trace()` blocks and, with `graph_breaks=True`, value reads split a
region into compiled segments around eager code. Every run is checked against the same code run
eagerly: outputs, parameters, `.grad`, buffers, optimizer state and the RNG key."""

import gc
import weakref

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import eager as eg
import eager.functional as F
import eager.module as M
import eager.optimizer as optim
from eager.autodiff import Function, GradManager
from partial import (
    InvalidTensorError,
    UnsupportedInRegionError,
    ValueReadError,
    exclude_from_trace,
    partial_trace,
    xla_trace,
)
from partial import exclude_from_trace as keep_eager  # a block under another name
from tests.helpers import examples, labelled_batch

from .differential import World, assert_all_close, check_against_eager


def _train(region_of, *, opt=optim.SGD, steps_kw=None):
    """A World training `net` whose forward is `region_of(net, log)` (wrapped), with an eager
    cross-entropy head and the optimizer stepping outside the region."""

    def build(wrap):
        net = M.Sequential(M.Linear(8, 16), M.BatchNorm1d(16), M.ReLU(), M.Dropout(0.25),
                           M.Linear(16, 16), M.ReLU(), M.Dropout(0.25), M.Linear(16, 4))
        log: list = []
        region = wrap(region_of(net, log))
        params = net.parameters()
        gm = GradManager().attach(params)
        o = opt(params, lr=0.05, **(steps_kw or {}))

        def step(i):
            x, y = labelled_batch((i, 11))
            with gm:
                logits, masks = region(x)
                loss = F.cross_entropy(logits, y)
                gm.backward(loss)
            grads = [p.grad for p in params]
            o.step().clear_grad()
            return loss, grads, masks, list(log)

        return World(step, modules=[net], optimizers=[o], traced=[region])

    return build


def _mask(t):
    return t == 0  # where dropout zeroed: compared exactly


def test_one_excluded_block_with_dropout_on_both_sides_matches_eager():
    def region_of(net, log):
        first, second = net[:4], net[4:]

        def forward(x):
            h = first(x)
            with exclude_from_trace():
                scale = 1.0 + abs(h.mean().item())  # a real value, on every call
                log.append(round(scale, 4))
                h = h * scale  # eager op: gradients flow through it
            out = second(h)
            return out, (_mask(h), _mask(second[:3](h)))

        return forward

    world = check_against_eager(_train(region_of, steps_kw={"momentum": 0.9}), steps=4)
    info = world.traced[0].cache_info()
    assert (info.segments, info.captures) == (2, 2)
    assert len(info.breaks) == 1 and "exclude_from_trace() at tests" in info.breaks[0]
    assert "test_breaks.py:" in info.breaks[0]


def test_two_excluded_blocks_and_eager_control_flow_match_eager():
    def region_of(net, log):
        def forward(x):
            h = net[:3](x)
            with exclude_from_trace():
                log.append(float(h.max().item()))
            h = net[3:6](h)
            with exclude_from_trace():
                if h.abs().max().item() > 1.0:  # data-dependent Python
                    h = h / 2
                log.append(h.shape[0])
            return net[6:](h), _mask(h)

        return forward

    world = check_against_eager(_train(region_of, opt=optim.Adam), steps=4)
    assert world.traced[0].cache_info().segments == 3


def test_value_reads_with_graph_breaks_take_data_dependent_branches_like_eager():
    def region_of(net, log):
        def forward(x):
            h = net[:4](x)
            if h.mean() > 0.415:  # a break: the branch is taken on the real value
                log.append("big")
                h = net[4](h) * 0.5
            else:
                log.append("small")
                h = net[4](h)
            h = net[5:](h)
            return h, _mask(h)

        return forward

    world = check_against_eager(_train(region_of), steps=6, graph_breaks=True)
    assert {"big", "small"} <= set(world.step(6)[3])
    fn = world.traced[0]
    captures = fn.cache_info().captures
    assert captures == 3  # the stretch before the read, and one per branch
    for i in range(7, 10):
        world.step(i)
    assert fn.cache_info().captures == captures
    assert fn.cache_info().breaks[0].startswith("bool() at ")


def test_xla_trace_step_with_an_excluded_logging_block_matches_eager():
    def build(wrap):
        # no bias before BatchNorm: its gradient is 0 up to rounding, which Adam scales to lr-sized
        # steps, so eager and compiled rounding differences (on a GPU) would move it apart
        net = M.Sequential(M.Linear(8, 16, bias=False), M.BatchNorm1d(16), M.ReLU(), M.Dropout(0.2),
                           M.Linear(16, 4))
        params = net.parameters()
        opt = optim.Adam(params, lr=0.01)
        log: list = []

        def train_step(x, y):
            gm = GradManager().attach(params)
            pre = net[0](x).sum()  # before recording: no gradient from here
            with gm:
                loss = F.cross_entropy(net(x), y) + 0 * pre
                with exclude_from_trace():
                    log.append(round(loss.item(), 5))
                gm.backward(loss)
            opt.step().clear_grad()
            return loss

        step_fn = wrap(train_step)

        def step(i):
            loss = step_fn(*labelled_batch((i, 11)))
            return loss, list(log)

        return World(step, modules=[net], optimizers=[opt], traced=[step_fn])

    world = check_against_eager(build, steps=4, compile=xla_trace)
    assert world.traced[0].cache_info().segments == 2


def test_an_excluded_block_runs_once_per_call_and_sequences_compile_once():
    runs = {"block": 0, "body": 0}
    net = M.Sequential(M.Linear(8, 8), M.ReLU())

    @partial_trace
    def f(x):
        runs["body"] += 1
        h = net(x)
        with exclude_from_trace():
            runs["block"] += 1
        return h * 2

    x, _ = labelled_batch((0, 11))
    for n in range(1, 6):
        f(x)
        assert runs["block"] == n
    assert runs["body"] == 5  # its code names exclude_from_trace: lazy from the first call
    info = f.cache_info()
    assert (info.captures, info.hits, info.entries) == (2, 8, 2)
    assert len(f.segments()) == 2 and f.segments()[0].forward().cost_analysis() is not None
    with pytest.raises(LookupError, match="graph breaks"):
        f.flat_inputs(x)


def test_a_region_without_breaks_keeps_the_fast_path():
    runs = []

    @partial_trace(graph_breaks=True)
    def f(x):
        runs.append(1)
        return (x * 2).sum()

    for _ in range(3):
        f(eg.ones(4))
    assert len(runs) == 1
    info = f.cache_info()
    assert (info.segments, info.breaks, info.captures, info.hits) == (1, (), 1, 2)
    assert "without graph breaks" in f.explain()


def test_explain_reports_segments_and_break_lines():
    @partial_trace(graph_breaks=True)
    def f(x):
        with exclude_from_trace():
            pass
        h = x * 2
        if h.sum() > 0:
            return h + 1
        return h

    f(eg.ones(3))
    text = f.explain()
    assert "the last call ran 2 segments" in text
    assert "no ops, then exclude_from_trace() at tests" in text
    assert "3 ops (compiled), then bool() at tests" in text  # x * 2, sum, > 0
    assert "then the end of the region" in text
    f(eg.ones(3))
    assert "3 ops (cached)" in f.explain()


def test_value_reads_outside_blocks_still_raise_by_default():
    w = eg.Parameter(np.ones(3, np.float32))

    @partial_trace
    def f(x):
        h = x * w
        with exclude_from_trace():
            pass
        if h.sum() > 0:  # not inside the block, and graph_breaks is off
            return h
        return -h

    with pytest.raises(ValueReadError, match=r"test_breaks.py:\d+: `if h.sum\(\) > 0:"):
        f(eg.ones(3))
    with pytest.raises(ValueReadError, match="graph_breaks=True"):
        f(eg.ones(3))


def test_a_failed_call_leaves_state_as_it_was():
    net = M.Sequential(M.Linear(4, 4), M.BatchNorm1d(4), M.Dropout(0.5))
    opt = optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    kept = []

    @xla_trace(graph_breaks=True)
    def step(x, fail):
        gm = GradManager().attach(net.parameters())
        with gm:
            loss = net(x).sum()
            if loss > -1e9:  # a break: the forward segment runs here
                gm.backward(loss)
        opt.step()
        h = net(x)
        kept.append(h)
        if fail:
            raise RuntimeError("boom")
        return h

    x = eg.tensor(np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32))
    step(x, False)
    before = [t.numpy() for t in net.parameters() + net.buffers()]
    grads = [p.grad.numpy() for p in net.parameters()]
    slots = [t.numpy() for s in opt.state.values() for t in s.values()]
    key = eg.random.get_state().numpy()
    with pytest.raises(RuntimeError, match="boom"):
        step(x, True)
    for a, b in zip(before, [t.numpy() for t in net.parameters() + net.buffers()]):
        np.testing.assert_array_equal(a, b)
    for a, p in zip(grads, net.parameters()):
        np.testing.assert_array_equal(a, p.grad.numpy())
    for a, b in zip(slots, [t.numpy() for s in opt.state.values() for t in s.values()]):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(key, eg.random.get_state().numpy())
    with pytest.raises(InvalidTensorError):
        kept[-1] + 1
    assert step(x, False).shape == (3, 4)


def test_detach_and_no_grad_inside_a_region_with_breaks_cut_gradients_like_eager():
    def build(wrap):
        lin = M.Linear(4, 4)
        w = eg.Parameter(np.full((4,), 0.5, np.float32))
        gm = GradManager().attach(lin.parameters() + [w])

        def region(x):
            h = lin(x)
            d = h.detach() * w
            with eg.no_grad():
                n = h * 3
            with exclude_from_trace():
                pass
            return (h * d + n * w).sum()

        f = wrap(region)

        def step(i):
            x, _ = labelled_batch((i, 11), (3, 4))
            with gm:
                loss = f(x)
                gm.backward(loss)
            out = [loss, w.grad] + [p.grad for p in lin.parameters()]
            for p in lin.parameters() + [w]:
                p.grad = None
            return out

        return World(step, modules=[lin], tensors={"w": w})

    check_against_eager(build, steps=2)


def test_traced_functions_nest_in_regions_and_blocks():
    lin = M.Linear(4, 4)
    inner = partial_trace(lambda x: lin(x) * 2)

    @partial_trace
    def outer(x):
        h = inner(x)  # recorded into the outer region's stretch
        with exclude_from_trace():
            g = inner(h)  # an ordinary compiled call
        return g + h

    x, _ = labelled_batch((0, 11), (2, 4))
    want = (lambda h: inner._fn(h) + h)(inner._fn(x))
    for _ in range(2):
        np.testing.assert_allclose(outer(x).numpy(), want.numpy(), rtol=1e-6)
    assert inner.cache_info().hits >= 1


def test_custom_functions_run_only_inside_excluded_blocks():
    class Double(Function):
        def forward(self, x):
            return x * 2

        def backward(self, dy):
            return dy * 2

    @partial_trace(graph_breaks=True)
    def bad(x):
        h = x + 1
        if h.sum() > 0:
            return Double()(h)
        return h

    with pytest.raises(UnsupportedInRegionError, match="exclude_from_trace"):
        bad(eg.ones(2))

    w = eg.Parameter([1.0, 2.0])
    gm = GradManager().attach([w])

    @partial_trace
    def good(x):
        h = x * w
        with exclude_from_trace():
            h = Double()(h)
        return h.sum()

    with gm:
        loss = good(eg.ones(2))
        gm.backward(loss)
    assert loss.item() == 6.0 and w.grad.numpy().tolist() == [2.0, 2.0]


def test_backward_inside_a_partial_trace_region_with_breaks_is_refused():
    w = eg.Parameter([1.0])
    gm = GradManager().attach([w])

    @partial_trace
    def f(x):
        with exclude_from_trace():
            pass
        loss = (x * w).sum()
        gm.backward(loss)
        return loss

    with gm, pytest.raises(UnsupportedInRegionError, match="xla_trace"):
        f(eg.ones(1))


def test_new_shapes_compile_new_segments_and_cache_clear_starts_over():
    runs = []

    @partial_trace
    def f(x):
        runs.append(1)
        h = x * 2
        with exclude_from_trace():
            pass
        return h + 1

    f(eg.ones(3))
    f(eg.ones(3))
    assert f.cache_info().captures == 2
    f(eg.ones(5))
    assert f.cache_info().captures == 4
    f.cache_clear()
    assert f.cache_info().entries == 0
    runs.clear()
    np.testing.assert_array_equal(f(eg.ones(3)).numpy(), [3.0, 3.0, 3.0])
    assert len(runs) == 1


def test_arrays_of_pending_tensors_handed_to_jax_or_numpy_say_why_they_fail():
    @partial_trace
    def f(x, use_numpy):
        h = x * 2
        with exclude_from_trace():
            pass
        a = eg.read(h * 1)
        return np.asarray(a) if use_numpy else jnp.sin(a)

    with pytest.raises(ValueReadError, match="exclude_from_trace"):
        f(eg.ones(2), True)
    with pytest.raises(TypeError, match="gets its value at the next break"):
        f(eg.ones(2), False)


# ----- random programs with breaks --------------------------------------------------------------
UNARY = ["tanh", "sin", "exp", "neg"]
BINARY = ["add", "mul", "sub"]

op = st.one_of(
    st.tuples(st.just("unary"), st.sampled_from(UNARY), st.integers(0, 9), st.integers(0, 9)),
    st.tuples(st.just("binary"), st.sampled_from(BINARY), st.integers(0, 9), st.integers(0, 9)),
    st.tuples(st.just("break"), st.sampled_from(["scale", "read", "none"]), st.integers(0, 9),
              st.integers(0, 9)),
)


def _program(steps, w, c):
    def run(x):
        values = [x, w, c]
        for kind, name, i, j in steps:
            a, b = values[i % len(values)], values[j % len(values)]
            if kind == "unary":
                values.append(eg.apply(eg.OPS[name], eg.apply(eg.OPS["tanh"], a)))
            elif kind == "binary":
                values.append(eg.apply(eg.OPS[name], a, b))
            else:
                with exclude_from_trace():
                    if name == "scale":
                        values.append(a * 1.5)
                    elif name == "read":
                        values.append(a if a.sum().item() > 0 else -a)
        return values[-1], values[-2]

    return run


@examples(15)
@given(steps=st.lists(op, min_size=1, max_size=8), seed=st.integers(0, 2**16))
def test_random_programs_with_breaks_match_eager_values_and_gradients(steps, seed):
    rng = np.random.default_rng(seed)
    data = [rng.uniform(-2, 2, (3, 4)).astype(np.float32) for _ in range(3)]
    cotangent = eg.tensor(rng.standard_normal((3, 4)).astype(np.float32))
    results = []
    for wrap in (lambda f: f, partial_trace):
        x, w, c = eg.Parameter(data[0]), eg.Parameter(data[1]), eg.tensor(data[2])
        f = wrap(_program(steps, w, c))
        gm = GradManager().attach([x, w])
        for _ in range(2):  # the second call runs from the cache
            x.grad = w.grad = None
            with gm:
                out, prev = f(x)
                gm.backward([out, prev], [cotangent, cotangent])
        results.append([t.numpy() for t in (out, prev)] +
                       [None if t.grad is None else t.grad.numpy() for t in (x, w)])
    assert_all_close(results[1], results[0])


def test_python_scalars_are_inputs_of_segments_not_constants():
    @partial_trace(graph_breaks=True)
    def f(x, k):
        h = x * k
        if h.sum() > 0:
            return h
        return -h

    assert f(eg.ones(2), 2.0).numpy().tolist() == [2.0, 2.0]
    assert f(eg.ones(2), 3.0).numpy().tolist() == [3.0, 3.0]
    assert (f.cache_info().captures, f.cache_info().hits) == (1, 1)


def _split(**options):
    """`x * 2`, a break, `+ 1`: a region of two one-op stretches."""

    @partial_trace(**options)
    def f(x):
        h = x * 2
        with exclude_from_trace():
            pass
        return h + 1

    return f


def test_recompiling_a_stretch_past_the_limit_warns_with_its_start(caplog):
    f = _split(recompile_limit=2)

    with caplog.at_level("WARNING", logger="partial"):
        for n in (1, 2, 3):
            f(eg.ones(n))
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2  # the third shape, for each of the two stretches
    assert "segment 1 of `f` (starting at the start of the region)" in warnings[0]
    assert "segment 2 of `f` (starting at exclude_from_trace() at tests" in warnings[1]


def test_segments_share_the_cache_bound():
    f = _split(cache_size=3)

    for n in (1, 2, 3, 1):
        f(eg.ones(n))
    info = f.cache_info()
    assert info.entries == 3 and info.captures == 8  # shape 1 was dropped, and compiled again


def test_a_break_found_deeper_hands_the_capture_over_and_runs_lazily_after():
    runs = []

    class Logged(M.Module):
        def __init__(self):
            super().__init__()
            self.lin = M.Linear(3, 3)
            self.means = []

        def forward(self, x):
            h = self.lin(x)
            with exclude_from_trace():
                self.means.append(h.mean().item())
            return h

    inner = Logged()

    def region(x):  # its own code does not name exclude_from_trace
        runs.append(1)
        return inner(x) * 2

    f = partial_trace(region)
    for _ in range(3):
        f(eg.ones((2, 3)))
    assert len(runs) == 3  # the first call's capture went on lazily at the block
    assert len(inner.means) == 3
    assert "first found: exclude_from_trace() at tests" in f.explain()
    assert f.cache_info().captures == 2  # the later calls reuse what the first compiled

    module = Logged()
    traced_module = partial_trace(module)
    traced_module(eg.ones((2, 3)))
    assert len(module.means) == 1
    assert "first found: exclude_from_trace() at tests" in traced_module.explain()


# ----- the Python before a block, whatever the block is called ------------------------------------
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


@pytest.mark.parametrize("ends", ["with a break", "with an error"])
def test_a_capture_that_raises_lets_go_of_the_arrays_it_lifted(ends):
    """A capture leaves `jax.make_jaxpr` by an exception when the region breaks (the rest of
    the call runs lazily) or fails; jax keeps such a trace, and every array lifted into it,
    for good unless the capture releases it. The parameter's old array must die once the
    parameter holds another."""
    w = eg.Parameter(np.ones((3, 3), np.float32))
    old = weakref.ref(eg.read(w))

    @partial_trace(graph_breaks=True)
    def f(x):
        y = F.matmul(x, w)
        if ends == "with an error":
            raise KeyError("the region's own error")
        return y * 2 if y.sum() > 0 else y

    try:
        f(eg.ones((2, 3)))
    except KeyError:
        assert ends == "with an error"
    w.set_value(np.zeros((3, 3), np.float32))
    gc.collect()
    assert old() is None
