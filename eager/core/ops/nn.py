"""Neural-network ops: matmul, linear, pooling (NCHW), dropout, embedding, softmax, attention and
losses (convolutions are in conv.py, normalizations in norm.py), with their argument checks."""

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..amp_policy import FLOAT32, LOW
from ..errors import OpArgumentError, OpTypeError
from .checks import Found, dims, integers, kind, missing, shape_of, window
from .ragged_rules import ROWS, WIDE_ROWS, along, unless_reduced
from .registry import defop


def _matmul_check(inputs: Sequence, attrs: dict) -> Found:
    if (found := missing(inputs, ("left operand", "right operand"))) is not None:
        return found
    a, b = (dims(x) for x in inputs)
    for i, s in enumerate((a, b)):
        if len(s) == 0:
            return OpArgumentError, (f"argument {i + 1} is 0-d (a scalar); matmul needs tensors "
                                     "of at least one dimension: use `*` to scale by a scalar.")
    inner_a, inner_b = a[-1], b[-2] if len(b) > 1 else b[0]
    if inner_a != inner_b:
        return OpArgumentError, (
            f"the inner dimensions do not match: {a} @ {b} needs {inner_a} == {inner_b}. "
            "Transpose an operand (x.T) or check which axis holds the features.")
    batch_a, batch_b = a[:-2], b[:-2]
    try:
        np.broadcast_shapes(batch_a, batch_b)
    except ValueError:
        return OpArgumentError, (f"the batch dimensions {batch_a} and {batch_b} of {a} @ {b} do "
                                 "not broadcast; make them equal or 1.")
    return None


def _embedding_before(inputs: Sequence, attrs: dict) -> Found:
    """Integer indices, in the words the wrapper used before reading their range on the host;
    the weight's rank is explained only after a failed call (a higher-rank table works)."""
    return integers(inputs[0], "indices must be integers, got dtype {dtype}; convert them with "
                               ".astype('int32').")


def _embedding_check(inputs: Sequence, attrs: dict) -> Found:
    index, weight = inputs
    if (found := missing((index, weight), ("index", "weight"))) is not None:
        return found
    if (found := _embedding_before(inputs, attrs)) is not None:
        return found
    if len(dims(weight)) != 2:
        return OpArgumentError, (f"the weight has shape {shape_of(weight)}; it must be 2-d "
                                 "(num_embeddings, dim).")
    return None


# ragged=ROWS: a ragged axis 0 is a batch (row) axis; a call that contracts over it fails
# ragged_dispatch.py's shape check and runs on the exact arrays.
defop("matmul", ragged=ROWS, amp=LOW, check=_matmul_check)(jnp.matmul)
defop("softmax", ragged=along(inside=None), amp=FLOAT32)(
    lambda x, *, axis: jax.nn.softmax(x, axis=axis))
defop("log_softmax", ragged=along(inside=None), amp=FLOAT32)(
    lambda x, *, axis: jax.nn.log_softmax(x, axis=axis))
defop("embedding", ragged=ROWS, check=_embedding_check, before=_embedding_before)(
    lambda index, weight: jnp.take(weight, index, axis=0))


def _einsum_check(inputs: Sequence, attrs: dict) -> Found:
    """Each operand's rank fits its term of the subscripts (an ellipsis takes any number of
    axes), and a label's sizes agree or are 1 (and broadcast)."""
    subscripts, shapes = attrs["subscripts"], [dims(x) for x in inputs]
    terms = subscripts.partition("->")[0].split(",")
    if len(terms) != len(shapes):
        return OpArgumentError, (f"{subscripts!r} names {len(terms)} operands, got "
                                 f"{len(shapes)} (shapes {shapes}).")
    sizes: dict[str, int] = {}
    for i, (term, shape) in enumerate(zip(terms, shapes)):
        head, dots, tail = term.partition("...")
        if not (len(shape) >= len(head + tail) if dots else len(shape) == len(term)):
            return OpArgumentError, (f"term {term!r} of {subscripts!r} does not fit operand {i} "
                                     f"of shape {shape} (its number of axes differs).")
        for label, n in [*zip(head, shape), *zip(tail, shape[len(shape) - len(tail):])]:
            seen = sizes.setdefault(label, n)
            if seen != n and 1 not in (seen, n):
                return OpArgumentError, (f"label {label!r} of {subscripts!r} has size {n} in "
                                         f"operand {i} (shape {shape}) but {seen} before.")
            sizes[label] = max(seen, n)
    return None


defop("einsum", amp=LOW, check=_einsum_check, before=_einsum_check)(
    lambda *xs, subscripts: jnp.einsum(subscripts, *xs))


def _linear_check(inputs: Sequence, attrs: dict) -> Found:
    x, weight, bias = inputs
    if (found := missing((x, weight), ("input", "weight"))) is not None:
        return found
    xs, ws = dims(x), dims(weight)
    if len(ws) != 2:
        return OpArgumentError, (f"the weight has shape {ws}; it must be 2-d, (out_features, "
                                 "in_features).")
    if len(xs) == 0 or xs[-1] != ws[1]:
        return OpArgumentError, (
            f"the input of shape {xs} has {xs[-1] if xs else 0} features on its last axis but "
            f"the weight of shape {ws} (out_features, in_features) expects {ws[1]}. Give the "
            f"input {ws[1]} features or build the layer with in_features={xs[-1] if xs else 0}.")
    bs = shape_of(bias)
    if bs is not None and bs not in ((ws[0],), ()):
        return OpArgumentError, (f"the bias has shape {bs}; for a weight of shape {ws} it must "
                                 f"be ({ws[0]},).")
    return None


@defop("linear", ragged=WIDE_ROWS, amp=LOW, check=_linear_check)
def linear(x, weight, bias):
    y = jnp.matmul(x, weight.T)
    return y if bias is None else y + bias


def channel(v, ndim):
    """A per-channel vector shaped to broadcast over axis 1 of an N-d activation."""
    return v.reshape((1, -1) + (1,) * (ndim - 2))


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


def _interpolate_check(inputs: Sequence, attrs: dict) -> Found:
    """An NCHW input, of floats for the bilinear mode (it mixes neighbours)."""
    xs = dims(inputs[0])
    if len(xs) != 4:
        return OpArgumentError, f"needs an NCHW input, got shape {xs}."
    if attrs["mode"] == "bilinear" and kind(inputs[0]) != "f":
        return OpTypeError, (f"bilinear needs a float input, got dtype "
                             f"{np.dtype(inputs[0].dtype)}; use x.astype('float32').")
    return None


@defop("interpolate", check=_interpolate_check, before=_interpolate_check)
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


def _pool_check(inputs: Sequence, attrs: dict) -> Found:
    """Also run before the call (`F.max_pool2d`, `F.avg_pool2d`): jax takes a negative padding
    silently (it crops)."""
    xs = shape_of(inputs[0])
    if xs is None or len(xs) != 4:
        return OpArgumentError, (f"the input has shape {xs}; pooling needs a 4-d (N, C, H, W) "
                                 "tensor.")
    found = window(attrs, ("kernel", "stride"))
    if found is None and "kernel" in attrs:
        pad = attrs.get("padding", (0, 0))
        if any(n + 2 * p < k for n, p, k in zip(xs[2:], pad, attrs["kernel"])):
            return OpArgumentError, (
                f"kernel={attrs['kernel']} is larger than the input's spatial size {xs[2:]} "
                f"plus padding={pad}: the output would be empty; use a smaller kernel or pad.")
    return found


@defop("max_pool2d", check=_pool_check, before=_pool_check)
def max_pool2d(x, *, kernel, stride, padding):
    # a concrete numpy init value lets jax recognise the max monoid, which it can differentiate
    return _window(x, np.array(-np.inf, x.dtype), lax.max, kernel, stride, padding)


@defop("avg_pool2d", check=_pool_check, before=_pool_check)
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


def adaptive_fit(xs: tuple, out: tuple) -> Found:
    """An adaptive pooling's output size `out` for an NCHW input of shape `xs`: between 1 and
    the input's spatial size (MegEngine crashes past it), as the bins' rule needs."""
    if any(not 1 <= o <= n for o, n in zip(out, xs[2:])):
        return OpArgumentError, (f"oshp={out} must lie between (1, 1) and the input's spatial "
                                 f"size {xs[2:]} (input shape {xs}).")
    return None


def _adaptive_check(inputs: Sequence, attrs: dict) -> Found:
    """The output size (an input not NCHW: jax's error says what is wrong)."""
    xs = dims(inputs[0])
    return adaptive_fit(xs, attrs["out_shape"]) if len(xs) == 4 else None


@defop("adaptive_avg_pool2d", check=_adaptive_check, before=_adaptive_check)
def adaptive_avg_pool2d(x, *, out_shape):
    """MegEngine's adaptive bins: along an axis of n values, output i averages
    [i * s, i * s + k), s = n // o, k = n - (o - 1) * s: a pooling window (bins may overlap;
    PyTorch's bins differ where o does not divide n). A window the channels-last rewrite of
    compiled regions keeps channels-last."""
    k, stride = adaptive_window(x.shape[2:], out_shape)
    return _window(x, np.array(0, x.dtype), lax.add, k, stride, (0, 0)) / (k[0] * k[1])


def _dropout_check(inputs: Sequence, attrs: dict) -> Found:
    """A probability the kept values can be scaled up by (1 / (1 - p))."""
    p = attrs["drop_prob"]
    return None if 0.0 <= p < 1.0 else (OpArgumentError, f"drop_prob must be in [0, 1), got {p}.")


@defop("dropout", before=_dropout_check)
def dropout(x, key, *, drop_prob):
    keep = jax.random.bernoulli(key, 1.0 - drop_prob, x.shape)
    return jnp.where(keep, x / (1.0 - drop_prob), jnp.zeros_like(x))


@defop("scaled_dot_product_attention", amp=LOW)
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


def _class_axis(inputs: Sequence, attrs: dict) -> Found:
    """The classes' axis is one of pred's (a wrong one would pick along another silently)."""
    ps, axis = dims(inputs[0]), attrs.get("axis", 1)
    if not -len(ps) <= axis < len(ps):
        return OpArgumentError, f"axis {axis} is out of range for pred of shape {ps}."
    return None


def _class_loss_check(inputs: Sequence, attrs: dict) -> Found:
    pred, label = inputs
    if (found := missing((pred, label), ("pred", "label"))) is not None:
        return found
    if (found := _class_axis(inputs, attrs)) is not None:
        return found
    ps, ls, axis = dims(pred), dims(label), attrs.get("axis", 1)
    want = ps[:axis % len(ps)] + ps[axis % len(ps) + 1:]
    if ls != want:
        return OpArgumentError, (
            f"pred of shape {ps} and label of shape {ls} do not fit: with the classes on axis "
            f"{axis}, label must have shape {want} (one class index per sample).")
    if kind(label) not in "iu":
        return OpTypeError, (f"label is a {np.dtype(label.dtype)} tensor; it must hold integer "
                             "class indices: convert it with .astype('int32').")
    return None


@defop("cross_entropy", ragged=unless_reduced, amp=FLOAT32, check=_class_loss_check,
       before=_class_axis)
def cross_entropy(pred, label, *, axis, with_logits, label_smooth, reduction):
    logp = jax.nn.log_softmax(pred, axis=axis) if with_logits else jnp.log(pred)
    loss = -_picked(logp, label, axis)
    if label_smooth:
        loss = (1 - label_smooth) * loss - label_smooth * jnp.mean(logp, axis=axis)
    return _reduce(loss, reduction)


@defop("nll_loss", ragged=unless_reduced, amp=FLOAT32, check=_class_loss_check,
       before=_class_axis)
def nll_loss(logp, label, *, axis, reduction):
    return _reduce(-_picked(logp, label, axis), reduction)


@defop("binary_cross_entropy", ragged=unless_reduced, amp=FLOAT32)
def binary_cross_entropy(pred, label, *, with_logits, reduction):
    if with_logits:
        loss = jnp.maximum(pred, 0) - pred * label + jnp.log1p(jnp.exp(-jnp.abs(pred)))
    else:
        loss = -(label * jnp.log(pred) + (1 - label) * jnp.log1p(-pred))
    return _reduce(loss, reduction)


defop("mse_loss", ragged=unless_reduced, amp=FLOAT32)(
    lambda pred, label, *, reduction: _reduce(jnp.square(pred - label), reduction))
defop("l1_loss", ragged=unless_reduced, amp=FLOAT32)(
    lambda pred, label, *, reduction: _reduce(jnp.abs(pred - label), reduction))
