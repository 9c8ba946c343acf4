"""Detection ops, MegEngine's `F.vision`: RoI align, RoI pooling and the keep mask of
non-maximum suppression.

Rules are MegEngine 1.13's CPU kernels', measured against it (`tests/parity/cases_detection.py`):
a RoI is a row (batch index, x0, y0, x1, y1); its batch index is truncated to an int; RoIs carry
no gradient. Shapes are static (the RoI count, `output_shape`), so these ops compile inside
regions, and RoIs picked by a mask (ragged, `eager/core/ragged.py`) run on their padded
storage, each output row depending on its RoI alone; the data-dependent count NMS keeps is
taken by the functional wrapper.
"""

from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from ..errors import OpArgumentError
from .checks import Found, dims, float_tensor, numeric
from .ragged_ops import valid_first
from .ragged_rules import HEAVY_ROWS
from .registry import defop

_F32 = np.float32


def _roi_rows(rois):
    """(batch index (K,) int32, x0, y0, x1, y1 (K,) float32) of (K, 5) RoIs, without gradient."""
    rois = lax.stop_gradient(rois).astype(jnp.float32)
    return (rois[:, 0].astype(jnp.int32), *(rois[:, i] for i in range(1, 5)))


# ----- argument checks (run before the call by `F.vision`'s wrappers, and after a failed call) ---
def rois_check(x: Any, rois: Any) -> Found:
    """An NCHW `x` and (K, 5) RoIs holding numbers: what every RoI op reads (the deformable PS
    RoI pooling of `deformable.py` too)."""
    if len(dims(x)) != 4:
        return OpArgumentError, f"needs an NCHW (4-d) input, got shape {dims(x)}."
    rs = dims(rois)
    if len(rs) != 2 or rs[1] != 5:
        return OpArgumentError, (f"rois must have shape (K, 5), rows (batch index, x0, y0, x1, "
                                 f"y1); got shape {rs}.")
    return numeric(rois, "rois")


def _bins(attrs: dict) -> Found:
    """The output's bins: a negative count is no size (0 is an empty output)."""
    shape = attrs["output_shape"]
    if min(shape) < 0:
        return OpArgumentError, f"output_shape must be (height, width) >= 0, got {shape}."
    return None


def _align_check(inputs: Sequence, attrs: dict) -> Found:
    x, rois = inputs
    if (found := rois_check(x, rois) or _bins(attrs)) is not None:
        return found
    if min(attrs["sample_points"]) < 1:
        return OpArgumentError, (
            f"sample_points must be >= 1 along each axis, got {attrs['sample_points']}; "
            "MegEngine documents 0 as 'sample densely', but its kernels then return zeros: "
            "pass a count (2 is the default).")
    return None


def _pooling_check(inputs: Sequence, attrs: dict) -> Found:
    x, rois = inputs
    return rois_check(x, rois) or float_tensor(x, "input") or _bins(attrs)


def _nms_check(inputs: Sequence, attrs: dict) -> Found:
    """(N, 4) boxes and one score per box, both numbers (a ragged call's length is not read)."""
    boxes, scores = inputs[:2]
    bs, ss = dims(boxes), dims(scores)
    if len(bs) != 2 or bs[1] != 4:
        return OpArgumentError, (f"boxes must have shape (N, 4), rows (x0, y0, x1, y1); got "
                                 f"shape {bs}.")
    if len(ss) != 1 or ss[0] != bs[0]:
        return OpArgumentError, (f"scores must have shape (N,) with one score per box, got "
                                 f"shape {ss} for boxes of shape {bs}.")
    return numeric(boxes, "boxes") or numeric(scores, "scores")


# ----- RoI align ----------------------------------------------------------------------------------
def _sample_offsets(pooled: int, samples: int) -> np.ndarray:
    """Where the samples of each bin lie, in bins from the RoI's start: bin p's sample s is at
    p + (s + 0.5) / samples, in float32 as MegEngine computes it."""
    bins = np.arange(pooled, dtype=_F32)[:, None]
    within = (np.arange(samples, dtype=_F32) + _F32(0.5)) * (_F32(1) / _F32(samples))
    return (bins + within).reshape(-1)


def _axis_samples(start, end, pooled, samples):
    """The sample coordinates (K, pooled * samples) along one axis of each RoI: its extent
    (never negative) cut into `pooled` bins of `samples` evenly spread points each."""
    size = jnp.maximum(end - start, 0.0) / _F32(pooled)
    return start[:, None] + size[:, None] * _sample_offsets(pooled, samples)


def _bilinear(xt, batch, ys, xs):
    """`xt` (N, H, W, C) bilinearly interpolated at the grid ys (K, Y) x xs (K, X) of image
    `batch` (K,): (K, Y, X, C). A neighbour outside the image counts as 0, and the weights are
    applied as MegEngine does (along x within each row, then between the rows)."""
    _, h, w, _ = xt.shape
    y0f, x0f = jnp.floor(ys), jnp.floor(xs)
    fy, fx = (ys - y0f)[:, :, None, None], (xs - x0f)[:, None, :, None]
    y0, x0 = y0f.astype(jnp.int32), x0f.astype(jnp.int32)
    b = batch[:, None, None]

    def at(yi, xi):
        inside = ((yi >= 0) & (yi < h))[:, :, None] & ((xi >= 0) & (xi < w))[:, None, :]
        v = xt[b, jnp.clip(yi, 0, h - 1)[:, :, None], jnp.clip(xi, 0, w - 1)[:, None, :]]
        return jnp.where(inside[..., None], v, 0)

    top_left, top_right = at(y0, x0), at(y0, x0 + 1)
    bottom_left, bottom_right = at(y0 + 1, x0), at(y0 + 1, x0 + 1)
    top = top_left + (top_right - top_left) * fx
    bottom = bottom_left + (bottom_right - bottom_left) * fx
    return top + (bottom - top) * fy


# RoIs per block of `roi_align`: its samples are gathered as (RoIs, ph * sh, pw * sw, C), 0.8 GB
# for 1028 RoIs of 7x7 bins of 2x2 samples over 256 channels, which Faster R-CNN pools on each
# FPN level. In blocks of 64 (`lax.map`) that is 50 MB; measured on 2 cores for those 1028 RoIs
# over a (2, 256, 64, 64) map: forward 30% faster, backward the same, peak memory 0.55 GB lower.
_ROI_BLOCK = 64


# RoI k gives output row k
@defop("roi_align", ragged=HEAVY_ROWS, check=_align_check, before=_align_check)
def roi_align(x, rois, *, output_shape, mode, spatial_scale, offset, sample_points):
    """(K, C, ph, pw): each RoI of `rois` (K, 5) over NCHW `x`, cut into ph x pw bins, each
    bin the average (mode "average") or maximum ("max") of its sh x sw bilinear samples.

    A RoI's corners are scaled by `spatial_scale` and shifted by -`offset`. The maximum's
    gradient goes to its first sample (row-major), as MegEngine's argmax does.
    """
    attrs = dict(output_shape=output_shape, mode=mode, spatial_scale=spatial_scale,
                 offset=offset, sample_points=sample_points)
    # channels last, once: inside `lax.map`'s body XLA transposes the whole map again for every
    # block (measured: forward 0.48 s against 0.15 s for 1024 RoIs over (2, 256, 64, 64))
    xt = x.transpose(0, 2, 3, 1)
    k = rois.shape[0]
    if k <= _ROI_BLOCK:
        return _roi_align_block(xt, rois, **attrs)
    pad = -k % _ROI_BLOCK  # padding RoIs repeat RoI 0; their rows are cut off below
    blocks = jnp.concatenate([rois, jnp.broadcast_to(rois[:1], (pad, rois.shape[1]))])
    out = lax.map(lambda block: _roi_align_block(xt, block, **attrs),
                  blocks.reshape(-1, _ROI_BLOCK, rois.shape[1]))
    return out.reshape(-1, *out.shape[2:])[:k]


def _roi_align_block(xt, rois, *, output_shape, mode, spatial_scale, offset, sample_points):
    """`roi_align` of one block of RoIs over the channels-last map `xt` (N, H, W, C)."""
    (ph, pw), (sh, sw) = output_shape, sample_points
    batch, x0, y0, x1, y1 = _roi_rows(rois)
    ys = _axis_samples(y0 * _F32(spatial_scale) - _F32(offset),
                       y1 * _F32(spatial_scale) - _F32(offset), ph, sh)
    xs = _axis_samples(x0 * _F32(spatial_scale) - _F32(offset),
                       x1 * _F32(spatial_scale) - _F32(offset), pw, sw)
    v = _bilinear(xt, batch, ys, xs)  # (K, ph * sh, pw * sw, C)
    k, c = v.shape[0], v.shape[-1]
    v = v.reshape(k, ph, sh, pw, sw, c)
    if mode == "average":
        out = v.sum(axis=(2, 4)) / (sh * sw)
    else:
        v = v.transpose(0, 1, 3, 5, 2, 4).reshape(k, ph, pw, c, sh * sw)
        first = jnp.argmax(lax.stop_gradient(v), axis=-1)  # the first of tied maxima
        out = jnp.take_along_axis(v, first[..., None], axis=-1)[..., 0]
    return out.transpose(0, 3, 1, 2)


# ----- RoI pooling --------------------------------------------------------------------------------
def _round_half_away(v):
    """C's round(): halves away from zero (jnp.round rounds them to even)."""
    t = jnp.trunc(v)
    return jnp.where(jnp.abs(v - t) >= 0.5, t + jnp.sign(v), t)


def _pool_bins(start, end, pooled, size):
    """(begin, end) (K, pooled) int32 of each RoI's bins along one axis: the RoI covers pixels
    start..end (at least one), bin p is [floor(p * s), ceil((p + 1) * s)) from its start
    (s = its length / pooled; bins may overlap), clipped to the image [0, size)."""
    length = jnp.maximum(end - start + 1, 1).astype(jnp.float32) / _F32(pooled)
    p = np.arange(pooled, dtype=_F32)
    begin = jnp.floor(p * length[:, None]).astype(jnp.int32) + start[:, None]
    stop = jnp.ceil((p + _F32(1)) * length[:, None]).astype(jnp.int32) + start[:, None]
    return jnp.clip(begin, 0, size), jnp.clip(stop, 0, size)


def _in_bins(begin, stop, size):
    """(K, pooled, size) bool: whether each pixel along the axis lies in each bin."""
    i = jnp.arange(size)
    return (i >= begin[..., None]) & (i < stop[..., None])


# Note [range maxima]: a bin of RoI pooling is any rectangle of the image, as large as the image,
# so a masked reduction per bin costs K * C * ph * pw * H * W (16 s for 512 RoIs of 7 x 7 bins
# over a (2, 256, 50, 68) map). A sparse table answers it in four reads instead: level (a, b)
# holds the maximum of the 2^a x 2^b window at each pixel, and a bin of h x w pixels is covered
# by the four windows of levels (floor(log2 h), floor(log2 w)) at its corners; they overlap,
# which a maximum does not mind. The table holds (value, flat index) pairs and keeps the smaller
# index of equal values, so the answer is the bin's first maximum in row-major order, where
# MegEngine sends the gradient. Levels are built and read in `lax.scan`s, one row level at a
# time: that keeps one row of the table in memory, and XLA compiles a stack of many levels
# written out in the program into a concatenation 100 times slower.
def _better(a, b):
    """The larger of two (value, index) pairs; of equal values, the smaller index."""
    take = (b[0] > a[0]) | ((b[0] == a[0]) & (b[1] < a[1]))
    return jnp.where(take, b[0], a[0]), jnp.where(take, b[1], a[1])


def _doubled(pair, step, axis):
    """The table level of windows twice as long along `axis`: each window joined with the one
    `step` pixels on (past the image's end, the last pixel's: the window is cut there)."""
    size = pair[0].shape[axis]
    ahead = jnp.minimum(jnp.arange(size) + step, size - 1)
    return _better(pair, tuple(jnp.take(t, ahead, axis=axis) for t in pair))


def _log2(n):
    """floor(log2(n)) of positive int32s."""
    return 31 - lax.clz(n)


def _first_max(x, batch, rows, cols):
    """The flat index (row * W + col), (K, C, ph, pw), of the first maximum in row-major order
    of each bin of image `batch` (K,); `rows` and `cols` are the bins' (begin, end) along the
    two axes, (K, ph) and (K, pw), each nonempty. See Note [range maxima]."""
    _, c, h, w = x.shape
    (r0, r1), (c0, c1) = rows, cols
    row_level, col_level = _log2(r1 - r0), _log2(c1 - c0)  # (K, ph), (K, pw)
    corner_rows = [r[:, :, None] for r in (r0, r1 - (1 << row_level))]
    corner_cols = [col[:, None, :] for col in (c0, c1 - (1 << col_level))]
    # channels last: each read of the table below is a whole vector of channels
    values = lax.stop_gradient(x).transpose(0, 2, 3, 1)
    flat = jnp.arange(h * w, dtype=jnp.int32).reshape(1, h, w, 1)

    def col_levels(pair, b):
        return _doubled(pair, jnp.left_shift(1, b), axis=2), pair

    def row_level_step(carry, a):
        pair, best = carry
        _, table = lax.scan(col_levels, pair, jnp.arange(w.bit_length()))  # (levels, N, H, W, C)
        found = None
        for row in corner_rows:
            for col in corner_cols:
                where = (col_level[:, None, :], batch[:, None, None], row, col)
                hit = (table[0][where], table[1][where])  # (K, ph, pw, C)
                found = hit if found is None else _better(found, hit)
        assert found is not None
        here = (row_level == a)[:, :, None, None]
        best = tuple(jnp.where(here, f, b) for f, b in zip(found, best))
        return (_doubled(pair, jnp.left_shift(1, a), axis=1), best), None

    shape = (batch.shape[0], r0.shape[1], c0.shape[1], c)
    start = ((values, jnp.broadcast_to(flat, values.shape)),
             (jnp.zeros(shape, x.dtype), jnp.zeros(shape, jnp.int32)))
    (_, best), _ = lax.scan(row_level_step, start, jnp.arange(h.bit_length()))
    return best[1].transpose(0, 3, 1, 2)


def _bin_means(x, batch, rows, cols, count):
    """The mean of each bin, (K, C, ph, pw): sums by two contractions with the bins' 0/1 masks
    (no per-RoI copies of the image). A mask's 0 times an inf outside the bin would be NaN, so
    the sums run over the finite values, and three more channels count each bin's inf, -inf
    and NaN to give it the sum those make: what summing the bin alone gives."""
    n, c, h, w = x.shape
    flags = [x == jnp.inf, x == -jnp.inf, jnp.isnan(x)]
    parts = jnp.concatenate([jnp.where(jnp.isfinite(x), x, 0),
                             *(f.astype(x.dtype) for f in flags)], axis=1)
    of_image = (batch[:, None] == jnp.arange(n))[:, None, :, None]  # (K, 1, N, 1)
    in_rows = _in_bins(rows[0], rows[1], h)[:, :, None] & of_image  # (K, ph, N, H)
    band = jnp.einsum("kpnh,nchw->kcpw", in_rows.astype(x.dtype), parts)
    total = jnp.einsum("kcpw,kqw->kcpq", band, _in_bins(cols[0], cols[1], w).astype(x.dtype))
    up, down, nan = (total[:, c + i:c + i + 1] > 0 for i in range(3))
    mean = total[:, :c] / jnp.maximum(count, 1).astype(x.dtype)
    mean = jnp.where(up, jnp.inf, jnp.where(down, -jnp.inf, mean))
    mean = jnp.where(nan | (up & down), jnp.nan, mean)
    return jnp.where(count > 0, mean, 0)


@defop("roi_pooling", ragged=HEAVY_ROWS, check=_pooling_check, before=_pooling_check)
def roi_pooling(x, rois, *, output_shape, mode, scale):
    """(K, C, ph, pw): the maximum ("max") or average ("average") of each of ph x pw bins of
    every RoI of `rois` (K, 5) over NCHW `x`; an empty bin (outside the image) is 0.

    A RoI covers the pixels between its corners times `scale`, rounded (halves away from zero).
    The maximum's gradient goes to the first pixel (row-major) holding it, as in MegEngine.
    """
    ph, pw = output_shape
    n, c, h, w = x.shape
    batch, *corners = _roi_rows(rois)
    x0, y0, x1, y1 = (_round_half_away(v * _F32(scale)).astype(jnp.int32) for v in corners)
    rows, cols = _pool_bins(y0, y1, ph, h), _pool_bins(x0, x1, pw, w)
    heights, widths = rows[1] - rows[0], cols[1] - cols[0]
    count = (heights[:, :, None] * widths[:, None, :])[:, None]  # (K, 1, ph, pw)
    if mode == "average":
        return _bin_means(x, batch, rows, cols, count)
    nonempty = ((rows[0], rows[0] + jnp.maximum(heights, 1)),
                (cols[0], cols[0] + jnp.maximum(widths, 1)))
    first = _first_max(x, batch, *nonempty)
    out = x.reshape(n, c, h * w)[batch[:, None, None, None], jnp.arange(c)[None, :, None, None],
                                 first]
    return jnp.where(count > 0, out, 0)


# ----- non-maximum suppression --------------------------------------------------------------------
def _overlaps(box, boxes, iou_thresh):
    """Whether each of `boxes` (N, 4) overlaps `box` (4,) by an IoU above `iou_thresh`, in
    float32 and in MegEngine's form (intersection > union * threshold: no division)."""
    left, top = jnp.maximum(box[0], boxes[:, 0]), jnp.maximum(box[1], boxes[:, 1])
    right, bottom = jnp.minimum(box[2], boxes[:, 2]), jnp.minimum(box[3], boxes[:, 3])
    inter = jnp.maximum(right - left, 0.0) * jnp.maximum(bottom - top, 0.0)
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    return inter > (area + areas - inter) * _F32(iou_thresh)


@defop("nms_keep", differentiable=False, multi_output=True, check=_nms_check,
       before=_nms_check)
def nms_keep(boxes, scores, length=None, *, iou_thresh, max_output):
    """(order, keep): the boxes' positions by descending score, int32 (N,), and whether the box
    at each place of that order survives greedy suppression, bool (N,).

    Equal scores keep the later box first (MegEngine's descending argsort: a stable ascending
    sort, reversed). Going down the order, a box is kept unless it overlaps a kept box by an
    IoU above `iou_thresh`; the search stops once `max_output` boxes are kept. With `length`
    (ragged boxes, `eager/core/ragged.py`) only the first `length` boxes take part: the others are
    ordered last and never kept.
    """
    n = scores.shape[0]
    order = jnp.argsort(scores, stable=True)[::-1].astype(jnp.int32)
    if length is not None:
        order, n = valid_first(order, length), length
    ranked = boxes.astype(jnp.float32)[order]
    if scores.shape[0] == 0:
        return order, jnp.zeros(0, jnp.bool_)

    def more(state):
        i, kept, _ = state
        return (i < n) & (kept < max_output)

    def visit(state):
        i, kept, keep = state
        alive = ~jnp.any(keep & _overlaps(ranked[i], ranked, iou_thresh))
        return i + 1, kept + alive.astype(jnp.int32), keep.at[i].set(alive)

    _, _, keep = lax.while_loop(more, visit, (0, 0, jnp.zeros(scores.shape[0], jnp.bool_)))
    return order, keep
