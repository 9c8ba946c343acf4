"""Decorator forms, argument structures and output structures of `partial_trace`."""

import numpy as np
import pytest

import eager as eg
import eager.functional as F
import eager.module as M
from eager.autodiff import GradManager
from partial import partial_trace, xla_trace
from tests.helpers import randn

from .differential import World, assert_trees_close, check_against_eager, to_numpy


def test_bare_decorator_and_decorator_with_options_agree_with_eager():
    net = M.Linear(3, 2)

    @partial_trace
    def a(x):
        return F.relu(net(x))

    @partial_trace(backend="xla", capture_as_const=True)
    def b(x):
        return F.relu(net(x))

    x = randn(4, 3)
    expected = F.relu(net(x)).numpy()
    np.testing.assert_allclose(a(x).numpy(), expected, rtol=1e-6)
    np.testing.assert_allclose(b(x).numpy(), expected, rtol=1e-6)
    assert a.__name__ == "a" and a.__wrapped__ is not None


def test_lambda():
    f = partial_trace(lambda x, y: x * y + 1)
    np.testing.assert_allclose(f(randn(3), randn(3, seed=1)).numpy(),
                               (randn(3) * randn(3, seed=1) + 1).numpy(), rtol=1e-6)


class Net(M.Module):
    def __init__(self):
        super().__init__()
        self.fc = M.Linear(3, 4)

    @partial_trace
    def forward(self, x):
        return F.gelu(self.fc(x))

    @partial_trace
    def scaled(self, x, scale):
        return self.fc(x) * scale


def test_method_and_module_forward_bind_like_functions():
    a, b = Net(), Net()
    x = randn(2, 3)
    for net in (a, b):
        np.testing.assert_allclose(net(x).numpy(), F.gelu(net.fc(x)).numpy(), rtol=1e-6)
        np.testing.assert_allclose(net.scaled(x, 2.0).numpy(), (net.fc(x) * 2.0).numpy(),
                                   rtol=1e-6)
    # one cache per decorated function, keyed by the module object
    assert Net.forward.cache_info().entries == 2
    assert a.forward.cache_info() == Net.forward.cache_info()


def test_module_forward_gradients_match_eager():
    def build(wrap):
        net = M.Sequential(M.Linear(3, 5), M.ReLU(), M.Linear(5, 2))
        net.forward = wrap(net.forward)
        gm = GradManager().attach(net.parameters())

        def step(i):
            with gm:
                loss = (net(randn(4, 3, seed=i)) ** 2).sum()
                gm.backward(loss)
            return loss

        return World(step, modules=[net])

    check_against_eager(build)


def test_nested_arguments_outputs_and_kwargs_keep_their_structure():
    def region(batch, *, scale, flags=("a",)):
        x, (y, z) = batch["x"], batch["pair"]
        return {"sum": x + y, "list": [x * scale, z], "tuple": (z - 1, len(flags)), "none": None}

    f = partial_trace(region)
    batch = {"x": randn(2), "pair": (randn(2, seed=1), randn(3, seed=2))}
    got = f(batch, scale=3.0)
    want = region(batch, scale=3.0)
    assert set(got) == set(want) and got["none"] is None and got["tuple"][1] == 1
    assert isinstance(got["list"], list) and isinstance(got["tuple"], tuple)
    for g, w in [(got["sum"], want["sum"]), (got["list"][0], want["list"][0]),
                 (got["list"][1], want["list"][1]), (got["tuple"][0], want["tuple"][0])]:
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-6)


def test_plain_python_values_are_static_and_key_the_cache():
    f = partial_trace(lambda x, k, mode: x * k if mode == "mul" else x + k)
    x = randn(3)
    np.testing.assert_allclose(f(x, 2, "mul").numpy(), (x * 2).numpy())
    np.testing.assert_allclose(f(x, 2, "add").numpy(), (x + 2).numpy())
    np.testing.assert_allclose(f(x, 3, "mul").numpy(), (x * 3).numpy())
    np.testing.assert_allclose(f(x, 2, "mul").numpy(), (x * 2).numpy())
    info = f.cache_info()
    assert (info.captures, info.hits, info.entries) == (3, 1, 3)


def test_the_same_tensor_twice_is_one_input_and_keys_separately():
    f = partial_trace(lambda a, b: a * 2 + b)
    x, y = randn(3), randn(3, seed=1)
    np.testing.assert_allclose(f(x, x).numpy(), (x * 3).numpy(), rtol=1e-6)
    np.testing.assert_allclose(f(x, y).numpy(), (x * 2 + y).numpy(), rtol=1e-6)
    assert f.cache_info().captures == 2


def test_outputs_that_are_inputs_are_the_same_objects():
    w = eg.Parameter([1.0, 2.0])
    f = partial_trace(lambda x: (x, w, x + w))
    x = randn(2)
    a, b, c = f(x)
    assert a is x and b is w
    np.testing.assert_allclose(c.numpy(), (x + w).numpy())


def test_options_are_checked():
    with pytest.raises(ValueError, match="backend"):
        partial_trace(lambda x: x, backend="cuda")
    with pytest.raises(TypeError, match="unknown option"):
        partial_trace(lambda x: x, recompile_limt=3)
    with pytest.raises(TypeError, match="decorates a function"):
        partial_trace(3)


def test_a_traced_function_called_inside_another_region_becomes_part_of_it():
    inner = partial_trace(lambda x: x * 2)
    outer = partial_trace(lambda x: inner(x) + 1)
    x = randn(3)
    np.testing.assert_allclose(outer(x).numpy(), (x * 2 + 1).numpy())
    assert inner.cache_info().captures == 0 and outer.cache_info().captures == 1


# ----- MegEngine's spellings ----------------------------------------------------------------------
def test_megengine_spellings_func_backend_default_and_trace():
    from partial import trace

    net = M.Linear(3, 2)
    x = randn(4, 3)
    expected = F.relu(net(x)).numpy()
    f = partial_trace(func=lambda x: F.relu(net(x)), backend="default", without_host=False)
    np.testing.assert_allclose(f(x).numpy(), expected, rtol=1e-6)
    g = partial_trace(func=None, without_host=True)(lambda x: F.relu(net(x)))
    np.testing.assert_allclose(g(x).numpy(), expected, rtol=1e-6)
    with pytest.raises(TypeError, match="twice"):
        partial_trace(lambda x: x, func=lambda x: x)

    @trace(symbolic=True, capture_as_const=False)
    def step(x):
        return F.relu(net(x))

    np.testing.assert_allclose(step(x).numpy(), expected, rtol=1e-6)
    assert step.cache_info().captures == 1


@pytest.mark.parametrize("kind", ["partial_trace", "xla_trace"])
def test_without_host_refuses_a_graph_break_and_changes_nothing(kind):
    import partial
    from partial import UnsupportedInRegionError, exclude_from_trace

    bn = M.BatchNorm1d(3)
    before = {k: v.copy() for k, v in bn.state_dict().items()}
    rng = eg.random.get_state().numpy().copy()

    def body(x):
        y = F.dropout(bn(x), 0.5)
        with exclude_from_trace():
            print(y.shape)
        return y

    region = getattr(partial, kind)(without_host=True)(body)
    with pytest.raises(UnsupportedInRegionError, match="without_host=True") as info:
        region(randn(4, 3))
    assert "test_forms.py" in str(info.value)
    for k, v in bn.state_dict().items():
        np.testing.assert_array_equal(v, before[k])
    np.testing.assert_array_equal(eg.random.get_state().numpy(), rng)
    with pytest.raises(ValueError, match="choose one"):
        getattr(partial, kind)(without_host=True, graph_breaks=True)


# ----- Python values as arguments, output structures, modules -------------------------------------
def test_a_float_argument_is_an_input_and_other_plain_values_are_static():
    seen = []

    def body(x, s, flag=None):
        # runs only when captured
        seen.append((isinstance(s, eg.Tensor), getattr(s, "shape", None),
                     getattr(s, "dtype", None)))
        return x * s + (1.0 if flag else 0.0)

    f = partial_trace(body)
    x = randn(3)
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


@pytest.mark.parametrize("compile", [partial_trace, xla_trace], ids=["partial_trace", "xla_trace"])
def test_the_output_structure_is_kept_exactly(compile):
    x = randn(2, 3)
    for make in (lambda x: [x * 2], lambda x: (x * 2,), lambda x: {"a": x * 2},
                 lambda x: x * 2, lambda x: ([x * 2], {"b": (x + 1,)})):
        want, got = make(x), compile(make)(x)
        assert type(got) is type(want), f"{type(got).__name__} for a {type(want).__name__}"
        assert_trees_close(to_numpy(got), to_numpy(want), 1e-6, 1e-6, "outputs")


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
    x = randn(4, 3)
    for _ in range(2):
        np.testing.assert_allclose(w(x).numpy(), lin(x).numpy(), rtol=1e-6)
    assert w.cache_info().captures == 1
