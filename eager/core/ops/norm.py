"""Normalization ops: batch normalization (training, inference and the update of the running
statistics), layer and group normalization (instance normalization is a group normalization with
one channel per group: `eager/functional/_norm.py`), with their argument checks."""

import math
from collections.abc import Sequence

import jax.numpy as jnp
from jax import lax

from ..amp_policy import FLOAT32
from ..errors import OpArgumentError
from .checks import Found, dims
from .lean_grads import standardize
from .nn import channel
from .ragged_rules import ROWS
from .registry import defop


def _eval_check(inputs: Sequence, attrs: dict) -> Found:
    """Inference normalizes with the running statistics: both must be there."""
    if inputs[1] is None or inputs[2] is None:
        return OpArgumentError, "inference needs running_mean and running_var."
    return None


def _group_check(inputs: Sequence, attrs: dict) -> Found:
    """The channels (axis 1) split into `groups` groups; a weight and a bias of one value per
    channel (a single value would broadcast over all of them unnoticed)."""
    x, weight, bias = inputs
    xs, groups = dims(x), attrs["groups"]
    if xs[1] % groups:
        return OpArgumentError, f"{xs[1]} channels are not divisible into {groups} groups."
    for value, name in ((weight, "weight"), (bias, "bias")):
        if value is not None and math.prod(dims(value)) != xs[1]:
            return OpArgumentError, (f"{name} has shape {dims(value)}; it needs one value per "
                                     f"channel ({xs[1]}) of the input {xs}.")
    return None


@defop("batch_norm_train", nondiff_outputs=(1, 2), amp=FLOAT32)
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


@defop("batch_norm_eval", amp=FLOAT32, check=_eval_check, before=_eval_check)
def batch_norm_eval(x, running_mean, running_var, weight, bias, *, eps):
    wide = _normalize_dtype(x, weight, running_mean)
    mean, var = channel(running_mean, x.ndim), channel(running_var, x.ndim)
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
    scale = inv_std if weight is None else inv_std * channel(weight, centered.ndim)
    y = centered * scale
    return y if bias is None else y + channel(bias, y.ndim)


@defop("running_stats_update", differentiable=False, multi_output=True, quick=True)
def running_stats_update(running_mean, running_var, mean, var, *, momentum):
    """MegEngine's convention: running = momentum * running + (1 - momentum) * batch."""
    mean, var = mean.reshape(running_mean.shape), var.reshape(running_var.shape)
    return (momentum * running_mean + (1 - momentum) * mean,
            momentum * running_var + (1 - momentum) * var)


@defop("layer_norm", ragged=lambda attrs, ndim: ROWS if attrs["n_axes"] < ndim else None,
       amp=FLOAT32)
def layer_norm(x, weight, bias, *, n_axes, eps):
    y = standardize(x, tuple(range(x.ndim - n_axes, x.ndim)), eps)
    if weight is not None:
        y = y * weight
    return y if bias is None else y + bias


@defop("group_norm", ragged=ROWS, amp=FLOAT32, check=_group_check, before=_group_check)
def group_norm(x, weight, bias, *, groups, eps):
    y = standardize(x.reshape((x.shape[0], groups, -1)), (2,), eps).reshape(x.shape)
    if weight is not None:
        y = y * channel(weight, y.ndim)
    return y if bias is None else y + channel(bias, y.ndim)
