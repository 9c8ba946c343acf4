"""Pooling of MegEngine's `F.nn` (nn.py imports it): max, average and adaptive pooling over
NCHW, and the sliding windows (im2col and its transpose)."""

from __future__ import annotations

from typing import Any

from ..core.op_errors import bad_argument, require
from ..core.ops import OPS
from ..core.ops.nn import adaptive_fit, adaptive_window
from ..core.tensors import Tensor, apply
from ._args import _ints, _pair, _t


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
    require("adaptive_avg_pool2d", x, out_shape=out)
    return apply(OPS["adaptive_avg_pool2d"], x, out_shape=out)


def adaptive_max_pool2d(x: Any, oshp: Any) -> Tensor:
    """Max pooling of NCHW `x` to the output size `oshp` (an int or (oh, ow)).

    MegEngine's bins: along an axis of n values, output i takes the maximum of
    [i * s, i * s + k), with s = n // o and k = n - (o - 1) * s (a pooling window; bins may
    overlap). `oshp` may not exceed the input's size.
    """
    # Its op is `max_pool2d`, over the window these bins make: `oshp` is no attribute of it, so
    # the function checks the option against the input itself, by the rule adaptive average
    # pooling's op applies (`adaptive_fit`).
    x = _t(x)
    if x.ndim != 4:
        raise bad_argument(f"adaptive_max_pool2d: needs an NCHW (4-d) input, got shape "
                           f"{x.shape}.")
    out = _ints("adaptive_max_pool2d", "oshp", oshp, 2)
    if (found := adaptive_fit(x.shape, out)) is not None:
        raise bad_argument(f"adaptive_max_pool2d: {found[1]}")
    kernel, stride = adaptive_window(x.shape[2:], out)
    return apply(OPS["max_pool2d"], x, kernel=kernel, stride=stride, padding=(0, 0))


def _window_attrs(fn: str, kernel_size: Any, padding: Any, stride: Any,
                  dilation: Any) -> dict[str, tuple[int, ...]]:
    """A sliding window's attributes as ints (their rules are the ops' checks)."""
    return {"kernel": _ints(fn, "kernel_size", kernel_size, 2),
            "padding": _ints(fn, "padding", padding, 2), "stride": _ints(fn, "stride", stride, 2),
            "dilation": _ints(fn, "dilation", dilation, 2)}


def sliding_window(x: Any, kernel_size: Any, padding: Any = 0, stride: Any = 1,
                   dilation: Any = 1) -> Tensor:
    """Every `kernel_size` window of NCHW `x` (zero-padded by `padding`), as a (N, C, OH, OW,
    kh, kw) tensor: MegEngine's `F.sliding_window` (im2col, PyTorch's `unfold`)."""
    x = _t(x)
    attrs = _window_attrs("sliding_window", kernel_size, padding, stride, dilation)
    require("sliding_window", x, **attrs)
    return apply(OPS["sliding_window"], x, **attrs)


def sliding_window_transpose(x: Any, output_size: Any, kernel_size: Any, padding: Any = 0,
                             stride: Any = 1, dilation: Any = 1) -> Tensor:
    """The transpose of `sliding_window`: (N, C, OH, OW, kh, kw) windows summed back onto an
    (N, C, *output_size) image (col2im, PyTorch's `fold`)."""
    x = _t(x)
    attrs = _window_attrs("sliding_window_transpose", kernel_size, padding, stride, dilation)
    size = _ints("sliding_window_transpose", "output_size", output_size, 2)
    require("sliding_window_transpose", x, size=size, **attrs)
    return apply(OPS["sliding_window_transpose"], x, size=size, **attrs)
