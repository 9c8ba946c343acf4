"""Convolutions of MegEngine's `F.nn` (nn.py imports them): 1-, 2- and 3-d convolution and 2-
and 3-d transposed convolution, over NC... inputs, with MegEngine's grouped weight layout
accepted beside the flat one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..core.op_errors import bad_argument, require
from ..core.ops import OPS
from ..core.tensors import Tensor, apply
from ._args import _compute_mode, _ints, _pair, _t


def _conv(n: int, x: Any, weight: Any, bias: Any, stride: Any, padding: Any, dilation: Any,
          groups: int) -> Tensor:
    attrs = dict(stride=_pair(stride, n), padding=_pair(padding, n), dilation=_pair(dilation, n),
                 groups=int(groups))
    require("conv", x, weight, **attrs)  # what jax takes silently or refuses only late
    return apply(OPS["conv"], x, weight, bias, **attrs)


def conv1d(x: Any, weight: Any, bias: Any = None, stride: int | Sequence[int] = 1,
           padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1,
           groups: int = 1) -> Tensor:
    """1-d convolution over (N, C, L) with weight (out, in/groups, k), or for grouped
    convolution also MegEngine's (groups, out/groups, in/groups, k)."""
    return _conv(1, x, grouped_weight("conv1d", weight, int(groups), 1), bias, stride, padding,
                 dilation, groups)


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
    _compute_mode("conv2d", compute_mode)
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
    require("conv3d", x, weight, bias, **attrs)
    return apply(OPS["conv3d"], x, weight, bias, **attrs)


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
    require("conv_transpose", x, weight, groups=groups, **attrs)
    return apply(OPS["conv_transpose"], x, weight, bias, groups=groups, **attrs)
