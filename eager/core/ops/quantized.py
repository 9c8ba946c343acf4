"""int8 inference ops (MegEngine's quantized kernels: `TypeCvt` to and from quantized dtypes,
`ConvBias`, `BatchConvBias`, `ConvolutionBackwardData` and `MatrixMul` on qint8): integer
arithmetic on XLA, int8 operands multiplied with int32 accumulation, the bias added in int32,
then requantized to the output's grid.

Requantization is MegEngine's CPU kernels': the int32 accumulator dequantized (times acc_scale in
float32), then quantized (times the float32 reciprocal of out_scale), the activation applied,
rounded half away from zero, shifted by the output's zero point and saturated to [qmin, qmax].
The order matters on ties: acc times the one multiplier acc_scale / out_scale rounds about one
value in five million to the other side of a half (measured against MegEngine 1.13's
`conv_bias_activation` on every int8 product under 300 random scales, and the zoo's ResNet-18;
the two-step product agrees on all). MegEngine also adds the bias after dequantizing, in
float32; here it is added in int32, because XLA:CPU contracts that float sum of products into a
fused multiply-add, rounding once where MegEngine rounds three times (no barrier stops it):
2 of the zoo's MobileNet V2's 14.1M int8 outputs land one step apart on such a tie.

The scales and zero points are static attributes (a quantized dtype carries them), so a
compiled program bakes them in.

A convolution is lowered to strided slices (im2col) and one int8 `dot_general` per group with
`preferred_element_type=int32`: XLA:CPU's integer convolution has no fast kernel (about 18x
slower than float32 on a 3x3, 64-channel layer), while its int8 matrix product is faster than
the float32 one. Inputs with a zero point (quint8) are shifted and multiplied in int32 instead,
slower but exact.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..errors import OpArgumentError
from .checks import Found, shape_of
from .quantize import round_half_away
from .registry import defop

_NONLINEAR = ("identity", "relu", "h_swish")


def _shifted(q: jax.Array, zero_point: int) -> jax.Array:
    """`q` as a signed operand of the product: int8 as it is, anything with a zero point (or
    unsigned) minus it, in int32."""
    if zero_point == 0 and q.dtype == jnp.int8:
        return q
    return q.astype(jnp.int32) - jnp.int32(zero_point)


def reciprocal(scale: float) -> np.float32:
    """1 / scale in float32, what MegEngine multiplies by to quantize."""
    return np.float32(1) / np.float32(scale)


def _saturate(v: jax.Array, *, zero_point: int, qmin: int, qmax: int, storage: str) -> jax.Array:
    """Values on the output grid (float, already divided by the scale): rounded half away from
    zero, shifted, saturated and stored."""
    q = round_half_away(v) + np.float32(zero_point)
    return jnp.clip(q, qmin, qmax).astype(storage)


def _requantize(acc: jax.Array, *, multiplier: float, acc_scale: float, out_scale: float,
                nonlinear: str, zero_point: int, qmin: int, qmax: int,
                storage: str) -> jax.Array:
    """The int32 accumulator `acc` (scale `acc_scale`) on the output's grid."""
    if storage == "int32" and multiplier == 1.0 and nonlinear == "identity":
        return acc + jnp.int32(zero_point)  # a qint32 output of the accumulator's scale
    if nonlinear == "h_swish":  # not piecewise linear: computed on the real values
        real = acc.astype(jnp.float32) * np.float32(acc_scale)
        v = real * jnp.clip(real + 3, 0, 6) / 6 / np.float32(out_scale)
    else:
        # dequantized, then quantized: MegEngine's order (see the module docstring); the
        # barrier keeps XLA from folding the two constants into the one multiplier
        v = lax.optimization_barrier(acc.astype(jnp.float32) * np.float32(acc_scale))
        v = v * reciprocal(out_scale)
        if nonlinear == "relu":
            v = jnp.maximum(v, 0)
    return _saturate(v, zero_point=zero_point, qmin=qmin, qmax=qmax, storage=storage)


def _patches(x: jax.Array, kernel: Sequence[int], stride: Sequence[int],
             dilation: Sequence[int]) -> jax.Array:
    """(n, ho, wo, kh * kw, c) windows of the (already padded) NCHW `x`, by strided slices."""
    n, c, h, w = x.shape
    xt = x.transpose(0, 2, 3, 1)
    ho = (h - dilation[0] * (kernel[0] - 1) - 1) // stride[0] + 1
    wo = (w - dilation[1] * (kernel[1] - 1) - 1) // stride[1] + 1
    cols = []
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            top, left = i * dilation[0], j * dilation[1]
            cols.append(lax.slice(
                xt, (0, top, left, 0),
                (n, top + (ho - 1) * stride[0] + 1, left + (wo - 1) * stride[1] + 1, c),
                (1, stride[0], stride[1], 1)))
    return jnp.stack(cols, axis=3)


def int_conv(x: jax.Array, weight: jax.Array, *, stride: Sequence[int],
             padding: Sequence[tuple[int, int]], dilation: Sequence[int], groups: int,
             flip: bool = False) -> jax.Array:
    """The int32 cross-correlation (NCHW, weight (out, in / groups, kh, kw)) of integer `x`
    and `weight`; `flip` makes it a convolution. Padding is (low, high) per axis."""
    if flip:
        weight = jnp.flip(weight, (2, 3))
    weight = weight.astype(x.dtype)  # int32 where the input was shifted by its zero point
    x = jnp.pad(x, ((0, 0), (0, 0), *padding))
    out_c, in_g, kh, kw = weight.shape
    p = _patches(x, (kh, kw), stride, dilation)  # (n, ho, wo, kk, c)
    n, ho, wo, kk, _ = p.shape
    wm = weight.transpose(0, 2, 3, 1)  # (out, kh, kw, in/g): the patches' (kk, c) order
    if groups == 1:
        y = lax.dot_general(p.reshape(n, ho, wo, kk * in_g), wm.reshape(out_c, kk * in_g),
                            (((3,), (1,)), ((), ())), preferred_element_type=jnp.int32)
        return y.transpose(0, 3, 1, 2)
    pg = p.reshape(n * ho * wo, kk, groups, in_g).transpose(2, 0, 1, 3)
    pg = pg.reshape(groups, n * ho * wo, kk * in_g)
    wg = wm.reshape(groups, out_c // groups, kk * in_g)
    y = lax.dot_general(pg, wg, (((2,), (2,)), ((0,), (0,))), preferred_element_type=jnp.int32)
    return y.reshape(groups, n, ho, wo, out_c // groups).transpose(1, 0, 4, 2, 3).reshape(
        n, out_c, ho, wo)


def _flat_weight(weight: jax.Array) -> jax.Array:
    """MegEngine's grouped weight (groups, out/groups, in/groups, kh, kw) as (out, in/groups,
    kh, kw)."""
    return weight.reshape((-1, *weight.shape[2:])) if weight.ndim == 5 else weight


def _with_bias(acc: jax.Array, bias: jax.Array | None) -> jax.Array:
    if bias is None:
        return acc
    return acc + bias.astype(jnp.int32).reshape((1, -1) + (1,) * (acc.ndim - 2))


# ----- checks ----------------------------------------------------------------------------------
def _check_requant(inputs: Sequence, attrs: dict) -> Found:
    if attrs.get("nonlinear", "identity") not in _NONLINEAR:
        return OpArgumentError, (f"nonlinear_mode={attrs['nonlinear']!r} is not one of "
                                 f"{_NONLINEAR} (what the int8 kernels here apply).")
    if attrs["qmin"] > attrs["qmax"]:
        return OpArgumentError, f"qmin={attrs['qmin']} is above qmax={attrs['qmax']}."
    return None


def _check_conv(inputs: Sequence, attrs: dict) -> Found:
    x, w = shape_of(inputs[0]), shape_of(inputs[1])
    if x is None or len(x) != 4:
        return OpArgumentError, f"the input has shape {x}; an int8 convolution needs (N, C, H, W)."
    if w is None or len(w) not in (4, 5):
        return OpArgumentError, (f"the weight has shape {w}; an int8 convolution needs (out, in, "
                                 "kh, kw), or (groups, out/groups, in/groups, kh, kw).")
    return _check_requant(inputs, attrs)


# ----- the ops ---------------------------------------------------------------------------------
@defop("quantize", differentiable=False, check=_check_requant)
def quantize(x, *, scale, zero_point, qmin, qmax, storage):
    """Float `x` on the grid of a quantized dtype (MegEngine's `TypeCvt` to it): times the
    float32 reciprocal of the scale, as MegEngine's kernel computes it (measured: dividing
    rounds ties otherwise, e.g. x = 0.5 s)."""
    v = x.astype(jnp.float32) * reciprocal(scale)
    return _saturate(v, zero_point=zero_point, qmin=qmin, qmax=qmax, storage=storage)


@defop("dequantize", differentiable=False)
def dequantize(q, *, scale, zero_point):
    """The float32 values of the quantized storage `q`: scale * (q - zero_point)."""
    return (q.astype(jnp.float32) - np.float32(zero_point)) * np.float32(scale)


@defop("requantize", differentiable=False, check=_check_requant)
def requantize(q, *, in_zero_point, multiplier, zero_point, qmin, qmax, storage):
    """Quantized storage `q` on another grid: (q - in_zero_point) times the float32 multiplier
    in_scale / out_scale, rounded, shifted and saturated."""
    v = (q.astype(jnp.float32) - np.float32(in_zero_point)) * np.float32(multiplier)
    return _saturate(v, zero_point=zero_point, qmin=qmin, qmax=qmax, storage=storage)


@defop("conv_bias_activation", differentiable=False, check=_check_conv)
def conv_bias_activation(x, weight, bias, *, stride, padding, dilation, groups, flip,
                         in_zero_point, **requant):
    """MegEngine's int8 `ConvBias`: int32 convolution of the int8 input and weight, plus the
    qint32 bias, requantized to the output dtype with the activation."""
    acc = int_conv(_shifted(x, in_zero_point), _flat_weight(weight), stride=stride,
                   padding=[(p, p) for p in padding], dilation=dilation, groups=groups,
                   flip=flip)
    return _requantize(_with_bias(acc, bias), **requant)


@defop("batch_conv_bias_activation", differentiable=False, check=_check_requant)
def batch_conv_bias_activation(x, weight, bias, *, stride, padding, dilation, flip,
                               in_zero_point, **requant):
    """MegEngine's int8 `BatchConvBias`: sample i of `x` convolved with its own weight
    `weight[i]` (out, in, kh, kw)."""
    def one(xi, wi):
        return int_conv(xi[None], wi, stride=stride, padding=[(p, p) for p in padding],
                        dilation=dilation, groups=1, flip=flip)[0]

    acc = jax.vmap(one)(_shifted(x, in_zero_point), weight)
    return _requantize(_with_bias(acc, bias), **requant)


@defop("quantized_conv_transpose2d", differentiable=False, check=_check_requant)
def quantized_conv_transpose2d(x, weight, bias, *, stride, padding, output_padding, dilation,
                               in_zero_point, **requant):
    """MegEngine's int8 transposed convolution (`ConvolutionBackwardData`), weight (in, out,
    kh, kw): the input dilated by the stride, convolved with the flipped kernel."""
    kh, kw = weight.shape[2:]
    xs = _shifted(x, in_zero_point)
    # zeros between the input's pixels (lax.pad's interior padding), then the usual border
    pads = [(d * (k - 1) - p, d * (k - 1) - p + op, s - 1)
            for k, p, op, d, s in zip((kh, kw), padding, output_padding, dilation, stride)]
    xs = lax.pad(xs, jnp.zeros((), xs.dtype), [(0, 0, 0), (0, 0, 0), *pads])
    acc = int_conv(xs, weight.swapaxes(0, 1), stride=(1, 1), padding=[(0, 0), (0, 0)],
                   dilation=dilation, groups=1, flip=True)
    return _requantize(_with_bias(acc, bias), **requant)


@defop("quantized_linear", differentiable=False, check=_check_requant)
def quantized_linear(x, weight, bias, *, in_zero_point, **requant):
    """MegEngine's int8 `MatrixMul` with a qint32 bias: x (..., in) times weight (out, in)
    with int32 accumulation, requantized."""
    xs = _shifted(x, in_zero_point)
    acc = lax.dot_general(xs, weight.astype(xs.dtype), (((x.ndim - 1,), (1,)), ((), ())),
                          preferred_element_type=jnp.int32)
    if bias is not None:
        acc = acc + bias.astype(jnp.int32)
    return _requantize(acc, **requant)
