"""logaddexp, dot, diag, roll, swapaxes, meshgrid, matinv, svd and topk_accuracy: each op's value
against an independent jnp/numpy reference and its gradient against `jax.vjp` of that reference
(`check_op`), with hypothesis over shapes and dtypes where they vary, plus the `F` wrappers'
argument checks (MegEngine 1.13's signatures; parity with real MegEngine in
tests/parity/cases_linalg.py)."""

import hypothesis.extra.numpy as hnp
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import eager as eg
import eager.functional as F
from eager.autodiff import GradManager
from eager.core.errors import OpArgumentError, OpTypeError
from tests.helpers import examples, randn_array

from .op_check import assert_close, check_op

# a value-and-gradient check compiles the op, its vjp and the reference for every new shape
# (~0.3 s, ~1 s for matinv and svd): few examples each, and most of the linear algebra in the
# slow set; the fast set keeps one value-and-gradient check of every op
FAST = examples(2)
ONE = examples(1)
SLOW = pytest.mark.slow

COVERED = {"logaddexp", "dot", "diag", "roll", "meshgrid", "matinv", "svd", "topk_accuracy"}


def check(name, inputs, ref, attrs=None, **kw):
    check_op(name, inputs, jax.jit(ref), attrs, **kw)


def _grad(fn, x, ct):
    """The gradient of sum(fn(x) * ct) with respect to x, through the eager tape."""
    p = eg.Parameter(x)
    with GradManager().attach([p]) as gm:
        gm.backward(fn(p), eg.tensor(ct))
    return p.grad.numpy()


# ----- logaddexp, dot --------------------------------------------------------------------------
@ONE
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3),
       seed=st.integers(0, 2**16))
def test_logaddexp_broadcasting(shapes, seed):
    x, y = (randn_array(*s, seed=seed + i) * 3 for i, s in enumerate(shapes.input_shapes))
    check("logaddexp", [x, y], lambda a, b: jnp.maximum(a, b) + jnp.log1p(jnp.exp(-abs(a - b))),
          seed=seed)


def test_logaddexp_dtypes_and_infinities():
    big = F.logaddexp(eg.tensor([1000.0, -1000.0]), eg.tensor([1000.0, -1000.0]))
    np.testing.assert_allclose(big.numpy(), [1000 + np.log(2), -1000 + np.log(2)], rtol=1e-6)
    inf = F.logaddexp(eg.tensor([np.inf, -np.inf, -np.inf]), eg.tensor([np.inf, -np.inf, 0.0]))
    assert inf.numpy().tolist() == [np.inf, -np.inf, 0.0]  # numpy's values (MegEngine: nan)
    assert F.logaddexp(eg.tensor([1, 2]), eg.tensor([3, 4])).dtype == np.float32
    half = F.logaddexp(eg.tensor([1.0, 2.0]).astype(jnp.bfloat16), 0.5)
    assert half.dtype == np.dtype(jnp.bfloat16)
    np.testing.assert_allclose(half.numpy().astype(np.float32), np.logaddexp([1, 2], 0.5),
                               rtol=1e-2)


@FAST
@given(n=st.integers(0, 5), dtype=st.sampled_from([np.float32, np.int32]),
       seed=st.integers(0, 2**16))
def test_dot(n, dtype, seed):
    a, b = (np.random.default_rng(seed + i).integers(-4, 5, n).astype(dtype) for i in (0, 1))
    check("dot", [a, b], lambda x, y: jnp.sum(x * y))


def test_dot_of_scalars():
    out = F.dot(eg.tensor(2.0), eg.tensor(3.0))
    assert out.shape == () and out.item() == 6.0


# ----- diag ------------------------------------------------------------------------------------
def _diag_ref(x, k):
    if x.ndim == 2:  # the entries (i, i + k) that exist, gathered by index
        i = np.arange(max(0, -k), min(x.shape[0], x.shape[1] - k))
        return x[i, i + k]
    x = x.reshape(-1)
    n = x.shape[0] + abs(k)
    i = np.arange(x.shape[0]) + max(0, -k)
    return jnp.zeros((n, n), x.dtype).at[i, i + k].set(x)


@pytest.mark.parametrize("shape, k", [((3,), 2), ((3, 4), -2), *(
    pytest.param(*c, marks=SLOW) for c in [((3,), 0), ((4,), -1), ((), 1), ((3, 4), 0),
                                           ((3, 4), 3)])])
def test_diag(shape, k):
    check("diag", [randn_array(*shape, seed=k + 7)], lambda x: _diag_ref(x, k), {"k": k})


def test_diag_keeps_integer_dtype():
    out = F.diag(eg.tensor([1, 2, 3]), k=-1)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out.numpy(), np.diag([1, 2, 3], -1))


# ----- roll, swapaxes --------------------------------------------------------------------------
def _roll_ref(x, shifts, axes):
    for s, a in zip(shifts, axes):  # element j comes from j - s: a gather, not jnp.roll
        n = x.shape[a]
        x = jnp.take(x, (np.arange(n) - s) % n, axis=a)
    return x


@ONE
@given(shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4),
       data=st.data(), seed=st.integers(0, 2**16))
def test_roll(shape, data, seed):
    ndim = len(shape)
    axes = data.draw(st.lists(st.integers(-ndim, ndim - 1), min_size=1, max_size=3))
    shifts = data.draw(st.lists(st.integers(-9, 9), min_size=len(axes), max_size=len(axes)))
    x = randn_array(*shape, seed=seed)
    out = F.roll(eg.tensor(x), tuple(shifts), tuple(axes))
    assert_close(out, np.roll(x, shifts, axes), 0, 0, "roll")
    ct = randn_array(*shape, seed=seed + 1)
    _, pullback = jax.vjp(lambda a: _roll_ref(a, shifts, axes), x)
    assert_close(_grad(lambda t: F.roll(t, tuple(shifts), tuple(axes)), x, ct), pullback(ct)[0],
                 0, 1e-6, "roll gradient")


@SLOW
def test_roll_flattened_and_by_an_int():
    x = np.arange(6, dtype=np.int32).reshape(3, 2)
    np.testing.assert_array_equal(F.roll(eg.tensor(x), 1).numpy(), np.roll(x, 1))
    np.testing.assert_array_equal(F.roll(eg.tensor(x), -7, -1).numpy(), np.roll(x, -7, -1))
    assert F.roll(eg.tensor(3.0), 2).item() == 3.0
    check("roll", [randn_array(2, 3)], lambda a: _roll_ref(a.reshape(-1), [4], [0]).reshape(2, 3),
          {"shift": 4, "axis": None})


def test_swapaxes():
    x = randn_array(2, 3, 4, seed=1)
    out = F.swapaxes(eg.tensor(x), -1, 0)
    assert_close(out, np.swapaxes(x, -1, 0), 0, 0, "swapaxes")
    ct = randn_array(4, 3, 2, seed=2)
    assert_close(_grad(lambda t: F.swapaxes(t, 2, 0), x, ct), np.swapaxes(ct, 0, 2), 0, 0,
                 "swapaxes gradient")
    assert F.swapaxes(eg.tensor(x), 1, 1).shape == (2, 3, 4)


# ----- meshgrid --------------------------------------------------------------------------------
def _mesh_ref(*xs, indexing):
    """Each input broadcast along its own axis of the grid (the first two swapped for "xy")."""
    xs = [x.reshape(-1) for x in xs]
    lengths = [x.shape[0] for x in xs]
    axes = list(range(len(xs)))
    if indexing == "xy" and len(xs) > 1:
        axes[0], axes[1] = 1, 0
        lengths[0], lengths[1] = lengths[1], lengths[0]
    out = []
    for x, a in zip(xs, axes):
        shape = [1] * len(xs)
        shape[a] = x.shape[0]
        out.append(jnp.broadcast_to(x.reshape(shape), lengths))
    return tuple(out)


@pytest.mark.parametrize("shapes, indexing", [([(3,), (2,)], "xy"), *(
    pytest.param(*c, marks=SLOW) for c in [([(3,), (2,), (4,)], "ij"), ([(3,)], "xy"),
                                           ([(), (2,)], "xy")])])
def test_meshgrid(shapes, indexing):
    xs = [randn_array(*s, seed=i) for i, s in enumerate(shapes)]
    check("meshgrid", xs, lambda *a: _mesh_ref(*a, indexing=indexing), {"indexing": indexing})


def test_meshgrid_returns_a_tuple_of_the_inputs_dtype():
    grids = F.meshgrid(eg.tensor([1, 2, 3]), eg.tensor([4, 5]))
    assert isinstance(grids, tuple) and [g.dtype for g in grids] == [np.int32, np.int32]
    np.testing.assert_array_equal(grids[1].numpy(), np.meshgrid([1, 2, 3], [4, 5])[1])


# ----- matinv, svd -----------------------------------------------------------------------------
def _well_conditioned(seed, shape, dtype=np.float32):
    return (randn_array(*shape, seed=seed) + 3 * np.eye(shape[-1], dtype=np.float32)).astype(dtype)


def test_matinv_value_and_gradient():
    a = _well_conditioned(2, (3, 3))
    inv = np.linalg.inv(a.astype(np.float64))
    assert_close(F.matinv(eg.tensor(a)), inv, 1e-5, 1e-6, "matinv")
    ct = randn_array(3, 3, seed=3)
    # d(A^-1) = -A^-1 dA A^-1, so the gradient is -A^-T ct A^-T
    assert_close(_grad(F.matinv, a, ct), -inv.T @ ct @ inv.T, 1e-4, 1e-5, "matinv gradient")


@SLOW
@FAST
@given(n=st.integers(1, 4), batch=st.sampled_from([(), (2,)]), seed=st.integers(0, 2**16))
def test_matinv(n, batch, seed):
    a = _well_conditioned(seed, (*batch, n, n))
    # the inverse solves a x = I: an LU solve, not jnp.linalg.inv
    check("matinv", [a], lambda m: jnp.linalg.solve(m, jnp.broadcast_to(jnp.eye(n), m.shape)),
          rtol=1e-4, atol=1e-5, grad_rtol=1e-3, grad_atol=1e-4, seed=seed)


@SLOW
def test_matinv_in_float16():
    a = _well_conditioned(3, (3, 3))
    out = F.matinv(eg.tensor(a).astype(np.float16))
    assert out.dtype == np.float16
    np.testing.assert_allclose(out.numpy().astype(np.float32), np.linalg.inv(a.astype(np.float16)
                                                                             .astype(np.float32)),
                               atol=2e-3, rtol=2e-3)


def _singular_values(a):
    """The singular values from the eigenvalues of a^T a (or a a^T), largest first."""
    m, n = a.shape[-2:]
    gram = a @ jnp.swapaxes(a, -1, -2) if m < n else jnp.swapaxes(a, -1, -2) @ a
    return jnp.sqrt(jnp.linalg.eigvalsh(gram)[..., ::-1])


@SLOW
@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 5)])
def test_svd_singular_values_and_their_gradient(shape):
    a = randn_array(*shape, seed=5)
    check("svd", [a], lambda x: (_singular_values(x),),
          {"full_matrices": False, "compute_uv": False}, rtol=1e-4, atol=1e-5)
    s = F.svd(eg.tensor(a), compute_uv=False)
    assert isinstance(s, eg.Tensor) and s.shape == shape[:-2] + (min(shape[-2:]),)


@pytest.mark.parametrize("shape, full", [((4, 3), False), pytest.param((4, 3), True, marks=SLOW),
                                         pytest.param((2, 3, 5), True, marks=SLOW)])
def test_svd_factors(shape, full):
    a = randn_array(*shape, seed=6)
    u, s, vh = F.svd(eg.tensor(a), full_matrices=full)
    m, n = shape[-2:]
    k = min(m, n)
    assert (u.shape[-2:], s.shape[-1], vh.shape[-2:]) == (((m, m), k, (n, n)) if full
                                                           else ((m, k), k, (k, n)))
    u, s, vh = u.numpy(), s.numpy(), vh.numpy()
    np.testing.assert_allclose((u[..., :k] * s[..., None, :]) @ vh[..., :k, :], a, atol=1e-5)
    np.testing.assert_allclose(np.swapaxes(u, -1, -2) @ u, np.broadcast_to(np.eye(u.shape[-1]),
                               u.shape[:-2] + (u.shape[-1],) * 2), atol=1e-5)
    np.testing.assert_allclose(vh @ np.swapaxes(vh, -1, -2), np.broadcast_to(
        np.eye(vh.shape[-2]), vh.shape[:-2] + (vh.shape[-2],) * 2), atol=1e-5)
    np.testing.assert_allclose(s, np.linalg.svd(a, compute_uv=False), rtol=1e-5)
    # the gradient of sum(S * ct) is U diag(ct) Vh (numpy's factors: the product has no sign)
    ct = randn_array(*(shape[:-2] + (k,)), seed=7)
    nu, _, nvh = np.linalg.svd(a.astype(np.float64), full_matrices=False)
    assert_close(_grad(lambda t: F.svd(t, full_matrices=full)[1], a, ct),
                 (nu * ct[..., None, :]) @ nvh, 1e-4, 1e-5, "svd gradient")


@SLOW
def test_svd_gradient_of_a_sign_invariant_function_of_the_vectors():
    """|U| and |Vh| do not depend on the signs jax picks: their gradient against jax.vjp."""
    a = randn_array(4, 3, seed=8)

    def loss(u, s, vh, xp):
        return xp.sum(u * u * np.arange(3.0, dtype=np.float32)) + xp.sum(s) + xp.sum(
            vh[0] ** 2 * np.arange(3.0, dtype=np.float32))

    p = eg.Parameter(a)
    with GradManager().attach([p]) as gm:
        gm.backward(loss(*F.svd(p), F))
    expected = jax.grad(lambda x: loss(*jnp.linalg.svd(x, full_matrices=False), jnp))(a)
    assert_close(p.grad, expected, 1e-4, 1e-5, "svd vector gradient")


# ----- topk_accuracy ---------------------------------------------------------------------------
@FAST
@given(n=st.integers(1, 6), c=st.integers(1, 5), data=st.data(), seed=st.integers(0, 2**16))
def test_topk_accuracy(n, c, data, seed):
    rng = np.random.default_rng(seed)
    logits = np.stack([rng.permutation(c) for _ in range(n)]).astype(np.float32)  # no ties
    target = rng.integers(0, c, n).astype(np.int32)
    ks = data.draw(st.lists(st.integers(1, c), min_size=1, max_size=3))
    ranks = (logits > logits[np.arange(n), target][:, None]).sum(axis=1)  # how many beat it
    out = F.topk_accuracy(eg.tensor(logits), eg.tensor(target), tuple(ks))
    outs = [out] if len(ks) == 1 else out
    assert isinstance(outs, list) and len(outs) == len(ks)
    for k, acc in zip(ks, outs):
        assert acc.dtype == np.float32 and acc.shape == ()
        assert acc.item() == pytest.approx(np.mean(ranks < k))


def test_topk_accuracy_int_topk_and_float_target():
    logits = eg.tensor([[0.1, 0.5, 0.4], [0.7, 0.2, 0.1]])
    assert F.topk_accuracy(logits, eg.tensor([1.0, 1.0])).item() == 0.5
    assert F.topk_accuracy(logits, eg.tensor([2, 1])).item() == 0.0
    assert F.topk_accuracy(logits, eg.tensor([2, 1]), 2).item() == 1.0


# ----- argument checks -------------------------------------------------------------------------
_M = np.ones((2, 3), np.float32)
BAD = [
    (lambda: F.logaddexp(eg.ones((2,)), eg.ones((3,))), OpArgumentError, r"logaddexp: .*\(2,\)"),
    (lambda: F.dot(_M, np.ones(3, np.float32)), OpArgumentError, r"dot: inp1 .*\(2, 3\)"),
    (lambda: F.dot(eg.ones((2,)), eg.ones((3,))), OpArgumentError, r"dot: .*\(2,\).*\(3,\)"),
    (lambda: F.diag(eg.ones((2, 2, 2))), OpArgumentError, r"diag: inp .*\(2, 2, 2\)"),
    (lambda: F.diag(_M, 3), OpArgumentError, r"diag: .*\(2, 3\).*k=3"),
    (lambda: F.diag(_M, -2), OpArgumentError, r"diag: .*k=-2; k must be in \[-1, 2\]"),
    (lambda: F.diag(_M, 1.0), OpTypeError, "diag: k must be an int"),
    (lambda: F.roll(_M, 1, 2), OpArgumentError, r"roll: axis .*\[-2, 1\].*\(2, 3\)"),
    (lambda: F.roll(_M, (1, 2), 0), OpArgumentError, "roll: shift"),
    (lambda: F.roll(_M, (1, 2), (0,)), OpArgumentError, "roll: shift"),
    (lambda: F.roll(_M, (1, 2)), OpArgumentError, "roll: with axis=None"),
    (lambda: F.roll(_M, 1.5, 0), OpTypeError, "roll: shift 1.5"),
    (lambda: F.roll(_M, (1.5,), (0,)), OpTypeError, "roll: the shifts must be ints"),
    (lambda: F.roll(eg.tensor(1.0), 1, 0), OpArgumentError, "roll: a 0-d tensor"),
    (lambda: F.swapaxes(_M, 0, 2), OpArgumentError, r"swapaxes: axis2 .*\(2, 3\)"),
    (lambda: F.meshgrid(_M), OpArgumentError, r"meshgrid: input 0 .*\(2, 3\)"),
    (lambda: F.meshgrid(eg.tensor([1]), eg.ones((2,))), OpTypeError, "meshgrid: .*int32"),
    (lambda: F.meshgrid(eg.ones((2,)), indexing="yx"), OpArgumentError, "meshgrid: indexing"),
    (lambda: F.meshgrid(), OpArgumentError, "meshgrid: needs"),
    (lambda: F.matinv(_M), OpArgumentError, r"matinv: needs square .*\(2, 3\)"),
    (lambda: F.matinv(eg.ones((3,))), OpArgumentError, r"matinv: .*\(3,\)"),
    (lambda: F.matinv(eg.tensor([[1, 0], [0, 1]])), OpTypeError, "matinv: .*int32"),
    (lambda: F.svd(eg.ones((3,))), OpArgumentError, r"svd: .*\(3,\)"),
    (lambda: F.svd(eg.tensor([[1, 0], [0, 1]])), OpTypeError, "svd: .*int32"),
    (lambda: F.topk_accuracy(_M, eg.tensor([0, 1]), 4), OpArgumentError,
     r"topk_accuracy: topk .*\[1, 3\]"),
    (lambda: F.topk_accuracy(_M, eg.tensor([0, 1]), (1, 0)), OpArgumentError, "topk_accuracy"),
    (lambda: F.topk_accuracy(_M, eg.tensor([0, 1, 2])), OpArgumentError,
     r"topk_accuracy: .*\(2, 3\) and \(3,\)"),
    (lambda: F.topk_accuracy(eg.ones((3,)), eg.tensor([0])), OpArgumentError, "topk_accuracy"),
]


@pytest.mark.parametrize("call, cls, match", BAD, ids=[m.split(":")[0] + str(i)
                                                       for i, (_, _, m) in enumerate(BAD)])
def test_bad_arguments_raise_the_projects_errors(call, cls, match):
    with pytest.raises(cls, match=match):
        call()
