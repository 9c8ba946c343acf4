"""Table-driven tests over the whole op registry: every op's value against an independent
numpy/jnp reference and its gradient against `jax.vjp` of that reference.

Elementwise ops and reductions draw shapes, broadcasting and dtypes with hypothesis; the other ops
run hand-picked cases. `test_every_op_has_a_test` fails when an op is registered without one.
"""

import importlib
import math
from pathlib import Path

import hypothesis.extra.numpy as hnp
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import eager as eg
import eager.optimizer as optim

from .op_check import check_op
from .references import BINARY, POSITIVE, REAL, UNARY, values_in

LOW_PRECISION = {np.dtype(jnp.bfloat16): 2e-2, np.dtype(np.float16): 2e-3}


PREDICATES = {
    "equal": np.equal, "not_equal": np.not_equal, "less": np.less,
    "less_equal": np.less_equal, "greater": np.greater, "greater_equal": np.greater_equal,
    "logical_and": np.logical_and, "logical_or": np.logical_or, "logical_xor": np.logical_xor,
    "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor,
    "logical_not": np.logical_not, "bitwise_not": np.invert, "isnan": np.isnan,
    "isinf": np.isinf,
}
_UNARY_PREDICATES = {"logical_not", "bitwise_not", "isnan", "isinf"}

shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=4)
float_dtypes = st.sampled_from([np.float32, np.float32, jnp.bfloat16, np.float16])


def _tol(dtype):
    return LOW_PRECISION.get(np.dtype(dtype), 1e-5)


@pytest.mark.parametrize("name", sorted(UNARY))
@given(shape=shapes, dtype=float_dtypes, seed=st.integers(0, 2**16))
def test_unary(name, shape, dtype, seed):
    ref, domain = UNARY[name]
    x = values_in(seed, shape, dtype, domain)
    tol = _tol(dtype)
    check_op(name, [x], lambda a: ref(a.astype(np.float32)).astype(a.dtype) if tol > 1e-5
             else ref(a), rtol=tol, atol=tol, grad_atol=1e-5, seed=seed)


@pytest.mark.parametrize("name", sorted(BINARY))
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=4),
       seed=st.integers(0, 2**16))
def test_binary_broadcasting(name, shapes, seed):
    ref, domain = BINARY[name]
    x, y = (values_in(seed + i, s, np.float32, domain) for i, s in enumerate(shapes.input_shapes))
    check_op(name, [x, y], ref, rtol=2e-5, atol=1e-5, seed=seed)


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("dtype", [np.float32, np.float16, jnp.bfloat16])
def test_binary_python_scalar_keeps_dtype(name, dtype):
    """A Python scalar operand does not upcast the tensor (weak typing), on either side."""
    x = values_in(0, (3, 2), dtype, BINARY[name][1])
    t = eg.tensor(x)
    for out in (eg.apply(eg.OPS[name], t, 1.5), eg.apply(eg.OPS[name], 1.5, t)):
        assert out.dtype == np.dtype(dtype)
    ref = BINARY[name][0](jnp.asarray(x, np.float32), 1.5)
    np.testing.assert_allclose(eg.apply(eg.OPS[name], t, 1.5).numpy().astype(np.float32), ref,
                               rtol=_tol(dtype) * 4, atol=_tol(dtype) * 4)


@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=4),
       seed=st.integers(0, 2**16), dtype=st.sampled_from([np.int32, np.int16, np.uint8]))
def test_integer_power_against_jax(shapes, seed, dtype):
    """`int_pow` (`x **= y` of integers): jax's integer power, wrapping as it does."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 6, shapes.input_shapes[0]).astype(dtype)
    b = rng.integers(0, 5, shapes.input_shapes[1]).astype(dtype)
    got = eg.apply(eg.OPS["int_pow"], eg.tensor(a), eg.tensor(b))
    want = jnp.power(jnp.asarray(a), jnp.asarray(b))
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.numpy(), np.asarray(want))


def test_int_tensor_with_float_scalar_promotes_to_float32():
    t = eg.tensor([1, 2, 3])
    assert t.dtype == np.int32
    assert (t * 0.5).dtype == np.float32
    assert (t + 1).dtype == np.int32
    assert (t / 2).dtype == np.float32


@pytest.mark.parametrize("name", sorted(PREDICATES))
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=4),
       seed=st.integers(0, 2**16), kind=st.sampled_from(["float", "int", "bool"]))
def test_predicates(name, shapes, seed, kind):
    rng = np.random.default_rng(seed)
    if kind == "float" and name.startswith("bitwise"):
        kind = "int"
    make = {
        "float": lambda s: rng.choice([-1.0, 0.0, 2.5, np.nan, np.inf], s).astype(np.float32),
        "int": lambda s: rng.integers(-3, 4, s).astype(np.int32),
        "bool": lambda s: rng.integers(0, 2, s).astype(bool),
    }[kind]
    args = [make(shapes.input_shapes[0])]
    if name not in _UNARY_PREDICATES:
        args.append(make(shapes.input_shapes[1]))
    if name in ("isnan", "isinf") and kind != "float":
        args = [args[0].astype(np.float32)]
    check_op(name, args, lambda *a: jnp.asarray(PREDICATES[name](*map(np.asarray, a))))


def test_leaky_relu_clip_where_astype():
    x = values_in(1, (4, 5), np.float32, REAL)
    check_op("leaky_relu", [x], lambda a: jnp.where(a > 0, a, 0.2 * a), {"negative_slope": 0.2})
    lo, hi = np.full((5,), -0.5, np.float32), np.float32(1.0)
    check_op("clip", [x, lo, 1.0], lambda a, b, c: jnp.minimum(jnp.maximum(a, b), c))
    check_op("clip", [x, None, hi], lambda a, b, c: jnp.minimum(a, c))
    mask = x > 0.3
    y = values_in(2, (1, 5), np.float32, REAL)
    check_op("where", [mask, x, y], lambda m, a, b: m * a + (1 - m) * b)
    check_op("astype", [x], lambda a: a.astype(jnp.float16), {"dtype": np.dtype(np.float16)},
             rtol=1e-3, atol=1e-3)
    check_op("astype", [x], lambda a: a.astype(jnp.int32), {"dtype": np.dtype(np.int32)})


# ----- reductions ---------------------------------------------------------------------------------
REDUCTIONS = {
    "sum": lambda x, axis, keepdims: jnp.sum(x, axis, keepdims=keepdims),
    "mean": lambda x, axis, keepdims: jnp.sum(x, axis, keepdims=keepdims)
    / (x.size / jnp.sum(jnp.ones_like(x), axis, keepdims=keepdims).size),
    "max": lambda x, axis, keepdims: -jnp.min(-x, axis, keepdims=keepdims),
    "min": lambda x, axis, keepdims: -jnp.max(-x, axis, keepdims=keepdims),
    "prod": lambda x, axis, keepdims: jnp.exp(jnp.sum(jnp.log(x), axis, keepdims=keepdims)),
    "logsumexp": lambda x, axis, keepdims: jnp.log(jnp.sum(jnp.exp(x), axis, keepdims=keepdims)),
}


@st.composite
def shape_and_axis(draw):
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4))
    axis = draw(st.one_of(st.none(), st.integers(-len(shape), len(shape) - 1),
                          st.lists(st.integers(0, len(shape) - 1), min_size=1, unique=True)
                          .map(tuple)))
    return shape, axis


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
@given(sa=shape_and_axis(), keepdims=st.booleans(), seed=st.integers(0, 2**16))
def test_reductions(name, sa, keepdims, seed):
    shape, axis = sa
    x = values_in(seed, shape, np.float32, POSITIVE if name == "prod" else REAL)
    check_op(name, [x], lambda a: REDUCTIONS[name](a, axis, keepdims),
             {"axis": axis, "keepdims": keepdims}, rtol=2e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["var", "std"])
@pytest.mark.parametrize("ddof", [0, 1])
@pytest.mark.parametrize("axis", [None, 1, (0, 2)])
def test_var_std(name, ddof, axis):
    x = values_in(3, (3, 4, 5), np.float32, REAL)

    def ref(a):
        n = a.size if axis is None else np.prod([a.shape[i] for i in np.atleast_1d(axis)])
        d = a - jnp.mean(a, axis, keepdims=True)
        v = jnp.sum(d * d, axis) / (n - ddof)
        return v if name == "var" else jnp.sqrt(v)

    check_op(name, [x], ref, {"axis": axis, "keepdims": False, "ddof": ddof})


@pytest.mark.parametrize("ord", [1.0, 2.0, 3.0, math.inf, -math.inf, 0.0])
def test_norm(ord):
    x = values_in(4, (3, 4), np.float32, REAL)

    def ref(a):
        if ord == 0:
            return jnp.sum(a != 0, axis=1).astype(a.dtype)
        if ord == math.inf:
            return jnp.max(jnp.abs(a), axis=1)
        if ord == -math.inf:
            return jnp.min(jnp.abs(a), axis=1)
        return jnp.sum(jnp.abs(a) ** ord, axis=1) ** (1 / ord)

    check_op("norm", [x], ref, {"ord": ord, "axis": 1, "keepdims": False}, grad=ord != 0)


@pytest.mark.parametrize("name", ["argmax", "argmin"])
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_arg_reductions(name, axis):
    x = values_in(5, (4, 6), np.float32, REAL)
    fn = np.argmax if name == "argmax" else np.argmin
    check_op(name, [x], lambda a: jnp.asarray(fn(np.asarray(a), axis)).astype(jnp.int32),
             {"axis": axis, "keepdims": False})


# ----- shape ops ----------------------------------------------------------------------------------
X = values_in(6, (2, 3, 4), np.float32, REAL)
IDX = np.array([[0, 2, 1, 0], [1, 0, 0, 2]], np.int32)
SHAPE_CASES = [
    ("reshape", [X], lambda a: a.reshape(6, 4), {"shape": (6, -1)}),
    ("transpose", [X], lambda a: jnp.moveaxis(a, 0, -1), {"axes": (1, 2, 0)}),
    ("expand_dims", [X], lambda a: a[:, None, :, :, None], {"axis": (1, 4)}),
    ("squeeze", [X[:, :1]], lambda a: a[:, 0], {"axis": (1,)}),
    ("broadcast_to", [X[:1]], lambda a: jnp.concatenate([a] * 5), {"shape": (5, 3, 4)}),
    ("concat", [X, X[:, :1] * 2], lambda a, b: jnp.concatenate([a, b], 1), {"axis": 1}),
    ("stack", [X, X + 1], lambda a, b: jnp.concatenate([a[:, :, None], b[:, :, None]], 2),
     {"axis": 2}),
    ("split", [X], lambda a: (a[:, :, :1], a[:, :, 1:3], a[:, :, 3:]), {"indices": (1, 3),
                                                                       "axis": 2}),
    ("tile", [X], lambda a: jnp.concatenate([a, a], 2), {"reps": (1, 2)}),
    ("repeat", [X], lambda a: jnp.stack([a, a], 2).reshape(2, 6, 4),
     {"repeats": 2, "axis": 1}),
    ("gather", [X[0], IDX], lambda a, i: jnp.stack([a[i[r], jnp.arange(4)] for r in range(2)]),
     {"axis": 0}),
    ("gather", [X[0], IDX[:, :2]], lambda a, i: jnp.stack(
        [a[r][np.asarray(i[r])] for r in range(2)]), {"axis": 1}),
    ("scatter", [X[0], np.array([[2, 0, 1, 2]], np.int32), X[1, :1]],
     lambda a, i, s: a.at[np.asarray(i[0]), jnp.arange(4)].set(s[0]), {"axis": 0}),
    ("indexing_one_hot", [X[0], np.array([1, 3, 0], np.int32)],
     lambda a, i: a[jnp.arange(3), i], {"axis": 1, "keepdims": False}),
    ("indexing_one_hot", [X[0], np.array([1, 3, 0], np.int32)],
     lambda a, i: a[jnp.arange(3), i][:, None], {"axis": 1, "keepdims": True}),
    ("one_hot", [np.array([0, 2, 1], np.int32)], lambda i: jnp.eye(4, dtype=np.float32)[i],
     {"num_classes": 4, "dtype": np.dtype(np.float32)}),
    ("pad", [X[0]], lambda a: jnp.concatenate([jnp.full((3, 1), 7.0), a, jnp.full((3, 2), 7.0)],
                                              1), {"pad_width": ((0, 0), (1, 2)),
                                                   "mode": "constant", "constant_value": 7.0}),
    ("pad", [X[0]], lambda a: jnp.concatenate([a[:, :1], a], 1),
     {"pad_width": ((0, 0), (1, 0)), "mode": "edge", "constant_value": 0.0}),
    ("pad", [X[0]], lambda a: jnp.concatenate([a[:, 1:2], a], 1),
     {"pad_width": ((0, 0), (1, 0)), "mode": "reflect", "constant_value": 0.0}),
]


@pytest.mark.parametrize("case", SHAPE_CASES, ids=lambda c: c[0] if isinstance(c, tuple) else "")
def test_shape_ops(case):
    name, inputs, ref, attrs = case
    check_op(name, inputs, ref, attrs)


INDEXES = [
    1, -1, (0, 2), slice(1, None), (slice(None), None, 2), (Ellipsis, 1), (0, Ellipsis, None),
    (slice(None, None, -1),), np.array([1, 0, 1]), (slice(None), np.array([2, 0])),
    (np.array([0, 1]), np.array([1, 2])), X > 0.5, (0, X[0] > 0), (slice(0, 2), 1, slice(1, 3)),
]


@pytest.mark.parametrize("index", INDEXES, ids=[str(i)[:30] for i in range(len(INDEXES))])
def test_getitem_and_setitem(index):
    t = eg.Parameter(X)
    expected = X[index]
    got = t[index]
    np.testing.assert_array_equal(got.numpy(), expected)
    gm = eg.GradManager().attach([t])
    with gm:
        gm.backward(t[index].sum())
    g = np.zeros_like(X)
    np.add.at(g, index, 1.0)
    np.testing.assert_allclose(t.grad.numpy(), g)
    # setitem: values and gradients through both the old value and the written value
    base, value = eg.Parameter(X), eg.Parameter(np.full(expected.shape, 3.0, np.float32))
    gm = eg.GradManager().attach([base, value])
    with gm:
        y = base * 1.0
        y[index] = value * 2.0
        ref = X.copy()
        ref[index] = 6.0
        np.testing.assert_allclose(y.numpy(), ref)
        gm.backward((y * y).sum())
    written = np.zeros(X.shape, bool)
    written[index] = True
    np.testing.assert_allclose(base.grad.numpy(), np.where(written, 0.0, 2 * X), rtol=1e-6)
    if g.max() == 1:  # with repeated positions, which write wins is unspecified
        np.testing.assert_allclose(value.grad.numpy(), np.full(expected.shape, 24.0))


def test_getitem_setitem_ops_with_dynamic_index():
    check_op("getitem", [X, 1, np.array([0, 2], np.int32)], lambda a, i, j: a[i, j],
             {"spec": ("#", "#")})
    check_op("setitem", [X, X[0, 0] * 3, 1], lambda a, v, i: a.at[i, 0].set(v),
             {"spec": ("#", 0)})


def test_index_errors_name_the_problem():
    t = eg.tensor(X)
    with pytest.raises(IndexError, match=r"index 3 is out of range for axis 1 of a tensor of "
                                         r"shape \(2, 3, 4\); indices must lie in \[-3, 2\]"):
        t[0, 3]
    with pytest.raises(IndexError, match="too many indices"):
        t[0, 0, 0, 0]
    with pytest.raises(IndexError, match="dtype float"):
        t[np.array([0.5])]


def test_int_index_compiles_once():
    t = eg.tensor(np.arange(10.0, dtype=np.float32))
    op = eg.OPS["getitem"]
    t[0]
    before = op.jitted((("spec", ("#",)),))._cache_size()
    for i in range(1, 10):
        assert t[i].item() == i
    assert op.jitted((("spec", ("#",)),))._cache_size() == before


# ----- nn ops -------------------------------------------------------------------------------------
def _conv_ref(x, w, b, stride, padding, dilation, groups):
    """Convolution by explicit patch extraction (im2col) and einsum, per group."""
    n, c = x.shape[:2]
    k = w.shape[2:]
    xp = jnp.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in padding])
    out_sz = [(xp.shape[2 + d] - dilation[d] * (k[d] - 1) - 1) // stride[d] + 1
              for d in range(len(k))]
    patches = []
    for offs in np.ndindex(*k):
        sl = tuple(slice(o * dl, o * dl + s * (m - 1) + 1, s)
                   for o, dl, s, m in zip(offs, dilation, stride, out_sz))
        patches.append(xp[(slice(None), slice(None)) + sl])
    p = jnp.stack(patches, 2)  # n, c, K, *out
    cg, og = c // groups, w.shape[0] // groups
    outs = []
    for g in range(groups):
        wg = w[g * og:(g + 1) * og].reshape(og, cg, -1)
        outs.append(jnp.einsum("nck...,ock->no...", p[:, g * cg:(g + 1) * cg], wg))
    y = jnp.concatenate(outs, 1)
    return y if b is None else y + b.reshape((1, -1) + (1,) * len(k))


CONV_CASES = [
    ((2, 3, 9), (4, 3, 3), (1,), (1,), (1,), 1),
    ((2, 4, 7, 6), (6, 2, 3, 3), (1, 1), (1, 1), (1, 1), 2),
    ((1, 3, 8, 8), (4, 3, 3, 2), (2, 1), (0, 1), (1, 2), 1),
    ((2, 2, 5, 5), (2, 2, 1, 1), (1, 1), (0, 0), (1, 1), 1),
]


@pytest.mark.parametrize("xs, ws, stride, padding, dilation, groups", CONV_CASES)
@pytest.mark.parametrize("bias", [True, False])
def test_conv(xs, ws, stride, padding, dilation, groups, bias):
    rng = np.random.default_rng(7)
    x, w = rng.standard_normal(xs, np.float32), rng.standard_normal(ws, np.float32)
    b = rng.standard_normal(ws[0]).astype(np.float32) if bias else None
    attrs = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    check_op("conv", [x, w, b], lambda *a: _conv_ref(*a, **attrs), attrs, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("stride, padding, output_padding, dilation, groups", [
    ((1, 1), (0, 0), (0, 0), (1, 1), 1), ((2, 2), (1, 1), (1, 1), (1, 1), 1),
    ((2, 1), (1, 0), (0, 0), (1, 2), 2), ((3, 3), (0, 1), (2, 0), (1, 1), 1),
])
def test_conv_transpose_is_the_adjoint_of_conv(stride, padding, output_padding, dilation, groups):
    """conv_transpose(y, w) is the gradient of conv(x, w) with respect to x."""
    rng = np.random.default_rng(8)
    cin, cout, k = 4, 6, (3, 2)
    w = rng.standard_normal((cin, cout // groups, *k)).astype(np.float32)
    y = rng.standard_normal((2, cin, 4, 5)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    out_hw = [(y.shape[2 + d] - 1) * stride[d] - 2 * padding[d] + dilation[d] * (k[d] - 1) + 1
              + output_padding[d] for d in range(2)]
    # the adjoint conv maps (cout channels, out_hw) -> cin channels, and w, laid out
    # (in, out/groups, kh, kw), is exactly its (O, I/groups, kh, kw) kernel
    w_fwd = jnp.asarray(w)

    def ref(yy, ww, bb):
        del ww
        conv = lambda x: _conv_ref(x, w_fwd, None, stride, padding, dilation, groups)  # noqa: E731
        _, pull = jax.vjp(conv, jnp.zeros((2, cout, *out_hw), np.float32))
        return pull(yy)[0] + bb.reshape(1, -1, 1, 1)

    attrs = dict(stride=stride, padding=padding, output_padding=output_padding,
                 dilation=dilation, groups=groups)
    check_op("conv_transpose", [y, w, b], ref, attrs, rtol=1e-4, atol=1e-4, grad=False)
    # gradients (weight included) against jax.vjp of lax's own transposed convolution
    check_op("conv_transpose", [y, w, b], lambda yy, ww, bb: eg.OPS["conv_transpose"].fwd(
        yy, ww, bb, **attrs), attrs, rtol=1e-4, atol=1e-4)


def _windows(x, k, s, p, fill):
    """Every pooling window of an NCHW array, stacked on a last axis (padding filled)."""
    xp = jnp.pad(x, [(0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])], constant_values=fill)
    oh, ow = (xp.shape[2] - k[0]) // s[0] + 1, (xp.shape[3] - k[1]) // s[1] + 1
    wins = [xp[:, :, i:i + s[0] * (oh - 1) + 1:s[0], j:j + s[1] * (ow - 1) + 1:s[1]]
            for i in range(k[0]) for j in range(k[1])]
    return jnp.stack(wins, -1)


POOL_CASES = [((2, 2), (2, 2), (0, 0)), ((3, 3), (2, 2), (1, 1)), ((3, 2), (1, 2), (1, 0))]


@pytest.mark.parametrize("k, s, p", POOL_CASES)
def test_pooling(k, s, p):
    x = np.random.default_rng(9).standard_normal((2, 3, 7, 6)).astype(np.float32)
    attrs = {"kernel": k, "stride": s, "padding": p}
    check_op("max_pool2d", [x], lambda a: _windows(a, k, s, p, -jnp.inf).max(-1), attrs)
    ones = _windows(jnp.ones_like(x), k, s, p, 0.0).sum(-1)
    check_op("avg_pool2d", [x], lambda a: _windows(a, k, s, p, 0.0).sum(-1) / ones,
             {**attrs, "count_padding": False})
    check_op("avg_pool2d", [x], lambda a: _windows(a, k, s, p, 0.0).sum(-1) / (k[0] * k[1]),
             {**attrs, "count_padding": True})


@pytest.mark.parametrize("out", [(1, 1), (2, 3), (3, 4), (7, 6), (7, 2)])
def test_adaptive_avg_pool2d(out):
    """MegEngine's bins: stride n // o, window n - (o - 1) * stride."""
    x = np.random.default_rng(10).standard_normal((2, 3, 7, 6)).astype(np.float32)

    def bins(n, o):
        s = n // o
        return [(i * s, i * s + n - (o - 1) * s) for i in range(o)]

    def ref(a):
        return jnp.stack([jnp.stack([jnp.mean(a[:, :, h0:h1, w0:w1], (2, 3))
                                     for w0, w1 in bins(6, out[1])], -1)
                          for h0, h1 in bins(7, out[0])], -2)

    check_op("adaptive_avg_pool2d", [x], ref, {"out_shape": out})


def test_matmul_linear_embedding():
    rng = np.random.default_rng(11)
    a, b = rng.standard_normal((2, 1, 3, 4), np.float32), rng.standard_normal((5, 4, 2),
                                                                                np.float32)
    ein = lambda p, q: jnp.einsum("...ij,...jk->...ik", p, q)  # noqa: E731
    check_op("matmul", [a, b], ein, rtol=1e-5, atol=1e-5)
    v = rng.standard_normal(4).astype(np.float32)
    check_op("matmul", [a[0, 0], v], lambda p, q: jnp.sum(p * q, -1), atol=1e-5)
    w, bias = rng.standard_normal((6, 4), np.float32), rng.standard_normal(6).astype(np.float32)
    check_op("linear", [a, w, bias], lambda x, ww, bb: jnp.einsum("...i,oi->...o", x, ww) + bb,
             atol=1e-5)
    check_op("linear", [a, w, None], lambda x, ww, bb: jnp.einsum("...i,oi->...o", x, ww),
             atol=1e-5)
    idx = np.array([[1, 0], [5, 5]], np.int32)
    check_op("embedding", [idx, w], lambda i, ww: jnp.stack([ww[r] for r in np.asarray(i)]))


def _normalize(a, axes, eps):
    m = jnp.mean(a, axes, keepdims=True)
    v = jnp.mean((a - m) ** 2, axes, keepdims=True)
    return (a - m) / jnp.sqrt(v + eps)


@pytest.mark.parametrize("affine", [True, False])
def test_normalization(affine):
    rng = np.random.default_rng(12)
    x = rng.standard_normal((4, 6, 3, 2)).astype(np.float32) * 2 + 1
    w = rng.standard_normal(6).astype(np.float32) if affine else None
    b = rng.standard_normal(6).astype(np.float32) if affine else None
    ch = lambda t: 1.0 if t is None else t.reshape(1, -1, 1, 1)  # noqa: E731
    add = lambda t: 0.0 if t is None else t.reshape(1, -1, 1, 1)  # noqa: E731

    def bn_train(a, ww, bb):
        y = _normalize(a, (0, 2, 3), 1e-5) * ch(ww) + add(bb)
        return y, jnp.mean(a, (0, 2, 3)), jnp.var(a, (0, 2, 3), ddof=1)

    check_op("batch_norm_train", [x, w, b], bn_train, {"eps": 1e-5}, rtol=1e-4, atol=1e-5)
    rm, rv = rng.standard_normal(6).astype(np.float32), rng.uniform(0.5, 2, 6).astype(np.float32)
    check_op("batch_norm_eval", [x, rm, rv, w, b],
             lambda a, m, v, ww, bb: (a - ch(m)) / jnp.sqrt(ch(v) + 1e-5) * ch(ww) + add(bb),
             {"eps": 1e-5}, rtol=1e-4, atol=1e-5)
    check_op("running_stats_update", [rm, rv, rm * 2, rv * 3],
             lambda m, v, bm, bv: (0.9 * m + 0.1 * bm, 0.9 * v + 0.1 * bv), {"momentum": 0.9})
    lw = rng.standard_normal((3, 2)).astype(np.float32) if affine else None
    lb = rng.standard_normal((3, 2)).astype(np.float32) if affine else None
    check_op("layer_norm", [x, lw, lb], lambda a, ww, bb: _normalize(a, (2, 3), 1e-5)
             * (1.0 if ww is None else ww) + (0.0 if bb is None else bb),
             {"n_axes": 2, "eps": 1e-5}, rtol=1e-4, atol=1e-5)

    def gn(a, ww, bb):
        y = _normalize(a.reshape(4, 3, 2, 3, 2), (2, 3, 4), 1e-5).reshape(a.shape)
        return y * ch(ww) + add(bb)

    check_op("group_norm", [x, w, b], gn, {"groups": 3, "eps": 1e-5}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_softmax_log_softmax(axis):
    x = np.random.default_rng(13).standard_normal((3, 4, 5)).astype(np.float32) * 3

    def sm(a):
        e = jnp.exp(a - jnp.max(a, axis, keepdims=True))
        return e / jnp.sum(e, axis, keepdims=True)

    check_op("softmax", [x], sm, {"axis": axis})
    check_op("log_softmax", [x], lambda a: jnp.log(sm(a)), {"axis": axis}, atol=1e-5)


@pytest.mark.parametrize("mask_kind", [None, "bool", "float", "causal"])
def test_scaled_dot_product_attention(mask_kind):
    rng = np.random.default_rng(14)
    q, k, v = (rng.standard_normal((2, 3, s, 8)).astype(np.float32) for s in (5, 6, 6))
    mask = {None: None, "causal": None,
            "bool": rng.integers(0, 2, (5, 6)).astype(bool) | np.eye(5, 6, dtype=bool),
            "float": rng.standard_normal((2, 1, 5, 6)).astype(np.float32)}[mask_kind]
    causal = mask_kind == "causal"

    def ref(qq, kk, vv, m):
        s = jnp.einsum("bhqd,bhkd->bhqk", qq, kk) / math.sqrt(8)
        if causal:
            s = s - 1e9 * (np.arange(6)[None] > np.arange(5)[:, None])
        if mask_kind == "bool":
            s = s - 1e9 * (~m)
        elif mask_kind == "float":
            s = s + m
        p = jnp.exp(s - s.max(-1, keepdims=True))
        return jnp.einsum("bhqk,bhkd->bhqd", p / p.sum(-1, keepdims=True), vv)

    check_op("scaled_dot_product_attention", [q, k, v, mask], ref,
             {"is_causal": causal, "scale": 1 / math.sqrt(8)}, rtol=1e-4, atol=1e-5)


def test_dropout_op():
    x = np.random.default_rng(15).standard_normal((50, 40)).astype(np.float32)
    key = np.asarray(jax.random.key_data(jax.random.key(3)))
    keep = np.asarray(jax.random.bernoulli(jax.random.key(3), 0.7, x.shape))
    check_op("dropout", [x, key], lambda a, kk: jnp.where(keep, a / 0.7, 0.0),
             {"drop_prob": 0.3})
    assert abs(keep.mean() - 0.7) < 0.05


@pytest.mark.parametrize("reduction", ["mean", pytest.param("sum", marks=pytest.mark.slow),
                                       pytest.param("none", marks=pytest.mark.slow)])
def test_losses(reduction):
    rng = np.random.default_rng(16)
    logits = rng.standard_normal((6, 5, 2)).astype(np.float32)
    label = rng.integers(0, 5, (6, 2)).astype(np.int32)
    red = {"mean": jnp.mean, "sum": jnp.sum, "none": lambda t: t}[reduction]
    onehot = np.eye(5, dtype=np.float32)[label].transpose(0, 2, 1)

    def lsm(a):
        return a - jnp.log(jnp.sum(jnp.exp(a), 1, keepdims=True))

    for ls in (0.0, 0.1):
        target = onehot * (1 - ls) + ls / 5
        check_op("cross_entropy", [logits, label],
                 lambda a, y, target=target: red(-jnp.sum(target * lsm(a), 1)),
                 {"axis": 1, "with_logits": True, "label_smooth": ls, "reduction": reduction},
                 atol=1e-5)
    probs = np.exp(np.asarray(lsm(jnp.asarray(logits))))
    check_op("cross_entropy", [probs, label], lambda p, y: red(-jnp.sum(onehot * jnp.log(p), 1)),
             {"axis": 1, "with_logits": False, "label_smooth": 0.0, "reduction": reduction},
             rtol=1e-4, atol=1e-5)
    logp = np.asarray(lsm(jnp.asarray(logits)))
    check_op("nll_loss", [logp, label], lambda a, y: red(-jnp.sum(onehot * a, 1)),
             {"axis": 1, "reduction": reduction})
    z, t = rng.standard_normal((4, 3)).astype(np.float32), rng.uniform(0, 1, (4, 3)).astype(
        np.float32)
    sig = lambda a: 1 / (1 + jnp.exp(-a))  # noqa: E731
    bce = lambda p, y: -(y * jnp.log(p) + (1 - y) * jnp.log(1 - p))  # noqa: E731
    check_op("binary_cross_entropy", [z, t], lambda a, y: red(bce(sig(a), y)),
             {"with_logits": True, "reduction": reduction}, rtol=1e-4, atol=1e-5)
    p = np.asarray(sig(jnp.asarray(z)))
    check_op("binary_cross_entropy", [p, t], lambda a, y: red(bce(a, y)),
             {"with_logits": False, "reduction": reduction}, rtol=1e-4, atol=1e-5)
    check_op("mse_loss", [z, t], lambda a, y: red((a - y) ** 2), {"reduction": reduction})
    check_op("l1_loss", [z, t], lambda a, y: red(jnp.abs(a - y)), {"reduction": reduction})


# ----- state ops ----------------------------------------------------------------------------------
def test_random_ops():
    key = np.asarray(jax.random.key_data(jax.random.key(5)))
    check_op("random_key", [5], lambda s: jax.random.key_data(jax.random.key(5)))
    nxt, sub = jax.random.split(jax.random.key(5))
    check_op("random_split", [key], lambda k: (jax.random.key_data(nxt), jax.random.key_data(sub)))
    draws = eg.apply(eg.OPS["random_normal"], eg.tensor(key), 2.0, 0.5, shape=(4000,),
                     dtype=np.dtype(np.float32)).numpy()
    assert abs(draws.mean() - 2.0) < 0.05 and abs(draws.std() - 0.5) < 0.05
    check_op("random_normal", [key, 2.0, 0.5],
             lambda k, m, s: m + s * jax.random.normal(jax.random.key(5), (3,)),
             {"shape": (3,), "dtype": np.dtype(np.float32)})
    check_op("random_uniform", [key, -1.0, 3.0],
             lambda k, lo, hi: jax.random.uniform(jax.random.key(5), (3,), minval=lo, maxval=hi),
             {"shape": (3,), "dtype": np.dtype(np.float32)})
    perm = eg.apply(eg.OPS["random_permutation"], eg.tensor(key), n=50,
                    dtype=np.dtype(np.int32)).numpy()
    assert sorted(perm.tolist()) == list(range(50)) and perm.tolist() != list(range(50))
    check_op("random_permutation", [key], lambda k: jax.random.permutation(
        jax.random.key(5), 7).astype(jnp.int32), {"n": 7, "dtype": np.dtype(np.int32)})


@pytest.mark.parametrize("nesterov", [False, True])
def test_optimizer_update_ops(nesterov):
    rng = np.random.default_rng(17)
    p, g, buf = (rng.standard_normal(5).astype(np.float32) for _ in range(3))
    gd = g + 0.01 * p
    nb = 0.9 * buf + gd
    step = gd + 0.9 * nb if nesterov else nb
    check_op("sgd_update", [p, g, buf, 0.1, 0.9, 0.01],
             lambda *a: (jnp.asarray(p - 0.1 * step), jnp.asarray(nb)),
             {"nesterov": nesterov, "n": 1})
    check_op("sgd_plain_update", [p, g, 0.1, 0.01], lambda *a: (jnp.asarray(p - 0.1 * gd),),
             {"n": 1})
    m, v = rng.standard_normal(5).astype(np.float32), rng.uniform(0, 1, 5).astype(np.float32)
    for decoupled in (False, True):
        gg = g if decoupled else g + 0.01 * p
        pp = p * (1 - 0.1 * 0.01) if decoupled else p
        m2, v2 = 0.9 * m + 0.1 * gg, 0.99 * v + 0.01 * gg**2
        new_p = pp - 0.1 / (1 - 0.9**3) * m2 / (np.sqrt(v2) / np.sqrt(1 - 0.99**3) + 1e-8)
        check_op("adam_update", [p, g, m, v, np.array(2, np.int32), 0.1, 0.9, 0.99, 1e-8, 0.01],
                 lambda *a, new_p=new_p, m2=m2, v2=v2: (jnp.asarray(new_p), jnp.asarray(m2),
                                                        jnp.asarray(v2), jnp.asarray(3)),
                 {"decoupled": decoupled, "n": 1}, rtol=1e-5, atol=1e-6)


def test_optimizer_updates_of_a_group_match_one_parameter_at_a_time():
    rng = np.random.default_rng(3)
    shapes = [(3, 4), (4,), ()]
    p, g, m, v = ([rng.standard_normal(s).astype(np.float32) for s in shapes] for _ in range(4))
    step = [np.array(i, np.int32) for i in range(3)]
    hyper = (0.1, 0.9, 0.99, 1e-8, 0.01)
    # fresh tensors per call: an update consumes (donates) its parameter and state buffers
    grouped = eg.apply(eg.OPS["adam_update"], *map(eg.tensor, p + g + m + v + step), *hyper,
                       n=3, decoupled=False)
    for i in range(3):
        single = eg.apply(eg.OPS["adam_update"], *map(eg.tensor, (p[i], g[i], m[i], v[i],
                                                                  step[i])),
                          *hyper, n=1, decoupled=False)
        for k in range(4):  # new parameters, m, v and steps come in lists of 3
            np.testing.assert_array_equal(grouped[3 * k + i].numpy(), single[k].numpy())


def test_updates_donate_only_buffers_nothing_else_holds():
    w = eg.Parameter(np.ones((64, 64), np.float32))
    opt = optim.SGD([w], lr=0.1, momentum=0.9)
    w.grad = eg.ones((64, 64))
    kept = w.detach()  # shares w's buffer: must survive the update
    opt.step()
    assert (kept.numpy() == 1).all() and (w.numpy() == 0.9).all()
    address = eg.hooks.data(w).unsafe_buffer_pointer()  # (eg.read would hand it out)
    opt.step()  # w's buffer is held by w alone: updated in place
    assert eg.hooks.data(w).unsafe_buffer_pointer() == address
    np.testing.assert_allclose(w.numpy(), 0.9 - 0.1 * 1.9, rtol=1e-6)


# ----- coverage ---------------------------------------------------------------------------------
COVERED = (
    set(UNARY) | set(BINARY) | set(PREDICATES) | set(REDUCTIONS) | {c[0] for c in SHAPE_CASES}
    | {"leaky_relu", "clip", "where", "astype", "var", "std", "norm", "argmax", "argmin",
       "getitem", "setitem", "conv", "conv_transpose", "max_pool2d", "avg_pool2d",
       "adaptive_avg_pool2d", "matmul", "linear", "embedding", "batch_norm_train",
       "batch_norm_eval", "running_stats_update", "layer_norm", "group_norm", "softmax",
       "log_softmax", "scaled_dot_product_attention", "dropout", "cross_entropy", "nll_loss",
       "binary_cross_entropy", "mse_loss", "l1_loss", "random_key", "random_split",
       "random_normal", "random_uniform", "random_permutation", "sgd_update",
       "sgd_plain_update", "adam_update", "int_pow"}
    # Collectives: values and gradients against numpy on 2 processes in
    # tests/distributed/test_per_rank.py.
    | {f"dist.{n}" for n in ("all_reduce_sum", "all_reduce_max", "all_reduce_min", "all_gather",
                             "broadcast", "reduce_scatter_sum")}
)


def test_every_op_has_a_test():
    """Every registered op is named in the `COVERED` set of this module or of another
    `tests/eager/test_ops_*.py` module, and every name there is a registered op."""
    covered = set(COVERED)
    for path in sorted(Path(__file__).parent.glob("test_ops_*.py")):
        covered |= importlib.import_module(f"tests.eager.{path.stem}").COVERED
    assert set(eg.OPS) - covered == set(), "ops without a test entry"
    assert covered - set(eg.OPS) == set(), "test entries for ops that do not exist"
