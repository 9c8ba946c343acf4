"""Neural-network functions (MegEngine semantics: NCHW, `drop_prob`, exact GELU)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import random as _random
from ..ops import OPS
from ..tensor import Tensor, apply, rebind
from .loss import (  # noqa: F401  (MegEngine's F.nn also holds the losses)
    binary_cross_entropy,
    cross_entropy,
    l1_loss,
    mse_loss,
    nll_loss,
)
from .math import gelu, leaky_relu, relu, sigmoid, silu, softplus, tanh, where  # noqa: F401


def _pair(v: int | Sequence[int], n: int = 2) -> tuple[int, ...]:
    return (int(v),) * n if isinstance(v, int) else tuple(int(i) for i in v)


def matmul(a: Any, b: Any, transpose_a: bool = False, transpose_b: bool = False) -> Tensor:
    """Matrix product with broadcasting over leading axes."""
    if transpose_a:
        a = a.transpose(*range(a.ndim - 2), a.ndim - 1, a.ndim - 2)
    if transpose_b:
        b = b.transpose(*range(b.ndim - 2), b.ndim - 1, b.ndim - 2)
    return apply(OPS["matmul"], a, b)


def linear(x: Any, weight: Any, bias: Any = None) -> Tensor:
    """x @ weight.T + bias, with weight of shape (out, in)."""
    return apply(OPS["linear"], x, weight, bias)


def _conv(n: int, x, weight, bias, stride, padding, dilation, groups) -> Tensor:
    return apply(OPS["conv"], x, weight, bias, stride=_pair(stride, n),
                 padding=_pair(padding, n), dilation=_pair(dilation, n), groups=int(groups))


def conv1d(x: Any, weight: Any, bias: Any = None, stride: int = 1, padding: int = 0,
           dilation: int = 1, groups: int = 1) -> Tensor:
    """1-d convolution over (N, C, L) with weight (out, in/groups, k)."""
    return _conv(1, x, weight, bias, stride, padding, dilation, groups)


def conv2d(x: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1) -> Tensor:
    """2-d convolution over NCHW with weight (out, in/groups, kh, kw)."""
    return _conv(2, x, weight, bias, stride, padding, dilation, groups)


def conv_transpose2d(x: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0,
                     output_padding: Any = 0, dilation: Any = 1, groups: int = 1) -> Tensor:
    """Transposed 2-d convolution over NCHW with weight (in, out/groups, kh, kw)."""
    return apply(OPS["conv_transpose"], x, weight, bias, stride=_pair(stride),
                 padding=_pair(padding), output_padding=_pair(output_padding),
                 dilation=_pair(dilation), groups=int(groups))


def max_pool2d(x: Any, kernel_size: Any, stride: Any = None, padding: Any = 0) -> Tensor:
    """Max pooling over NCHW; `stride` defaults to `kernel_size`."""
    k = _pair(kernel_size)
    return apply(OPS["max_pool2d"], x, kernel=k, stride=_pair(stride) if stride else k,
                 padding=_pair(padding))


def avg_pool2d(x: Any, kernel_size: Any, stride: Any = None, padding: Any = 0,
               mode: str = "average_count_exclude_padding") -> Tensor:
    """Average pooling over NCHW; padded cells are not counted unless mode="average"."""
    if mode not in ("average", "average_count_exclude_padding"):
        raise ValueError(f"avg_pool2d: mode must be 'average' or "
                         f"'average_count_exclude_padding', got {mode!r}")
    k = _pair(kernel_size)
    return apply(OPS["avg_pool2d"], x, kernel=k, stride=_pair(stride) if stride else k,
                 padding=_pair(padding), count_padding=mode == "average")


def adaptive_avg_pool2d(x: Any, oshp: Any) -> Tensor:
    """Average pooling to the output size `oshp` (an int or (h, w))."""
    return apply(OPS["adaptive_avg_pool2d"], x, out_shape=_pair(oshp))


def batch_norm(x: Any, running_mean: Tensor | None = None, running_var: Tensor | None = None,
               weight: Any = None, bias: Any = None, *, training: bool = False,
               momentum: float = 0.9, eps: float = 1e-5, inplace: bool = True) -> Tensor:
    """Batch normalization over axis 1 (channels).

    In training it normalizes with the batch statistics and, with `inplace`, updates the running
    statistics as `running = momentum * running + (1 - momentum) * batch` (MegEngine's momentum;
    the unbiased batch variance goes into `running_var`). Otherwise it uses the running statistics.
    """
    if not training:
        if running_mean is None or running_var is None:
            raise ValueError("batch_norm in inference needs running_mean and running_var")
        return apply(OPS["batch_norm_eval"], x, running_mean, running_var, weight, bias,
                     eps=float(eps))
    y, mean, var = apply(OPS["batch_norm_train"], x, weight, bias, eps=float(eps))
    if inplace and running_mean is not None and running_var is not None:
        new_mean, new_var = apply(OPS["running_stats_update"], running_mean, running_var,
                                  mean, var, momentum=float(momentum))
        rebind(running_mean, new_mean._data)
        rebind(running_var, new_var._data)
    return y


def layer_norm(x: Any, normalized_shape: int | Sequence[int], affine: bool = True,
               weight: Any = None, bias: Any = None, eps: float = 1e-5) -> Tensor:
    """Normalize over the trailing `normalized_shape` axes (biased variance)."""
    n = 1 if isinstance(normalized_shape, int) else len(tuple(normalized_shape))
    if not affine:
        weight = bias = None
    return apply(OPS["layer_norm"], x, weight, bias, n_axes=n, eps=float(eps))


def group_norm(x: Any, num_groups: int, affine: bool = True, weight: Any = None,
               bias: Any = None, eps: float = 1e-5) -> Tensor:
    """Normalize over channel groups of an (N, C, ...) tensor."""
    if x.shape[1] % num_groups:
        raise ValueError(f"group_norm: {x.shape[1]} channels are not divisible into "
                         f"{num_groups} groups")
    if not affine:
        weight = bias = None
    return apply(OPS["group_norm"], x, weight, bias, groups=int(num_groups), eps=float(eps))


def dropout(x: Any, drop_prob: float, training: bool = True) -> Tensor:
    """Zero each element with probability `drop_prob` and scale the rest by 1/(1-drop_prob).

    Draws from the framework generator (`eg.random`), so a captured dropout is bit-identical.
    """
    if not 0.0 <= drop_prob < 1.0:
        raise ValueError(f"dropout: drop_prob must be in [0, 1), got {drop_prob}")
    if not training or drop_prob == 0.0:
        return x
    return apply(OPS["dropout"], x, _random.next_key(), drop_prob=float(drop_prob))


def embedding(x: Any, weight: Any) -> Tensor:
    """Rows of `weight` (num_embeddings, dim) picked by the integer tensor `x`."""
    return apply(OPS["embedding"], x, weight)


def _softmax_axis(ndim: int) -> int:
    # MegEngine's default: axis 0 for 0-, 1- and 3-d inputs, axis 1 otherwise.
    return 0 if ndim in (0, 1, 3) else 1


def softmax(x: Any, axis: int | None = None) -> Tensor:
    """exp(x) / sum(exp(x)) along `axis` (MegEngine's default axis when None)."""
    return apply(OPS["softmax"], x, axis=_softmax_axis(x.ndim) if axis is None else int(axis))


def log_softmax(x: Any, axis: int | None = None) -> Tensor:
    """log(softmax(x)) computed stably."""
    return apply(OPS["log_softmax"], x, axis=_softmax_axis(x.ndim) if axis is None else int(axis))


def scaled_dot_product_attention(q: Any, k: Any, v: Any, attn_mask: Any = None,
                                 dropout_p: float = 0.0, is_causal: bool = False,
                                 scale: float | None = None, training: bool = True) -> Tensor:
    """softmax(q k^T * scale + mask) v over (..., L, E) inputs; a bool mask keeps True entries.

    With `dropout_p > 0` (in training) the attention weights are dropped out before `v`.
    """
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    if not (dropout_p and training):
        return apply(OPS["scaled_dot_product_attention"], q, k, v, attn_mask,
                     is_causal=bool(is_causal), scale=scale)
    scores = matmul(q, k, transpose_b=True) * scale
    if is_causal:
        keep = Tensor(np.tril(np.ones((q.shape[-2], k.shape[-2]), bool)))
        scores = where(keep, scores, -math.inf)
    if attn_mask is not None:
        is_bool = getattr(attn_mask, "dtype", None) == np.bool_
        scores = where(attn_mask, scores, -math.inf) if is_bool else scores + attn_mask
    return matmul(dropout(softmax(scores, axis=-1), dropout_p, training), v)

__all__ = [
    "matmul", "linear", "conv1d", "conv2d", "conv_transpose2d", "max_pool2d", "avg_pool2d",
    "adaptive_avg_pool2d", "batch_norm", "layer_norm", "group_norm", "dropout", "embedding",
    "softmax", "log_softmax", "scaled_dot_product_attention", "relu", "leaky_relu", "gelu",
    "silu", "sigmoid", "tanh", "softplus", "cross_entropy", "binary_cross_entropy", "nll_loss",
    "mse_loss", "l1_loss",
]
