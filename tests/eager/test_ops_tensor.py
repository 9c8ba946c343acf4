"""Ordering, scans, einsum, triangles, data-dependent selections, resizing, MegEngine's
convolution arguments and the embedding bounds check: each op's value against an independent
numpy/jnp reference and its gradient against `jax.vjp` of that reference (`check_op`), plus the
`F` wrappers' argument checks and their behaviour inside regions."""

import functools as ft

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
from partial import ValueReadError, partial_trace, xla_trace
from tests.helpers import examples

from .op_check import assert_close, check_op

# a value-and-gradient check compiles the op, its vjp and the reference's vjp for every new
# shape (~0.4 s): those tests draw fewer examples
GRAD = examples(3)

COVERED = {"sort", "argsort", "topk", "cumsum", "cumprod", "einsum", "tril", "triu",
           "count_nonzero", "nonzero", "cond_take", "interpolate", "any", "all"}

shapes = hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=5)


def _with_ties(seed, shape, dtype=np.float32):
    """Values drawn from a few levels, so that ties are common (order among them is tested)."""
    return np.random.default_rng(seed).integers(-3, 4, shape).astype(dtype)


def _np_order(x, descending):
    """numpy's stable argsort along the last axis, largest first when `descending` (negating
    keeps a stable order among ties)."""
    return np.argsort(-x if descending else x, axis=-1, kind="stable").astype(np.int32)


def _gather_ref(idx):
    return lambda a: (jnp.take_along_axis(a, jnp.asarray(idx), -1), jnp.asarray(idx))


# ----- sort, argsort, topk ------------------------------------------------------------------------
@GRAD
@given(shape=shapes, descending=st.booleans(), seed=st.integers(0, 2**16),
       dtype=st.sampled_from([np.float32, np.int32]))
def test_sort_and_argsort_are_stable(shape, descending, seed, dtype):
    x = _with_ties(seed, shape, dtype)
    idx = _np_order(x, descending)
    check_op("sort", [x], _gather_ref(idx), {"descending": descending}, seed=seed)
    check_op("argsort", [x], lambda a: jnp.asarray(idx), {"descending": descending})


@GRAD
@given(shape=shapes, data=st.data(), seed=st.integers(0, 2**16))
def test_topk_smallest_by_default_largest_when_descending(shape, data, seed):
    x = _with_ties(seed, shape)
    k = data.draw(st.integers(1, shape[-1]))
    descending, kth_only = data.draw(st.booleans()), data.draw(st.booleans())
    idx = _np_order(x, descending)[..., :k]
    if kth_only:
        idx = idx[..., -1:]
    ref = _gather_ref(idx)
    if kth_only:
        ref = lambda a: tuple(o[..., 0] for o in _gather_ref(idx)(a))  # noqa: E731
    check_op("topk", [x], ref, {"k": k, "descending": descending, "kth_only": kth_only},
             seed=seed)


@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.int8])
@pytest.mark.parametrize("descending", [False, True])
def test_topk_integers_at_the_extremes_of_their_range(dtype, descending):
    info = np.iinfo(dtype)
    x = np.array([[3, info.min, info.max, 0, info.min, 1]], dtype)
    idx = _np_order(x.astype(np.int64), descending)[..., :4]
    check_op("topk", [x], _gather_ref(idx), {"k": 4, "descending": descending,
                                             "kth_only": False})


def test_topk_megengine_example_and_functional_forms():
    x = eg.tensor(np.array([2, 4, 6, 8, 7, 5, 3, 1], np.float32))
    top, idx = F.topk(x, 5, descending=False)
    assert top.numpy().tolist() == [1, 2, 3, 4, 5] and idx.numpy().tolist() == [7, 0, 6, 1, 5]
    top, idx = F.topk(x, 2)  # MegEngine's default: the largest
    assert top.numpy().tolist() == [8, 7] and idx.numpy().tolist() == [3, 4]
    assert idx.dtype == np.int32
    kth, at = F.topk(x, 3, descending=True, kth_only=True)
    assert (kth.shape, kth.item(), at.item()) == ((), 6.0, 2)
    values, _ = F.topk(x, 3, descending=False, no_sort=True)
    assert sorted(values.numpy().tolist()) == [1, 2, 3]
    v, i = F.sort(eg.tensor([[3.0, 1.0, 2.0]]), descending=True)
    assert v.numpy().tolist() == [[3, 2, 1]] and i.numpy().tolist() == [[0, 2, 1]]
    assert F.argsort(eg.tensor([3.0, 1.0, 2.0])).numpy().tolist() == [1, 2, 0]


def test_topk_k_as_megengine_takes_it():
    """A k above the axis length gives the whole axis, a negative k the other end, and a Tensor
    k is read (the zoo's label sampler passes `num_samples - mask.sum()`)."""
    x = eg.tensor(np.array([[2, 4, 1, 3]], np.float32))
    assert F.topk(x, 9)[0].numpy().tolist() == [[4, 3, 2, 1]]
    assert F.topk(x, -2)[0].numpy().tolist() == [[1, 2]]
    assert F.topk(x, -1, descending=False)[0].numpy().tolist() == [[4]]
    assert F.topk(x, eg.tensor(2) - eg.tensor(4))[1].numpy().tolist() == [[2, 0]]
    kth, at = F.topk(x, 9, kth_only=True)
    assert (kth.numpy().tolist(), at.numpy().tolist()) == ([1.0], [2])


@pytest.mark.parametrize("call, match", [
    (lambda: F.topk(eg.ones((2, 3)), 0), r"topk: k must be a nonzero int.*got 0.*\(2, 3\)"),
    (lambda: F.topk(eg.ones((2, 3)), 1.5), "topk: k must be a nonzero int"),
    (lambda: F.topk(eg.tensor(1.0), 1), "topk: needs at least one axis"),
    (lambda: F.sort(eg.tensor(1.0)), "sort: needs at least one axis"),
    (lambda: F.argsort(eg.tensor(1.0)), "argsort: needs at least one axis"),
    (lambda: F.cumsum(eg.ones((2, 3)), 2), r"cumsum: axis must be an int in \[-2, 1\].*got 2"),
    (lambda: F.cumprod(eg.ones((2, 3)), None), "cumprod: axis must be an int"),
    (lambda: F.tril(eg.ones(3)), r"tril: needs a matrix.*\(3,\)"),
    (lambda: F.triu(eg.ones(3)), "triu: needs a matrix"),
    (lambda: F.nonzero(eg.tensor(1.0)), "nonzero: needs at least one axis"),
])
def test_argument_errors_name_the_function_and_what_it_got(call, match):
    with pytest.raises(OpArgumentError, match=match):
        call()


# ----- scans --------------------------------------------------------------------------------------
@ft.partial(jax.jit, static_argnums=(1, 2))
def _prefix(a, axis, reduce):
    """out[i] = reduce over j of (a[j] if j <= i else the identity), along `axis`."""
    n = a.shape[axis]
    a = jnp.moveaxis(a, axis, 0)
    upto = (np.arange(n)[None, :] <= np.arange(n)[:, None]).reshape((n, n) + (1,) * (a.ndim - 1))
    identity = 0.0 if reduce is jnp.sum else 1.0
    return jnp.moveaxis(reduce(jnp.where(upto, a[None], identity), axis=1), 0, axis)


@GRAD
@given(shape=shapes, data=st.data(), seed=st.integers(0, 2**16))
def test_scans(shape, data, seed):
    name = data.draw(st.sampled_from(["cumsum", "cumprod"]))
    reduce = jnp.sum if name == "cumsum" else jnp.prod
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = np.random.default_rng(seed).uniform(-2, 2, shape).astype(np.float32)
    check_op(name, [x], lambda a: _prefix(a, axis % len(shape), reduce),
             {"axis": axis % len(shape)}, rtol=1e-5, atol=1e-5, seed=seed)
    assert_close(getattr(F, name)(eg.tensor(x), axis), _prefix(jnp.asarray(x), axis % len(shape),
                                                               reduce), 1e-5, 1e-5, f"F.{name}")


def test_scans_through_zeros_and_on_integers():
    x = np.array([[2.0, 0.0, 3.0, 0.0, 1.5]], np.float32)  # zeros: the product's gradient
    check_op("cumprod", [x], lambda a: _prefix(a, 1, jnp.prod), {"axis": 1})
    ints = np.array([[1, -2, 3], [4, 5, -6]], np.int32)
    check_op("cumsum", [ints], lambda a: jnp.asarray(np.cumsum(ints, 0, dtype=np.int32)),
             {"axis": 0})
    assert F.cumsum(eg.tensor(ints), -1).numpy().tolist() == [[1, -1, 2], [4, 9, 3]]
    assert F.cumprod(eg.tensor(ints), 1).dtype == np.int32


# ----- einsum -------------------------------------------------------------------------------------
EINSUM_CASES = [
    ("ij,jk->ik", [(3, 4), (4, 2)], lambda a, b: (a[:, :, None] * b[None]).sum(1)),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)],
     lambda a, b: (a[:, :, :, None] * b[:, None]).sum(2)),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)],
     lambda a, b: (a[..., :, :, None] * b[..., None, :, :]).sum(-2)),
    ("ii->", [(4, 4)], lambda a: (a * jnp.eye(4)).sum()),
    ("i,j->ij", [(3,), (4,)], lambda a, b: a[:, None] * b[None, :]),
    ("ij->ji", [(3, 5)], lambda a: a.T),
    ("ijk->", [(2, 3, 4)], lambda a: a.sum()),
    ("bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)],
     lambda q, k: (q[:, :, :, None] * k[:, :, None]).sum(-1)),
    ("i j, j ->i", [(3, 4), (4,)], lambda a, b: (a * b).sum(1)),
]


@pytest.mark.parametrize("subscripts, in_shapes, ref", EINSUM_CASES,
                         ids=[c[0] for c in EINSUM_CASES])
def test_einsum(subscripts, in_shapes, ref):
    rng = np.random.default_rng(len(subscripts))
    xs = [rng.standard_normal(s).astype(np.float32) for s in in_shapes]
    with_grad = subscripts in ("ij,jk->ik", "...ij,...jk->...ik", "ii->", "i,j->ij")
    check_op("einsum", xs, ref, {"subscripts": subscripts.replace(" ", "")}, rtol=1e-5,
             atol=1e-5, grad=with_grad)
    got = F.einsum(subscripts, *(eg.tensor(x) for x in xs))
    assert_close(got, ref(*map(jnp.asarray, xs)), 1e-5, 1e-5, "F.einsum")
    assert_close(F.einsum(subscripts, [eg.tensor(x) for x in xs]), got, 0, 0, "list form")


@pytest.mark.parametrize("args, match", [
    (("ij,jk->ik", np.ones((2, 3))), "names 2 operands, got 1"),
    (("ij,jk->ik", np.ones((2, 3)), np.ones((4, 2))), "label 'j'.*size 4 in operand 1.*but 3"),
    (("ijk,jk", np.ones((2, 3)), np.ones((3, 3))), "term 'ijk'.*operand 0 of shape \\(2, 3\\)"),
    (("...ijk", np.ones((2, 3))), "term '...ijk'"),
])
def test_einsum_argument_errors(args, match):
    with pytest.raises(OpArgumentError, match=f"einsum: .*{match}"):
        F.einsum(args[0], *(eg.tensor(a) for a in args[1:]))
    with pytest.raises(OpTypeError, match="subscripts must be a string"):
        F.einsum(eg.ones((2, 2)), eg.ones((2, 2)))


# ----- triangles ----------------------------------------------------------------------------------
@GRAD
@given(shape=hnp.array_shapes(min_dims=2, max_dims=4, min_side=1, max_side=5),
       k=st.integers(-3, 3), seed=st.integers(0, 2**16), name=st.sampled_from(["tril", "triu"]))
def test_triangles(shape, k, seed, name):
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    rows, cols = np.arange(shape[-2])[:, None], np.arange(shape[-1])[None, :]
    keep = cols - rows <= k if name == "tril" else cols - rows >= k
    check_op(name, [x], lambda a: a * keep, {"k": k}, seed=seed)
    other = "triu" if name == "tril" else "tril"
    keep_other = cols - rows >= k if name == "tril" else cols - rows <= k
    assert_close(getattr(F, name)(eg.tensor(x), k), x * keep, 0, 0, f"F.{name}")
    assert_close(getattr(F, other)(eg.tensor(x), k), x * keep_other, 0, 0, f"F.{other}")


# ----- nonzero and cond_take ----------------------------------------------------------------------
def _sparse(seed, shape, dtype):
    rng = np.random.default_rng(seed)
    return (rng.integers(-2, 3, shape) * (rng.random(shape) < 0.4)).astype(dtype)


@given(shape=shapes, seed=st.integers(0, 2**16), keepdims=st.booleans(), data=st.data(),
       dtype=st.sampled_from([np.float32, np.int32, np.bool_]))
def test_any_and_all(shape, seed, keepdims, data, dtype):
    x = _sparse(seed, shape, dtype)
    axis = data.draw(st.none() | st.integers(-len(shape), len(shape) - 1))
    for name, ref in (("any", jnp.any), ("all", jnp.all)):
        attrs = {"axis": axis, "keepdims": keepdims}
        check_op(name, [x], lambda a, ref=ref: ref(a, axis=axis, keepdims=keepdims), attrs)
        got = getattr(eg.tensor(x), name)(axis, keepdims)
        assert_close(got, ref(x, axis=axis, keepdims=keepdims), 0, 0, f"Tensor.{name}")


@pytest.mark.slow
@given(shape=shapes, seed=st.integers(0, 2**16),
       dtype=st.sampled_from([np.float32, np.int32, np.bool_]))
def test_nonzero(shape, seed, dtype):
    x = _sparse(seed, shape, dtype)
    coords = [c.astype(np.int32) for c in np.nonzero(x)]
    n = len(coords[0])
    check_op("count_nonzero", [x], lambda a: jnp.asarray(n, np.int32))
    check_op("nonzero", [x], lambda a: tuple(map(jnp.asarray, coords)),
             {"size": n, "as_tuple": True})
    check_op("nonzero", [x], lambda a: (jnp.asarray(np.stack(coords, 1)),),
             {"size": n, "as_tuple": False})
    got = F.nonzero(eg.tensor(x))
    assert got.shape == (n, len(shape)) and got.numpy().tolist() == np.argwhere(x).tolist()
    as_tuple = F.nonzero(eg.tensor(x), as_tuple=True)
    assert [c.numpy().tolist() for c in as_tuple] == [c.tolist() for c in coords]


@GRAD
@given(shape=shapes, seed=st.integers(0, 2**16))
def test_cond_take(shape, seed):
    rng = np.random.default_rng(seed)
    mask = rng.random(shape) < 0.5
    x = rng.standard_normal(shape).astype(np.float32)
    idx = np.flatnonzero(mask).astype(np.int32)
    check_op("cond_take", [mask, x], lambda m, a: (a.reshape(-1)[idx], jnp.asarray(idx)),
             {"size": len(idx)}, seed=seed)
    values, where = F.cond_take(eg.tensor(mask), eg.tensor(x))
    assert_close(values, x[mask], 0, 0, "F.cond_take values")
    assert where.dtype == np.int32 and where.numpy().tolist() == idx.tolist()


def test_selections_with_nothing_selected_and_the_megengine_example():
    assert F.nonzero(eg.zeros((2, 3))).shape == (0, 2)
    v, i = F.cond_take(eg.tensor([False, False]), eg.tensor([1.0, 2.0]))
    assert v.shape == i.shape == (0,)
    mask = eg.tensor(np.array([[True, False], [False, True]]))
    v, i = F.cond_take(mask, eg.tensor(np.array([[1, np.inf], [np.nan, 4]], np.float32)))
    assert v.numpy().tolist() == [1.0, 4.0] and i.numpy().tolist() == [0, 3]


def test_cond_take_argument_errors():
    with pytest.raises(OpTypeError, match="cond_take: mask must be a bool tensor, got dtype "
                                          "float32"):
        F.cond_take(eg.ones(3), eg.ones(3))
    with pytest.raises(OpArgumentError, match=r"cond_take: mask of shape \(3,\) .* \(2, 3\)"):
        F.cond_take(eg.tensor([True, False, True]), eg.ones((2, 3)))


def test_cond_take_gradient_flows_to_the_taken_elements():
    x = eg.Parameter(np.array([[1.0, -2.0], [3.0, -4.0]], np.float32))
    gm = GradManager().attach([x])
    with gm:
        values, _ = F.cond_take(x > 0, x)
        gm.backward((values * values).sum())
    assert x.grad.numpy().tolist() == [[2.0, 0.0], [6.0, 0.0]]


@pytest.mark.parametrize("select, name", [
    (lambda x: F.nonzero(x), "F.nonzero()"),
    (lambda x: F.cond_take(x > 0, x)[0], "F.cond_take()"),
])
def test_selections_in_a_region_compile_or_read_the_count_through_the_value_read_path(select,
                                                                                     name):
    x = eg.tensor(np.array([[0.5, -1.0, 0.0], [2.0, 0.0, 3.0]], np.float32))
    for decorator in (partial_trace, xla_trace):
        # reduced inside the region: compiled at a fixed capacity, no value read
        region = decorator(lambda t: (select(t) * 2).astype("float32").sum())
        assert_close(region(x), (select(x) * 2).astype("float32").sum(), 0, 0, name)
        with pytest.raises(ValueReadError) as info:  # its size read: a value read
            decorator(lambda t: select(t).shape[0] * 2)(x)
        message = str(info.value)
        assert "data-dependent" in message and "test_ops_tensor.py" in message
        assert "select(t).shape[0] * 2" in message

    region = partial_trace(lambda t: select(t * 1.0) * 2, graph_breaks=True)
    for data in (x, -x):  # two counts: the segment after the break compiles per count
        assert_close(region(data), select(data) * 2, 0, 0, f"{name} with graph_breaks")
    assert region.cache_info().breaks[0].startswith(name)


def test_cond_take_gradient_through_a_region_with_a_break():
    data = np.array([[0.5, -1.0], [2.0, 3.0]], np.float32)
    grads = []
    for wrap in (lambda f: f, lambda f: partial_trace(f, graph_breaks=True)):
        x = eg.Parameter(data)
        f = wrap(lambda t: (F.cond_take(t > 0, t * 3.0)[0] ** 2).sum())
        gm = GradManager().attach([x])
        with gm:
            gm.backward(f(x))
        grads.append(x.grad.numpy())
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-6)
    assert grads[0].tolist() == [[9.0, 0.0], [36.0, 54.0]]


# ----- interpolate --------------------------------------------------------------------------------
def _nearest_matrix(n_in, n_out):
    """Row i picks source floor(i * (n_in / n_out)), with the ratio and the product in float32
    as PyTorch computes them, clamped to the last source row."""
    m = np.zeros((n_out, n_in), np.float32)
    ratio = np.float32(n_in) / np.float32(n_out)
    for i in range(n_out):
        m[i, min(int(np.floor(np.float32(i) * ratio)), n_in - 1)] = 1.0
    return m


def _bilinear_matrix(n_in, n_out, align_corners):
    """Row i mixes the two source rows around its source position: i * (n_in - 1) / (n_out - 1)
    with corners aligned, else (i + 0.5) * n_in / n_out - 0.5 clamped at 0."""
    m = np.zeros((n_out, n_in))
    for i in range(n_out):
        if align_corners:
            src = i * (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
        else:
            src = max((i + 0.5) * n_in / n_out - 0.5, 0.0)
        lo = min(int(np.floor(src)), n_in - 1)
        hi = min(lo + 1, n_in - 1)
        m[i, lo] += 1 - (src - lo)
        m[i, hi] += src - lo
    return m.astype(np.float32)


def _resize_ref(size, mode, align_corners):
    def ref(a):
        h, w = a.shape[2:]
        if mode == "nearest":
            mh, mw = _nearest_matrix(h, size[0]), _nearest_matrix(w, size[1])
        else:
            mh, mw = (_bilinear_matrix(h, size[0], align_corners),
                      _bilinear_matrix(w, size[1], align_corners))
        return jnp.einsum("oh,nchw,pw->ncop", mh, a, mw)

    return ref


@GRAD
@given(in_hw=st.tuples(st.integers(1, 6), st.integers(1, 6)),
       out_hw=st.tuples(st.integers(1, 9), st.integers(1, 9)),
       mode=st.sampled_from(["nearest", "bilinear"]), align=st.booleans(),
       seed=st.integers(0, 2**16))
def test_interpolate(in_hw, out_hw, mode, align, seed):
    x = np.random.default_rng(seed).standard_normal((2, 3, *in_hw)).astype(np.float32)
    align = align and mode == "bilinear"
    check_op("interpolate", [x], _resize_ref(out_hw, mode, align),
             {"size": out_hw, "mode": mode, "align_corners": align}, rtol=1e-5, atol=1e-5,
             seed=seed)
    got = F.interpolate(eg.tensor(x), size=out_hw, mode=mode,
                        align_corners=align if mode == "bilinear" else None)
    assert_close(got, _resize_ref(out_hw, mode, align)(jnp.asarray(x)), 1e-5, 1e-5, "F")


def test_interpolate_matches_pytorchs_published_values():
    x = eg.tensor(np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2))
    assert F.interpolate(x, scale_factor=2).numpy()[0, 0].tolist() == [
        [0.0, 0.25, 0.75, 1.0], [0.5, 0.75, 1.25, 1.5], [1.5, 1.75, 2.25, 2.5],
        [2.0, 2.25, 2.75, 3.0]]
    assert F.interpolate(x, size=3, align_corners=True).numpy()[0, 0].tolist() == [
        [0.0, 0.5, 1.0], [1.0, 1.5, 2.0], [2.0, 2.5, 3.0]]
    assert F.interpolate(x, size=(3, 3), mode="nearest").numpy()[0, 0].tolist() == [
        [0.0, 0.0, 1.0], [0.0, 0.0, 1.0], [2.0, 2.0, 3.0]]


def test_interpolate_nearest_uses_float32_arithmetic_for_the_source_index():
    """For 2 -> 82 rows the exact floor(41 * 2 / 82) is 1, PyTorch's float32 rule gives 0."""
    x = np.arange(2, dtype=np.float32).reshape(1, 1, 2, 1)
    got = F.interpolate(eg.tensor(x), size=(82, 1), mode="nearest").numpy()[0, 0, :, 0]
    assert got[41] == 0.0 and (41 * 2) // 82 == 1
    assert_close(got, _nearest_matrix(2, 82) @ x[0, 0, :, 0], 0, 0, "2 -> 82")


def test_interpolate_scale_factor_floors_the_size_and_accepts_ints_and_halves():
    x = eg.tensor(np.random.default_rng(3).standard_normal((1, 2, 5, 4)).astype(np.float32))
    for factor, size in ((1.5, (7, 6)), ((2, 0.5), (10, 2))):
        got = F.interpolate(x, scale_factor=factor)
        assert_close(got, F.interpolate(x, size=size), 0, 0, f"scale_factor={factor}")
    half = F.interpolate(eg.tensor(np.ones((1, 1, 4, 4), np.float16)), size=2)
    assert half.dtype == np.float16
    ints = F.interpolate(eg.tensor(np.arange(4).reshape(1, 1, 2, 2)), size=4, mode="nearest")
    assert ints.dtype == np.int32 and ints.numpy()[0, 0, 3].tolist() == [2, 2, 3, 3]


@pytest.mark.parametrize("kwargs, error, match", [
    ({"size": 4, "mode": "bicubic"}, OpArgumentError, "mode must be one of"),
    ({"size": 4, "mode": "nearest", "align_corners": False}, OpArgumentError, "align_corners"),
    ({}, OpArgumentError, "exactly one of size and scale_factor"),
    ({"size": 4, "scale_factor": 2.0}, OpArgumentError, "exactly one of size and scale_factor"),
    ({"scale_factor": 0.1}, OpArgumentError, r"two positive ints, got \(0, 0\)"),
    ({"size": (2, 3, 4)}, OpArgumentError, "two positive ints"),
])
def test_interpolate_argument_errors(kwargs, error, match):
    with pytest.raises(error, match=f"interpolate: .*{match}"):
        F.interpolate(eg.ones((1, 1, 4, 4)), **kwargs)


def test_interpolate_input_errors():
    with pytest.raises(OpArgumentError, match=r"interpolate: needs an NCHW input.*\(4, 4\)"):
        F.interpolate(eg.ones((4, 4)), size=2)
    with pytest.raises(OpTypeError, match="bilinear needs a float input, got dtype int32"):
        F.interpolate(eg.tensor(np.ones((1, 1, 2, 2), np.int32)), size=3)


# ----- conv2d: MegEngine's arguments and grouped weight -------------------------------------------
def test_conv2d_accepts_megengines_modes_positionally_and_by_name():
    rng = np.random.default_rng(4)
    x = eg.tensor(rng.standard_normal((1, 2, 5, 5)).astype(np.float32))
    w = eg.tensor(rng.standard_normal((3, 2, 3, 3)).astype(np.float32))
    plain = F.conv2d(x, w)
    for mode in ("default", "float32"):
        assert_close(F.conv2d(x, w, compute_mode=mode), plain, 0, 0, mode)
    assert_close(F.conv2d(x, w, None, 1, 0, 1, 1, "cross_correlation", "default"), plain, 0, 0,
                 "positional")
    with pytest.raises(OpArgumentError, match="conv2d: compute_mode must be one of .* 'float16'"):
        F.conv2d(x, w, compute_mode="float16")
    with pytest.raises(OpArgumentError, match="conv2d: conv_mode must be 'cross_correlation', "
                                              "got 'convolution'"):
        F.conv2d(x, w, conv_mode="convolution")


@pytest.mark.parametrize("groups, stride, padding", [(2, 1, 1), (3, 2, 0)])
def test_conv2d_grouped_5d_weight_equals_the_4d_call(groups, stride, padding):
    rng = np.random.default_rng(groups)
    out_g, in_g = 2, 3
    x = rng.standard_normal((2, groups * in_g, 6, 7)).astype(np.float32)
    w5 = rng.standard_normal((groups, out_g, in_g, 3, 2)).astype(np.float32)
    b = rng.standard_normal(groups * out_g).astype(np.float32)
    ct = None
    results = []
    for w in (w5, w5.reshape(groups * out_g, in_g, 3, 2)):
        p = eg.Parameter(w)
        gm = GradManager().attach([p])
        with gm:
            y = F.conv2d(eg.tensor(x), p, eg.tensor(b), stride, padding, groups=groups)
            ct = rng.standard_normal(y.shape).astype(np.float32) if ct is None else ct
            gm.backward(y, eg.tensor(ct))
        results.append((y, p.grad))
    (y5, g5), (y4, g4) = results
    assert_close(y5, y4, 0, 0, "value")
    assert g5.shape == w5.shape
    assert_close(g5, g4.numpy().reshape(w5.shape), 0, 0, "gradient w.r.t. the 5-d weight")


def test_conv2d_5d_weight_with_the_wrong_groups():
    with pytest.raises(OpArgumentError, match=r"holds 2 groups, but groups=1; pass groups=2"):
        F.conv2d(eg.ones((1, 4, 5, 5)), eg.ones((2, 3, 2, 3, 3)))


# ----- embedding bounds --------------------------------------------------------------------------
@pytest.mark.parametrize("index, bad", [([[1, 10]], 10), ([0, -1], -1), (np.array([3, 12]), 12)])
def test_embedding_out_of_range_raises_in_eager_code(index, bad):
    weight = eg.tensor(np.ones((10, 3), np.float32))
    x = index if isinstance(index, np.ndarray) else eg.tensor(index)
    with pytest.raises(IndexError, match=rf"embedding: index {bad} is out of range for a table "
                                         rf"of 10 rows .* must lie in \[0, 9\]"):
        F.embedding(x, weight)


def test_embedding_in_range_and_index_dtype():
    w = np.random.default_rng(5).standard_normal((4, 2)).astype(np.float32)
    idx = np.array([[3, 0], [1, 1]], np.int32)
    for x in (idx, eg.tensor(idx), eg.tensor(idx.astype(np.uint8)), eg.tensor(np.zeros(0, int))):
        got = F.embedding(x, eg.tensor(w))
        assert_close(got, w[np.asarray(x.numpy() if isinstance(x, eg.Tensor) else x)], 0, 0,
                     "in range")
    with pytest.raises(OpTypeError, match="embedding: indices must be integers, got dtype "
                                          "float32"):
        F.embedding(eg.tensor([1.0]), eg.tensor(w))


def test_embedding_in_a_region_is_not_checked_as_documented():
    w = eg.tensor(np.arange(8, dtype=np.float32).reshape(4, 2))
    region = partial_trace(lambda i, t: F.embedding(i, t))
    out = region(eg.tensor([4, -1, 2]), w).numpy()
    assert np.isnan(out[0]).all()
    assert out[1:].tolist() == [[6.0, 7.0], [4.0, 5.0]]
