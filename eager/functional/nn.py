"""Neural-network functions (MegEngine's `megengine.functional.nn`; MegEngine semantics: NCHW,
`drop_prob`, exact GELU): activations, softmax, linear layers, dropout, embeddings, one-hot
encoding and padding are defined here; convolution, pooling, normalization and the deformable
functions in the private modules beside it (`_conv`, `_pool`, `_norm`, `_deformable`).

As MegEngine's `F.nn` does, it also holds the functions of the other modules, here every flat
name of `eager.functional`: ported code writes `F.nn.relu`, `F.nn.conv2d` and `F.nn.sum` alike.

>>> import eager as eg, eager.functional as F
>>> F.nn.relu(eg.tensor([-1.0, 2.0])).numpy().tolist(), F.nn.sum is F.math.sum
([0.0, 2.0], True)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import random as _random
from ..core.context import current as _current
from ..core.index_checks import check_range
from ..core.op_errors import bad_argument, number, require
from ..core.ops import OPS
from ..core.tensors import Tensor, apply
from ._args import _compute_mode, _t
from ._conv import conv1d, conv2d, conv3d, conv_transpose2d, conv_transpose3d
from ._deformable import deformable_conv2d, deformable_psroi_pooling
from ._norm import batch_norm, group_norm, instance_norm, layer_norm, local_response_norm
from ._pool import (
    adaptive_avg_pool2d,
    adaptive_max_pool2d,
    avg_pool2d,
    max_pool2d,
    sliding_window,
    sliding_window_transpose,
)
from ._resize import pixel_shuffle

# every other flat name, for `F.nn.<name>` (these rebind `sum`, `max`, `min`, `abs`, `round` and
# `pow` here: the code below must not use Python's)
from .elemwise import *  # noqa: F403
from .elemwise import _unary
from .loss import *  # noqa: F403
from .math import *  # noqa: F403
from .math import _reduction, matmul, normalize
from .metric import *  # noqa: F403
from .tensor import *  # noqa: F403
from .tensor import _axis, _check_along, where
from .vision import *  # noqa: F403
from .vision import remap, warp_affine, warp_perspective

# ----- activations -----------------------------------------------------------------------------
sigmoid, relu, gelu, silu, softplus = (
    _unary(n, module=__name__) for n in ("sigmoid", "relu", "gelu", "silu", "softplus"))
relu6 = _unary("relu6", "min(max(x, 0), 6); the gradient is 0 at 0 and at 6 (PyTorch's "
                        "convention).", __name__)
hswish = _unary("hswish", "x * relu6(x + 3) / 6 (MegEngine's hswish, PyTorch's hardswish).",
                __name__)
hsigmoid = _unary("hsigmoid", "relu6(x + 3) / 6 (MegEngine's hsigmoid, PyTorch's hardsigmoid).",
                  __name__)
selu = _unary("selu", "scale * elu(x, alpha), self-normalizing: scale ~1.0507, alpha ~1.6733.",
              __name__)
logsigmoid = _unary("logsigmoid", "log(sigmoid(x)), as -softplus(-x): it neither under- nor "
                                  "overflows.", __name__)
softsign = _unary("softsign", "x / (1 + |x|).", __name__)


def leaky_relu(x: Any, negative_slope: float = 0.01) -> Tensor:
    """x where x > 0, else negative_slope * x."""
    return apply(OPS["leaky_relu"], x, negative_slope=number(negative_slope, "negative_slope"))


def elu(x: Any, alpha: float = 1.0) -> Tensor:
    """x where x > 0, else alpha * (exp(x) - 1); the gradient at 0 is alpha (PyTorch's)."""
    return apply(OPS["elu"], x, alpha=number(alpha, "alpha"))


def prelu(x: Any, weight: Any) -> Tensor:
    """x where x > 0, else weight * x, with a learned slope `weight`: a single element, or one
    element per channel (axis 1 of x), applied along that axis whatever the weight's shape.

    >>> import eager as eg, eager.functional as F
    >>> F.prelu(eg.tensor([[-2.0, 3.0]]), eg.tensor([0.5, 0.1])).numpy().tolist()
    [[-1.0, 3.0]]
    """
    require("prelu", x, weight)
    return apply(OPS["prelu"], x, weight)


# ----- softmax ---------------------------------------------------------------------------------
logsumexp = _reduction("logsumexp", __name__)


def _softmax_axis(ndim: int) -> int:
    # MegEngine's default: axis 0 for 0-, 1- and 3-d inputs, axis 1 otherwise.
    return 0 if ndim in (0, 1, 3) else 1


def _softmax_axes(x: Any, axis: int | Sequence[int] | None) -> int | tuple[int, ...]:
    """MegEngine's default axis when None; an int; or several axes normalized together."""
    if axis is None:
        return _softmax_axis(x.ndim)
    if isinstance(axis, Sequence):
        return tuple(int(a) for a in axis)
    return int(axis)


def softmax(x: Any, axis: int | Sequence[int] | None = None) -> Tensor:
    """exp(x) / sum(exp(x)) along `axis`: an int, several axes (normalized over all of them
    together), or None for MegEngine's default axis."""
    return apply(OPS["softmax"], x, axis=_softmax_axes(x, axis))


def log_softmax(x: Any, axis: int | Sequence[int] | None = None) -> Tensor:
    """log(softmax(x)) computed stably; `logsoftmax` is MegEngine's spelling."""
    return apply(OPS["log_softmax"], x, axis=_softmax_axes(x, axis))


logsoftmax = log_softmax


# ----- layers ----------------------------------------------------------------------------------
def linear(x: Any, weight: Any, bias: Any = None, compute_mode: str = "default") -> Tensor:
    """x @ weight.T + bias, with weight of shape (out, in); `compute_mode` as `matmul`'s."""
    _compute_mode("linear", compute_mode)
    return apply(OPS["linear"], x, weight, bias)


def dropout(x: Any, drop_prob: float, training: bool = True) -> Tensor:
    """Zero each element with probability `drop_prob` and scale the rest by 1/(1-drop_prob).

    Draws from the framework generator (`eg.random`), so a captured dropout is bit-identical.
    """
    drop_prob = number(drop_prob, "drop_prob")
    require("dropout", x, drop_prob=drop_prob)  # also where it returns x as it is
    if not training or drop_prob == 0.0:
        return x
    return apply(OPS["dropout"], x, _random.next_key(), drop_prob=drop_prob)


def embedding(x: Any, weight: Any) -> Tensor:
    """Rows of `weight` (num_embeddings, dim) picked by the integer tensor `x`.

    In eager code an index outside [0, num_embeddings) raises `IndexError`. The check reads the
    indices on the host before the lookup is dispatched: free for numpy indices, a view without
    a copy for tensors on the CPU, one copy of the indices from an accelerator; it waits only
    for indices that an earlier op is still computing. Inside a region
    (`partial_trace`, `xla_trace`) nothing is checked, since the indices are not known while it
    is captured: an index in [-num_embeddings, -1] picks a row counted from the end, and any
    other out-of-range one gives a row of nan (whose gradient is dropped).
    """
    require("embedding", x, weight)
    # the indices' values, read on the host: in eager code only (a region's are abstract)
    if _current() is None and getattr(weight, "ndim", 0) >= 1:  # else apply says what is wrong
        n = weight.shape[0]
        check_range("embedding", x, n, "index",
                    size=f"a table of {n} rows (weight shape {tuple(weight.shape)})")
    return apply(OPS["embedding"], x, weight)


def indexing_one_hot(src: Any, index: Any, axis: int = 1, keepdims: bool = False) -> Tensor:
    """Pick, along `axis`, the element at `index` (one per position): src[i, index[i]]. An
    index out of range raises `OpIndexError` in eager code (in a compiled region: nan)."""
    src = _t(src)
    axis = _axis("indexing_one_hot", src, axis)
    _check_along(src, axis, index, "indexing_one_hot")
    return apply(OPS["indexing_one_hot"], src, index, axis=axis, keepdims=keepdims)


def one_hot(x: Any, num_classes: int, dtype: Any = "int32") -> Tensor:
    """One-hot encoding of integer `x` along a new last axis, int32 as MegEngine's (`dtype`
    another: `F.one_hot(labels, 10, dtype="float32")` for a loss). A label outside
    [0, num_classes) raises `OpIndexError` in eager code (MegEngine aborts); in a compiled
    region its row is all zeros."""
    require("one_hot", x)
    if int(num_classes) > 0:  # else the op says what is wrong with num_classes
        check_range("one_hot", x, int(num_classes), "label", size=f"{int(num_classes)} classes")
    return apply(OPS["one_hot"], x, num_classes=int(num_classes), dtype=np.dtype(dtype))


_PAD_MODES = {"constant": "constant", "edge": "edge", "replicate": "edge", "reflect": "reflect",
              "symmetric": "symmetric"}


def pad(x: Any, pad_width: Sequence[Sequence[int]], mode: str = "constant",
        constant_value: float = 0.0) -> Tensor:
    """Pad with (before, after) widths per axis; modes constant, edge/replicate, reflect,
    symmetric, in either case (MegEngine writes "CONSTANT")."""
    if not isinstance(mode, str) or mode.lower() not in _PAD_MODES:
        raise bad_argument(f"pad: unknown mode {mode!r}; use one of {sorted(_PAD_MODES)} "
                           "(in either case).")
    mode = mode.lower()
    widths = tuple((int(a), int(b)) for a, b in pad_width)
    return apply(OPS["pad"], x, pad_width=widths, mode=_PAD_MODES[mode],
                 constant_value=number(constant_value, "constant_value"))


def scaled_dot_product_attention(q: Any, k: Any, v: Any, attn_mask: Any = None,
                                 dropout_p: float = 0.0, is_causal: bool = False,
                                 scale: float | None = None, training: bool = True) -> Tensor:
    """softmax(q k^T * scale + mask) v over (..., L, E) inputs; a bool mask keeps True entries.

    With `dropout_p > 0` (in training) the attention weights are dropped out before `v`.
    """
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else number(scale, "scale")
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
    "sigmoid", "relu", "gelu", "silu", "softplus", "leaky_relu", "relu6", "hswish", "hsigmoid",
    "elu", "selu", "logsigmoid", "softsign", "prelu", "logsumexp", "softmax", "log_softmax",
    "logsoftmax", "linear", "conv1d", "conv2d", "conv3d", "conv_transpose2d",
    "conv_transpose3d", "deformable_conv2d", "deformable_psroi_pooling", "max_pool2d",
    "avg_pool2d", "adaptive_avg_pool2d", "adaptive_max_pool2d", "sliding_window",
    "sliding_window_transpose", "pixel_shuffle", "batch_norm", "layer_norm", "group_norm",
    "instance_norm", "local_response_norm", "dropout", "embedding", "one_hot",
    "indexing_one_hot", "pad", "scaled_dot_product_attention",
    # MegEngine's `F.nn` lists these too; they live in math.py and vision.py
    "normalize", "remap", "warp_affine", "warp_perspective",
]

from .quantized import conv_bias_activation as conv_bias_activation  # noqa: E402  (as MegEngine's F.nn)
