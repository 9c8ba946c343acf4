"""The detection ops (roi_align, roi_pooling, and nms's keep mask `nms_keep`) against numpy
references written here from MegEngine 1.13's rules, one bin, one sample and one box at a time:
values, gradients (finite differences of the reference in float64; the exact argmax gradient
where maxima tie), hypothesis over shapes and RoIs, torchvision where it is installed, and
roi_align compiled in a `partial_trace` region. Then the errors bad arguments raise.

Where MegEngine's CPU kernels do something this project does not copy, the test says so; the
parity cases (`tests/parity/cases_detection.py`) compare with MegEngine itself.
"""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import eager as eg
import eager.functional as F
from eager.autodiff import GradManager
from partial import partial_trace
from tests.helpers import examples, normal

from .op_check import assert_close, check_fn

FAST = examples(3)
COVERED = {"roi_align", "roi_pooling", "nms_keep"}
F32 = np.float32


# ----- references ---------------------------------------------------------------------------------
def _bilinear_ref(img, y, x):
    """img (C, H, W) at the point (y, x): the four neighbours' weighted sum, 0 outside."""
    c, h, w = img.shape
    y0, x0 = math.floor(y), math.floor(x)
    total = np.zeros(c, img.dtype)
    for dy, wy in ((0, 1 - (y - y0)), (1, y - y0)):
        for dx, wx in ((0, 1 - (x - x0)), (1, x - x0)):
            if 0 <= y0 + dy < h and 0 <= x0 + dx < w:
                total = total + wy * wx * img[:, y0 + dy, x0 + dx]
    return total


def roi_align_ref(x, rois, out, mode="average", scale=1.0, samples=(2, 2), aligned=True):
    """Each bin of each RoI: the mean or maximum of its sh x sw samples, placed evenly inside
    it, each interpolated bilinearly."""
    (ph, pw), (sh, sw) = out, samples
    shift = 0.5 if aligned else 0.0
    y = np.zeros((len(rois), x.shape[1], ph, pw), x.dtype)
    for k, roi in enumerate(rois):
        left, top, right, bottom = (float(v) * scale - shift for v in roi[1:])
        bin_h, bin_w = max(bottom - top, 0) / ph, max(right - left, 0) / pw
        img = x[int(roi[0])]
        for i in range(ph):
            for j in range(pw):
                vals = [_bilinear_ref(img, top + bin_h * (i + (si + 0.5) / sh),
                                      left + bin_w * (j + (sj + 0.5) / sw))
                        for si in range(sh) for sj in range(sw)]
                y[k, :, i, j] = np.mean(vals, 0) if mode == "average" else np.max(vals, 0)
    return y


def _c_round(v):
    return math.copysign(math.floor(abs(v) + 0.5), v)


def pool_bins_ref(roi, out, scale, shape):
    """MegEngine's bins of one RoI, [(r0, r1, c0, c1)] row by row, in float32 as it computes
    them: corners rounded (halves away from zero), at least one pixel, bins clipped."""
    (ph, pw), (h, w) = out, shape
    x0, y0, x1, y1 = (int(_c_round(float(F32(v) * F32(scale)))) for v in roi[1:])
    bin_h = F32(max(y1 - y0 + 1, 1)) / F32(ph)
    bin_w = F32(max(x1 - x0 + 1, 1)) / F32(pw)

    def span(p, size, start, length):
        lo = int(np.floor(F32(p) * length)) + start
        hi = int(np.ceil(F32(p + 1) * length)) + start
        return min(max(lo, 0), size), min(max(hi, 0), size)

    return [[(*span(i, h, y0, bin_h), *span(j, w, x0, bin_w)) for j in range(pw)]
            for i in range(ph)]


def roi_pooling_ref(x, rois, out, mode="max", scale=1.0):
    y = np.zeros((len(rois), x.shape[1], *out), x.dtype)
    for k, roi in enumerate(rois):
        for i, row in enumerate(pool_bins_ref(roi, out, scale, x.shape[2:])):
            for j, (r0, r1, c0, c1) in enumerate(row):
                patch = x[int(roi[0]), :, r0:r1, c0:c1].reshape(x.shape[1], -1)
                if patch.shape[1]:
                    y[k, :, i, j] = patch.mean(1) if mode == "average" else patch.max(1)
    return y


def roi_pooling_max_grad_ref(x, rois, out, scale, cotangent):
    """The gradient of sum(roi_pooling(x) * cotangent) in max mode: each bin's cotangent goes
    to the first pixel (row-major) of the bin holding its maximum."""
    grad = np.zeros_like(x)
    for k, roi in enumerate(rois):
        for i, row in enumerate(pool_bins_ref(roi, out, scale, x.shape[2:])):
            for j, (r0, r1, c0, c1) in enumerate(row):
                for ch in range(x.shape[1]):
                    patch = x[int(roi[0]), ch, r0:r1, c0:c1]
                    if patch.size:
                        r, c = np.unravel_index(np.argmax(patch), patch.shape)
                        grad[int(roi[0]), ch, r0 + r, c0 + c] += cotangent[k, ch, i, j]
    return grad


def nms_ref(boxes, scores, thresh, max_output=None):
    """Greedy suppression down the scores (ties: the later box first), with MegEngine's
    overlap test in float32: intersection > union * thresh."""
    boxes = boxes.astype(F32)
    kept = []
    for i in np.argsort(scores, kind="stable")[::-1]:
        if max_output is not None and len(kept) == max_output:
            break
        a = boxes[i]
        overlaps = False
        for j in kept:
            b = boxes[j]
            iw = max(min(a[2], b[2]) - max(a[0], b[0]), F32(0))
            ih = max(min(a[3], b[3]) - max(a[1], b[1]), F32(0))
            inter = iw * ih
            union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
            overlaps = overlaps or inter > union * F32(thresh)
        if not overlaps:
            kept.append(i)
    return np.array(kept, np.int32)


# ----- inputs -------------------------------------------------------------------------------------
def random_rois(rng, k, n, extent, reach=6.0):
    """k RoIs over n images of about `extent` pixels: some past the edges, some inverted."""
    corner = rng.uniform(-2, extent + 1, (k, 2))
    size = rng.uniform(-1, reach, (k, 2))
    index = rng.integers(0, n, (k, 1))
    return np.concatenate([index, corner, corner + size], 1).astype(F32)


def random_boxes(rng, n, spread=10.0):
    corner = rng.uniform(0, spread, (n, 2))
    return np.concatenate([corner, corner + rng.uniform(0.5, 6, (n, 2))], 1).astype(F32)


# ----- roi_align ----------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["average", "max"])
def test_roi_align(rng, mode):
    x, rois = normal(rng, 2, 3, 7, 8), random_rois(rng, 5, 2, 7)
    attrs = dict(mode=mode, spatial_scale=0.75, sample_points=(2, 3), aligned=True)
    check_fn(lambda x: F.roi_align(x, rois, (2, 3), **attrs),
             lambda x: roi_align_ref(x, rois, (2, 3), mode, 0.75, (2, 3), True), [x])


@FAST
@given(n=st.integers(1, 2), c=st.integers(1, 2), h=st.integers(1, 7), w=st.integers(1, 7),
       k=st.integers(0, 3), out=st.tuples(st.integers(1, 3), st.integers(1, 3)),
       samples=st.tuples(st.integers(1, 2), st.integers(1, 2)),
       mode=st.sampled_from(["average", "max"]), aligned=st.booleans(),
       scale=st.sampled_from([1.0, 0.5]), seed=st.integers(0, 2**16))
def test_roi_align_shapes(n, c, h, w, k, out, samples, mode, aligned, scale, seed):
    rng = np.random.default_rng(seed)
    x, rois = normal(rng, n, c, h, w), random_rois(rng, k, n, max(h, w) / scale)
    check_fn(lambda x: F.roi_align(x, rois, out, mode, scale, samples, aligned),
             lambda x: roi_align_ref(x, rois, out, mode, scale, samples, aligned), [x])


def test_roi_align_takes_megengine_argument_forms(rng):
    x, rois = normal(rng, 1, 2, 5, 5), random_rois(rng, 2, 1, 5)
    want = roi_align_ref(x, rois, (2, 2), "max", 1.0, (3, 3), False)
    got = F.vision.roi_align(eg.tensor(x), eg.tensor(rois), 2, "MAX", 1, 3, False)
    assert_close(got, want, 1e-5, 1e-6, "int output_shape and sample_points, 'MAX'")
    assert F.roi_align(x.astype(np.float16), rois, 2).dtype == np.float32  # as in MegEngine


def test_roi_align_rois_get_no_gradient(rng):
    x, rois = eg.Parameter(normal(rng, 1, 2, 5, 5)), eg.Parameter(random_rois(rng, 2, 1, 5))
    gm = GradManager().attach([x, rois])
    with gm:
        gm.backward(F.roi_align(x, rois, 2).sum())
    assert x.grad is not None and rois.grad is None


def test_roi_align_in_partial_trace_equals_eager(rng):
    x0, rois = normal(rng, 2, 3, 8, 9), eg.tensor(random_rois(rng, 4, 2, 8))
    cotangent = eg.tensor(normal(rng, 4, 3, 3, 2))

    def body(x, rois):
        return F.roi_align(x, rois, (3, 2), mode="max", spatial_scale=0.5) * 2

    runs = []
    traced = partial_trace(body)
    for fn in (body, traced, traced):  # eager, the capture, a replay
        x = eg.Parameter(x0)
        gm = GradManager().attach([x])
        with gm:
            y = fn(x, rois)
            gm.backward((y * cotangent).sum())
        runs.append((y.numpy(), x.grad.numpy()))
    for y, g in runs[1:]:
        np.testing.assert_allclose(y, runs[0][0], rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(g, runs[0][1], rtol=1e-6, atol=1e-6)


def test_rois_picked_by_a_mask_run_on_the_padded_storage(rng):
    """RoIs selected by scores (a ragged tensor) give the selected RoIs' features and
    gradients, with no op falling back to the exact arrays (one program per count)."""
    x0, rois = normal(rng, 2, 3, 8, 9), random_rois(rng, 20, 2, 8)
    scores = rng.random(20).astype(F32)
    before = eg.ragged_fallbacks()
    runs = []
    for picked in (lambda: eg.tensor(rois)[eg.tensor(scores) > 0.5],
                   lambda: eg.tensor(rois[scores > 0.5])):
        x = eg.Parameter(x0)
        gm = GradManager().attach([x])
        with gm:
            r = picked()
            y = F.roi_align(x, r, 2, mode="max"), F.roi_pooling(x, r, (2, 3))
            gm.backward(y[0].sum() + (y[1] * 2).sum())
        runs.append([y[0].numpy(), y[1].numpy(), x.grad.numpy()])
    for got, want in zip(*runs):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert eg.ragged_fallbacks() == before


def test_few_rois_of_many_run_on_their_capacity_rung_only(rng):
    """20 RoIs picked of 300 (the selection's storage holds 300 rows): eagerly, RoI align and
    RoI pooling compute the 32 rows of the length's capacity rung, not 300 (their rows are
    costly), with the values and gradients of the exact selection; inside a region, where the
    length is traced, they run on the whole storage and agree too."""
    x0, rois = normal(rng, 2, 3, 8, 9), random_rois(rng, 300, 2, 8)
    keep = np.zeros(300, bool)
    keep[rng.choice(300, 20, replace=False)] = True

    def body(x, picked):
        y = F.roi_align(x, picked, 2, mode="average"), F.roi_pooling(x, picked, (2, 3))
        return y[0].sum() * 3 + (y[1] * 2).sum() + (y[0] ** 2).sum()

    runs = []
    for fn, picked in ((body, lambda: eg.tensor(rois)[eg.tensor(keep)]),
                       (body, lambda: eg.tensor(rois[keep])),
                       (partial_trace(lambda x, m: body(x, eg.tensor(rois)[m])), None)):
        x = eg.Parameter(x0)
        gm = GradManager().attach([x])
        with gm:
            loss = fn(x, picked()) if picked else fn(x, eg.tensor(keep))
            gm.backward(loss)
        runs.append([loss.numpy(), x.grad.numpy()])
    for run in (runs[0], runs[2]):
        for got, want in zip(run, runs[1]):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    heavy = eg.OPS["roi_align"].ragged_ops["heavy rows"]
    keys = [*heavy._fwd, *(key for key, _ in heavy._bwd)]
    assert any(dict(key).get("upto") == (32, (1,)) for key in keys)


# ----- roi_pooling --------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["max", "average"])
def test_roi_pooling(rng, mode):
    x = normal(rng, 2, 3, 9, 7)
    rois = random_rois(rng, 6, 2, 8, reach=12)
    rois[0, 1:] = [1.5, 2.5, -0.5, 4.5]  # halves round away from zero; inverted: one pixel
    check_fn(lambda x: F.roi_pooling(x, rois, (3, 2), mode, 0.5),
             lambda x: roi_pooling_ref(x, rois, (3, 2), mode, 0.5), [x])


@pytest.mark.slow  # each example compiles the sparse table's scans, forward and backward
@examples(4)
@given(n=st.integers(1, 2), c=st.integers(1, 2), h=st.integers(1, 9), w=st.integers(1, 9),
       k=st.integers(0, 3), out=st.tuples(st.integers(1, 4), st.integers(1, 4)),
       mode=st.sampled_from(["max", "average"]), scale=st.sampled_from([1.0, 0.5]),
       seed=st.integers(0, 2**16))
def test_roi_pooling_shapes(n, c, h, w, k, out, mode, scale, seed):
    rng = np.random.default_rng(seed)
    x, rois = normal(rng, n, c, h, w), random_rois(rng, k, n, max(h, w) / scale, reach=10)
    check_fn(lambda x: F.roi_pooling(x, rois, out, mode, scale),
             lambda x: roi_pooling_ref(x, rois, out, mode, scale), [x])


def test_roi_pooling_max_gradient_goes_to_the_first_tied_maximum(rng):
    """Post-ReLU features tie at 0 everywhere: the gradient goes to one pixel per bin, the
    first in row-major order (MegEngine's), not shared among the ties."""
    x0 = np.maximum(normal(rng, 2, 2, 12, 11), 0) * (rng.random((2, 2, 12, 11)) < 0.3)
    rois = random_rois(rng, 5, 2, 10, reach=16)
    cotangent = normal(rng, 5, 2, 3, 4)
    x = eg.Parameter(x0.astype(F32))
    gm = GradManager().attach([x])
    with gm:
        y = F.roi_pooling(x, rois, (3, 4))
        gm.backward(y, eg.tensor(cotangent))
    assert_close(y, roi_pooling_ref(x0, rois, (3, 4)), 0, 0, "value")
    assert_close(x.grad, roi_pooling_max_grad_ref(x0, rois, (3, 4), 1.0, cotangent), 1e-6,
                 1e-6, "gradient")


def test_roi_pooling_large_bins(rng):
    """Bins as large as the image (the sparse table's highest levels), in float16 too."""
    x = normal(rng, 1, 2, 33, 40)
    rois = np.array([[0, -50, -50, 90, 90], [0, 0, 0, 39, 32], [0, 3, 1, 38, 20]], F32)
    for dtype in (F32, np.float16):
        got = F.roi_pooling(x.astype(dtype), rois, (2, 3))
        assert got.dtype == dtype
        assert_close(got, roi_pooling_ref(x.astype(dtype), rois, (2, 3)), 0, 0, str(dtype))


def test_roi_pooling_average_reads_only_each_bins_pixels(rng):
    """An inf or NaN makes only the bins that hold it non-finite: not the other bins of its
    image, nor those of the other images (the averages are contractions with 0/1 masks)."""
    x = normal(rng, 2, 1, 6, 6)
    x[0, 0, 1, 1], x[0, 0, 3, 3], x[0, 0, 4, 4], x[0, 0, 4, 5] = -np.inf, np.nan, np.inf, -np.inf
    x[1, 0, 5, 5] = np.inf
    rois = np.array([[0, 0, 0, 2, 2], [0, 0, 0, 0, 0], [1, 4, 4, 5, 5], [1, 0, 0, 3, 3],
                     [0, 2, 2, 3, 3], [0, 4, 4, 5, 5], [0, 4, 4, 4, 4]], F32)
    with np.errstate(invalid="ignore"):
        want = roi_pooling_ref(x, rois, (1, 1), "average")
    assert_close(F.roi_pooling(x, rois, 1, mode="average"), want, 1e-6, 1e-6, "means")
    assert np.isfinite(want[[1, 3]]).all() and not np.isfinite(want[[0, 2, 4, 5, 6]]).any()


# ----- nms ----------------------------------------------------------------------------------------
@FAST
@given(n=st.integers(0, 40), thresh=st.sampled_from([0.0, 0.3, 0.5, 0.8]),
       max_output=st.one_of(st.none(), st.integers(1, 8)), ties=st.booleans(),
       seed=st.integers(0, 2**16))
def test_nms(n, thresh, max_output, ties, seed):
    rng = np.random.default_rng(seed)
    boxes = random_boxes(rng, n)
    scores = (rng.integers(0, 4, n) if ties else rng.random(n)).astype(F32)
    got = F.nms(boxes, scores, thresh, max_output)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got.numpy(), nms_ref(boxes, scores, thresh, max_output))


@pytest.mark.parametrize("path", [{}, {"small_source": 0}, None],
                         ids=["on-the-device", "count-read", "ragged-off"])
def test_nms_on_each_selection_path(rng, path):
    """The kept count stays on the device (few boxes), is read to pick a capacity, or (ragged
    results off) sizes the result exactly."""
    boxes, scores = random_boxes(rng, 60), rng.random(60).astype(F32)
    if path is None:
        eg.set_ragged_buckets(None)
    else:
        eg.set_ragged_buckets(2.0, **path)
    try:
        got = F.nms(boxes, scores, 0.4, max_output=20)
        assert got.shape == (len(nms_ref(boxes, scores, 0.4, 20)),)
        np.testing.assert_array_equal(got.numpy(), nms_ref(boxes, scores, 0.4, 20))
    finally:
        eg.set_ragged_buckets(2.0)


def test_nms_overlap_at_the_threshold_is_kept():
    """IoU 1/3 against a threshold of 1/3: kept (suppression needs an IoU above it)."""
    boxes = np.array([[0, 0, 2, 1], [1, 0, 3, 1]], F32)
    scores = np.array([1.0, 0.5], F32)
    assert F.nms(boxes, scores, 1 / 3).numpy().tolist() == [0, 1]
    assert F.nms(boxes, scores, 0.33).numpy().tolist() == [0]


def test_nms_in_partial_trace_compiles_without_a_break(rng):
    boxes, scores = random_boxes(rng, 30), rng.random(30).astype(F32)

    @partial_trace
    def kept_score(boxes, scores):
        return scores[F.nms(boxes, scores, 0.3)].sum()

    want = scores[nms_ref(boxes, scores, 0.3)].sum()
    for _ in range(2):
        assert kept_score(eg.tensor(boxes), eg.tensor(scores)).item() == pytest.approx(want)


# ----- torchvision, where installed ---------------------------------------------------------------
def test_against_torchvision(rng):
    """Inside the image (where torchvision's clamping at the border changes nothing) and with
    RoIs at least a pixel wide (torchvision widens smaller ones without `aligned`)."""
    tv = pytest.importorskip("torchvision.ops")
    torch = pytest.importorskip("torch")
    x = normal(rng, 2, 3, 16, 16)
    corner = rng.uniform(1, 7, (6, 2))
    rois = np.concatenate([rng.integers(0, 2, (6, 1)), corner,
                           corner + rng.uniform(1, 7, (6, 2))], 1).astype(F32)
    tx, tr = torch.from_numpy(x), torch.from_numpy(rois)
    for aligned in (True, False):
        want = tv.roi_align(tx, tr, (3, 2), 1.0, 2, aligned).numpy()
        assert_close(F.roi_align(x, rois, (3, 2), aligned=aligned), want, 1e-5, 1e-5,
                     f"roi_align aligned={aligned}")
    want = tv.roi_pool(tx, tr, (3, 2), 0.5).numpy()
    assert_close(F.roi_pooling(x, rois, (3, 2), scale=0.5), want, 0, 0, "roi_pool")
    boxes, scores = random_boxes(rng, 50), rng.random(50).astype(F32)
    want = tv.nms(torch.from_numpy(boxes), torch.from_numpy(scores), 0.5).numpy()
    np.testing.assert_array_equal(F.nms(boxes, scores, 0.5).numpy(), want)


# ----- names and bad arguments --------------------------------------------------------------------
def test_megengine_namespaces():
    for name in ("roi_align", "roi_pooling", "nms"):
        assert getattr(F.vision, name) is getattr(F.nn, name) is getattr(F, name)


X, ROIS = np.zeros((1, 2, 4, 4), F32), np.array([[0, 0, 0, 2, 2]], F32)
BOXES, SCORES = np.zeros((3, 4), F32), np.zeros(3, F32)
BAD = [
    (lambda: F.roi_align(X[0], ROIS, 2), eg.OpArgumentError, r"NCHW \(4-d\) input"),
    (lambda: F.roi_align(X, ROIS[:, 1:], 2), eg.OpArgumentError, r"rois must have shape \(K, 5\)"),
    (lambda: F.roi_align(X, ROIS, (2, 2, 2)), eg.OpTypeError, "output_shape must be an int or 2"),
    (lambda: F.roi_align(X, ROIS, (2, -1)), eg.OpArgumentError, "output_shape must be"),
    (lambda: F.roi_align(X, ROIS, 2, mode="sum"), eg.OpArgumentError, "mode must be 'max' or"),
    (lambda: F.roi_align(X, ROIS, 2, sample_points=0), eg.OpArgumentError,
     "sample_points must be >= 1"),
    (lambda: F.roi_align(X, ROIS, 2, spatial_scale="half"), eg.OpTypeError,
     "spatial_scale must be a number"),
    (lambda: F.roi_pooling(X.astype(np.int32), ROIS, 2), eg.OpTypeError, "must be a float"),
    (lambda: F.roi_pooling(X, ROIS, 2, mode="avg"), eg.OpArgumentError, "mode must be"),
    (lambda: F.roi_pooling(X, ROIS.astype(bool), 2), eg.OpTypeError, "rois has dtype bool"),
    (lambda: F.nms(BOXES[:, :3], SCORES, 0.5), eg.OpArgumentError, r"shape \(N, 4\)"),
    (lambda: F.nms(BOXES, SCORES[:2], 0.5), eg.OpArgumentError, "one score per box"),
    (lambda: F.nms(BOXES, SCORES, 0.5, max_output=0), eg.OpArgumentError,
     "max_output must be >= 1"),
    (lambda: F.nms(BOXES, SCORES, None), eg.OpTypeError, "iou_thresh must be a number"),
]


@pytest.mark.parametrize("call, error, match", BAD)
def test_bad_arguments_raise_named_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()
