"""`megengine.jit`: `partial_trace` (segment mode: compiled regions inside eager code), `xla_trace`
(whole-step mode) and the classic `trace(symbolic=True)`: results equal eager ones on every call,
in-place updates are written back, GradManager callbacks, RNG and state."""

import functools as ft

import numpy as np
import pytest

import eager as mge
import eager.functional as F
import eager.module as M
import eager.optimizer as optim
from eager.autodiff import GradManager
from partial import exclude_from_trace, partial_trace, trace, xla_trace


def test_partial_trace_writes_inplace_updates_of_arguments_back():
    @partial_trace(backend="xla")
    def inc(a, b):
        a += 1
        b[...] = b + 1

    inc(mge.tensor([0.0]), mge.tensor([0.0]))          # the tracing call
    a, b = mge.tensor([1.0]), mge.tensor([2.0])
    inc(a, b)
    np.testing.assert_array_equal(a.numpy(), [2.0])
    np.testing.assert_array_equal(b.numpy(), [3.0])


class AB(M.Module):
    def __init__(self):
        super().__init__()
        self.a = mge.Parameter([1.0])
        self.b = mge.Parameter([2.0])

    def forward(self, x):
        return F.exp(x * self.a + x / self.b)


def test_partial_trace_segment_between_eager_code():
    net = AB()
    fwd = ft.partial(partial_trace(func=type(net).forward, backend="xla"), net)
    gm = GradManager().attach(net.parameters())

    @partial_trace(backend="xla")
    def combine(a, b):                                   # forward only
        return a * b + a / b

    e = np.exp(4.5)                                      # x = 3: 3 * 1 + 3 / 2
    for _ in range(3):
        with gm:
            y = fwd(mge.tensor([1.0]) * 3) * 2
            gm.backward(y)
        ga, gb = 2 * e * 3, 2 * e * (-3 / 4)
        np.testing.assert_allclose(y.numpy(), [2 * e], rtol=1e-5)
        np.testing.assert_allclose(net.a.grad.numpy(), [ga], rtol=1e-5)
        np.testing.assert_allclose(net.b.grad.numpy(), [gb], rtol=1e-5)
        out = combine(net.a.grad, net.b.grad)
        np.testing.assert_allclose(out.numpy(), [ga * gb + ga / gb], rtol=1e-5)
        net.a.grad = net.b.grad = None


def test_partial_trace_new_shapes_give_correct_results():
    @partial_trace(backend="xla")
    def add(a, b):
        return a + b

    for value in (np.ones((1, 3, 3, 3), np.float32), np.float32(2.0),
                  np.ones((1, 3, 3, 3), np.float32)):
        out = add(mge.tensor(value), mge.tensor(value))
        np.testing.assert_array_equal(out.numpy(), value * 2)


def _count_and_halve(counter):
    def callback(param, grad):
        counter.append(1)
        return grad * 0.5
    return callback


@pytest.mark.parametrize("trace_gmcallback", [True, False])
def test_partial_trace_gmcallback(trace_gmcallback):
    calls = []
    w = mge.Parameter(np.ones(3, np.float32))
    gm = GradManager().attach([w], callbacks=[_count_and_halve(calls)])

    @partial_trace(backend="xla", trace_gmcallback=trace_gmcallback)
    def seg(w, x):
        return (w * x).sum()

    counts = []
    for _ in range(3):
        with gm:
            gm.backward(seg(w, mge.tensor([0.0, 1.0, 2.0])))
        np.testing.assert_allclose(w.grad.numpy(), [0.0, 0.5, 1.0])   # callback applied
        w.grad = None
        counts.append(len(calls))
    # compiled: the Python side effect happens once, when the step is captured
    assert counts == ([1, 1, 1] if trace_gmcallback else [1, 2, 3])


def test_partial_trace_module_training_matches_eager():
    rng = np.random.default_rng(0)
    data = [(rng.standard_normal((4, 2)).astype(np.float32),
             rng.standard_normal((4, 1)).astype(np.float32)) for _ in range(3)]
    eager_net, traced_net = M.Linear(2, 1), M.Linear(2, 1)
    traced_net.load_state_dict(eager_net.state_dict())
    # MegEngine's tests wrap the unbound forward and bind the module as its argument
    backbone = ft.partial(
        partial_trace(func=type(traced_net).forward, backend="xla", capture_as_const=True),
        traced_net)
    losses = {}
    for name, net, call in (("eager", eager_net, eager_net), ("traced", traced_net, backbone)):
        opt = optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        gm = GradManager().attach(net.parameters())
        losses[name] = []
        for x, y in data:
            with gm:
                loss = F.loss.square_loss(call(mge.tensor(x)), mge.tensor(y))
                gm.backward(loss)
            opt.step().clear_grad()
            losses[name].append(loss.item())
    np.testing.assert_allclose(losses["traced"], losses["eager"], rtol=1e-5)
    np.testing.assert_allclose(traced_net.weight.numpy(), eager_net.weight.numpy(), rtol=1e-5)


def test_xla_trace_fused_softmax_from_the_guide():
    @xla_trace
    def xla_fused_softmax(inp):
        offset = inp.max(axis=-1, keepdims=True).detach()
        cached = F.exp(inp - offset)
        down = F.sum(cached, axis=-1, keepdims=True)
        return cached / down

    a = np.random.default_rng(1).standard_normal((4, 10)).astype(np.float32)
    e = np.exp(a - a.max(axis=-1, keepdims=True))
    for _ in range(2):
        out = xla_fused_softmax(mge.tensor(a))
        np.testing.assert_allclose(out.numpy(), e / e.sum(-1, keepdims=True), rtol=1e-5)


def test_xla_trace_train_step_updates_params_and_reads_lr_each_call():
    w = mge.Parameter([1.0])
    opt = optim.SGD([w], lr=1.0)
    calls = []
    gm = GradManager().attach([w], callbacks=[_count_and_halve(calls)])

    @xla_trace(capture_as_const=True)
    def train_step(w, opt):
        with gm:
            loss = (w * 2).sum()
            gm.backward(loss)
        opt.step().clear_grad()
        return loss

    values = []
    for i in range(4):
        if i == 2:
            opt.param_groups[0]["lr"] = 0.1
        train_step(w, opt)
        values.append(w.item())
        assert w.grad is None
    # grad 2, halved by the callback to 1: steps of lr * 1
    np.testing.assert_allclose(values, [0.0, -1.0, -1.1, -1.2], rtol=1e-6)
    assert len(calls) == 1       # the callback's Python side effect ran only while tracing


def test_xla_trace_whole_step_matches_eager_loop():
    rng = np.random.default_rng(2)
    batches = [(rng.standard_normal((8, 2)).astype(np.float32),
                rng.integers(0, 3, 8).astype(np.int32)) for _ in range(3)]
    nets = {k: M.Sequential(M.Linear(2, 3), M.ReLU(), M.Linear(3, 3)) for k in ("eager", "xla")}
    nets["xla"].load_state_dict(nets["eager"].state_dict())
    opts = {k: optim.Adam(n.parameters(), lr=0.01) for k, n in nets.items()}

    def step(data, label, *, opt, net):
        gm = GradManager().attach(net.parameters())
        with gm:
            loss = F.loss.cross_entropy(net(data), label)
            gm.backward(loss)
        opt.step().clear_grad()
        return loss

    compiled = xla_trace(capture_as_const=True)(step)
    for i in range(6):
        x, y = batches[i % 3]
        if i == 4:
            for opt in opts.values():
                opt.param_groups[0]["lr"] = 0.005
        le = step(mge.tensor(x), mge.tensor(y), opt=opts["eager"], net=nets["eager"])
        lx = compiled(mge.tensor(x), mge.tensor(y), opt=opts["xla"], net=nets["xla"])
        np.testing.assert_allclose(lx.numpy(), le.numpy(), rtol=1e-4)
    for (name, pe), (_, px) in zip(nets["eager"].named_parameters(),
                                   nets["xla"].named_parameters()):
        np.testing.assert_allclose(px.numpy(), pe.numpy(), rtol=1e-4, atol=1e-6, err_msg=name)


def test_xla_trace_batchnorm_running_stats_are_written_back():
    bn = M.BatchNorm2d(2)

    @xla_trace
    def forward(bn, x):
        return bn(x)

    a = np.random.default_rng(3).standard_normal((4, 2, 3, 3)).astype(np.float32)
    for _ in range(3):
        forward(bn, mge.tensor(a))
    mean, unbiased = a.mean(axis=(0, 2, 3)), a.var(axis=(0, 2, 3), ddof=1)
    decay = 0.9 ** 3
    np.testing.assert_allclose(bn.running_mean.numpy().ravel(), (1 - decay) * mean, rtol=1e-5)
    np.testing.assert_allclose(bn.running_var.numpy().ravel(),
                               decay + (1 - decay) * unbiased, rtol=1e-5)


class PropertyNet(M.Module):
    def __init__(self):
        super().__init__()
        self.weight = mge.Parameter(np.eye(2, dtype=np.float32))

    @property
    def weight_property(self):
        return self.weight + 1

    def forward(self, x):
        self.weight[...] = self.weight_property
        return F.matmul(x, self.weight_property)


def test_xla_trace_module_property_and_inplace_parameter_update():
    net = PropertyNet()
    gm = GradManager().attach(net.parameters())

    @xla_trace
    def step(net, x, dy):
        with gm:
            y = net(x)
            gm.backward(y, dy)
        grad = net.weight.grad
        net.weight.grad = None
        return y, grad

    x = mge.tensor(np.ones((1, 2), np.float32))
    ref = np.eye(2, dtype=np.float32)
    for _ in range(3):
        y, grad = step(net, x, mge.tensor(np.ones((1, 2), np.float32)))
        ref = ref + 1                                    # applied exactly once per call
        np.testing.assert_array_equal(net.weight.numpy(), ref)
        np.testing.assert_array_equal(y.numpy(), np.ones((1, 2)) @ (ref + 1))
        np.testing.assert_array_equal(grad.numpy(), np.ones((2, 2)))


def test_xla_trace_new_shape_and_back():
    @xla_trace
    def add(a, b):
        return a + b

    for shape in ((1, 3, 3, 3), (1, 3, 3, 3), (3, 3, 3, 3), (3, 3, 3, 3), (1, 3, 3, 3)):
        a = np.full(shape, 2.0, np.float32)
        out = add(mge.tensor(a), mge.tensor(a))
        assert out.shape == shape
        np.testing.assert_array_equal(out.numpy(), a * 2)


def test_xla_trace_dropout_rng_is_reproducible_from_the_seed():
    def make():
        @xla_trace
        def two_dropouts(x):
            return F.nn.dropout(x, 0.5), F.nn.dropout(x, 0.5)
        return two_dropouts

    x = mge.tensor(np.ones((4, 8), np.float32))
    mge.random.seed(3)
    f = make()
    first = [t.numpy() for t in f(x)]
    second = [t.numpy() for t in f(x)]
    assert (first[0] != first[1]).any()            # two draws in one call differ
    assert (first[0] != second[0]).any()           # and the state advances across calls
    mge.random.seed(3)
    again = [t.numpy() for t in make()(x)]
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    mge.random.seed(4)
    other = make()(x)[0].numpy()
    assert (other != first[0]).any()


def test_capture_as_const_bakes_closed_over_tensors():
    const, live = mge.tensor([1.0]), mge.tensor([1.0])

    @xla_trace(capture_as_const=True)
    def baked(x):
        return x + const

    @xla_trace
    def read(x):
        return x + live

    for f in (baked, read):
        np.testing.assert_array_equal(f(mge.tensor([1.0])).numpy(), [2.0])
    const[...] = mge.tensor([5.0])
    live[...] = mge.tensor([5.0])
    np.testing.assert_array_equal(baked(mge.tensor([1.0])).numpy(), [2.0])
    np.testing.assert_array_equal(read(mge.tensor([1.0])).numpy(), [6.0])


def test_trace_symbolic_keeps_output_structure():
    @trace(symbolic=True)
    def f(a, b, c):
        return [(a + b) * (a + c), {"ratio": (a + b) / (a + c)}], (a,)

    args = [mge.tensor([v]) for v in (1.0, 2.0, 3.0)]
    first = f(*args)
    for _ in range(2):
        out = f(*args)
        assert isinstance(out, tuple) and isinstance(out[0], list)
        assert isinstance(out[0][1], dict) and isinstance(out[1], tuple)
        np.testing.assert_array_equal(out[0][0].numpy(), first[0][0].numpy())
    np.testing.assert_allclose(first[0][0].numpy(), [12.0])
    np.testing.assert_allclose(first[0][1]["ratio"].numpy(), [0.75])


def test_exclude_from_trace_runs_every_call():
    seen = []

    @trace(symbolic=True)
    def f(x):
        y = x * 2
        with exclude_from_trace():
            seen.append(y.item())
        return y + 1

    for v in (1.0, 2.0, 3.0):
        np.testing.assert_array_equal(f(mge.tensor([v])).numpy(), [2 * v + 1])
    assert seen == [2.0, 4.0, 6.0]


def test_user_exceptions_propagate_unchanged():
    class BoomError(Exception):
        pass

    err = BoomError("boom")

    @partial_trace
    def f(x, fail):
        if fail:
            raise err
        return x + 1

    for fail in (False, True, False, True):
        if fail:
            with pytest.raises(BoomError) as info:
                f(mge.tensor([1.0]), fail)
            assert info.value is err
        else:
            np.testing.assert_array_equal(f(mge.tensor([1.0]), fail).numpy(), [2.0])


def test_trace_options_of_megengine_are_accepted():
    f = xla_trace(symbolic_shape=False)(lambda x: x * 2)
    g = trace(symbolic=True, symbolic_shape=True)(lambda x: x + 1)
    np.testing.assert_array_equal(f(mge.ones(2)).numpy(), [2.0, 2.0])
    np.testing.assert_array_equal(g(mge.ones(2)).numpy(), [2.0, 2.0])


@pytest.mark.parametrize("symbolic", [False, True])
def test_trace_returns_a_boolean_mask_selection_of_the_right_size(symbolic):
    """MegEngine's test_tracing.py: advanced indexing with a boolean mask inside `trace`."""
    @trace(symbolic=symbolic)
    def f(x):
        return x[x > 0]

    for v in ([1.0, -2.0, 3.0], [-1.0, -2.0, -3.0], [4.0, 5.0, -6.0], [1.0, 2.0, 3.0]):
        a = np.array(v, np.float32)
        out = f(mge.tensor(a))
        np.testing.assert_array_equal(out.numpy(), a[a > 0])
        assert out.shape == a[a > 0].shape
