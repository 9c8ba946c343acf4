"""Deformable ops of MegEngine's `F.nn`: deformable convolution (each kernel tap samples the
input at a learned offset, scaled by a learned mask: DCNv2) and deformable PS RoI pooling (each
bin of a RoI shifted by a learned offset: Deformable R-FCN).

Rules are MegEngine 1.13's CPU kernels', measured against it (`tests/parity/cases_deformable.py`):
samples are bilinear, a point's neighbours outside the image count as 0; the gradients are
`jax.vjp` of these forwards, written so that they are MegEngine's too (see `_psroi_sample`).
Shapes are static, so both ops compile inside regions; sampling is vectorised (gathers of whole
channel vectors), with no loop over pixels.
"""

import math
from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np

from ..errors import OpArgumentError, OpTypeError
from .checks import Found, dims, float_tensor, numeric, out_size
from .conv import Wording, conv_check
from .detection import _roi_rows, _round_half_away, rois_check
from .registry import defop

_F32 = np.float32


# ----- deformable convolution ---------------------------------------------------------------------
def _tap_grid(out: int, stride: int, pad: int, kernel: int, dilation: int) -> np.ndarray:
    """(kernel, out): where tap i of output position p samples along one axis, undeformed."""
    return (np.arange(out)[None, :] * stride - pad
            + np.arange(kernel)[:, None] * dilation).astype(_F32)


def _sample_zero_padded(img, ys, xs):
    """`img` (N, G, H, W, C) at the points (ys, xs) (N, G, P): (N, G, P, C), bilinear.

    A point counts only inside (-1, H) x (-1, W) (as MegEngine tests it: a NaN is outside); its
    neighbours outside the image are 0. An outside point is moved to (-2, -2), where every
    neighbour is outside, so neither it nor its offset's gradient is NaN or huge.
    """
    n, g, h, w, c = img.shape
    inside = (ys > -1) & (ys < h) & (xs > -1) & (xs < w)
    ys, xs = jnp.where(inside, ys, -2.0), jnp.where(inside, xs, -2.0)
    y0f, x0f = jnp.floor(ys), jnp.floor(xs)
    ly, lx = ys - y0f, xs - x0f
    y0, x0 = y0f.astype(jnp.int32), x0f.astype(jnp.int32)
    flat = img.reshape(n, g, h * w, c)
    b, grp = np.arange(n)[:, None, None], np.arange(g)[None, :, None]

    def at(yi, xi):
        ok = (yi >= 0) & (yi < h) & (xi >= 0) & (xi < w)
        v = flat[b, grp, jnp.where(ok, yi * w + xi, 0)]
        return jnp.where(ok[..., None], v, 0)

    hy, hx = (1 - ly)[..., None], (1 - lx)[..., None]
    ly, lx = ly[..., None], lx[..., None]
    # MegEngine's order of the four terms
    return (hy * hx * at(y0, x0) + hy * lx * at(y0, x0 + 1) + ly * hx * at(y0 + 1, x0)
            + ly * lx * at(y0 + 1, x0 + 1))


_CHANNELS = (OpArgumentError, "the input of shape {xs} has {channels} channels; the weight of "
                              "shape {ws} with groups={groups} needs {need} and O divisible by "
                              "groups.")
_WINDOW = (OpArgumentError, "stride and dilation must be >= 1 and padding >= 0, got "
                            "stride={stride}, padding={padding}, dilation={dilation}.")
_RANK = (OpArgumentError, "needs an NCHW (4-d) input and an (O, C / groups, kh, kw) weight, got "
                          "shapes {xs} and {ws}.")
_CONV: Wording = {
    "input_rank": _RANK, "weight_rank": _RANK,
    "dtype": (OpTypeError, "the {what} has dtype {dtype}; it must be a float tensor: convert it "
                           "with .astype('float32')."),
    "groups": _CHANNELS, "channels": _CHANNELS, "window": _WINDOW, "padding": _WINDOW,
    "empty": (OpArgumentError, "the dilated kernel {kernel} (dilation={dilation}) is larger than "
                               "the padded input {sizes} (padding={padding}): no output "
                               "position."),
}


def _conv_before(inputs: Sequence, attrs: dict) -> Found:
    """The convolution's rules (`conv.conv_check`), then the offsets', the mask's and the
    bias's shapes (MegEngine's layouts) and kinds."""
    x, weight, offset, mask, bias = inputs
    if (found := conv_check(x, weight, None, attrs, _CONV)) is not None:
        return found
    if (found := _deformation(x, weight, offset, mask, attrs)) is not None:
        return found
    return None if bias is None else _bias(bias, dims(weight)[0])


def _deformation(x: Any, weight: Any, offset: Any, mask: Any, attrs: dict) -> Found:
    """offset (N, 2 * dg * taps, OH, OW) and mask (N, dg * taps, OH, OW), dg dividing C."""
    xs, ws, os, ms = dims(x), dims(weight), dims(offset), dims(mask)
    out = out_size(xs[2:], ws[2:], attrs["stride"], attrs["padding"], attrs["dilation"])
    taps = ws[2] * ws[3]
    n, c = xs[:2]
    dg = ms[1] // taps if len(ms) == 4 else 0
    want = ((n, 2 * dg * taps, *out), (n, dg * taps, *out))
    if dg < 1 or c % dg or ms[1] % taps or (os, ms) != want:
        return OpArgumentError, (
            f"offset and mask must have shapes (N, 2 * dg * kh * kw, OH, OW) and (N, dg * kh * "
            f"kw, OH, OW) for some number dg of deformable groups dividing the {c} input "
            f"channels; with the input {xs} and the weight {ws} that is (N, OH, OW) = "
            f"{(n, *out)} and kh * kw = {taps}, got {os} and {ms}.")
    return numeric(offset, "offset") or numeric(mask, "mask")


def _bias(bias: Any, out_channels: int) -> Found:
    bs = dims(bias)
    if math.prod(bs) != out_channels or (len(bs) != 1 and bs != (1, out_channels, 1, 1)):
        return OpArgumentError, (f"bias must have shape (1, {out_channels}, 1, 1) or "
                                 f"({out_channels},), one value per output channel; got shape "
                                 f"{bs}.")
    return float_tensor(bias, "bias")


@defop("deformable_conv2d", before=_conv_before)
def deformable_conv2d(x, weight, offset, mask, bias, *, stride, padding, dilation, groups):
    """(N, O, OH, OW): NCHW `x` convolved with `weight` (O, C / groups, kh, kw), tap k of output
    position p sampling the input at its place plus `offset` (N, 2 * dg * kh * kw, OH, OW),
    rows (dy, dx) per tap, and scaled by `mask` (N, dg * kh * kw, OH, OW). The C channels form
    dg deformable groups (the count of offset sets), each with its own offsets and mask."""
    n, c, h, w = x.shape
    o, _, kh, kw = weight.shape
    oh, ow = offset.shape[2:]
    taps = kh * kw
    dg = mask.shape[1] // taps
    rows = _tap_grid(oh, stride[0], padding[0], kh, dilation[0])  # (kh, oh)
    cols = _tap_grid(ow, stride[1], padding[1], kw, dilation[1])  # (kw, ow)
    base_y = np.broadcast_to(rows[:, None, :, None], (kh, kw, oh, ow)).reshape(-1)
    base_x = np.broadcast_to(cols[None, :, None, :], (kh, kw, oh, ow)).reshape(-1)
    off = offset.reshape(n, dg, taps, 2, oh * ow)
    points = taps * oh * ow
    ys = off[:, :, :, 0].reshape(n, dg, points) + base_y  # (N, dg, taps * OH * OW)
    xs = off[:, :, :, 1].reshape(n, dg, points) + base_x
    img = x.reshape(n, dg, c // dg, h, w).transpose(0, 1, 3, 4, 2)
    v = _sample_zero_padded(img, ys, xs) * mask.reshape(n, dg, points, 1)  # (.., C / dg)
    v = v.reshape(n, dg, taps, oh * ow, c // dg).transpose(0, 1, 4, 2, 3)
    v = v.reshape(n, groups, c // groups, taps, oh * ow)
    wg = weight.reshape(groups, o // groups, c // groups, taps)
    y = jnp.einsum("ngckp,gock->ngop", v, wg).reshape(n, o, oh, ow)
    return y if bias is None else y + bias.reshape(1, o, 1, 1)


# ----- deformable PS RoI pooling ------------------------------------------------------------------
def _psroi_sample(xt, batch, hs, ws):
    """`xt` (N, H, W, C) of image `batch` (K,) at the grid hs (K, ph, pw, S) x ws (K, ph, pw, S),
    bilinear as MegEngine: between floor and ceil of each coordinate (at an integer both are
    the same pixel, so the coordinate's gradient there is 0, as in its backward): (K, ph, pw,
    S, S, C)."""
    h0f, w0f = jnp.floor(hs), jnp.floor(ws)
    dh, dw = (hs - h0f)[..., :, None, None], (ws - w0f)[..., None, :, None]
    h0, h1 = h0f.astype(jnp.int32), jnp.ceil(hs).astype(jnp.int32)
    w0, w1 = w0f.astype(jnp.int32), jnp.ceil(ws).astype(jnp.int32)
    b = batch[:, None, None, None, None]

    def at(hi, wi):
        return xt[b, hi[..., :, None], wi[..., None, :]]

    return ((1 - dw) * (1 - dh) * at(h0, w0) + (1 - dw) * dh * at(h1, w0)
            + dw * (1 - dh) * at(h0, w1) + dw * dh * at(h1, w1))


def _part_index(pooled: int, part_size: int) -> np.ndarray:
    """The part (row of `trans`) of each of `pooled` bins: floor(p / pooled * part_size), in
    float32 as MegEngine computes it."""
    p = np.arange(pooled, dtype=_F32)
    return np.floor(p / _F32(pooled) * _F32(part_size)).astype(np.int32)


def _psroi_bins(rois, pooled, samples, scale):
    """Per RoI (K,): its batch index, the start of its bins along y and x ((K, ph), (K, pw)),
    its height and width, and the step between the samples of a bin along y and x."""
    batch, *corners = _roi_rows(rois)
    x0, y0, x1, y1 = (_round_half_away(v) for v in corners)
    left, top = x0 * _F32(scale) - 0.5, y0 * _F32(scale) - 0.5
    width = jnp.maximum((x1 + 1) * _F32(scale) - 0.5 - left, _F32(0.1))
    height = jnp.maximum((y1 + 1) * _F32(scale) - 0.5 - top, _F32(0.1))
    (ph, pw), s = pooled, _F32(samples)
    bin_h, bin_w = height / _F32(ph), width / _F32(pw)
    starts_y = np.arange(ph, dtype=_F32) * bin_h[:, None] + top[:, None]
    starts_x = np.arange(pw, dtype=_F32) * bin_w[:, None] + left[:, None]
    return batch, starts_y, starts_x, (height, width), (bin_h / s, bin_w / s)


def trans_rank(trans: Any) -> Found:
    """MegEngine's layout of the offsets: 4-d, even where `no_trans` leaves them unread."""
    if len(dims(trans)) != 4:
        return OpArgumentError, (f"trans must be 4-d, (K, 2, pooled_h, pooled_w); got shape "
                                 f"{dims(trans)}.")
    return None


def _psroi_check(inputs: Sequence, attrs: dict) -> Found:
    """The RoIs' rules (`detection.rois_check`), a float input, the bins and samples, then the
    offsets (None: no offsets): one (2, ph, pw) block per RoI, `part_size` parts of them."""
    x, rois, trans = inputs
    if (found := rois_check(x, rois) or float_tensor(x, "input")) is not None:
        return found
    pooled, samples, part = attrs["pooled"], attrs["samples"], attrs["part_size"]
    if min(pooled) < 1 or samples < 1:
        return OpArgumentError, (f"pooled_h, pooled_w and sample_per_part must be >= 1, got "
                                 f"{pooled[0]}, {pooled[1]} and {samples}.")
    if trans is None or (found := trans_rank(trans)) is not None:
        return found
    want, k = (dims(rois)[0], 2, *pooled), dims(rois)[0]
    if dims(trans) != want:
        return OpArgumentError, (f"trans must have shape (K, 2, pooled_h, pooled_w) = {want} "
                                 f"for {k} RoIs, got {dims(trans)}.")
    if not 1 <= part <= min(pooled):
        return OpArgumentError, (f"part_size must be between 1 and min(pooled_h, pooled_w) = "
                                 f"{min(pooled)} (the parts index trans's last two axes), got "
                                 f"{part}.")
    return numeric(trans, "trans")


@defop("deformable_psroi_pooling", check=_psroi_check, before=_psroi_check)
def deformable_psroi_pooling(x, rois, trans, *, pooled, part_size, samples, spatial_scale,
                             trans_std):
    """(K, C, ph, pw): the mean of each bin's samples x samples bilinear samples of NCHW `x` for
    each RoI of `rois` (K, 5), its bins shifted by `trans` (K, 2, ph, pw) (rows dx, dy, in
    units of the RoI's size times `trans_std`; None: unshifted) at part (floor(i * part_size /
    ph), floor(j * part_size / pw)). Samples outside [-0.5, size - 0.5] are left out (a bin
    with none is 0); the others are clamped into the image."""
    _, _, h, w = x.shape
    ph, pw = pooled
    batch, hstart, wstart, (height, width), (step_h, step_w) = _psroi_bins(
        rois, pooled, samples, spatial_scale)
    hstart = jnp.broadcast_to(hstart[:, :, None], (rois.shape[0], ph, pw))
    wstart = jnp.broadcast_to(wstart[:, None, :], (rois.shape[0], ph, pw))
    if trans is not None:
        part = trans[:, :, _part_index(ph, part_size)[:, None], _part_index(pw, part_size)]
        wstart = wstart + part[:, 0] * _F32(trans_std) * width[:, None, None]
        hstart = hstart + part[:, 1] * _F32(trans_std) * height[:, None, None]
    s = np.arange(samples, dtype=_F32)
    hs = hstart[..., None] + s * step_h[:, None, None, None]  # (K, ph, pw, S)
    ws = wstart[..., None] + s * step_w[:, None, None, None]
    in_h, in_w = (hs >= -0.5) & (hs <= h - 0.5), (ws >= -0.5) & (ws <= w - 0.5)
    hs = jnp.clip(jnp.where(in_h, hs, 0), 0, h - 1)
    ws = jnp.clip(jnp.where(in_w, ws, 0), 0, w - 1)
    v = _psroi_sample(x.transpose(0, 2, 3, 1), batch, hs, ws)  # (K, ph, pw, S, S, C)
    taken = (in_h[..., :, None] & in_w[..., None, :])[..., None]
    total = jnp.where(taken, v, 0).sum(axis=(3, 4))
    count = taken.sum(axis=(3, 4)).astype(x.dtype)
    out = jnp.where(count > 0, total / jnp.maximum(count, 1), 0)
    return out.transpose(0, 3, 1, 2)
