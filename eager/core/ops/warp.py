"""Geometric image ops of MegEngine's `F.vision`: remap, warp_affine and warp_perspective.

Rules are MegEngine 1.13's CPU kernels', measured against it (`tests/parity/cases_warp.py`).
Each output pixel reads the input at a source position, through one of two samplers:

- exact: the position in float32, bilinear between its four neighbours (remap: or the nearest,
  halves to even). MegEngine's kernels for NCHW, and for NHWC with more than 3 channels.
- fixed point: OpenCV's `remap`, which MegEngine runs for NHWC images of 1 to 3 channels. The
  position is rounded to 1/32 pixel (`_STEPS`), an int: whole pixels plus a fraction that picks
  the weights of 2 x 2 (linear), 4 x 4 (cubic) or 8 x 8 (Lanczos) neighbours from tables, or
  rounded to whole pixels (nearest). MegEngine computes the position in double, here in a
  pair of float32s of about that precision (Note [double positions]).

A neighbour past the edge is read by the border rule (`border_index`); with "constant" it is
`border_val`. Shapes are static (the output size is an attribute), so these ops compile inside
regions; gradients are `jax.vjp`'s, to the image and (exact sampler) to the positions.
"""

from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np
from jax import lax

from ..errors import OpArgumentError
from .checks import Check, Found, dims, image, numeric
from .registry import defop

_F32 = np.float32
BORDERS = ("replicate", "reflect", "reflect_101", "wrap", "constant")
_BITS = 5  # fixed-point positions: 1/32 pixel (OpenCV's INTER_BITS)
_STEPS = 1 << _BITS
_TAPS = {"linear": (2, 0), "cubic": (4, 1), "lanczos4": (8, 3)}  # (taps, taps before)


def fixed_point(format: str, channels: int) -> bool:
    """Whether MegEngine samples an image of this layout with the fixed-point sampler."""
    return format == "NHWC" and channels in (1, 2, 3)


# ----- borders and neighbours ---------------------------------------------------------------------
def border_index(p, size, border):
    """(index, inside): positions `p` (int32) along an axis of `size` read through the border
    rule: "replicate" repeats the edge (aaa|abcd|ddd), "reflect" mirrors it (cba|abcd|dcb),
    "reflect_101" mirrors about the edge pixel (dcb|abcd|cba), "wrap" tiles (bcd|abcd|abc),
    "constant" reads nothing there (`inside` is False; None for the other rules)."""
    if border == "constant":
        return jnp.clip(p, 0, size - 1), (p >= 0) & (p < size)
    if border == "replicate":
        return jnp.clip(p, 0, size - 1), None
    if border == "wrap":
        return jnp.remainder(p, size), None
    if size == 1:
        return jnp.zeros_like(p), None
    period = 2 * size - 2 if border == "reflect_101" else 2 * size
    m = jnp.remainder(p, period)
    return jnp.where(m < size, m, period - m - (border == "reflect")), None


def _neighbours(img, batch, rows, cols, border, border_val):
    """img (N, H, W, C) at rows (B, OH, OW, K) x cols (B, OH, OW, K) of images `batch` (B,):
    (B, OH, OW, K, K, C), `border_val` where "constant" reads outside the image."""
    _, h, w, _ = img.shape
    r, r_in = border_index(rows, h, border)
    c, c_in = border_index(cols, w, border)
    v = img[batch[:, None, None, None, None], r[..., :, None], c[..., None, :]]
    if border != "constant":
        return v
    inside = r_in[..., :, None] & c_in[..., None, :]
    return jnp.where(inside[..., None], v, _F32(border_val))


def _int(v, bound=2.0 ** 30):
    """float positions -> int32, clipped far outside any image (their border reads agree)."""
    return jnp.clip(v, -bound, bound).astype(jnp.int32)


# ----- the exact sampler --------------------------------------------------------------------------
def sample_exact(img, batch, xs, ys, *, border, border_val, interp):
    """img (N, H, W, C) float32 at float positions (xs, ys) (B, OH, OW) of images `batch`:
    (B, OH, OW, C). Linear: v00 (1 - ax)(1 - ay) + v01 ax (1 - ay) + v10 (1 - ax) ay + v11 ax ay
    of the neighbours at (floor(y) + i, floor(x) + j), ax = x - floor(x); nearest: the pixel at
    the position rounded (halves to even)."""
    if interp == "nearest":
        rows, cols = _int(jnp.round(ys))[..., None], _int(jnp.round(xs))[..., None]
        return _neighbours(img, batch, rows, cols, border, border_val)[..., 0, 0, :]
    x0, y0 = jnp.floor(xs), jnp.floor(ys)
    step = np.arange(2, dtype=np.int32)
    v = _neighbours(img, batch, _int(y0)[..., None] + step, _int(x0)[..., None] + step,
                    border, border_val)
    ax, ay = (xs - x0)[..., None], (ys - y0)[..., None]
    return (v[..., 0, 0, :] * (1 - ax) * (1 - ay) + v[..., 0, 1, :] * ax * (1 - ay)
            + v[..., 1, 0, :] * (1 - ax) * ay + v[..., 1, 1, :] * ax * ay)


# ----- the fixed-point sampler --------------------------------------------------------------------
def _weights(interp: str) -> np.ndarray:
    """(32, taps) float32: the 1-d weights of the taps for each fraction f / 32 of a pixel.
    Linear: (1 - t, t). Cubic: Keys' convolution with a = -0.75 at the distances 1 + t, t,
    1 - t and 2 - t. Lanczos: sinc(d) sinc(d / 4) at the distances d = t + 3 - i of taps
    i = 0..7, normalized to sum 1 (t = 0: the tap at the position alone)."""
    t = np.arange(_STEPS, dtype=_F32) * _F32(1 / _STEPS)
    if interp == "linear":
        return np.stack([1 - t, t], 1)
    if interp == "cubic":
        a = _F32(-0.75)

        def near(d):  # |d| <= 1
            return ((a + 2) * d - (a + 3)) * d * d + 1

        def far(d):  # 1 < |d| < 2
            return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a

        w0, w1, w2 = far(t + 1), near(t), near(1 - t)
        return np.stack([w0, w1, w2, 1 - w0 - w1 - w2], 1).astype(_F32)
    d = t.astype(np.float64)[:, None] + 3 - np.arange(8)
    w = (np.sinc(d) * np.sinc(d / 4)).astype(_F32)
    w = w * (_F32(1) / w.sum(1, keepdims=True, dtype=_F32))
    w[0] = np.arange(8) == 3
    return w.astype(_F32)


_WEIGHTS = {interp: _weights(interp) for interp in _TAPS}


def _short(v):
    """OpenCV keeps whole-pixel positions in int16."""
    return jnp.clip(v, -(1 << 15), (1 << 15) - 1)


def sample_fixed(img, batch, fx, fy, *, border, border_val, interp):
    """img (N, H, W, C) float32 at int32 positions (fx, fy) (B, OH, OW) of images `batch`, in
    1/32 pixel (whole pixels for "nearest"): (B, OH, OW, C). With "constant", a position whose
    taps all lie outside the image gives `border_val` itself."""
    if interp == "nearest":
        v = _neighbours(img, batch, _short(fy)[..., None], _short(fx)[..., None], border,
                        border_val)
        return v[..., 0, 0, :]
    taps, before = _TAPS[interp]
    step = np.arange(taps, dtype=np.int32) - before
    rows = _short(jnp.right_shift(fy, _BITS))[..., None] + step
    cols = _short(jnp.right_shift(fx, _BITS))[..., None] + step
    v = _neighbours(img, batch, rows, cols, border, border_val)
    table = jnp.asarray(_WEIGHTS[interp])
    w = table[fy & (_STEPS - 1)][..., :, None] * table[fx & (_STEPS - 1)][..., None, :]
    out = (v * w[..., None]).sum((-3, -2))
    if border != "constant":
        return out
    _, h, wd, _ = img.shape
    seen = (((rows >= 0) & (rows < h)).any(-1) & ((cols >= 0) & (cols < wd)).any(-1))
    return jnp.where(seen[..., None], out, _F32(border_val))


# Note [double positions]: MegEngine computes the fixed-point positions in double, where a
# product of a float32 entry of the matrix with a pixel index is exact. Decimal matrices put
# many positions on a rounding boundary (1.1 * 2 + 0.3 is 2.5 - 2e-8 in float32, 2.5 + 3e-8 in
# double), so float32 would read other pixels. Here a value is a float32 pair hi + lo, |lo|
# much below |hi|, good to about 2^-35: products from exact partial products of 12-bit halves
# (Dekker's), sums by Knuth's two-sum, and rounding that looks at lo where hi is a half. Few
# operations: XLA's compile time grows with their count. An exact half is rounded to even here;
# MegEngine's double may land beside it first when the denominator is not a power of two (20
# of 4.8 million positions of decimal matrices did).
def _halves(v):
    """v = hi + lo, each with at most 12 significant bits (v's mantissa cut in two)."""
    hi = lax.bitcast_convert_type(lax.bitcast_convert_type(v, jnp.int32) & -4096, jnp.float32)
    return hi, v - hi


def _two_sum(a, b):
    """(a + b rounded, its exact error)."""
    s = a + b
    back = s - a
    return s, (a - (s - back)) + (b - back)


def _times_index(m, index):
    """m (B, 1, 1) times a pixel index (a numpy grid, exact in float32) as a pair."""
    hi, lo = _halves(m)
    if index.max(initial=0) < 1 << 12:  # 12 x 12 bits: both products exact
        return hi * index, lo * index
    top = (index.astype(np.int64) & ~63).astype(_F32)  # at most 12 significant bits
    s, err = _two_sum(hi * top, hi * (index - top))
    return s, err + lo * index


def _rows(mat, i, gx, gy):
    """m[i, 0] x + m[i, 1] y + m[i, 2] of each output pixel, as a pair (B, OH, OW)."""
    m = mat[:, i, :, None, None]
    (a, a_lo), (b, b_lo) = _times_index(m[:, 0], gx), _times_index(m[:, 1], gy)
    s, e1 = _two_sum(a, b)
    s, e2 = _two_sum(s, m[:, 2])
    return s, (a_lo + b_lo) + (e1 + e2)


def _quotient(num, den, scale):
    """scale * num / den of two pairs, as a pair (0 where den is 0, as OpenCV has it): the
    float32 quotient q, and the rest from the exact remainder num - q * den (Dekker's)."""
    q = num[0] / den[0]
    p = q * den[0]
    (qh, ql), (dh, dl) = _halves(q), _halves(den[0])
    p_err = (((qh * dh - p) + qh * dl) + ql * dh) + ql * dl  # q * den[0] = p + p_err exactly
    rest = ((num[0] - p) - p_err) + (num[1] - q * den[1])
    zero = den[0] == 0
    return jnp.where(zero, 0, q * _F32(scale)), jnp.where(zero, 0, rest / den[0] * _F32(scale))


def _round(pair):
    """The pair rounded to an int32, halves to even, saturated."""
    hi, lo = _two_sum(jnp.clip(pair[0], -2147483520.0, 2147483520.0), pair[1])  # |lo| <= ulp/2
    r = jnp.round(hi)
    d = hi - r  # exact, in [-0.5, 0.5]: only a half can go either way
    odd = jnp.remainder(r, 2) != 0
    up = (d == 0.5) & ((lo > 0) | ((lo == 0) & odd))
    down = (d == -0.5) & ((lo < 0) | ((lo == 0) & odd))
    return (r + up.astype(r.dtype) - down.astype(r.dtype)).astype(jnp.int32)


# ----- the ops ------------------------------------------------------------------------------------
def _nhwc(x, format):
    return x if format == "NHWC" else x.transpose(0, 2, 3, 1)


def _layout(y, format):
    return y if format == "NHWC" else y.transpose(0, 3, 1, 2)


def _grid(out_shape):
    """(xs, ys) (1, OH, OW) float32: each output pixel's column and row."""
    ys, xs = np.meshgrid(*(np.arange(n, dtype=_F32) for n in out_shape), indexing="ij")
    return xs[None], ys[None]


def _row(mat, i, gx, gy):
    """m[i, 0] x + m[i, 1] y + m[i, 2] for each output pixel, (B, OH, OW)."""
    m = mat[:, i, :, None, None]
    return m[:, 0] * gx + m[:, 1] * gy + m[:, 2]


# ----- argument checks (run before the call: `F.vision`'s wrappers) -------------------------------
def _remap_before(inputs: Sequence, attrs: dict) -> Found:
    x, xy = inputs
    if (found := image(x)) is not None:
        return found
    xs, ys = dims(x), dims(xy)
    if len(ys) != 4 or ys[0] != xs[0] or ys[3] != 2:
        return OpArgumentError, (f"map_xy must have shape ({xs[0]}, OH, OW, 2), an (x, y) "
                                 f"position per output pixel of each of the {xs[0]} images; got "
                                 f"shape {ys}.")
    return numeric(xy, "map_xy")


def _warp_before(rows: int, layout: str) -> Check:
    """The check of a warp by (K, `rows`, 3) matrices of an image laid out as `layout` says:
    inputs (image, matrices) or (image, matrices, image indices or None)."""
    def before(inputs: Sequence, attrs: dict) -> Found:
        x, mat, *index = inputs
        if (found := image(x, layout=layout)) is not None:
            return found
        oh, ow = attrs["out_shape"]
        if min(oh, ow) < 1:
            return OpArgumentError, f"out_shape must be (height, width) >= 1, got {(oh, ow)}."
        per_image = not index or index[0] is None
        count = dims(x)[0] if per_image else dims(index[0])[0]
        ms, of = dims(mat), "image" if per_image else "entry of mat_idx"
        if len(ms) != 3 or ms[1:] != (rows, 3) or ms[0] != count:
            return OpArgumentError, (f"mat must have shape ({count}, {rows}, 3), one {rows} x 3 "
                                     f"matrix per {of}; got shape {ms}.")
        return numeric(mat, "mat")

    return before


@defop("remap", before=_remap_before)
def remap(x, map_xy, *, border, border_val, interp):
    """NCHW `x` at the positions `map_xy` (N, OH, OW, 2), (x, y) in input pixels, through the
    exact sampler: (N, C, OH, OW) in x's dtype."""
    img = _nhwc(x.astype(jnp.float32), "NCHW")
    xy = map_xy.astype(jnp.float32)
    out = sample_exact(img, jnp.arange(x.shape[0]), xy[..., 0], xy[..., 1], border=border,
                       border_val=border_val, interp=interp)
    return _layout(out, "NCHW").astype(x.dtype)


@defop("warp_perspective", before=_warp_before(3, "NCHW or NHWC"))
def warp_perspective(x, mat, mat_idx, *, out_shape, format, border, border_val, interp):
    """Output pixel (x, y) of image k reads image mat_idx[k] (k without `mat_idx`) at
    ((m0 x + m1 y + m2) / (m6 x + m7 y + m8), (m3 x + m4 y + m5) / (same)), m = mat[k]
    flattened. The exact sampler sets a non-finite "constant" result to `border_val`."""
    img = _nhwc(x.astype(jnp.float32), format)
    batch = jnp.arange(x.shape[0]) if mat_idx is None else mat_idx.astype(jnp.int32)
    gx, gy = _grid(out_shape)
    mat = mat.astype(jnp.float32)
    attrs = {"border": border, "border_val": border_val, "interp": interp}
    if fixed_point(format, x.shape[-1]):
        num_x, num_y, den = (_rows(mat, i, gx, gy) for i in range(3))
        scale = 1 if interp == "nearest" else _STEPS
        out = sample_fixed(img, batch, _round(_quotient(num_x, den, scale)),
                           _round(_quotient(num_y, den, scale)), **attrs)
    else:
        num_x, num_y, den = (_row(mat, i, gx, gy) for i in range(3))
        out = sample_exact(img, batch, num_x / den, num_y / den, **attrs)
        if border == "constant":
            out = jnp.where(jnp.isfinite(out), out, _F32(border_val))
    return _layout(out, format).astype(x.dtype)


@defop("warp_affine", before=_warp_before(2, "NHWC or NCHW"))
def warp_affine(x, mat, *, out_shape, format, border, border_val, interp):
    """Output pixel (x, y) of image k reads it at (m0 x + m1 y + m2, m3 x + m4 y + m5),
    m = mat[k] (2, 3) flattened. The fixed-point sampler takes the position in 1/1024 pixel
    first (OpenCV's warpAffine: m0 x and m1 y + m2 rounded apart, then summed and cut to
    1/32), the exact one sets a non-finite "constant" result to `border_val`."""
    img = _nhwc(x.astype(jnp.float32), format)
    batch = jnp.arange(x.shape[0])
    gx, gy = _grid(out_shape)
    mat = mat.astype(jnp.float32)
    attrs = {"border": border, "border_val": border_val, "interp": interp}
    if fixed_point(format, x.shape[-1]):
        nearest = interp == "nearest"
        half, shift = (512, 10) if nearest else (16, 5)  # to the nearest pixel, or 1/32

        def fixed(i):
            m = mat[:, i, :, None, None]
            down, down_lo = _times_index(m[:, 1], gy)
            down, err = _two_sum(down, m[:, 2])
            ends = [_round((a * 1024, b * 1024)) for a, b in (
                _times_index(m[:, 0], gx), (down, down_lo + err))]
            return jnp.right_shift(ends[1] + half + ends[0], shift)

        out = sample_fixed(img, batch, fixed(0), fixed(1), **attrs)
    else:
        out = sample_exact(img, batch, _row(mat, 0, gx, gy), _row(mat, 1, gx, gy), **attrs)
        if border == "constant":
            out = jnp.where(jnp.isfinite(out), out, _F32(border_val))
    return _layout(out, format).astype(x.dtype)
