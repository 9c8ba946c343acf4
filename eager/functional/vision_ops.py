"""Image functions of MegEngine's `F.nn` beyond neural.py's: instance normalization, adaptive
max pooling, pixel shuffle, 3-d convolution and local response normalization (`F.nn`, nn.py,
re-exports them with every other flat name)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import OpTypeError
from ..index_checks import host_values
from ..op_errors import bad_argument, number
from ..ops import OPS
from ..ops.nn import adaptive_window
from ..tensors import Tensor, apply
from .neural import grouped_weight
from .shape import _t


def _ints(fn: str, name: str, v: Any, n: int) -> tuple[int, ...]:
    """An int or a sequence of `n` ints (a Tensor too) as a tuple of `n` ints."""
    values = np.asarray(host_values(v) if isinstance(v, Tensor) else v)
    if values.dtype.kind not in "iu" or values.ndim > 1 or values.size not in (1, n):
        raise bad_argument(f"{fn}: {name} must be an int or {n} ints, got {v!r:.80}.",
                           OpTypeError)
    return tuple(int(i) for i in np.broadcast_to(values.reshape(-1), (n,)))


def _float_input(fn: str, x: Tensor, what: str = "input") -> None:
    if np.dtype(x.dtype).kind not in "fV":  # V: bfloat16
        raise bad_argument(f"{fn}: the {what} has dtype {np.dtype(x.dtype)}; it must be a float "
                           "tensor: convert it with .astype('float32').", OpTypeError)


def instance_norm(x: Any, affine: bool, weight: Any = None, bias: Any = None,
                  eps: float = 1e-5) -> Tensor:
    """Normalize each (sample, channel) plane of NCHW `x` over its H * W values (biased
    variance), then, with `affine`, scale by `weight` and shift by `bias` (C values each)."""
    x = _t(x)
    if x.ndim != 4:
        raise bad_argument(f"instance_norm: needs an NCHW (4-d) input, as MegEngine does; got "
                           f"shape {x.shape}.")
    _float_input("instance_norm", x)
    c = x.shape[1]
    if not affine:
        weight = bias = None
    elif weight is None or bias is None:
        raise bad_argument("instance_norm: affine=True needs both weight and bias; pass them, "
                           "or affine=False.")
    for value, name in ((weight, "weight"), (bias, "bias")):
        if value is not None and int(np.prod(np.shape(value))) != c:
            raise bad_argument(f"instance_norm: {name} has shape {tuple(np.shape(value))}; it "
                               f"needs one value per channel ({c}) of the input {x.shape}.")
    # one channel per group: group normalization's statistics are instance normalization's
    return apply(OPS["group_norm"], x, weight, bias, groups=c, eps=number(eps, "eps"))


def adaptive_max_pool2d(x: Any, oshp: Any) -> Tensor:
    """Max pooling of NCHW `x` to the output size `oshp` (an int or (oh, ow)).

    MegEngine's bins: along an axis of n values, output i takes the maximum of
    [i * s, i * s + k), with s = n // o and k = n - (o - 1) * s (a pooling window; bins may
    overlap). `oshp` may not exceed the input's size.
    """
    x = _t(x)
    if x.ndim != 4:
        raise bad_argument(f"adaptive_max_pool2d: needs an NCHW (4-d) input, got shape "
                           f"{x.shape}.")
    out = _ints("adaptive_max_pool2d", "oshp", oshp, 2)
    if any(o < 1 or o > n for o, n in zip(out, x.shape[2:])):
        raise bad_argument(f"adaptive_max_pool2d: oshp={out} must lie between (1, 1) and the "
                           f"input's spatial size {x.shape[2:]} (input shape {x.shape}).")
    kernel, stride = adaptive_window(x.shape[2:], out)
    return apply(OPS["max_pool2d"], x, kernel=kernel, stride=stride, padding=(0, 0))


def pixel_shuffle(x: Any, upscale_factor: int) -> Tensor:
    """Rearrange (..., C * r * r, H, W) into (..., C, H * r, W * r), r = `upscale_factor`:
    each group of r * r channels becomes an r x r block of pixels (PyTorch's order)."""
    x = _t(x)
    r = _ints("pixel_shuffle", "upscale_factor", upscale_factor, 1)[0]
    if r < 1:
        raise bad_argument(f"pixel_shuffle: upscale_factor must be >= 1, got {r}.")
    if x.ndim < 3 or x.shape[-3] % (r * r):
        raise bad_argument(f"pixel_shuffle: the input of shape {x.shape} needs at least 3 axes "
                           f"and a channel count (axis -3) divisible by upscale_factor ** 2 = "
                           f"{r * r}.")
    return apply(OPS["pixel_shuffle"], x, factor=r)


def conv3d(x: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1, conv_mode: str = "cross_correlation") -> Tensor:
    """3-d convolution over NCDHW with weight (out, in / groups, kd, kh, kw), or for grouped
    convolution also MegEngine's (groups, out / groups, in / groups, kd, kh, kw)."""
    if str(conv_mode).lower() != "cross_correlation":
        raise bad_argument(f"conv3d: conv_mode must be 'cross_correlation', got {conv_mode!r}.")
    x, groups = _t(x), int(groups)
    weight = grouped_weight("conv3d", _t(weight), groups, 3)
    attrs = {"stride": _ints("conv3d", "stride", stride, 3),
             "padding": _ints("conv3d", "padding", padding, 3),
             "dilation": _ints("conv3d", "dilation", dilation, 3), "groups": groups}
    _check_conv3d(x, weight, bias, attrs)
    return apply(OPS["conv3d"], x, weight, bias, **attrs)


def _check_conv3d(x: Tensor, weight: Tensor, bias: Any, attrs: dict) -> None:
    if x.ndim != 5 or weight.ndim != 5:
        raise bad_argument(f"conv3d: needs a 5-d (N, C, D, H, W) input and a 5-d (out, "
                           f"in / groups, kd, kh, kw) weight, got shapes {x.shape} and "
                           f"{weight.shape}.")
    _float_input("conv3d", x)
    _float_input("conv3d", weight, "weight")
    groups = attrs["groups"]
    if groups < 1 or weight.shape[0] % groups or x.shape[1] != weight.shape[1] * groups:
        raise bad_argument(f"conv3d: the input of shape {x.shape} has {x.shape[1]} channels; "
                           f"the weight of shape {weight.shape} with groups={groups} needs "
                           f"weight.shape[1] * groups of them, and groups must divide its "
                           f"{weight.shape[0]} output channels.")
    if min(attrs["stride"] + attrs["dilation"]) < 1 or min(attrs["padding"]) < 0:
        raise bad_argument(f"conv3d: stride={attrs['stride']} and dilation={attrs['dilation']} "
                           f"must be >= 1, padding={attrs['padding']} >= 0.")
    if bias is not None and int(np.prod(np.shape(bias))) != weight.shape[0]:
        raise bad_argument(f"conv3d: the bias has shape {tuple(np.shape(bias))}; it needs one "
                           f"value per output channel ({weight.shape[0]}).")
    reach = [d * (k - 1) + 1 for d, k in zip(attrs["dilation"], weight.shape[2:])]
    if any(n + 2 * p < r for n, p, r in zip(x.shape[2:], attrs["padding"], reach)):
        raise bad_argument(f"conv3d: the kernel {weight.shape[2:]} (dilation "
                           f"{attrs['dilation']}) is larger than the input's size "
                           f"{x.shape[2:]} plus padding {attrs['padding']}.")


def local_response_norm(x: Any, kernel_size: int = 5, k: float = 2.0, alpha: float = 1e-4,
                        beta: float = 0.75) -> Tensor:
    """x / (k + alpha * s) ** beta, s the sum of x ** 2 over the `kernel_size` channels (axis 1)
    centred on each channel, zeros past the ends. `kernel_size` must be odd; unlike PyTorch,
    alpha is not divided by it (MegEngine's definition)."""
    x = _t(x)
    size = _ints("local_response_norm", "kernel_size", kernel_size, 1)[0]
    if size < 1 or size % 2 == 0:
        raise bad_argument(f"local_response_norm: kernel_size must be a positive odd int, got "
                           f"{size}.")
    if x.ndim < 2:
        raise bad_argument(f"local_response_norm: needs an (N, C, ...) input, got shape "
                           f"{x.shape}.")
    _float_input("local_response_norm", x)
    return apply(OPS["local_response_norm"], x, size=size, k=number(k, "k"),
                 alpha=number(alpha, "alpha"), beta=number(beta, "beta"))


def conv_transpose3d(x: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0,
                     output_padding: Any = 0, dilation: Any = 1, groups: int = 1) -> Tensor:
    """Transposed 3-d convolution over NCDHW with weight (in, out / groups, kd, kh, kw): the
    gradient of `conv3d` with respect to its input (MegEngine's `F.conv_transpose3d`); for
    grouped convolution the weight may also be MegEngine's (groups, in / groups, out / groups,
    kd, kh, kw)."""
    x, groups = _t(x), int(groups)
    weight = grouped_weight("conv_transpose3d", _t(weight), groups, 3)
    attrs = {name: _ints("conv_transpose3d", name, value, 3) for name, value in (
        ("stride", stride), ("padding", padding), ("output_padding", output_padding),
        ("dilation", dilation))}
    if x.ndim != 5 or weight.ndim != 5 or groups < 1 or x.shape[1] != weight.shape[0] \
            or weight.shape[0] % groups:
        raise bad_argument(f"conv_transpose3d: needs a 5-d (N, C, D, H, W) input and a 5-d "
                           f"(in, out / groups, kd, kh, kw) weight with in = C divisible by "
                           f"groups={groups}, got shapes {x.shape} and {weight.shape}.")
    _float_input("conv_transpose3d", x)
    _float_input("conv_transpose3d", weight, "weight")
    if min(attrs["stride"] + attrs["dilation"]) < 1 or min(attrs["padding"]) < 0 \
            or any(op >= max(s, d) for op, s, d in zip(attrs["output_padding"], attrs["stride"],
                                                         attrs["dilation"])):
        raise bad_argument(f"conv_transpose3d: stride and dilation must be >= 1, padding >= 0 "
                           f"and output_padding below stride or dilation, got {attrs}.")
    return apply(OPS["conv_transpose"], x, weight, bias, groups=groups, **attrs)


def _window_attrs(fn: str, kernel_size: Any, padding: Any, stride: Any,
                  dilation: Any) -> dict[str, tuple[int, ...]]:
    attrs = {"kernel": _ints(fn, "kernel_size", kernel_size, 2),
             "padding": _ints(fn, "padding", padding, 2), "stride": _ints(fn, "stride", stride, 2),
             "dilation": _ints(fn, "dilation", dilation, 2)}
    if min(attrs["kernel"] + attrs["stride"] + attrs["dilation"]) < 1 \
            or min(attrs["padding"]) < 0:
        raise bad_argument(f"{fn}: kernel_size, stride and dilation must be >= 1 and padding "
                           f">= 0, got {attrs}.")
    return attrs


def sliding_window(x: Any, kernel_size: Any, padding: Any = 0, stride: Any = 1,
                   dilation: Any = 1) -> Tensor:
    """Every `kernel_size` window of NCHW `x` (zero-padded by `padding`), as a (N, C, OH, OW,
    kh, kw) tensor: MegEngine's `F.sliding_window` (im2col, PyTorch's `unfold`)."""
    x = _t(x)
    attrs = _window_attrs("sliding_window", kernel_size, padding, stride, dilation)
    if x.ndim != 4:
        raise bad_argument(f"sliding_window: needs an NCHW input, got shape {x.shape}.")
    reach = [d * (k - 1) + 1 for d, k in zip(attrs["dilation"], attrs["kernel"])]
    if any(n + 2 * p < r for n, p, r in zip(x.shape[2:], attrs["padding"], reach)):
        raise bad_argument(f"sliding_window: the window {attrs['kernel']} (dilation "
                           f"{attrs['dilation']}) is larger than the input's size "
                           f"{x.shape[2:]} plus padding {attrs['padding']}.")
    return apply(OPS["sliding_window"], x, **attrs)


def sliding_window_transpose(x: Any, output_size: Any, kernel_size: Any, padding: Any = 0,
                             stride: Any = 1, dilation: Any = 1) -> Tensor:
    """The transpose of `sliding_window`: (N, C, OH, OW, kh, kw) windows summed back onto an
    (N, C, *output_size) image (col2im, PyTorch's `fold`)."""
    x = _t(x)
    attrs = _window_attrs("sliding_window_transpose", kernel_size, padding, stride, dilation)
    size = _ints("sliding_window_transpose", "output_size", output_size, 2)
    windows = tuple(
        (n + 2 * p - d * (k - 1) - 1) // s + 1 for n, p, d, k, s in zip(
            size, attrs["padding"], attrs["dilation"], attrs["kernel"], attrs["stride"]))
    want = (*x.shape[:2], *windows, *attrs["kernel"]) if x.ndim == 6 else None
    if x.shape != want:
        raise bad_argument(f"sliding_window_transpose: an output of size {size} has windows of "
                           f"shape (N, C, {windows[0]}, {windows[1]}, {attrs['kernel'][0]}, "
                           f"{attrs['kernel'][1]}), got an input of shape {x.shape}.")
    return apply(OPS["sliding_window_transpose"], x, size=size, **attrs)


__all__ = ["instance_norm", "adaptive_max_pool2d", "pixel_shuffle", "conv3d",
           "conv_transpose3d", "local_response_norm", "sliding_window",
           "sliding_window_transpose"]
