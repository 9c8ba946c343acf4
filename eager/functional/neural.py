"""Neural-network functions (MegEngine semantics: NCHW, `drop_prob`, exact GELU); `F.nn` (nn.py)
re-exports them with every other flat name."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np

from .. import random as _random
from ..context import atomic as _atomic
from ..context import current as _current
from ..errors import OpTypeError
from ..index_checks import check_range, host_values
from ..op_errors import bad_argument, number, require
from ..ops import OPS
from ..tensors import Tensor, apply, rebind
from .math import where


def _pair(v: int | Sequence[int], n: int = 2) -> tuple[int, ...]:
    return (int(v),) * n if isinstance(v, int) else tuple(int(i) for i in v)


def matmul(a: Any, b: Any, transpose_a: bool = False, transpose_b: bool = False,
           compute_mode: str = "default") -> Tensor:
    """Matrix product with broadcasting over leading axes. `compute_mode` is MegEngine's
    ("default" or "float32": float16 products accumulated in float32, which XLA does anyway)."""
    _compute_mode("matmul", compute_mode)
    if transpose_a:
        a = a.transpose(*range(a.ndim - 2), a.ndim - 1, a.ndim - 2)
    if transpose_b:
        b = b.transpose(*range(b.ndim - 2), b.ndim - 1, b.ndim - 2)
    return apply(OPS["matmul"], a, b)


def einsum(subscripts: str, *operands: Any) -> Tensor:
    """Einstein summation, numpy's notation (`...` broadcasts; operands may also be one list).

    >>> import eager as eg, eager.functional as F
    >>> F.einsum("ij,j->i", eg.tensor([[1.0, 2.0], [3.0, 4.0]]), eg.tensor([1.0, 1.0])).numpy()
    array([3., 7.], dtype=float32)
    """
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not isinstance(subscripts, str):
        raise bad_argument(f"einsum: subscripts must be a string like 'ij,jk->ik', got "
                           f"{type(subscripts).__name__}.", OpTypeError)
    subscripts = subscripts.replace(" ", "")
    _check_einsum(subscripts, [getattr(o, "shape", np.shape(o)) for o in operands])
    return apply(OPS["einsum"], *operands, subscripts=subscripts)


def _check_einsum(subscripts: str, shapes: list[tuple[int, ...]]) -> None:
    """Raise `OpArgumentError` unless each operand's rank and sizes fit its term of `subscripts`
    (a label's sizes must agree, or be 1 and broadcast)."""
    terms = subscripts.partition("->")[0].split(",")
    if len(terms) != len(shapes):
        raise bad_argument(f"einsum: {subscripts!r} names {len(terms)} operands, got "
                           f"{len(shapes)} (shapes {shapes}).")
    sizes: dict[str, int] = {}
    for i, (term, shape) in enumerate(zip(terms, shapes)):
        head, dots, tail = term.partition("...")
        fits = len(shape) >= len(head + tail) if dots else len(shape) == len(term)
        if not fits:
            raise bad_argument(f"einsum: term {term!r} of {subscripts!r} does not fit operand "
                               f"{i} of shape {tuple(shape)} (its number of axes differs).")
        dims = list(zip(head, shape)) + list(zip(tail, shape[len(shape) - len(tail):]))
        for label, n in dims:
            seen = sizes.setdefault(label, n)
            if seen != n and 1 not in (seen, n):
                raise bad_argument(f"einsum: label {label!r} of {subscripts!r} has size {n} "
                                   f"in operand {i} (shape {tuple(shape)}) but {seen} before.")
            sizes[label] = max(seen, n)


def linear(x: Any, weight: Any, bias: Any = None, compute_mode: str = "default") -> Tensor:
    """x @ weight.T + bias, with weight of shape (out, in); `compute_mode` as `matmul`'s."""
    _compute_mode("linear", compute_mode)
    return apply(OPS["linear"], x, weight, bias)


def _compute_mode(fn: str, mode: str) -> None:
    if mode not in _COMPUTE_MODES:
        raise bad_argument(f"{fn}: compute_mode must be one of {_COMPUTE_MODES}, got {mode!r}.")


def _conv(n: int, x: Any, weight: Any, bias: Any, stride: Any, padding: Any, dilation: Any,
          groups: int) -> Tensor:
    attrs = dict(stride=_pair(stride, n), padding=_pair(padding, n), dilation=_pair(dilation, n),
                 groups=int(groups))
    require("conv:before", x, weight, **attrs)  # what jax takes silently or refuses only late
    return apply(OPS["conv"], x, weight, bias, **attrs)


def conv1d(x: Any, weight: Any, bias: Any = None, stride: int | Sequence[int] = 1,
           padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1,
           groups: int = 1) -> Tensor:
    """1-d convolution over (N, C, L) with weight (out, in/groups, k), or for grouped
    convolution also MegEngine's (groups, out/groups, in/groups, k)."""
    return _conv(1, x, grouped_weight("conv1d", weight, int(groups), 1), bias, stride, padding,
                 dilation, groups)


_COMPUTE_MODES = ("default", "float32")


def conv2d(x: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1, conv_mode: str = "cross_correlation",
           compute_mode: str = "default") -> Tensor:
    """2-d convolution over NCHW with weight (out, in/groups, kh, kw), or for grouped
    convolution also MegEngine's (groups, out/groups, in/groups, kh, kw).

    `conv_mode` and `compute_mode` are MegEngine's arguments, accepted so its code runs:
    "cross_correlation" (what every framework computes as convolution), and "default" or
    "float32", both of which run XLA's convolution in the input dtype.
    """
    if conv_mode != "cross_correlation":
        raise bad_argument(f"conv2d: conv_mode must be 'cross_correlation', got "
                           f"{conv_mode!r}.")
    if compute_mode not in _COMPUTE_MODES:
        raise bad_argument(f"conv2d: compute_mode must be one of {_COMPUTE_MODES}, got "
                           f"{compute_mode!r}.")
    return _conv(2, x, grouped_weight("conv2d", weight, int(groups), 2), bias, stride, padding,
                 dilation, groups)


def grouped_weight(fn: str, weight: Any, groups: int, n: int) -> Any:
    """MegEngine's grouped layout of an `n`-d convolution's weight, (groups, a, b, *kernel),
    as the flat one, (groups * a, b, *kernel): a reshape, so the gradient reaches the grouped
    weight. Any other weight is returned as it is (the op's own checks judge it)."""
    if getattr(weight, "ndim", None) != n + 3:
        return weight
    g = weight.shape[0]
    if g != groups:
        raise bad_argument(f"{fn}: a {n + 3}-d weight of shape {tuple(weight.shape)} holds {g} "
                           f"groups, but groups={groups}; pass groups={g}.")
    w = weight if isinstance(weight, Tensor) else Tensor(weight)
    return w.reshape(g * weight.shape[1], *weight.shape[2:])


def conv_transpose2d(x: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0,
                     output_padding: Any = 0, dilation: Any = 1, groups: int = 1) -> Tensor:
    """Transposed 2-d convolution over NCHW with weight (in, out/groups, kh, kw), or for
    grouped convolution also MegEngine's (groups, in/groups, out/groups, kh, kw)."""
    weight = grouped_weight("conv_transpose2d", weight, int(groups), 2)
    return apply(OPS["conv_transpose"], x, weight, bias, stride=_pair(stride),
                 padding=_pair(padding), output_padding=_pair(output_padding),
                 dilation=_pair(dilation), groups=int(groups))


def max_pool2d(x: Any, kernel_size: Any, stride: Any = None, padding: Any = 0) -> Tensor:
    """Max pooling over NCHW; `stride` defaults to `kernel_size`."""
    attrs = _window(kernel_size, stride, padding)
    require("max_pool2d", x, **attrs)  # jax takes a negative padding silently (it crops)
    return apply(OPS["max_pool2d"], x, **attrs)


def avg_pool2d(x: Any, kernel_size: Any, stride: Any = None, padding: Any = 0,
               mode: str = "average_count_exclude_padding") -> Tensor:
    """Average pooling over NCHW; padded cells are not counted unless mode="average"."""
    if mode not in ("average", "average_count_exclude_padding"):
        raise bad_argument(f"avg_pool2d: mode must be 'average' or "
                           f"'average_count_exclude_padding', got {mode!r}.")
    attrs = _window(kernel_size, stride, padding)
    require("avg_pool2d", x, **attrs)
    return apply(OPS["avg_pool2d"], x, **attrs, count_padding=mode == "average")


def _window(kernel_size: Any, stride: Any, padding: Any) -> dict:
    """A pooling window's attributes; `stride` None means the kernel's size (0 is kept, for
    the check to refuse)."""
    k = _pair(kernel_size)
    return {"kernel": k, "stride": k if stride is None else _pair(stride),
            "padding": _pair(padding)}


def adaptive_avg_pool2d(x: Any, oshp: Any) -> Tensor:
    """Average pooling of NCHW `x` to the output size `oshp` (an int or (h, w)), in
    MegEngine's bins: along an axis of n values, output i averages [i * s, i * s + k),
    s = n // o and k = n - (o - 1) * s. Where o divides n they are PyTorch's bins too; `oshp`
    may not exceed the input's size (MegEngine crashes there)."""
    out = _pair(oshp)
    shape = tuple(getattr(x, "shape", ()))
    if len(shape) == 4 and any(not 1 <= o <= n for o, n in zip(out, shape[2:])):
        raise bad_argument(f"adaptive_avg_pool2d: oshp={out} must lie between (1, 1) and the "
                           f"input's spatial size {shape[2:]} (input shape {shape}).")
    return apply(OPS["adaptive_avg_pool2d"], x, out_shape=out)


def batch_norm(x: Any, running_mean: Tensor | None = None, running_var: Tensor | None = None,
               weight: Any = None, bias: Any = None, *, training: bool = False,
               momentum: float = 0.9, eps: float = 1e-5, inplace: bool = True) -> Any:
    """Batch normalization over axis 1 (channels).

    In training it normalizes with the batch statistics and updates the running statistics as
    `running = momentum * running + (1 - momentum) * batch` (MegEngine's momentum; the unbiased
    batch variance goes into `running_var`): in place, or with `inplace=False` it leaves them
    alone and returns `(y, new_running_mean, new_running_var)`, as MegEngine does. Otherwise it
    uses the running statistics. The output has x's dtype (float16 x with float32 parameters
    is normalized in float32).
    """
    if not training:
        if running_mean is None or running_var is None:
            raise bad_argument("batch_norm: inference needs running_mean and running_var.")
        return apply(OPS["batch_norm_eval"], x, running_mean, running_var, weight, bias,
                     eps=number(eps, "eps"))
    y, mean, var = apply(OPS["batch_norm_train"], x, weight, bias, eps=number(eps, "eps"))
    if running_mean is None or running_var is None:
        return y
    new_mean, new_var = apply(OPS["running_stats_update"], running_mean, running_var,
                              mean, var, momentum=number(momentum, "momentum"))
    if not inplace:
        return y, new_mean, new_var
    with _atomic():  # both statistics, or (a signal before) neither
        rebind(running_mean, new_mean._data)
        rebind(running_var, new_var._data)
    return y


def layer_norm(x: Any, normalized_shape: int | Sequence[int], affine: bool = True,
               weight: Any = None, bias: Any = None, eps: float = 1e-5) -> Tensor:
    """Normalize over the trailing `normalized_shape` axes (biased variance)."""
    n = 1 if isinstance(normalized_shape, int) else len(tuple(normalized_shape))
    if not affine:
        weight = bias = None
    return apply(OPS["layer_norm"], x, weight, bias, n_axes=n, eps=number(eps, "eps"))


def group_norm(x: Any, num_groups: int, affine: bool = True, weight: Any = None,
               bias: Any = None, eps: float = 1e-5) -> Tensor:
    """Normalize over channel groups of an (N, C, ...) tensor."""
    if x.shape[1] % num_groups:
        raise bad_argument(f"group_norm: {x.shape[1]} channels are not divisible into "
                           f"{num_groups} groups.")
    if not affine:
        weight = bias = None
    return apply(OPS["group_norm"], x, weight, bias, groups=int(num_groups),
                 eps=number(eps, "eps"))


def dropout(x: Any, drop_prob: float, training: bool = True) -> Tensor:
    """Zero each element with probability `drop_prob` and scale the rest by 1/(1-drop_prob).

    Draws from the framework generator (`eg.random`), so a captured dropout is bit-identical.
    """
    drop_prob = number(drop_prob, "drop_prob")
    if not 0.0 <= drop_prob < 1.0:
        raise bad_argument(f"dropout: drop_prob must be in [0, 1), got {drop_prob}.")
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
    if _current() is None and getattr(weight, "ndim", 0) >= 1:  # else apply says what is wrong
        _check_rows(x, weight)
    return apply(OPS["embedding"], x, weight)


def _check_rows(x: Any, weight: Any) -> None:
    host = host_values(x)
    if host.dtype.kind not in "iu":
        raise bad_argument(f"embedding: indices must be integers, got dtype {host.dtype}; "
                           "convert them with .astype('int32').", OpTypeError)
    n = weight.shape[0]
    check_range("embedding", host, n, "index",
                size=f"a table of {n} rows (weight shape {tuple(weight.shape)})")


_INTERPOLATE_MODES = ("nearest", "bilinear")


def interpolate(x: Any, size: int | Sequence[int] | None = None,
                scale_factor: float | Sequence[float] | None = None, mode: str = "bilinear",
                align_corners: bool | None = None) -> Tensor:
    """Resize NCHW `x` to `size` (an int or (h, w)) or by `scale_factor` (floor(h * s) rows).
    `mode` is "nearest" or "bilinear", in either case (MegEngine's).

    "nearest" takes source row floor(i * h_in / h_out); "bilinear" mixes the two nearest rows
    and columns, with the corner pixels' centres aligned when `align_corners=True`, their outer
    edges when False (the default). Both match PyTorch given `size`; given `scale_factor`, the
    source positions use h_in / h_out, as MegEngine does (PyTorch's `recompute_scale_factor=True`).
    """
    x = x if isinstance(x, Tensor) else Tensor(x)
    mode = mode.lower() if isinstance(mode, str) else mode  # MegEngine takes "BILINEAR" too
    if mode not in _INTERPOLATE_MODES:
        raise bad_argument(f"interpolate: mode must be one of {_INTERPOLATE_MODES}, got "
                           f"{mode!r}.")
    if mode == "nearest" and align_corners is not None:
        raise bad_argument("interpolate: align_corners applies to mode='bilinear' only; "
                           "leave it None for mode='nearest'.")
    if x.ndim != 4:
        raise bad_argument(f"interpolate: needs an NCHW input, got shape {x.shape}.")
    if mode == "bilinear" and not jnp.issubdtype(x.dtype, jnp.floating):
        raise bad_argument(f"interpolate: bilinear needs a float input, got dtype {x.dtype}; "
                           "use x.astype('float32').", OpTypeError)
    return apply(OPS["interpolate"], x, size=_out_size(x.shape[2:], size, scale_factor),
                 mode=mode, align_corners=bool(align_corners))


def _out_size(shape: tuple[int, ...], size: Any, scale_factor: Any) -> tuple[int, int]:
    if (size is None) == (scale_factor is None):
        raise bad_argument("interpolate: give exactly one of size and scale_factor, got "
                           f"size={size!r}, scale_factor={scale_factor!r}.")
    if size is not None:
        out = _pair(size)
    else:
        scales = (scale_factor,) * 2 if np.isscalar(scale_factor) else tuple(scale_factor)
        out = tuple(int(math.floor(n * number(s, "scale_factor"))) for n, s in zip(shape, scales))
    if len(out) != 2 or min(out) < 1:
        raise bad_argument(f"interpolate: the output size must be two positive ints, got "
                           f"{out} (size={size!r}, scale_factor={scale_factor!r}).")
    return out


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
    "matmul", "einsum", "interpolate", "linear", "conv1d", "conv2d", "conv_transpose2d",
    "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "batch_norm", "layer_norm", "group_norm",
    "dropout", "embedding", "softmax", "log_softmax", "logsoftmax",
    "scaled_dot_product_attention",
]
