"""Neural-network ops: matmul, linear, convolution and pooling (NCHW), normalization, dropout,
embedding, softmax, attention and losses."""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..conv_switch import conv_options, on_switch
from . import conv_forms
from .lean_grads import standardize
from .ragged_rules import ROWS, WIDE_ROWS, along, unless_reduced
from .registry import defop

# ragged=ROWS: a ragged axis 0 is a batch (row) axis; a call that contracts over it fails
# ragged_dispatch.py's shape check and runs on the exact arrays.
defop("matmul", ragged=ROWS)(jnp.matmul)
defop("einsum")(lambda *xs, subscripts: jnp.einsum(subscripts, *xs))
defop("softmax", ragged=along(inside=None))(lambda x, *, axis: jax.nn.softmax(x, axis=axis))
defop("log_softmax", ragged=along(inside=None))(lambda x, *, axis: jax.nn.log_softmax(x, axis=axis))
defop("embedding", ragged=ROWS)(lambda index, weight: jnp.take(weight, index, axis=0))


@defop("linear", ragged=WIDE_ROWS)
def linear(x, weight, bias):
    y = jnp.matmul(x, weight.T)
    return y if bias is None else y + bias


def _channel(v, ndim):
    """A per-channel vector shaped to broadcast over axis 1 of an N-d activation."""
    return v.reshape((1, -1) + (1,) * (ndim - 2))


_CONV_DIMS = {3: ("NCH", "OIH", "NCH"), 4: ("NCHW", "OIHW", "NCHW"),
              5: ("NCDHW", "OIDHW", "NCDHW")}


def _conv_options(**_attrs):
    """XLA options for a convolution's jitted forward and backward: on the CPU, XLA's own
    convolutions rather than YNNPACK's slow weight gradient (`eager.set_conv_rewrites`). An
    eager convolution keeps NCHW: a lone NHWC convolution behind transposes was not measured
    faster (XLA:CPU transposes around an NCHW one itself)."""
    return conv_options(jax.default_backend())


@defop("conv", compiler_options=_conv_options)
def conv(x, weight, bias, *, stride, padding, dilation, groups):
    settings = dict(stride=stride, padding=padding, dilation=dilation)
    if conv_forms.as_matmul(x, weight, groups=groups, **settings):
        y = conv_forms.conv_matmul(x, weight, **settings)
    else:
        y = lax.conv_general_dilated(
            x, weight, window_strides=stride, padding=[(p, p) for p in padding],
            rhs_dilation=dilation, dimension_numbers=_CONV_DIMS[x.ndim],
            feature_group_count=groups,
        )
    return y if bias is None else y + _channel(bias, y.ndim)


@defop("conv_transpose", compiler_options=_conv_options)
def conv_transpose(x, weight, bias, *, stride, padding, output_padding, dilation, groups):
    # The gradient of a convolution: dilate the input by the stride and convolve with the
    # flipped kernel, whose (in, out/groups) layout is regrouped to (out, in/groups).
    cin, cout_g, *k = weight.shape
    w = weight.reshape((groups, cin // groups, cout_g, *k)).swapaxes(1, 2)
    w = jnp.flip(w.reshape((groups * cout_g, cin // groups, *k)), range(2, 2 + len(k)))
    pads = [
        (d * (kk - 1) - p, d * (kk - 1) - p + op)
        for kk, p, op, d in zip(k, padding, output_padding, dilation)
    ]
    y = lax.conv_general_dilated(
        x, w, window_strides=(1,) * len(k), padding=pads, lhs_dilation=stride,
        rhs_dilation=dilation, dimension_numbers=_CONV_DIMS[x.ndim], feature_group_count=groups,
    )
    return y if bias is None else y + _channel(bias, y.ndim)


@on_switch
def _rebuild_convolutions() -> None:
    conv.drop_compiled()
    conv_transpose.drop_compiled()


def _nearest_taps(n_in, n_out):
    """PyTorch's nearest rule, in its float32 arithmetic: source floor(dst * (n_in / n_out)),
    clamped to the last row."""
    scale = np.float32(n_in) / np.float32(n_out)
    src = np.floor(np.arange(n_out, dtype=np.float32) * scale).astype(np.int32)
    return np.minimum(src, n_in - 1)


def _linear_taps(n_in, n_out, align_corners):
    """(lo, hi, weight of hi) per output position, in float32 as PyTorch computes them: corner
    pixel centres line up (align_corners) or pixel edges do, with sources clamped at 0."""
    dst = np.arange(n_out, dtype=np.float32)
    if align_corners:
        scale = np.float32(n_in - 1) / np.float32(n_out - 1) if n_out > 1 else np.float32(0)
        src = dst * scale
    else:
        scale = np.float32(n_in) / np.float32(n_out)
        src = np.maximum((dst + np.float32(0.5)) * scale - np.float32(0.5), np.float32(0))
    lo = np.minimum(np.floor(src).astype(np.int32), n_in - 1)
    return lo, np.minimum(lo + 1, n_in - 1), np.clip(src - lo, 0, 1)


@defop("interpolate")
def interpolate(x, *, size, mode, align_corners):
    """Resize the last two axes of NCHW `x` to `size`, one axis at a time (both modes are
    separable); the taps are static numpy constants computed from the shapes, all in range
    (so the gathers need no out-of-bounds fill)."""
    for axis, n_out in ((2, size[0]), (3, size[1])):
        n_in = x.shape[axis]
        if mode == "nearest":
            x = jnp.take(x, _nearest_taps(n_in, n_out), axis=axis, mode="clip")
            continue
        lo, hi, w = _linear_taps(n_in, n_out, align_corners)
        w = w.astype(x.dtype).reshape((-1,) + (1,) * (x.ndim - 1 - axis))
        x = (jnp.take(x, lo, axis=axis, mode="clip") * (1 - w)
             + jnp.take(x, hi, axis=axis, mode="clip") * w)
    return x


def _window(x, init, reducer, kernel, stride, padding):
    return lax.reduce_window(
        x, init, reducer, (1, 1, *kernel), (1, 1, *stride),
        [(0, 0), (0, 0)] + [(p, p) for p in padding],
    )


@defop("max_pool2d")
def max_pool2d(x, *, kernel, stride, padding):
    # a concrete numpy init value lets jax recognise the max monoid, which it can differentiate
    return _window(x, np.array(-np.inf, x.dtype), lax.max, kernel, stride, padding)


@defop("avg_pool2d")
def avg_pool2d(x, *, kernel, stride, padding, count_padding):
    total = _window(x, np.array(0, x.dtype), lax.add, kernel, stride, padding)
    if count_padding:
        return total / (kernel[0] * kernel[1])
    ones = jnp.ones((1, 1, *x.shape[2:]), x.dtype)
    return total / _window(ones, np.array(0, x.dtype), lax.add, kernel, stride, padding)


def adaptive_window(in_shape, out_shape):
    """(kernel, stride) of MegEngine's adaptive bins over the spatial sizes `in_shape` for the
    output sizes `out_shape`: along an axis of n values, output i covers [i * s, i * s + k),
    s = n // o, k = n - (o - 1) * s."""
    stride = tuple(n // o for n, o in zip(in_shape, out_shape))
    return tuple(n - (o - 1) * st for n, o, st in zip(in_shape, out_shape, stride)), stride


@defop("adaptive_avg_pool2d")
def adaptive_avg_pool2d(x, *, out_shape):
    """MegEngine's adaptive bins: along an axis of n values, output i averages
    [i * s, i * s + k), s = n // o, k = n - (o - 1) * s: a pooling window (bins may overlap;
    PyTorch's bins differ where o does not divide n). A window the channels-last rewrite of
    compiled regions keeps channels-last."""
    k, stride = adaptive_window(x.shape[2:], out_shape)
    return _window(x, np.array(0, x.dtype), lax.add, k, stride, (0, 0)) / (k[0] * k[1])


@defop("batch_norm_train", nondiff_outputs=(1, 2))
def batch_norm_train(x, weight, bias, *, eps):
    """Normalize with batch statistics; also return the mean and the unbiased variance.
    The output has x's dtype; a float16 x with float32 weights (MegEngine's mixed precision)
    is normalized in float32."""
    axes = (0, *range(2, x.ndim))
    wide = _normalize_dtype(x, weight)
    mean = jnp.mean(x.astype(wide), axis=axes, keepdims=True)
    centered = x.astype(wide) - mean
    var = jnp.mean(centered * centered, axis=axes, keepdims=True)
    y = _scale_shift(centered, lax.rsqrt(var + eps), weight, bias).astype(x.dtype)
    n = x.size // x.shape[1]
    return y, mean.reshape(-1), var.reshape(-1) * (n / max(n - 1, 1))


@defop("batch_norm_eval")
def batch_norm_eval(x, running_mean, running_var, weight, bias, *, eps):
    wide = _normalize_dtype(x, weight, running_mean)
    mean, var = _channel(running_mean, x.ndim), _channel(running_var, x.ndim)
    y = _scale_shift(x.astype(wide) - mean, lax.rsqrt(var + eps), weight, bias)
    return y.astype(x.dtype)


def _normalize_dtype(x, *others):
    """The dtype a normalization computes in: x's, or wider when its weights or statistics are
    (float16 activations with float32 parameters)."""
    return jnp.result_type(x, *(o for o in others if o is not None))


def _scale_shift(centered, inv_std, weight, bias):
    """centered * (inv_std * weight) + bias, with the weight folded into the per-channel scale:
    the backward then keeps no full-size normalized copy of the input (a whole ResNet step
    needed 1.31x the memory of jax.grad's without the fold, 1.00x with it)."""
    scale = inv_std if weight is None else inv_std * _channel(weight, centered.ndim)
    y = centered * scale
    return y if bias is None else y + _channel(bias, y.ndim)


@defop("running_stats_update", differentiable=False, multi_output=True, quick=True)
def running_stats_update(running_mean, running_var, mean, var, *, momentum):
    """MegEngine's convention: running = momentum * running + (1 - momentum) * batch."""
    mean, var = mean.reshape(running_mean.shape), var.reshape(running_var.shape)
    return (momentum * running_mean + (1 - momentum) * mean,
            momentum * running_var + (1 - momentum) * var)


@defop("layer_norm", ragged=lambda attrs, ndim: ROWS if attrs["n_axes"] < ndim else None)
def layer_norm(x, weight, bias, *, n_axes, eps):
    y = standardize(x, tuple(range(x.ndim - n_axes, x.ndim)), eps)
    if weight is not None:
        y = y * weight
    return y if bias is None else y + bias


@defop("group_norm", ragged=ROWS)
def group_norm(x, weight, bias, *, groups, eps):
    y = standardize(x.reshape((x.shape[0], groups, -1)), (2,), eps).reshape(x.shape)
    if weight is not None:
        y = y * _channel(weight, y.ndim)
    return y if bias is None else y + _channel(bias, y.ndim)


@defop("dropout")
def dropout(x, key, *, drop_prob):
    keep = jax.random.bernoulli(key, 1.0 - drop_prob, x.shape)
    return jnp.where(keep, x / (1.0 - drop_prob), jnp.zeros_like(x))


@defop("scaled_dot_product_attention")
def scaled_dot_product_attention(q, k, v, mask, *, is_causal, scale):
    scores = jnp.matmul(q, jnp.swapaxes(k, -1, -2)) * scale
    if is_causal:
        causal = jnp.tril(jnp.ones((q.shape[-2], k.shape[-2]), dtype=bool))
        scores = jnp.where(causal, scores, -jnp.inf)
    if mask is not None:
        scores = jnp.where(mask, scores, -jnp.inf) if mask.dtype == bool else scores + mask
    return jnp.matmul(jax.nn.softmax(scores, axis=-1), v)


def _reduce(loss, reduction):
    if reduction == "mean":
        return jnp.mean(loss)
    if reduction == "sum":
        return jnp.sum(loss)
    return loss


def _picked(logp, label, axis):
    return jnp.squeeze(jnp.take_along_axis(logp, jnp.expand_dims(label, axis), axis=axis), axis)


@defop("cross_entropy", ragged=unless_reduced)
def cross_entropy(pred, label, *, axis, with_logits, label_smooth, reduction):
    logp = jax.nn.log_softmax(pred, axis=axis) if with_logits else jnp.log(pred)
    loss = -_picked(logp, label, axis)
    if label_smooth:
        loss = (1 - label_smooth) * loss - label_smooth * jnp.mean(logp, axis=axis)
    return _reduce(loss, reduction)


@defop("nll_loss", ragged=unless_reduced)
def nll_loss(logp, label, *, axis, reduction):
    return _reduce(-_picked(logp, label, axis), reduction)


@defop("binary_cross_entropy", ragged=unless_reduced)
def binary_cross_entropy(pred, label, *, with_logits, reduction):
    if with_logits:
        loss = jnp.maximum(pred, 0) - pred * label + jnp.log1p(jnp.exp(-jnp.abs(pred)))
    else:
        loss = -(label * jnp.log(pred) + (1 - label) * jnp.log1p(-pred))
    return _reduce(loss, reduction)


defop("mse_loss", ragged=unless_reduced)(
    lambda pred, label, *, reduction: _reduce(jnp.square(pred - label), reduction))
defop("l1_loss", ragged=unless_reduced)(
    lambda pred, label, *, reduction: _reduce(jnp.abs(pred - label), reduction))
