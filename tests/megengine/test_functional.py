"""`megengine.functional`: the documented examples and formulas of MegEngine's functional ops."""

import numpy as np
import pytest

import eager as mge
import eager.functional as F


def test_nn_and_loss_namespaces_hold_the_same_functions():
    assert F.nn.relu is F.relu
    np.testing.assert_array_equal(F.nn.relu(mge.tensor([-1.0, 2.0])).numpy(), [0.0, 2.0])
    assert F.loss.cross_entropy is F.cross_entropy


def test_activations():
    a = np.array([-2.0, -0.5, 0.0, 1.5, 7.0], np.float32)
    x = mge.tensor(a)
    sig = 1 / (1 + np.exp(-a))
    np.testing.assert_allclose(F.sigmoid(x).numpy(), sig, rtol=1e-6)
    np.testing.assert_allclose(F.nn.leaky_relu(x, 0.1).numpy(), np.where(a > 0, a, 0.1 * a))
    np.testing.assert_allclose(F.relu6(x).numpy(), np.clip(a, 0, 6))
    np.testing.assert_allclose(F.hsigmoid(x).numpy(), np.clip(a + 3, 0, 6) / 6, rtol=1e-6)
    np.testing.assert_allclose(F.silu(x).numpy(), a * sig, rtol=1e-6)
    np.testing.assert_allclose(F.softplus(x).numpy(), np.log1p(np.exp(a)), rtol=1e-6)
    # gelu is the exact (erf) form: gelu(1.5) = 1.5 * Phi(1.5)
    np.testing.assert_allclose(F.gelu(mge.tensor([1.5])).numpy(), [1.5 * 0.9331928], rtol=1e-6)
    np.testing.assert_allclose(F.nn.prelu(x, mge.tensor([0.25])).numpy(),
                               np.where(a > 0, a, 0.25 * a))


def test_softmax_and_log_softmax():
    a = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]], np.float32)
    e = np.exp(a - a.max(axis=1, keepdims=True))
    ref = e / e.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(F.softmax(mge.tensor(a), axis=1).numpy(), ref, rtol=1e-6)
    np.testing.assert_allclose(F.log_softmax(mge.tensor(a), axis=1).numpy(), np.log(ref),
                               rtol=1e-5)


def test_reductions_and_statistics():
    a = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    x = mge.tensor(a)
    np.testing.assert_allclose(F.sum(x, axis=1, keepdims=True).numpy(), [[3.0], [7.0]])
    np.testing.assert_allclose(F.mean(x).numpy(), 2.5)
    np.testing.assert_allclose(F.var(x).numpy(), a.var())               # population
    np.testing.assert_allclose(F.std(x, axis=0).numpy(), a.std(axis=0))
    np.testing.assert_allclose(F.logsumexp(x, axis=1).numpy(),
                               np.log(np.exp(a).sum(axis=1)), rtol=1e-6)
    np.testing.assert_allclose(F.norm(mge.tensor([3.0, -4.0])).numpy(), 5.0)
    np.testing.assert_allclose(F.norm(mge.tensor([3.0, -4.0]), ord=1).numpy(), 7.0)
    np.testing.assert_allclose(F.normalize(mge.tensor([3.0, 4.0]), ord=2, axis=0).numpy(),
                               [0.6, 0.8], rtol=1e-6)


def test_topk_documented_example():
    """MegEngine's docstring example asks for the smallest; its default (1.13's signature and
    behaviour) is `descending=True`, so ascending is spelled out here."""
    x = mge.tensor(np.array([2, 4, 6, 8, 7, 5, 3, 1], dtype=np.float32))
    top, indices = F.topk(x, 5, descending=False)
    np.testing.assert_array_equal(top.numpy(), [1, 2, 3, 4, 5])
    np.testing.assert_array_equal(indices.numpy(), [7, 0, 6, 1, 5])
    top, indices = F.topk(x, 3)
    np.testing.assert_array_equal(top.numpy(), [8, 7, 6])
    np.testing.assert_array_equal(indices.numpy(), [3, 4, 2])
    kth, kidx = F.topk(x, 3, descending=True, kth_only=True)
    assert kth.shape == () and kth.item() == 6.0 and kidx.item() == 2


def test_cond_take_documented_example():
    mask = mge.tensor(np.array([[True, False], [False, True]]))
    x = mge.tensor(np.array([[1, np.inf], [np.nan, 4]], dtype=np.float32))
    v, index = F.cond_take(mask, x)
    np.testing.assert_array_equal(v.numpy(), [1.0, 4.0])
    np.testing.assert_array_equal(index.numpy(), [0, 3])


def test_interpolate_documented_example():
    x = mge.tensor(np.arange(1, 5, dtype=np.float32).reshape(1, 1, 2, 2))
    out = F.nn.interpolate(x, [4, 4], align_corners=False)
    ref = np.array([[1.0, 1.25, 1.75, 2.0], [1.5, 1.75, 2.25, 2.5],
                    [2.5, 2.75, 3.25, 3.5], [3.0, 3.25, 3.75, 4.0]], np.float32)
    np.testing.assert_allclose(out.numpy()[0, 0], ref, rtol=1e-6)
    out2 = F.nn.interpolate(x, scale_factor=2.0)
    np.testing.assert_allclose(out2.numpy(), out.numpy())
    nearest = F.nn.interpolate(x, scale_factor=2.0, mode="nearest")
    np.testing.assert_array_equal(nearest.numpy()[0, 0], np.repeat(np.repeat(
        [[1.0, 2.0], [3.0, 4.0]], 2, axis=0), 2, axis=1))


def test_indexing_one_hot_and_one_hot():
    src = mge.tensor(np.array([[1, 2], [3, 4]], dtype=np.float32))
    np.testing.assert_array_equal(F.indexing_one_hot(src, mge.tensor([0, 1]), 1).numpy(),
                                  [1.0, 4.0])
    kept = F.indexing_one_hot(src, mge.tensor([1, 0]), 1, keepdims=True)
    np.testing.assert_array_equal(kept.numpy(), [[2.0], [3.0]])
    out = F.one_hot(mge.tensor(np.arange(1, 4, dtype=np.int32)), num_classes=4)
    np.testing.assert_array_equal(out.numpy(), np.eye(4)[1:])
    assert out.dtype == np.int32  # MegEngine's (PyTorch: int64)


def test_shape_ops():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = mge.tensor(a)
    np.testing.assert_array_equal(F.concat([x, x], axis=1).numpy(), np.concatenate([a, a], 1))
    np.testing.assert_array_equal(F.stack([x, x], axis=0).numpy(), np.stack([a, a]))
    parts = F.split(mge.tensor(np.zeros((10, 3), np.float32)), [3, 5, 6])
    assert [p.shape for p in parts] == [(3, 3), (2, 3), (1, 3), (4, 3)]
    assert [p.shape for p in F.split(x, 3, axis=1)] == [(2, 1)] * 3
    assert F.expand_dims(mge.tensor([1, 2]), [0, 2]).shape == (1, 2, 1)
    assert F.squeeze(mge.tensor(np.zeros((1, 2, 1))), 0).shape == (2, 1)
    assert F.broadcast_to(mge.tensor([1, 2]), (3, 2)).shape == (3, 2)
    np.testing.assert_array_equal(F.transpose(x, (1, 0)).numpy(), a.T)
    assert F.flatten(mge.tensor(np.zeros((2, 3, 4))), 1).shape == (2, 12)
    np.testing.assert_array_equal(F.repeat(x, 2, axis=1).numpy(), np.repeat(a, 2, axis=1))
    np.testing.assert_array_equal(F.tile(x, (2, 1)).numpy(), np.tile(a, (2, 1)))


def test_gather_scatter_where_clip():
    x = mge.tensor(np.array([[1, 2], [3, 4]], np.float32))
    index = mge.tensor([[0, 0], [1, 0]])
    np.testing.assert_array_equal(F.gather(x, 1, index).numpy(), [[1, 1], [4, 3]])
    out = F.scatter(F.zeros((2, 2)), 1, mge.tensor([[1], [0]]), mge.tensor([[5.0], [6.0]]))
    np.testing.assert_array_equal(out.numpy(), [[0, 5], [6, 0]])
    mask = mge.tensor([True, False])
    np.testing.assert_array_equal(
        F.where(mask, mge.tensor([1.0, 2.0]), mge.tensor([3.0, 4.0])).numpy(), [1.0, 4.0])
    np.testing.assert_array_equal(F.clip(mge.tensor([-2.0, 0.0, 2.0]), -1, 1).numpy(),
                                  [-1.0, 0.0, 1.0])


def test_sort_and_argsort():
    x = mge.tensor([3.0, 1.0, 2.0])
    values, indices = F.sort(x, descending=True)
    np.testing.assert_array_equal(values.numpy(), [3.0, 2.0, 1.0])
    np.testing.assert_array_equal(indices.numpy(), [0, 2, 1])
    np.testing.assert_array_equal(F.argsort(x).numpy(), [1, 2, 0])


def test_matmul_and_linear():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 3, 4)).astype(np.float32)
    b = rng.standard_normal((4, 5)).astype(np.float32)
    np.testing.assert_allclose(F.matmul(mge.tensor(a), mge.tensor(b)).numpy(), a @ b, rtol=1e-5)
    w = rng.standard_normal((5, 4)).astype(np.float32)
    out = F.matmul(mge.tensor(a), mge.tensor(w), transpose_b=True)
    np.testing.assert_allclose(out.numpy(), a @ w.T, rtol=1e-5)
    bias = np.ones(5, np.float32)
    np.testing.assert_allclose(F.linear(mge.tensor(a), mge.tensor(w), mge.tensor(bias)).numpy(),
                               a @ w.T + bias, rtol=1e-5)


def test_cross_entropy():
    logits = np.array([[2.0, 1.0, 0.1], [0.5, 2.5, 0.3]], np.float32)
    label = np.array([0, 1], np.int32)
    logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    nll = -logp[np.arange(2), label]
    out = F.loss.cross_entropy(mge.tensor(logits), mge.tensor(label))
    np.testing.assert_allclose(out.numpy(), nll.mean(), rtol=1e-6)
    summed = F.nn.cross_entropy(mge.tensor(logits), mge.tensor(label), reduction="sum")
    np.testing.assert_allclose(summed.numpy(), nll.sum(), rtol=1e-6)
    # label smoothing mixes the one-hot target with the uniform distribution
    smooth = F.loss.cross_entropy(mge.tensor(logits), mge.tensor(label), label_smooth=0.3)
    target = 0.7 * np.eye(3)[label] + 0.3 / 3
    np.testing.assert_allclose(smooth.numpy(), (-(target * logp).sum(axis=1)).mean(), rtol=1e-5)


def test_other_losses():
    pred = np.array([0.2, 0.8, -1.0], np.float32)
    label = np.array([0.0, 1.0, 1.0], np.float32)
    p, y = mge.tensor(pred), mge.tensor(label)
    np.testing.assert_allclose(F.loss.square_loss(p, y).numpy(), ((pred - label) ** 2).mean())
    np.testing.assert_allclose(F.loss.l1_loss(p, y).numpy(), np.abs(pred - label).mean())
    sig = 1 / (1 + np.exp(-pred))
    bce = -(label * np.log(sig) + (1 - label) * np.log(1 - sig)).mean()
    np.testing.assert_allclose(F.loss.binary_cross_entropy(p, y).numpy(), bce, rtol=1e-6)
    probs = mge.tensor([0.5, 0.25, 0.9])
    bce_p = -(label * np.log([0.5, 0.25, 0.9]) + (1 - label) * np.log([0.5, 0.75, 0.1])).mean()
    np.testing.assert_allclose(
        F.loss.binary_cross_entropy(probs, y, with_logits=False).numpy(), bce_p, rtol=1e-6)


def test_pooling_is_nchw_with_stride_defaulting_to_kernel():
    a = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    x = mge.tensor(a)
    np.testing.assert_array_equal(F.nn.max_pool2d(x, 2).numpy()[0, 0], [[5, 7], [13, 15]])
    np.testing.assert_array_equal(F.nn.avg_pool2d(x, 2).numpy()[0, 0], [[2.5, 4.5], [10.5, 12.5]])
    # MegEngine's default mode averages over the cells inside the input only
    ones = mge.tensor(np.ones((1, 1, 2, 2), np.float32))
    np.testing.assert_array_equal(F.nn.avg_pool2d(ones, 2, stride=2, padding=1).numpy(),
                                  np.ones((1, 1, 2, 2)))
    np.testing.assert_allclose(F.nn.adaptive_avg_pool2d(x, 1).numpy().ravel(), [7.5])


def test_conv2d_against_a_direct_sum():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((1, 2, 4, 4)).astype(np.float32)
    w = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    out = F.nn.conv2d(mge.tensor(a), mge.tensor(w), padding=1).numpy()
    padded = np.pad(a, ((0, 0), (0, 0), (1, 1), (1, 1)))
    ref = np.zeros((1, 3, 4, 4), np.float32)
    for i in range(4):
        for j in range(4):
            ref[0, :, i, j] = np.einsum("chw,ochw->o", padded[0, :, i:i + 3, j:j + 3], w)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


def test_functional_batch_norm_updates_running_stats_in_place():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((4, 2, 3, 3)).astype(np.float32)
    running_mean = mge.tensor(np.zeros((1, 2, 1, 1), np.float32))
    running_var = mge.tensor(np.ones((1, 2, 1, 1), np.float32))
    out = F.nn.batch_norm(mge.tensor(a), running_mean, running_var, training=True, momentum=0.9)
    mean, var = a.mean(axis=(0, 2, 3)), a.var(axis=(0, 2, 3))
    ref = (a - mean[None, :, None, None]) / np.sqrt(var[None, :, None, None] + 1e-5)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(running_mean.numpy().ravel(), 0.1 * mean, rtol=1e-5)
    unbiased = a.var(axis=(0, 2, 3), ddof=1)
    np.testing.assert_allclose(running_var.numpy().ravel(), 0.9 + 0.1 * unbiased, rtol=1e-5)


def test_dropout_scales_kept_values():
    x = mge.tensor(np.ones(10000, np.float32))
    out = F.nn.dropout(x, 0.25).numpy()
    assert set(np.unique(out)) <= {0.0, np.float32(1 / 0.75)}
    assert abs((out == 0).mean() - 0.25) < 0.03
    np.testing.assert_array_equal(F.nn.dropout(x, 0.25, training=False).numpy(), x.numpy())


@pytest.mark.parametrize("fn, ref", [
    (F.exp, np.exp), (F.log, np.log), (F.sqrt, np.sqrt), (F.tanh, np.tanh),
    (F.floor, np.floor), (F.ceil, np.ceil), (F.abs, np.abs), (F.log1p, np.log1p),
])
def test_elementwise_against_numpy(fn, ref):
    a = np.array([0.25, 1.5, 2.75, 4.0], np.float32)
    np.testing.assert_allclose(fn(mge.tensor(a)).numpy(), ref(a), rtol=1e-6)


def test_embedding_and_pad():
    weight = mge.tensor(np.array([[1.0, 2.0], [3.0, 4.0]], np.float32))
    np.testing.assert_array_equal(F.nn.embedding(mge.tensor([1, 0]), weight).numpy(),
                                  [[3.0, 4.0], [1.0, 2.0]])
    padded = F.nn.pad(mge.tensor([[1.0, 2.0]]), ((1, 1), (0, 0)))
    np.testing.assert_array_equal(padded.numpy(), [[0, 0], [1, 2], [0, 0]])


def test_round_goes_half_away_from_zero_as_roundf():
    x = mge.tensor([0.5, 1.5, 2.5, -0.5, -2.5, 0.49999997, 1.2])
    np.testing.assert_array_equal(F.round(x).numpy(), [1, 2, 3, -1, -3, 0, 1])


def test_floor_div_mod_copy_and_the_vision_namespace():
    a, b = mge.tensor([7, -7, 6]), mge.tensor([2, 2, -4])
    np.testing.assert_array_equal(F.floor_div(a, b).numpy(), [3, -4, -2])
    np.testing.assert_array_equal(F.mod(a, b).numpy(), [1, 1, -2])
    x = mge.tensor([1.0, 2.0])
    y = F.copy(x, "cpu0")
    assert y is not x and y.device == "cpu0"
    np.testing.assert_array_equal(y.numpy(), [1.0, 2.0])
    up = F.vision.interpolate(mge.tensor(np.arange(4.0).reshape(1, 1, 2, 2)), scale_factor=2.0,
                              mode="nearest")
    np.testing.assert_array_equal(up.numpy()[0, 0, 0], [0, 0, 1, 1])


def test_one_hot_needs_integer_classes_and_pooling_a_non_empty_output():
    with pytest.raises(TypeError, match="one_hot: x must hold integer class indices"):
        F.one_hot(mge.tensor([1.5]), 3)
    with pytest.raises(ValueError, match="larger than the input's spatial size"):
        F.max_pool2d(mge.tensor(np.ones((1, 1, 2, 2), np.float32)), 3)


@pytest.mark.parametrize("fn", ["gather", "scatter", "indexing_one_hot"])
def test_a_negative_axis_is_the_axis_from_the_end(fn):
    """`F.gather(x, -1, idx)` gave NaN for valid indices: the axis was not normalised."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 4)).astype(np.float32)
    idx = np.array([[0, 3], [1, 2], [2, 0]], np.int32)
    results = []
    for axis in (1, -1):
        x = mge.tensor(a)
        gm = mge.autodiff.GradManager().attach([x])
        with gm:
            if fn == "gather":
                y = F.gather(x, axis, mge.tensor(idx))
            elif fn == "scatter":
                y = F.scatter(x, axis, mge.tensor(idx), mge.tensor(np.ones((3, 2), np.float32)))
            else:
                y = F.indexing_one_hot(x, mge.tensor(idx[:, 0]), axis=axis)
            gm.backward((y * y).sum())
        results.append((y.numpy(), x.grad.numpy()))
    assert np.isfinite(results[1][0]).all()
    for got, want in zip(results[1], results[0]):
        np.testing.assert_array_equal(got, want)
    if fn == "gather":
        np.testing.assert_array_equal(results[1][0], np.take_along_axis(a, idx, axis=1))


def test_one_hot_of_a_label_out_of_range_is_an_index_error():
    from eager.core.errors import OpIndexError

    with pytest.raises(OpIndexError, match=r"one_hot: label 5 is out of range for 3 classes"):
        F.one_hot(mge.tensor(np.array([0, 5], np.int32)), 3)
    with pytest.raises(OpIndexError, match="label -1"):
        F.one_hot(mge.tensor(np.array([-1, 0], np.int32)), 3)


@pytest.mark.parametrize("args, match", [
    ((3,), r"flatten: start_axis=3 is out of range for a 2-d tensor"),
    ((0, -3), r"flatten: end_axis=-3 is out of range"),
    ((1, 0), r"flatten: start_axis=1 comes after end_axis=0"),
])
def test_flatten_axes_out_of_range_are_clear_errors(args, match):
    from eager.core.errors import OpArgumentError

    with pytest.raises(OpArgumentError, match=match):
        F.flatten(mge.tensor(np.ones((3, 4), np.float32)), *args)
    assert F.flatten(mge.tensor(np.ones((2, 3, 4), np.float32)), -2).shape == (2, 12)
