"""Elementwise math, activations, `normalize` and the losses of eager/core/ops/losses.py: each op's
value against an independent jnp reference and its gradient against `jax.vjp` of that reference,
with hypothesis over shapes, broadcasting and dtypes for the elementwise ops; the gradients at
the activations' kinks against PyTorch's conventions; the `IndexError` for out-of-range class
labels in `cross_entropy` and `nll_loss`.
"""

import math

import hypothesis.extra.numpy as hnp
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from jax.scipy.special import erf, erfinv

import eager as eg
import eager.functional as F
from eager.autodiff import GradManager
from eager.core.errors import OpArgumentError
from partial import partial_trace
from tests.helpers import examples

from .op_check import check_op, fd_check
from .references import POSITIVE, REAL, UNIT, values_in

# Every new shape and dtype costs XLA compiles of the op's forward and backward (~40 ms each):
# each elementwise op runs in three fixed lanes (float32 with its gradient, bfloat16 and float16,
# each at another rank), hypothesis drawing the values; broadcasting shapes are drawn for atan2.
FAST = examples(2)
LANES = [((2, 1, 3), np.float32), ((3,), jnp.bfloat16), ((), np.float16)]
LOW_PRECISION = {np.dtype(jnp.bfloat16): 2e-2, np.dtype(np.float16): 4e-3}
SELU_ALPHA, SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946


def check(name, inputs, ref, attrs=None, **kw):
    """`check_op` with the reference jitted: one compile for it, not one per primitive."""
    check_op(name, inputs, jax.jit(ref), attrs, **kw)


def _asinh(x):
    return jnp.sign(x) * jnp.log(jnp.abs(x) + jnp.sqrt(x * x + 1))


def _asin(x):
    return jnp.arctan(x / jnp.sqrt(1 - x * x))


# name -> (reference written without the op's own jax function, domain)
UNARY = {
    "tan": (lambda x: jnp.sin(x) / jnp.cos(x), (-1.2, 1.2)),
    "asin": (_asin, UNIT),
    "acos": (lambda x: math.pi / 2 - _asin(x), UNIT),
    "atan": (lambda x: jnp.arcsin(x / jnp.sqrt(1 + x * x)), REAL),
    "sinh": (lambda x: (jnp.exp(x) - jnp.exp(-x)) / 2, REAL),
    "cosh": (lambda x: (jnp.exp(x) + jnp.exp(-x)) / 2, REAL),
    "asinh": (_asinh, REAL),
    "acosh": (lambda x: jnp.log(x + jnp.sqrt(x * x - 1)), (1.1, 3.0)),
    "atanh": (lambda x: 0.5 * jnp.log((1 + x) / (1 - x)), UNIT),
    # erf and erfinv are checked against math.erf and their derivatives in test_erf_erfinv
    "erf": (erf, REAL),
    "erfinv": (erfinv, UNIT),
    "expm1": (lambda x: jnp.exp(x) - 1, REAL),
    "log2": (lambda x: jnp.log(x) / math.log(2), POSITIVE),
    "log10": (lambda x: jnp.log(x) / math.log(10), POSITIVE),
    "square": (lambda x: x * x, REAL),
    "relu6": (lambda x: jnp.minimum(jnp.maximum(x, 0), 6), (-2.0, 8.0)),
    "hsigmoid": (lambda x: jnp.minimum(jnp.maximum(x + 3, 0), 6) / 6, (-5.0, 5.0)),
    "hswish": (lambda x: x * jnp.minimum(jnp.maximum(x + 3, 0), 6) / 6, (-5.0, 5.0)),
    "selu": (lambda x: SELU_SCALE * jnp.where(x > 0, x, SELU_ALPHA * (jnp.exp(x) - 1)), REAL),
    "logsigmoid": (lambda x: jnp.log(1 / (1 + jnp.exp(-x))), REAL),
    "softsign": (lambda x: x / (1 + jnp.abs(x)), REAL),
}

# every op this module checks (tests/eager/test_ops.py::test_every_op_has_a_test reads it)
COVERED = set(UNARY) | {"atan2", "elu", "prelu", "normalize", "smooth_l1_loss", "hinge_loss",
                        "kl_div"}


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("shape, dtype", LANES, ids=["float32", "bfloat16", "float16"])
@FAST
@given(seed=st.integers(0, 2**16))
def test_unary(name, shape, dtype, seed):
    ref, domain = UNARY[name]
    x = values_in(seed, shape, dtype, domain)
    tol = LOW_PRECISION.get(np.dtype(dtype))
    if tol is None:
        check(name, [x], ref, rtol=1e-5, atol=1e-5, grad_atol=1e-4, seed=seed)
    else:  # the reference in float32, rounded as the op's output is (not jitted: its
        # primitives, compiled once per shape, serve every op)
        check_op(name, [x], lambda a: ref(a.astype(np.float32)).astype(a.dtype), rtol=tol,
                 atol=tol, seed=seed)


@FAST
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3),
       seed=st.integers(0, 2**16))
def test_atan2_broadcasting(shapes, seed):
    y, x = (values_in(seed + i, s, np.float32, REAL) for i, s in enumerate(shapes.input_shapes))

    def ref(b, a):  # the quadrant fix-up of atan(y / x)
        t = jnp.arctan(b / a)
        return jnp.where(a > 0, t, jnp.where(b >= 0, t + math.pi, t - math.pi))

    check("atan2", [y, x], ref, rtol=1e-5, atol=1e-5, grad_atol=1e-4, seed=seed)
    assert F.atan2(eg.tensor(y).astype(jnp.bfloat16), 1.0).dtype == np.dtype(jnp.bfloat16)


def test_erf_erfinv():
    x = np.linspace(-2.5, 2.5, 41).astype(np.float32)
    np.testing.assert_allclose(F.erf(eg.tensor(x)).numpy(), [math.erf(v) for v in x], atol=1e-6)
    y = np.linspace(-0.95, 0.95, 39).astype(np.float32)
    inv = F.erfinv(eg.tensor(y)).numpy()
    np.testing.assert_allclose([math.erf(v) for v in inv.astype(np.float64)], y, atol=2e-6)
    # the derivatives: 2/sqrt(pi) exp(-x^2) and its reciprocal at erfinv(y)
    derf = 2 / math.sqrt(math.pi) * np.exp(-x.astype(float) ** 2)
    np.testing.assert_allclose(_grad(F.erf, x), derf, rtol=1e-4)
    np.testing.assert_allclose(_grad(F.erfinv, y), 1 / (2 / math.sqrt(math.pi)
                                                        * np.exp(-inv.astype(float) ** 2)),
                               rtol=1e-4)


def test_elu():
    x, alpha = values_in(3, (4, 5), np.float32, (-3.0, 3.0)), 0.3
    check("elu", [x], lambda a: jnp.where(a > 0, a, alpha * (jnp.exp(a) - 1)), {"alpha": alpha},
          atol=1e-6)
    np.testing.assert_allclose(F.elu(eg.tensor(x), alpha).numpy(),
                               eg.apply(eg.OPS["elu"], eg.tensor(x), alpha=alpha).numpy())


def _grad(fn, x, *extra):
    t = eg.Parameter(np.asarray(x, np.float32))
    with GradManager().attach([t]) as gm:
        gm.backward(fn(t, *extra).sum())
    return t.grad.numpy()


# PyTorch's gradients where the activation has a kink, and far out where a careless where()
# would turn an overflow in the discarded branch into nan.
KINKS = {
    "relu6": (F.relu6, [-1.0, 0.0, 3.0, 6.0, 7.0], [0, 0, 3, 6, 6], [0, 0, 1, 0, 0]),
    "hsigmoid": (F.hsigmoid, [-4.0, -3.0, 0.0, 3.0, 4.0], [0, 0, 0.5, 1, 1],
                 [0, 0, 1 / 6, 0, 0]),
    "hswish": (F.hswish, [-4.0, -3.0, 0.0, 3.0, 4.0], [0, 0, 0, 3, 4],
               [0, -0.5, 0.5, 1.5, 1]),
    "elu": (lambda t: F.elu(t, 0.5), [-1e4, 0.0, 100.0], [-0.5, 0, 100], [0, 0.5, 1]),
    "selu": (F.selu, [-1e4, 0.0, 100.0], [-SELU_SCALE * SELU_ALPHA, 0, SELU_SCALE * 100],
             [0, SELU_SCALE * SELU_ALPHA, SELU_SCALE]),
    "prelu": (lambda t: F.prelu(t, eg.tensor([0.25])), [-2.0, 0.0, 2.0], [-0.5, 0, 2],
              [0.25, 0.25, 1]),
    "logsigmoid": (F.logsigmoid, [-200.0, 0.0, 200.0], [-200, -math.log(2), 0], [1, 0.5, 0]),
    "softsign": (F.softsign, [-1.0, 0.0, 1.0], [-0.5, 0, 0.5], [0.25, 1, 0.25]),
}


@pytest.mark.parametrize("name", sorted(KINKS))
def test_activation_kinks_follow_pytorch(name):
    fn, x, value, grad = KINKS[name]
    np.testing.assert_allclose(fn(eg.tensor(x)).numpy(), value, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(_grad(fn, x), grad, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("x_shape, w_shape", [
    ((4, 3), (3,)), ((2, 3, 4, 2), (1, 3, 1, 1)), ((2, 3, 4), ()), ((5,), (1,)),
])
def test_prelu(x_shape, w_shape):
    x = values_in(8, x_shape, np.float32, REAL)
    w = values_in(9, w_shape, np.float32, (0.05, 0.5))

    def ref(a, b):  # MegEngine's formula, the weight laid along axis 1
        b = b.reshape(()) if b.size == 1 else b.reshape((1, -1) + (1,) * (a.ndim - 2))
        return jnp.maximum(a, 0) + b * jnp.minimum(a, 0)

    check("prelu", [x, w], ref)
    np.testing.assert_allclose(F.prelu(eg.tensor(x), eg.tensor(w)).numpy(), ref(x, w), rtol=1e-6)


def test_prelu_rejects_a_weight_that_fits_no_channel_axis():
    with pytest.raises(OpArgumentError, match=r"prelu: weight has 4 elements .* \(3, axis 1"):
        F.prelu(eg.ones((2, 3, 5)), eg.ones((4,)))
    with pytest.raises(OpArgumentError, match="prelu: weight has 3 elements"):
        F.prelu(eg.ones((3,)), eg.ones((3,)))


def _norm_ref(a, ord, axis, xp=jnp):
    a = xp.abs(a)
    if ord == math.inf:
        return xp.max(a, axis=axis, keepdims=True)
    return xp.sum(a**ord, axis=axis, keepdims=True) ** (1 / ord)


@pytest.mark.parametrize("ord, axis", [(2.0, None), (2.0, 1), (1.0, (0, 2)), (math.inf, -1)])
def test_normalize(ord, axis):
    x = values_in(11, (2, 3, 4), np.float32, REAL)
    check("normalize", [x], lambda a: a / jnp.maximum(_norm_ref(a, ord, axis), 1e-12),
             {"ord": ord, "axis": axis, "eps": 1e-12}, atol=1e-6)
    got = F.normalize(eg.tensor(x), ord, axis).numpy()
    np.testing.assert_allclose(_norm_ref(got, ord, axis, np), 1.0, rtol=1e-5)


def test_normalize_small_norms_divide_by_eps_with_a_finite_gradient():
    x = np.array([[0.0, 0.0, 0.0], [3.0, 0.0, 4.0], [1e-3, 0.0, 0.0]], np.float32)
    eps = 1e-2
    np.testing.assert_allclose(F.normalize(eg.tensor(x), axis=1, eps=eps).numpy(),
                               [[0, 0, 0], [0.6, 0, 0.8], [0.1, 0, 0]], rtol=1e-6)
    g = _grad(lambda t: F.normalize(t, axis=1, eps=eps) * eg.tensor([1.0, 2.0, 3.0]), x)
    # PyTorch's: below eps the norm is a constant, so the gradient is the cotangent / eps
    np.testing.assert_allclose(g[0], [100, 200, 300], rtol=1e-6)
    np.testing.assert_allclose(g[2], [100, 200, 300], rtol=1e-6)
    assert np.isfinite(g).all()
    with pytest.raises(OpArgumentError, match="normalize: ord must be"):
        F.normalize(eg.tensor(x), ord=-1)


def test_normalize_by_finite_differences(x64, rng):
    fd_check(lambda t: (F.normalize(t, 3, axis=0) * t).sum(), [rng.standard_normal((3, 4))])


# ----- losses -------------------------------------------------------------------------------------
RED = {"mean": jnp.mean, "sum": jnp.sum, "none": lambda t: t}


@pytest.mark.parametrize("beta, reduction", [(1.0, "mean"), (0.5, "none"), (0.0, "sum")])
def test_smooth_l1_loss(beta, reduction):
    pred, label = values_in(12, (4, 5), np.float32, REAL), values_in(13, (4, 5), np.float32, REAL)

    def ref(p, y):  # Huber's loss divided by beta, through the clipped difference
        d = jnp.abs(p - y)
        if beta == 0:
            return RED[reduction](d)
        q = jnp.minimum(d, beta)
        return RED[reduction]((0.5 * q * q + beta * (d - q)) / beta)

    check("smooth_l1_loss", [pred, label], ref, {"beta": beta, "reduction": reduction})
    got = F.smooth_l1_loss(eg.tensor(pred), eg.tensor(label), beta, reduction)
    np.testing.assert_allclose(got.numpy(), ref(pred, label), rtol=1e-6)


def test_smooth_l1_loss_hand_values_and_errors():
    got = F.smooth_l1_loss(eg.tensor([0.5, -3.0, 1.0]), eg.zeros((3,)), reduction="none")
    np.testing.assert_allclose(got.numpy(), [0.125, 2.5, 0.5])
    np.testing.assert_allclose(_grad(F.smooth_l1_loss, [0.5, -3.0, 1.0], eg.zeros((3,))),
                               np.array([0.5, -1.0, 1.0]) / 3)
    with pytest.raises(OpArgumentError, match="smooth_l1_loss: beta must be >= 0, got -1"):
        F.smooth_l1_loss(eg.ones((2,)), eg.ones((2,)), beta=-1)
    with pytest.raises(OpArgumentError, match="smooth_l1_loss: reduction must be one of"):
        F.smooth_l1_loss(eg.ones((2,)), eg.ones((2,)), reduction="avg")


@pytest.mark.parametrize("norm, reduction", [("L1", "mean"), ("L2", "none"), ("L1", "sum")])
def test_hinge_loss(norm, reduction):
    pred = values_in(14, (5, 4), np.float32, REAL)
    label = np.where(values_in(15, (5, 4), np.float32, REAL) > 0, 1.0, -1.0).astype(np.float32)
    p = 1 if norm == "L1" else 2
    check("hinge_loss", [pred, label],
             lambda a, y: RED[reduction](jnp.sum(jnp.maximum(1 - a * y, 0) ** p, axis=1)),
             {"squared": norm == "L2", "reduction": reduction})


def test_hinge_loss_megengine_example():
    pred = eg.tensor([[0.5, -0.5, 0.1], [-0.6, 0.7, 0.8]])
    label = eg.tensor([[1, -1, -1], [-1, 1, 1]])
    np.testing.assert_allclose(F.hinge_loss(pred, label).item(), 1.5, rtol=1e-6)
    np.testing.assert_allclose(F.hinge_loss(pred, label, reduction="none").numpy(), [2.1, 0.9],
                               rtol=1e-6)
    np.testing.assert_allclose(F.hinge_loss(pred, label, reduction="sum").item(), 3.0, rtol=1e-6)
    np.testing.assert_allclose(F.hinge_loss(pred, label, "l2").item(), (1.71 + 0.29) / 2,
                               rtol=1e-6)
    # the margin of a prediction of exactly 1 on its label is 0: no gradient, as relu gives
    np.testing.assert_allclose(_grad(F.hinge_loss, [[1.0, 0.5]], eg.tensor([[1.0, 1.0]])),
                               [[0.0, -1.0]])
    with pytest.raises(OpArgumentError, match="hinge_loss: norm must be 'L1' or 'L2', got 'L3'"):
        F.hinge_loss(pred, label, norm="L3")
    with pytest.raises(OpArgumentError, match=r"hinge_loss: pred must have shape \(N, C\)"):
        F.hinge_loss(eg.ones((3,)), eg.ones((3,)))


@pytest.mark.parametrize("log_target, reduction", [(False, "batchmean"), (True, "mean"),
                                                   (False, "none"), (True, "sum")])
def test_kl_div(log_target, reduction):
    rng = np.random.default_rng(16)
    pred = np.asarray(jax.nn.log_softmax(rng.standard_normal((3, 4)), axis=1), np.float32)
    q = np.asarray(jax.nn.softmax(rng.standard_normal((3, 4)), axis=1), np.float32)
    label = np.log(q) if log_target else q
    red = {**RED, "batchmean": lambda t: jnp.sum(t) / 3}[reduction]

    def ref(a, y):
        prob = jnp.exp(y) if log_target else y
        return red(prob * (jnp.log(prob) - a))

    check("kl_div", [pred, label], ref, {"log_target": log_target, "reduction": reduction},
             atol=1e-6)


def test_kl_div_hand_values():
    pred = eg.tensor(np.log([[0.25, 0.75]]).astype(np.float32))
    label = eg.tensor([[0.5, 0.5]])
    kl = 0.5 * math.log(4 / 3)
    np.testing.assert_allclose(F.kl_div(pred, label, reduction="sum").item(), kl, rtol=1e-6)
    np.testing.assert_allclose(F.kl_div(pred, label).item(), kl / 2, rtol=1e-6)
    np.testing.assert_allclose(F.kl_div(pred, label, reduction="batchmean").item(), kl,
                               rtol=1e-6)
    # a zero target probability contributes nothing (0 log 0 = 0), and no gradient to pred
    zero = F.kl_div(pred, eg.tensor([[0.0, 1.0]]), reduction="none").numpy()
    np.testing.assert_allclose(zero, [[0.0, -math.log(0.75)]], rtol=1e-6)
    np.testing.assert_allclose(_grad(F.kl_div, pred.numpy(), eg.tensor([[0.0, 1.0]])),
                               [[0.0, -0.5]])
    with pytest.raises(OpArgumentError, match="kl_div: reduction must be one of"):
        F.kl_div(pred, label, reduction="batch")


def test_square_loss_is_mse_loss():
    assert F.square_loss is F.mse_loss and "square_loss" in F.loss.__all__
    np.testing.assert_allclose(F.square_loss(eg.tensor([3.0, 3.0]), eg.tensor([2.0, 5.0])).item(),
                               2.5)


# ----- out-of-range class labels --------------------------------------------------------------
LOSSES = {"cross_entropy": F.cross_entropy, "nll_loss": F.nll_loss}


@pytest.mark.parametrize("fn", sorted(LOSSES))
@pytest.mark.parametrize("make", [eg.tensor, np.asarray, list], ids=["Tensor", "numpy", "list"])
@pytest.mark.parametrize("bad", [10, 11, -1, -10, -11])
def test_out_of_range_labels_raise_index_error(fn, make, bad):
    pred = eg.tensor(np.zeros((4, 10), np.float32))
    labels = [0, 9, bad, 3]
    with pytest.raises(IndexError, match=rf"{fn}: class label {bad} is out of range for 10 "
                                         r"classes .* each class label must lie in \[0, 9\]"):
        LOSSES[fn](pred, make(labels))


@pytest.mark.parametrize("fn", sorted(LOSSES))
def test_labels_in_range_pass_for_any_axis_and_integer_dtype(fn):
    pred = eg.tensor(np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32))
    for dtype in (np.int64, np.uint8):
        labels = np.array([[0, 3, 2], [3, 1, 0]], dtype)  # along axis 2 (4 classes)
        ref = LOSSES[fn](pred, eg.tensor(labels.astype(np.int32)), axis=2, reduction="none")
        got = LOSSES[fn](pred, labels, axis=2, reduction="none")
        np.testing.assert_array_equal(got.numpy(), ref.numpy())
        assert np.isfinite(got.numpy()).all()
    with pytest.raises(IndexError, match=r"label 3 is out of range for 3 classes \(axis 1"):
        LOSSES[fn](pred, np.array([[0, 3, 1, 2], [0, 0, 0, 0]]), axis=1)
    with pytest.raises(OpArgumentError, match=f"{fn}: axis 3 is out of range"):
        LOSSES[fn](pred, np.zeros((2, 3), np.int32), axis=3)


def test_compiled_regions_do_not_check_labels():
    """The documented compiled behaviour: no error; a label in [-C, -1] counts from the end and
    any other out-of-range label gives nan."""
    logits = np.random.default_rng(2).standard_normal((3, 4)).astype(np.float32)

    @partial_trace
    def loss(x, y):
        return F.cross_entropy(x, y, reduction="none")

    eager = F.cross_entropy(eg.tensor(logits), eg.tensor([0, 1, 3]), reduction="none").numpy()
    got = loss(eg.tensor(logits), eg.tensor([0, 1, 4])).numpy()
    np.testing.assert_allclose(got[:2], eager[:2], rtol=1e-6)
    assert np.isnan(got[2])
    np.testing.assert_allclose(loss(eg.tensor(logits), eg.tensor([0, 1, -1])).numpy(), eager,
                               rtol=1e-6)
