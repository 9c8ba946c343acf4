"""BatchNorm1d / BatchNorm2d / SyncBatchNorm: the training output and running statistics against
numpy, momentum, eval mode, no running statistics, no affine parameters, the gradient through the
batch statistics (against `jax.grad` and `jax.vjp` of a jnp reference), low-precision inputs,
`track_running_stats` read at call time, MegEngine-shaped state dicts, and wrong ranks."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eager as eg
import eager.module as M
from eager.autodiff import GradManager
from eager.core.errors import OpArgumentError
from tests.helpers import normal

from .op_check import check_vjp
from .references import normalize_ref, per_channel


def _set_affine(bn, rng):
    w, b = normal(rng, bn.num_features) + 1.5, normal(rng, bn.num_features)
    bn.load_state_dict({"weight": w, "bias": b}, strict=False)
    return w.astype(np.float64), b.astype(np.float64)


def _bn_axes(ndim):
    return (0, *range(2, ndim))


@pytest.mark.parametrize("cls, shape", [(M.BatchNorm2d, (4, 3, 2, 3)),
                                        (M.BatchNorm1d, (6, 3)),
                                        (M.BatchNorm1d, (4, 3, 5))])
def test_batchnorm_train_output_and_running_stats(rng, cls, shape):
    bn = cls(3)
    assert bn.momentum == 0.9
    w, b = _set_affine(bn, rng)
    axes = _bn_axes(len(shape))
    n = math.prod(shape) // shape[1]
    run_mean, run_var = np.zeros(3), np.ones(3)
    for _ in range(3):
        x = (normal(rng, *shape) * 2 + 1).astype(np.float32)
        out = bn(eg.tensor(x))
        expected = normalize_ref(x, axes, bn.eps) * per_channel(w, x.ndim) \
            + per_channel(b, x.ndim)
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=2e-6)
        x64 = x.astype(np.float64)
        run_mean = 0.9 * run_mean + 0.1 * x64.mean(axis=axes)
        run_var = 0.9 * run_var + 0.1 * x64.var(axis=axes) * n / (n - 1)
        np.testing.assert_allclose(bn.running_mean.numpy().ravel(), run_mean, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(bn.running_var.numpy().ravel(), run_var, rtol=1e-5, atol=1e-6)


def test_batchnorm_custom_momentum(rng):
    bn = M.BatchNorm2d(2, momentum=0.5)
    x = normal(rng, 3, 2, 2, 2)
    bn(eg.tensor(x))
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(bn.running_mean.numpy().ravel(), 0.5 * x64.mean(axis=(0, 2, 3)),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bn.running_var.numpy().ravel(),
                               0.5 + 0.5 * x64.var(axis=(0, 2, 3), ddof=1), rtol=1e-5, atol=1e-6)


def test_batchnorm_eval_uses_running_stats_and_does_not_update(rng):
    bn = M.BatchNorm2d(3, eps=1e-3)
    w, b = _set_affine(bn, rng)
    mean, var = normal(rng, 3), np.abs(normal(rng, 3)) + 0.5
    bn.load_state_dict({"running_mean": mean, "running_var": var}, strict=False)
    bn.eval()
    x = normal(rng, 2, 3, 2, 2)
    expected = (x - per_channel(mean, 4)) / np.sqrt(per_channel(var, 4) + 1e-3) \
        * per_channel(w, 4) + per_channel(b, 4)
    np.testing.assert_allclose(bn(eg.tensor(x)).numpy(), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(bn.running_mean.numpy().ravel(), mean)
    np.testing.assert_array_equal(bn.running_var.numpy().ravel(), var)


def test_batchnorm_without_running_stats_always_uses_batch_stats(rng):
    bn = M.BatchNorm2d(3, track_running_stats=False)
    assert bn.buffers() == [] and bn.running_mean is None
    assert set(bn.state_dict()) == {"weight", "bias"}
    x = normal(rng, 4, 3, 2, 2)
    expected = normalize_ref(x, (0, 2, 3), 1e-5)
    np.testing.assert_allclose(bn(eg.tensor(x)).numpy(), expected, rtol=1e-5, atol=2e-6)
    bn.eval()
    np.testing.assert_allclose(bn(eg.tensor(x)).numpy(), expected, rtol=1e-5, atol=2e-6)


def test_batchnorm_without_affine_has_no_parameters(rng):
    bn = M.BatchNorm1d(4, affine=False)
    assert bn.parameters() == []
    assert [n for n, _ in bn.named_buffers()] == ["running_mean", "running_var"]
    x = normal(rng, 5, 4) * 3
    np.testing.assert_allclose(bn(eg.tensor(x)).numpy(), normalize_ref(x, (0,), 1e-5), rtol=1e-5,
                               atol=2e-6)


def test_batchnorm_rejects_wrong_rank():
    with pytest.raises(ValueError):
        M.BatchNorm2d(3)(eg.zeros((2, 3)))
    with pytest.raises(ValueError):
        M.BatchNorm1d(3)(eg.zeros((2, 3, 1, 1)))


def test_batchnorm_gradient_flows_through_batch_statistics(rng):
    bn = M.BatchNorm2d(3)
    _set_affine(bn, rng)
    x_np, c = normal(rng, 4, 3, 2, 2), normal(rng, 4, 3, 2, 2)
    x = eg.tensor(x_np)
    gm = GradManager().attach([x, bn.weight, bn.bias])
    with gm:
        gm.backward((bn(x) * eg.tensor(c)).sum())

    def ref(x, w, b):
        mean = x.mean(axis=(0, 2, 3), keepdims=True)
        var = ((x - mean) ** 2).mean(axis=(0, 2, 3), keepdims=True)
        y = (x - mean) / jnp.sqrt(var + 1e-5) * w.reshape(1, -1, 1, 1) + b.reshape(1, -1, 1, 1)
        return (y * c).sum()

    grads = jax.jit(jax.grad(ref, argnums=(0, 1, 2)))(x_np, bn.weight.numpy(), bn.bias.numpy())
    for t, g in zip((x, bn.weight, bn.bias), grads):
        np.testing.assert_allclose(t.grad.numpy(), np.asarray(g), rtol=1e-4, atol=1e-5)
    assert np.abs(x.grad.numpy().sum(axis=(0, 2, 3))).max() < 1e-4


@pytest.mark.parametrize("cls, shape, dtype", [
    (M.BatchNorm2d, (4, 3, 2, 2), np.float16), (M.BatchNorm1d, (8, 3), np.float16),
    (M.SyncBatchNorm, (4, 3, 5), np.float16), (M.BatchNorm2d, (4, 3, 2, 2), jnp.bfloat16)])
def test_batchnorm_low_precision_input_keeps_its_dtype(rng, cls, shape, dtype):
    bn = cls(3)
    x_low = (normal(rng, *shape) * 2 + 1).astype(dtype)
    x32 = np.asarray(x_low, np.float32)  # the values the layer sees, exactly
    axes = (0, *range(2, len(shape)))
    x = eg.tensor(x_low)
    # Autodiff takes bfloat16 (numpy dtype kind "V") for a non-float today: gradients are
    # checked for float16 only.
    half = dtype == np.float16
    gm = GradManager().attach([x, bn.weight] if half else [])
    with gm:
        out = bn(x)
        if half:
            gm.backward(out.astype(np.float32).sum() + (out.astype(np.float32) ** 2).sum())
    assert out.dtype == np.dtype(dtype)
    assert bn.running_mean.dtype == bn.running_var.dtype == np.float32
    if half:
        assert x.grad.dtype == np.float16 and bn.weight.grad.dtype == np.float32
    tol = 1e-2 if dtype == np.float16 else 4e-2
    np.testing.assert_allclose(np.asarray(out.numpy(), np.float32), normalize_ref(x32, axes),
                               rtol=tol, atol=tol)
    n = x32.size // 3
    np.testing.assert_allclose(bn.running_mean.numpy().ravel(), 0.1 * x32.mean(axis=axes),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bn.running_var.numpy().ravel(),
                               0.9 + 0.1 * x32.astype(np.float64).var(axis=axes) * n / (n - 1),
                               rtol=1e-5)
    bn.eval()
    assert bn(x).dtype == np.dtype(dtype)


def test_batchnorm_float32_gradient_unchanged(rng):
    bn = M.BatchNorm2d(3)
    x = eg.tensor(normal(rng, 4, 3, 2, 2))
    w = bn.weight

    def ref(v, wv, bv):
        mean = v.mean(axis=(0, 2, 3), keepdims=True)
        var = ((v - mean) ** 2).mean(axis=(0, 2, 3), keepdims=True)
        return (v - mean) / jnp.sqrt(var + 1e-5) * wv.reshape(1, -1, 1, 1) \
            + bv.reshape(1, -1, 1, 1)

    check_vjp(lambda: bn(x), [x, w, bn.bias], ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("cls", [M.BatchNorm2d, M.SyncBatchNorm])
def test_batchnorm_track_running_stats_read_at_call_time(rng, cls):
    bn = cls(3)
    x = normal(rng, 4, 3, 2, 2) * 3 + 2
    bn(eg.tensor(x))
    mean, var = bn.running_mean.numpy().ravel(), bn.running_var.numpy().ravel()
    bn.track_running_stats = False
    for mode in (True, False):  # batch statistics in training and in eval, no update
        bn.train(mode)
        np.testing.assert_allclose(bn(eg.tensor(x)).numpy(), normalize_ref(x, (0, 2, 3)), atol=1e-5)
        np.testing.assert_array_equal(bn.running_mean.numpy().ravel(), mean)
        np.testing.assert_array_equal(bn.running_var.numpy().ravel(), var)
    bn.track_running_stats = True
    bn.eval()
    expected = (x - mean.reshape(1, 3, 1, 1)) / np.sqrt(var.reshape(1, 3, 1, 1) + 1e-5)
    np.testing.assert_allclose(bn(eg.tensor(x)).numpy(), expected, rtol=1e-5, atol=1e-5)
    bn.train()
    bn(eg.tensor(x))
    assert not np.allclose(bn.running_mean.numpy().ravel(), mean)


def test_batchnorm_turning_tracking_on_without_buffers_is_an_error(rng):
    """It used to fall back to batch statistics silently; MegEngine refuses it, so do we."""
    bn = M.BatchNorm2d(3, track_running_stats=False)
    x = normal(rng, 4, 3, 2, 2)
    for mode in (True, False):  # off: batch statistics in training and in eval
        np.testing.assert_allclose(bn.train(mode)(eg.tensor(x)).numpy(),
                                   normalize_ref(x, (0, 2, 3)), atol=1e-5)
    bn.track_running_stats = True
    with pytest.raises(OpArgumentError, match="built with track_running_stats=False"):
        bn(eg.tensor(x))
    assert bn.running_mean is None and bn.buffers() == []


def test_batchnorm_loads_megengine_shaped_state(rng):
    bn = M.BatchNorm2d(3)
    mge = {"weight": normal(rng, 1, 3, 1, 1), "bias": normal(rng, 1, 3, 1, 1),
           "running_mean": normal(rng, 1, 3, 1, 1),
           "running_var": np.abs(normal(rng, 1, 3, 1, 1)) + 0.5}
    bn.load_state_dict(mge)
    state = bn.state_dict()
    assert {k: v.shape for k, v in state.items()} == {k: (3,) for k in mge}
    for k, v in mge.items():
        np.testing.assert_array_equal(state[k], v.reshape(3))
    x = normal(rng, 2, 3, 2, 2)
    expected = (x - mge["running_mean"]) / np.sqrt(mge["running_var"] + 1e-5) * mge["weight"] \
        + mge["bias"]
    np.testing.assert_allclose(bn.eval()(eg.tensor(x)).numpy(), expected, rtol=1e-5, atol=1e-6)
    bn.load_state_dict(state)  # (C,) still loads; and round-trips
    np.testing.assert_array_equal(bn.running_var.numpy().ravel(), state["running_var"])
    bn1d = M.BatchNorm1d(3)
    bn1d.load_state_dict({"running_mean": mge["running_mean"][..., 0]}, strict=False)
    np.testing.assert_array_equal(bn1d.running_mean.numpy().ravel(), mge["running_mean"].reshape(3))


def test_megengine_conv_bias_loads_and_wrong_shapes_still_raise(rng):
    conv = M.Conv2d(2, 3, 1)
    assert conv.bias.shape == (1, 3, 1, 1)  # MegEngine's layout
    bias = normal(rng, 1, 3, 1, 1)
    conv.load_state_dict({"bias": bias}, strict=False)
    np.testing.assert_array_equal(conv.bias.numpy(), bias)
    conv.load_state_dict({"bias": bias.reshape(3) * 2}, strict=False)  # PyTorch's (C,)
    np.testing.assert_array_equal(conv.bias.numpy(), bias * 2)
    bn = M.BatchNorm2d(3)
    for shape in [(1, 4, 1, 1), (2, 3, 1, 1), (1, 1, 1, 3), (3, 1), (1, 3, 2)]:
        with pytest.raises(ValueError, match="shape"):
            bn.load_state_dict({"running_mean": np.zeros(shape, np.float32)}, strict=False)
    with pytest.raises(ValueError, match="shape"):  # a (1, C) matrix is not a channel vector
        M.Linear(3, 1).load_state_dict({"weight": np.zeros((1, 3, 1, 1), np.float32)},
                                       strict=False)


def test_batchnorm_wrong_rank_is_an_op_argument_error():
    with pytest.raises(eg.OpArgumentError, match="BatchNorm2d expects a 4-d input"):
        M.BatchNorm2d(3)(eg.zeros((2, 3)))
