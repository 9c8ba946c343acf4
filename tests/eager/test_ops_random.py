"""Random draws (`eg.random.randint`, `gamma`, `beta`, `poisson`, `shuffle`, the RNG state) and
the creation functions under `F`.

Each new draw op is checked against jax's own sampler at a fixed key (value; and gradient for
`random_shuffle`, the one differentiable draw), its moments against the distribution's over many
samples (fixed seeds and tolerances of several standard errors: they never flake),
reproducibility by seed and by `get_rng_state` / `set_rng_state`, and fresh draws on every call
of a `partial_trace` region, bit-identical to eager."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eager as eg
import eager.functional as F
import eager.random.rng
from eager.core.errors import OpArgumentError, OpTypeError
from partial import partial_trace, xla_trace
from tests.partial.differential import World, check_against_eager

from .op_check import check_op

COVERED = {"random_randint", "random_gamma", "random_beta", "random_poisson", "random_shuffle"}

KEY = np.asarray(jax.random.key_data(jax.random.key(5)))
F32 = np.dtype(np.float32)
# Every gamma, beta and poisson draw below takes parameters of shape (3,) and has size (N,), so
# each sampler compiles once for the file (they take seconds to compile); the columns of a draw
# are three distributions.
N = 40_000
GAMMA = np.array([[0.5, 2.0, 9.0], [1.0, 3.0, 0.5]], np.float32)  # shape k, scale theta
BETA = np.array([[0.5, 2.0, 3.0], [0.5, 5.0, 1.0]], np.float32)  # alpha, beta
LAM = np.array([0.5, 4.0, 30.0], np.float32)


def _k():
    return jax.random.key(5)


def _gamma():
    return eg.random.gamma(eg.tensor(GAMMA[0]), eg.tensor(GAMMA[1]), size=N)


def _beta():
    return eg.random.beta(eg.tensor(BETA[0]), eg.tensor(BETA[1]), size=N)


def _poisson():
    return eg.random.poisson(eg.tensor(LAM), size=N)


# ----- the ops against jax's samplers ---------------------------------------------------------
@pytest.mark.slow  # ~20 s: every sampler at several shapes
def test_draw_ops_against_jax_at_a_fixed_key():
    # the samplers' references jitted: op by op, their rejection loops dispatch thousands of ops
    check_op("random_randint", [KEY, -3, 4], lambda k, lo, hi: jax.random.randint(
        _k(), (5, 2), lo, hi, jnp.int32), {"shape": (5, 2), "dtype": np.dtype(np.int32)})
    check_op("random_gamma", [KEY, *GAMMA], jax.jit(lambda k, a, s: jax.random.gamma(
        _k(), a, (N, 3)) * s), {"shape": (N, 3), "dtype": F32}, rtol=1e-6)
    check_op("random_beta", [KEY, *BETA], jax.jit(lambda k, a, b: jax.random.beta(
        _k(), a, b, (N, 3))), {"shape": (N, 3), "dtype": F32}, rtol=1e-6)
    check_op("random_poisson", [KEY, LAM], jax.jit(lambda k, lam: jax.random.poisson(
        _k(), lam, (N, 3)).astype(jnp.float32)), {"shape": (N, 3), "dtype": F32})


def test_shuffle_op_permutes_rows_and_its_gradient_follows_them():
    x = np.random.default_rng(0).standard_normal((6, 3)).astype(np.float32)
    perm = jax.random.permutation(_k(), 6)  # the same key bits order the rows the same way
    check_op("random_shuffle", [KEY, x], lambda k, a: a[perm])
    v = np.arange(7, dtype=np.float32)
    check_op("random_shuffle", [KEY, v], lambda k, a: a[jax.random.permutation(_k(), 7)])


# ----- moments over many samples --------------------------------------------------------------
def _moments(t):
    a = t.numpy().astype(np.float64)
    return a.mean(0), a.var(0)


def test_gamma_moments():
    eg.random.seed(11)
    t = _gamma()
    assert t.shape == (N, 3) and t.dtype == np.float32 and (t.numpy() > 0).all()
    mean, var = _moments(t)
    k, theta = GAMMA.astype(np.float64)
    assert (np.abs(mean - k * theta) < 6 * np.sqrt(k * theta**2 / N)).all(), mean
    np.testing.assert_allclose(var, k * theta**2, rtol=0.1)


def test_beta_moments():
    eg.random.seed(12)
    t = _beta()
    assert t.shape == (N, 3) and ((t.numpy() >= 0) & (t.numpy() <= 1)).all()
    mean, var = _moments(t)
    a, b = BETA.astype(np.float64)
    m, v = a / (a + b), a * b / ((a + b) ** 2 * (a + b + 1))
    assert (np.abs(mean - m) < 6 * np.sqrt(v / N)).all(), mean
    np.testing.assert_allclose(var, v, rtol=0.08)


def test_poisson_moments_and_dtype():
    eg.random.seed(13)
    t = _poisson()
    assert t.dtype == np.float32 and t.shape == (N, 3)  # counts as floats, as MegEngine's
    a = t.numpy()
    assert (a >= 0).all() and (a == np.round(a)).all()
    mean, var = _moments(t)
    assert (np.abs(mean - LAM) < 6 * np.sqrt(LAM / N)).all(), mean
    np.testing.assert_allclose(var, LAM, rtol=0.08)


def test_randint_range_and_uniformity():
    eg.random.seed(14)
    a = eg.random.randint(-2, 5, size=(N,)).numpy()
    assert a.dtype == np.int32 and a.min() == -2 and a.max() == 4
    counts = np.bincount(a + 2)
    assert np.abs(counts / N - 1 / 7).max() < 6 * np.sqrt((1 / 7) * (6 / 7) / N)
    b = eg.random.randint(3, size=(2, 50)).numpy()  # one bound: [0, 3), as numpy
    assert b.shape == (2, 50) and set(np.unique(b)) == {0, 1, 2}
    assert eg.random.randint(0, 10).shape == ()


# ----- shapes: MegEngine's size + broadcast(parameters) ---------------------------------------
@pytest.mark.parametrize("params, size, shape", [
    ({"k": eg.tensor([[1.0], [10.0]]), "theta": eg.tensor([1.0, 5.0])}, None, (2, 2)),
    ({"k": eg.tensor([[1.0], [10.0]]), "theta": eg.tensor([1.0, 5.0])}, 3, (3, 2, 2)),
    ({"a": eg.tensor([0.5, 3.0]), "b": 2.0}, (4,), (4, 2)),
    ({"lam": eg.tensor([[1.0, 1.0], [10.0, 10.0]])}, (1, 3), (1, 3, 2, 2)),
    ({"k": 2.0, "theta": 1.0}, (2, 3), (2, 3)),
    ({"k": 2.0, "theta": 1.0}, None, ()),
])
def test_draw_shapes_follow_megengine(params, size, shape):
    # the rule alone (a draw of each shape would compile a sampler anew)
    assert eager.random.rng._draw_shape("draw", params, size, "float32") == shape


@pytest.mark.parametrize("call, cls, match", [
    (lambda: eg.random.gamma(0.0), OpArgumentError, "gamma: shape must be > 0"),
    (lambda: eg.random.gamma(1.0, -1.0), OpArgumentError, "scale must be > 0"),
    (lambda: eg.random.beta(1.0, 0), OpArgumentError, "beta: beta must be > 0"),
    (lambda: eg.random.poisson(-1.0), OpArgumentError, "lam must be >= 0"),
    (lambda: eg.random.gamma("2"), OpTypeError, "number or a Tensor"),
    (lambda: eg.random.randint(5, 5), OpArgumentError, "low < high"),
    (lambda: eg.random.randint(0.5, 5), OpTypeError, "low must be an int"),
    (lambda: eg.random.randint(0, 5, dtype="float32"), OpTypeError, "integer type"),
    (lambda: eg.random.gamma(eg.ones(3), eg.ones(2)), OpArgumentError, "do not broadcast"),
    (lambda: eg.random.gamma(1.0, size=(-1,)), OpArgumentError, "negative"),
    (lambda: eg.random.shuffle(eg.tensor(1.0)), OpArgumentError, "0-d"),
    (lambda: eg.random.shuffle(np.arange(3)), OpTypeError, "expects a Tensor"),
    (lambda: eg.random.set_rng_state(np.zeros(3, np.uint32)), OpArgumentError, "shape"),
])
def test_bad_arguments_raise_eager_errors_and_leave_the_generator_alone(call, cls, match):
    before = eg.random.get_state().numpy()
    with pytest.raises(cls, match=match) as e:
        call()
    assert "test_ops_random.py" in str(e.value)  # the user's line
    np.testing.assert_array_equal(eg.random.get_state().numpy(), before)


# ----- shuffle and permutation of a tensor ----------------------------------------------------
def test_shuffle_permutes_rows_in_place():
    x = eg.tensor(np.arange(30).reshape(10, 3))
    alias = x
    assert eg.random.shuffle(x) is None and x is alias
    rows = x.numpy()
    assert sorted(map(tuple, rows)) == [tuple(r) for r in np.arange(30).reshape(10, 3)]
    assert not np.array_equal(rows, np.arange(30).reshape(10, 3))
    assert (rows[:, 1] == rows[:, 0] + 1).all()  # rows move whole


def test_permutation_of_a_tensor_is_a_shuffled_copy():
    x = eg.tensor(np.arange(8.0))
    y = eg.random.permutation(x)
    assert x.tolist() == list(np.arange(8.0)) and sorted(y.tolist()) == x.tolist()


def test_gradient_flows_through_shuffle():
    w = eg.Parameter(np.arange(5.0, dtype=np.float32))
    gm = eg.GradManager().attach([w])
    with gm:
        h = w * 1
        eg.random.shuffle(h)
        gm.backward((h * eg.tensor(np.arange(5.0, dtype=np.float32))).sum())
    # h[i] = w[p[i]] so d/dw[p[i]] = i: the gradient is the inverse permutation
    p = h.numpy().astype(int)
    np.testing.assert_array_equal(w.grad.numpy()[p], np.arange(5.0))


# ----- reproducibility ------------------------------------------------------------------------
def _all_draws():
    return [eg.random.randint(0, 100, size=5), _gamma(), _beta(), _poisson(),
            eg.random.permutation(eg.tensor(np.arange(6.0))), eg.random.normal(size=2)]


def test_a_seed_reproduces_every_draw():
    eg.random.seed(21)
    a = [t.numpy() for t in _all_draws()]
    eg.random.seed(21)
    b = [t.numpy() for t in _all_draws()]
    eg.random.seed(22)
    c = [t.numpy() for t in _all_draws()]
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert any(not np.array_equal(x, z) for x, z in zip(a, c))


def test_rng_state_round_trip_reproduces_draws():
    state = eg.random.get_rng_state()
    assert state.shape == (2,) and state.dtype == np.uint32
    a = [t.numpy() for t in _all_draws()]
    np.testing.assert_array_equal(state.numpy(), state.numpy())
    assert not np.array_equal(eg.random.get_rng_state().numpy(), state.numpy())  # a copy
    eg.random.set_rng_state(state)
    b = [t.numpy() for t in _all_draws()]
    eg.random.set_rng_state(state.numpy())  # its numpy value works too
    c = [t.numpy() for t in _all_draws()]
    for x, y, z in zip(a, b, c):
        np.testing.assert_array_equal(x, y)
        np.testing.assert_array_equal(x, z)


# ----- inside regions -------------------------------------------------------------------------
def test_draws_in_a_partial_trace_region_are_fresh_each_call_and_match_eager():
    outs = []

    def build(wrap):
        region = wrap(lambda x: (x + eg.random.poisson(3.0, size=N),
                                 eg.random.randint(0, 9, size=(4,)), eg.random.normal(size=2)))

        def step(i):
            outs.append(region(eg.zeros(N)))
            return outs[-1]

        return World(step, traced=[region])

    # one compile per region; every call draws anew from the advancing key, as eager does
    world = check_against_eager(build, rtol=1e-6, atol=0)
    assert world.traced[0].cache_info().captures == 1
    compiled = [tuple(t.numpy() for t in o) for o in outs[3:]]
    for a, b in zip(compiled, compiled[1:]):
        assert all(not np.array_equal(x, y) for x, y in zip(a, b))


def test_shuffle_and_rng_state_in_regions_match_eager():
    def build(wrap):
        data = eg.tensor(np.arange(12.0, dtype=np.float32).reshape(6, 2))

        @wrap
        def step(x):
            eg.random.shuffle(data)
            s = eg.random.get_rng_state()
            a = eg.random.uniform(size=(2,))
            eg.random.set_rng_state(s)
            return data * x, a, eg.random.uniform(size=(2,))

        return World(lambda i: step(eg.ones(2)), tensors={"data": data})

    check_against_eager(build, rtol=0, atol=0)
    check_against_eager(build, rtol=0, atol=0, compile=xla_trace)


# ----- creation under F -----------------------------------------------------------------------
def test_creation_functions_under_F_are_the_eager_ones():  # noqa: N802 (F: eager.functional)
    for name in ["zeros", "ones", "full", "zeros_like", "ones_like", "full_like", "arange",
                 "linspace", "eye"]:
        assert getattr(F, name) is getattr(eg, name), name
    x = eg.ones((2, 3), dtype="int32")
    assert F.zeros((2, 3)).tolist() == [[0.0] * 3] * 2
    assert F.ones_like(x).dtype == np.int32 and F.zeros_like(x).shape == (2, 3)
    assert F.full_like(x, 7).tolist() == [[7] * 3] * 2 and F.full((2,), 1.5).tolist() == [1.5] * 2
    assert F.arange(1, 7, 2).tolist() == [1.0, 3.0, 5.0] and F.arange(4).dtype == np.float32
    np.testing.assert_array_equal(F.eye(2, 3).numpy(), np.eye(2, 3, dtype=np.float32))


@pytest.mark.parametrize("start, stop, num, dtype", [
    (0, 1, 5, "float32"), (3, -1, 9, "float32"), (-2.5, 2.5, 1, "float32"), (0, 1, 0, "float32"),
    (0, 10, 4, "int32"), (5, -5, 6, "int32"),
])
def test_linspace_against_numpy(start, stop, num, dtype):
    got = F.linspace(start, stop, num, dtype=dtype)
    want = np.linspace(start, stop, num).astype(dtype) if dtype == "float32" else np.floor(
        np.linspace(start, stop, num)).astype(dtype)
    assert got.dtype == np.dtype(dtype) and got.shape == (num,)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-6)


def test_linspace_in_a_region_and_its_errors():
    f = partial_trace(lambda x: x + F.linspace(0, 1, 3))
    np.testing.assert_allclose(f(eg.zeros(3)).numpy(), [0.0, 0.5, 1.0])
    with pytest.raises(OpTypeError, match="num must be an int"):
        F.linspace(0, 1, 2.5)
    with pytest.raises(OpArgumentError, match="negative"):
        F.linspace(0, 1, -1)
