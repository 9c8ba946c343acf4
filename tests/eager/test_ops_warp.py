"""The `F.vision` image ops (remap, warp_perspective, warp_affine, cvt_color, correlation)
against numpy references written here, one output pixel at a time, from MegEngine 1.13's
rules: the border rules as OpenCV's mirroring loop, the exact sampler's bilinear formula, the
fixed-point sampler's 1/32-pixel positions (in float64, as MegEngine's double) and its weight
tables from their definitions, FlowNet's patch means. Values, gradients (finite differences
of the references in float64), hypothesis over shapes, the ops compiled in a `partial_trace`
region, then the errors bad arguments raise.

Where MegEngine's CPU kernels do something this project does not copy, the parity cases
(`tests/parity/cases_warp.py`) keep the evidence.
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
COVERED = {"remap", "warp_perspective", "warp_affine", "cvt_color", "correlation"}
F32 = np.float32
BORDERS = ["replicate", "reflect", "reflect_101", "wrap", "constant"]


# ----- references ---------------------------------------------------------------------------------
def border_ref(p, n, border):
    """The pixel read for position p along an axis of n pixels (None: outside, "constant")."""
    if 0 <= p < n:
        return p
    if border == "constant":
        return None
    if border == "replicate":
        return min(max(p, 0), n - 1)
    if border == "wrap":
        return p % n
    if n == 1:
        return 0
    skip = border == "reflect_101"  # mirror about the edge pixel, not between pixels
    while not 0 <= p < n:
        p = -p - 1 + skip if p < 0 else 2 * n - 1 - p - skip
    return p


def pixel_ref(img, row, col, border, bval):
    """img (H, W, C) at integer (row, col)."""
    r, c = border_ref(row, img.shape[0], border), border_ref(col, img.shape[1], border)
    if r is None or c is None:
        return np.full(img.shape[2], bval, img.dtype)
    return img[r, c]


def bilinear_ref(img, x, y, border, bval):
    x0, y0 = math.floor(x), math.floor(y)
    ax, ay = x - x0, y - y0
    return sum(pixel_ref(img, y0 + i, x0 + j, border, bval) * wy * wx
               for i, wy in ((0, 1 - ay), (1, ay)) for j, wx in ((0, 1 - ax), (1, ax)))


def taps_ref(interp, t):
    """(first tap's offset, weights) of the fixed-point kernels at fraction t of a pixel."""
    if interp == "linear":
        return 0, [1 - t, t]
    if interp == "cubic":  # Keys' cubic convolution, a = -0.75
        a = -0.75

        def keys(d):
            d = abs(d)
            if d <= 1:
                return (a + 2) * d ** 3 - (a + 3) * d ** 2 + 1
            return a * d ** 3 - 5 * a * d ** 2 + 8 * a * d - 4 * a

        return -1, [keys(t + 1 - i) for i in range(4)]
    if t == 0:
        return -3, [float(i == 3) for i in range(8)]
    w = [np.sinc(t + 3 - i) * np.sinc((t + 3 - i) / 4) for i in range(8)]
    return -3, [v / sum(w) for v in w]


def fixed_ref(img, fx, fy, interp, border, bval):
    """img at the int positions (fx, fy), in 1/32 pixel (whole pixels for "nearest")."""
    if interp == "nearest":
        return pixel_ref(img, fy, fx, border, bval)
    start, wx = taps_ref(interp, (fx % 32) / 32)
    _, wy = taps_ref(interp, (fy % 32) / 32)
    rows = [fy // 32 + start + i for i in range(len(wy))]
    cols = [fx // 32 + start + j for j in range(len(wx))]
    if border == "constant" and (all(not 0 <= r < img.shape[0] for r in rows)
                                 or all(not 0 <= c < img.shape[1] for c in cols)):
        return np.full(img.shape[2], bval)
    return sum(pixel_ref(img, r, c, border, bval) * a * b
               for r, a in zip(rows, wy) for c, b in zip(cols, wx))


def remap_ref(x, map_xy, border="replicate", bval=0.0, interp="linear"):
    out = np.zeros((x.shape[0], x.shape[1], *map_xy.shape[1:3]))
    for n in range(x.shape[0]):
        img = x[n].transpose(1, 2, 0)
        for i, j in np.ndindex(*map_xy.shape[1:3]):
            px, py = map_xy[n, i, j]
            out[n, :, i, j] = (pixel_ref(img, round(py), round(px), border, bval)
                               if interp == "nearest" else bilinear_ref(img, px, py, border, bval))
    return out


def warp_ref(x, mat, out_shape, mat_idx=None, border="replicate", bval=0.0, fmt="NCHW",
             interp="linear", affine=False):
    """warp_perspective (or warp_affine) by the rules: exact positions for NCHW and wide NHWC,
    1/32-pixel positions (1/1024 first for affine) for NHWC of 1 to 3 channels."""
    imgs = x if fmt == "NHWC" else x.transpose(0, 2, 3, 1)
    fixed = fmt == "NHWC" and imgs.shape[3] <= 3
    out = np.zeros((len(mat), *out_shape, imgs.shape[3]))
    for k, m in enumerate(mat.astype(np.float64)):
        img = imgs[k if mat_idx is None else mat_idx[k]]
        for y, x_ in np.ndindex(*out_shape):
            num = m @ [x_, y, 1]
            if not fixed:
                px, py = (num[:2] if affine else num[:2] / num[2])
                v = bilinear_ref(img, px, py, border, bval)
                out[k, y, x_] = v if np.isfinite(v).all() or border != "constant" else bval
                continue
            if affine:  # m0 x and m1 y + m2 in 1/1024 pixel, then cut to 1/32
                half, shift = (512, 10) if interp == "nearest" else (16, 5)
                fx, fy = ((round(m[i, 0] * x_ * 1024) + round((m[i, 1] * y + m[i, 2]) * 1024)
                           + half) >> shift for i in (0, 1))
            else:
                scale = 1 if interp == "nearest" else 32
                fx, fy = (round(num[i] * scale / num[2]) for i in (0, 1))
            out[k, y, x_] = fixed_ref(img, fx, fy, interp, border, bval)
    return out if fmt == "NHWC" else out.transpose(0, 3, 1, 2)


def correlation_ref(a, b, k=1, md=1, s1=1, s2=1, pad=0, multiply=True):
    n, c, h, w = a.shape
    r, border = k // 2, md + k // 2
    pa, pb = (np.pad(t, ((0, 0), (0, 0), (pad, pad), (pad, pad))) for t in (a, b))
    oh, ow = (-(-(size + 2 * pad - 2 * border) // s1) for size in (h, w))
    grid = md // s2
    shifts = [(dy * s2, dx * s2) for dy in range(-grid, grid + 1) for dx in range(-grid, grid + 1)]
    out = np.zeros((n, len(shifts), oh, ow))
    for ch, (dy, dx) in enumerate(shifts):
        for y, x in np.ndindex(oh, ow):
            cy, cx = y * s1 + border, x * s1 + border
            p1 = pa[:, :, cy - r:cy + r + 1, cx - r:cx + r + 1]
            p2 = pb[:, :, cy + dy - r:cy + dy + r + 1, cx + dx - r:cx + dx + r + 1]
            out[:, ch, y, x] = (p1 * p2 if multiply else abs(p1 - p2)).mean((1, 2, 3))
    return out


def cvt_ref(x, mode):
    """BT.601's luma; YUV with OpenCV's float coefficients, chroma centred on 0.5."""
    luma = np.array([0.299, 0.587, 0.114])
    if mode == "RGB2YUV":
        to_yuv = np.stack([luma, 0.492 * (np.eye(3)[2] - luma), 0.877 * (np.eye(3)[0] - luma)])
        return x @ to_yuv.T + [0, 0.5, 0.5]
    if mode == "YUV2RGB":
        to_rgb = np.array([[1, 0, 1.140], [1, -0.395, -0.581], [1, 2.032, 0]])
        return (x - [0, 0.5, 0.5]) @ to_rgb.T
    return {"RGB2GRAY": lambda: x @ luma[:, None], "BGR2GRAY": lambda: x @ luma[::-1, None],
            "RGBA2GRAY": lambda: x[..., :3] @ luma[:, None],
            "GRAY2RGB": lambda: np.repeat(x, 3, -1), "RGB2BGR": lambda: x[..., ::-1],
            "BGR2RGB": lambda: x[..., ::-1], "RGBA2RGB": lambda: x[..., :3],
            "RGBA2BGR": lambda: x[..., 2::-1]}[mode]()


def perspective(rng, n, extent, spread=0.3):
    """n matrices mapping an output to about an input of `extent` pixels, some past its edges."""
    m = np.eye(3) + rng.uniform(-spread, spread, (n, 3, 3)) * [[1, 1, extent]] * 3
    m[:, 2] = [*rng.uniform(-0.02, 0.02, (2,)), 1.0]
    return m.astype(F32)


# ----- the border rules ---------------------------------------------------------------------------
def test_border_rules_match_the_mirroring_loop():
    from eager.core.ops.warp import border_index

    p = np.arange(-23, 24, dtype=np.int32)
    for n in (1, 2, 3, 5):
        for border in BORDERS:
            index, inside = border_index(p, n, border)
            want = [border_ref(int(v), n, border) for v in p]
            got = np.where(inside, index, -1) if inside is not None else np.asarray(index)
            assert got.tolist() == [-1 if w is None else w for w in want], (n, border)


# ----- remap --------------------------------------------------------------------------------------
@pytest.mark.parametrize("border", ["reflect", "wrap", "constant"])  # all five: the shapes test
def test_remap_linear(rng, border):
    x, xy = normal(rng, 2, 3, 5, 6), rng.uniform(-4, 9, (2, 4, 3, 2)).astype(F32)
    check_fn(lambda x, xy: F.remap(x, xy, border, 1.5),
             lambda x, xy: remap_ref(x, xy, border, 1.5), [x, xy])


def test_remap_nearest_rounds_halves_to_even(rng):
    x = normal(rng, 1, 2, 4, 5)
    xy = np.array([[[[0.5, 1.5], [2.5, 0.5], [-0.5, 2.5]], [[1.49, 2.51], [4.5, 3.5],
                                                              [7.2, -1.7]]]], F32)
    for border in ("reflect", "constant"):
        check_fn(lambda x, border=border: F.remap(x, xy, border, -2.0, "nearest"),
                 lambda x, border=border: remap_ref(x, xy, border, -2.0, "nearest"), [x])


@FAST
@given(n=st.integers(1, 2), c=st.integers(1, 3), h=st.integers(1, 6), w=st.integers(1, 6),
       out=st.tuples(st.integers(1, 4), st.integers(1, 4)), border=st.sampled_from(BORDERS),
       seed=st.integers(0, 2**16))
def test_remap_shapes(n, c, h, w, out, border, seed):
    rng = np.random.default_rng(seed)
    x, xy = normal(rng, n, c, h, w), rng.uniform(-3, max(h, w) + 2, (n, *out, 2)).astype(F32)
    check_fn(lambda x, xy: F.vision.remap(x, xy, border, 0.5),
             lambda x, xy: remap_ref(x, xy, border, 0.5), [x, xy])


# ----- warp_perspective and warp_affine: the exact sampler ----------------------------------------
@pytest.mark.parametrize("border", ["reflect_101", "constant"])  # all five: the shapes test
def test_warp_perspective(rng, border):
    x, mat = normal(rng, 2, 3, 6, 7), perspective(rng, 2, 6)
    check_fn(lambda x, m: F.warp_perspective(x, m, (5, 8), border_mode=border, border_val=2.0),
             lambda x, m: warp_ref(x, m, (5, 8), border=border, bval=2.0), [x, mat],
             grad_rtol=1e-3)


def test_warp_perspective_mat_idx_and_wide_nhwc(rng):
    """Several matrices on one image (its gradient sums theirs); NHWC with more than 3
    channels is sampled exactly too."""
    x, mat, idx = normal(rng, 2, 5, 6, 4), perspective(rng, 3, 5), [1, 1, 0]
    check_fn(lambda x, m: F.warp_perspective(x, m, (4, 6), mat_idx=idx, format="NHWC"),
             lambda x, m: warp_ref(x, m, (4, 6), idx, fmt="NHWC"), [x, mat], grad_rtol=1e-3)


def test_warp_perspective_at_infinity_gives_the_border_value():
    x = np.ones((1, 1, 3, 3), F32)
    mat = np.array([[[1, 0, 0], [0, 1, 0], [0, 0, 0]]], F32)  # every position at infinity
    got = F.warp_perspective(x, mat, (2, 2), border_mode="constant", border_val=7.0)
    assert got.numpy().tolist() == [[[[7.0, 7.0], [7.0, 7.0]]]]


@pytest.mark.parametrize("border", ["reflect", "constant"])
def test_warp_affine_nchw(rng, border):
    x, mat = normal(rng, 2, 2, 5, 6), perspective(rng, 2, 5)[:, :2]
    check_fn(lambda x, m: F.warp_affine(x, m, (4, 7), border, 1.0, "NCHW"),
             lambda x, m: warp_ref(x, m, (4, 7), border=border, bval=1.0, affine=True),
             [x, mat], grad_rtol=1e-3)


@FAST
@given(n=st.integers(1, 2), c=st.integers(1, 2), h=st.integers(1, 6), w=st.integers(1, 6),
       out=st.tuples(st.integers(1, 4), st.integers(1, 4)), border=st.sampled_from(BORDERS),
       seed=st.integers(0, 2**16))
def test_warp_perspective_shapes(n, c, h, w, out, border, seed):
    rng = np.random.default_rng(seed)
    x, mat = normal(rng, n, c, h, w), perspective(rng, n, max(h, w))
    check_fn(lambda x, m: F.warp_perspective(x, m, out, border_mode=border, border_val=-1.0),
             lambda x, m: warp_ref(x, m, out, border=border, bval=-1.0), [x, mat],
             grad_rtol=1e-3)


# ----- warp_perspective and warp_affine: the fixed-point sampler ----------------------------------
@pytest.mark.parametrize("interp, channels, border", [
    ("nearest", 1, "reflect_101"), ("linear", 3, "constant"), ("cubic", 2, "wrap"),
    ("lanczos4", 3, "reflect")])
def test_fixed_point_sampler(rng, interp, channels, border):
    """NHWC of 1 to 3 channels: positions in 1/32 pixel, the image's gradient through the
    weights (the positions, rounded, carry none)."""
    x, mat = normal(rng, 2, 7, 6, channels), perspective(rng, 2, 6)
    check_fn(lambda x: F.warp_perspective(x, mat, (4, 5), border_mode=border, border_val=3.0,
                                          format="NHWC", interp_mode=interp),
             lambda x: warp_ref(x, mat, (4, 5), border=border, bval=3.0, fmt="NHWC",
                                interp=interp), [x])
    got = F.warp_affine(x, mat[:, :2], (4, 5), border, 3.0, interp_mode=interp)
    want = warp_ref(x, mat[:, :2], (4, 5), border=border, bval=3.0, fmt="NHWC", interp=interp,
                    affine=True)
    assert_close(got, want, 1e-5, 1e-5, "warp_affine")


def test_fixed_point_positions_are_rounded_as_in_double():
    """1.1 * 2 + 0.3 is 2.5 - 2e-8 in float32 but 2.5 + 3e-8 in double (float32 entries,
    double arithmetic: MegEngine's), so the nearest pixel is row 3, not 2."""
    x = np.arange(5 * 5, dtype=F32).reshape(1, 5, 5, 1)
    mat = np.array([[[1, 0, 0], [0, 1.1, 0.3], [0, 0, 1]]], F32)
    assert float(F32(1.1) * 2 + F32(0.3)) == 2.5
    got = F.warp_perspective(x, mat, (3, 1), format="NHWC", interp_mode="nearest")
    assert got.numpy().ravel().tolist() == [0.0, 5.0, 15.0]  # rows 0, round(1.4), round(2.5+)
    affine = F.warp_affine(x, mat[:, :2], (3, 1), interp_mode="nearest")
    assert affine.numpy().ravel().tolist() == [0.0, 5.0, 15.0]


# ----- cvt_color and correlation ------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["RGB2GRAY", "BGR2GRAY", "RGBA2GRAY", "GRAY2RGB", "RGB2BGR",
                                  "BGR2RGB", "RGBA2RGB", "RGBA2BGR", "RGB2YUV", "YUV2RGB"])
def test_cvt_color(rng, mode):
    channels = {"GRAY2RGB": 1}.get(mode, 4 if mode.startswith("RGBA") else 3)
    x = rng.random((2, 3, 4, channels)).astype(F32)
    check_fn(lambda x: F.cvt_color(x, mode.lower()), lambda x: cvt_ref(x, mode), [x])


def test_yuv_round_trip(rng):
    x = rng.random((1, 4, 4, 3)).astype(F32)
    back = F.cvt_color(F.cvt_color(x, "RGB2YUV"), "YUV2RGB")
    assert_close(back, x, 1e-3, 1e-3, "RGB -> YUV -> RGB")  # the coefficients are rounded


@pytest.mark.parametrize("k, md, s1, s2, pad, multiply", [
    (1, 1, 1, 1, 0, True), (3, 2, 1, 1, 2, False), (3, 4, 2, 2, 4, True)])
def test_correlation(rng, k, md, s1, s2, pad, multiply):
    a, b = normal(rng, 2, 3, 7, 8), normal(rng, 2, 3, 7, 8)
    check_fn(lambda a, b: F.correlation(a, b, k, md, s1, s2, pad, multiply),
             lambda a, b: correlation_ref(a, b, k, md, s1, s2, pad, multiply), [a, b])


@FAST
@given(c=st.integers(1, 3), h=st.integers(3, 8), w=st.integers(3, 8), k=st.sampled_from([1, 3]),
       md=st.integers(0, 2), s1=st.integers(1, 2), s2=st.integers(1, 2), pad=st.integers(0, 3),
       multiply=st.booleans(), seed=st.integers(0, 2**16))
def test_correlation_shapes(c, h, w, k, md, s1, s2, pad, multiply, seed):
    if min(h, w) + 2 * pad - 2 * (md + k // 2) < 1:
        return
    rng = np.random.default_rng(seed)
    a, b = normal(rng, 1, c, h, w), normal(rng, 1, c, h, w)
    check_fn(lambda a, b: F.correlation(a, b, k, md, s1, s2, pad, multiply),
             lambda a, b: correlation_ref(a, b, k, md, s1, s2, pad, multiply), [a, b])


# ----- MegEngine's forms, dtypes and regions ------------------------------------------------------
def test_megengine_namespaces_and_argument_forms(rng):
    for name in ("remap", "warp_affine", "warp_perspective", "cvt_color", "correlation"):
        assert getattr(F.vision, name) is getattr(F.nn, name) is getattr(F, name)
    x, mat = normal(rng, 1, 2, 4, 4), perspective(rng, 1, 4)
    want = warp_ref(x, mat, (3, 3), border="constant")
    for shape in (3, [3, 3], eg.tensor(np.array([3, 3], np.int32))):
        got = F.warp_perspective(eg.tensor(x), eg.tensor(mat.astype(np.float64)), shape,
                                 mat_idx=eg.tensor(np.array([0])), border_mode="CONSTANT",
                                 format="nchw", interp_mode="Linear")
        assert_close(got, want, 1e-5, 1e-5, f"out_shape={shape!r}")


def test_dtypes_follow_megengine(rng):
    """warp_perspective computes float16 in float32 and returns it; the others keep it."""
    x16, mat = normal(rng, 1, 2, 4, 4).astype(np.float16), perspective(rng, 1, 4)
    assert F.warp_perspective(x16, mat, (3, 3)).dtype == np.float32
    assert F.warp_affine(x16, mat[:, :2], (3, 3), format="NCHW").dtype == np.float16
    assert F.remap(x16, np.zeros((1, 2, 2, 2), F32)).dtype == np.float16
    assert F.correlation(x16, x16).dtype == np.float16
    assert F.cvt_color(x16.transpose(0, 2, 3, 1)[..., :1], "GRAY2RGB").dtype == np.float16


def test_in_partial_trace_equals_eager(rng):
    """The exact sampler, the fixed-point one (its double-float positions) and correlation's
    loop over displacements, compiled in one region: values and gradients as eager."""
    x0, mat, w = normal(rng, 2, 3, 6, 7), perspective(rng, 2, 6), eg.tensor(normal(rng, 2, 9, 3, 3))

    def body(x, m):
        warped = F.warp_perspective(x, m, (5, 5), border_mode="reflect")
        nhwc = F.warp_affine(warped.transpose(0, 2, 3, 1), m[:, :2], (4, 4), interp_mode="cubic")
        return (F.correlation(warped, warped) * w).sum() + (nhwc * nhwc).sum()

    runs = []
    traced = partial_trace(body)
    for fn in (body, traced, traced):  # eager, the capture, a replay
        x, m = eg.Parameter(x0), eg.Parameter(mat)
        gm = GradManager().attach([x, m])
        with gm:
            y = fn(x, m)
            gm.backward(y)
        runs.append((y.numpy(), x.grad.numpy(), m.grad.numpy()))
    for run in runs[1:]:
        for got, want in zip(run, runs[0]):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# ----- bad arguments ------------------------------------------------------------------------------
X, NHWC = np.zeros((2, 3, 4, 4), F32), np.zeros((2, 4, 4, 3), F32)
MAT, XY = np.tile(np.eye(3, dtype=F32), (2, 1, 1)), np.zeros((2, 3, 3, 2), F32)
BAD = [
    (lambda: F.remap(X[0], XY), eg.OpArgumentError, r"4-d NCHW image batch"),
    (lambda: F.remap(X.astype(np.int32), XY), eg.OpTypeError, "must be a float tensor"),
    (lambda: F.remap(X, XY[:1]), eg.OpArgumentError, r"map_xy must have shape \(2, OH, OW, 2\)"),
    (lambda: F.remap(X, XY, "isolated"), eg.OpArgumentError, "border_mode must be one of.*"
     "returns pixels it never wrote"),
    (lambda: F.remap(X, XY, interp_mode="cubic"), eg.OpArgumentError, "interp_mode must be"),
    (lambda: F.remap(X, XY, scalar="zero"), eg.OpTypeError, "scalar must be a number"),
    (lambda: F.warp_perspective(X, MAT[:, :2], (3, 3)), eg.OpArgumentError,
     r"mat must have shape \(2, 3, 3\)"),
    (lambda: F.warp_perspective(X, MAT, (3, 0)), eg.OpArgumentError, "out_shape must be"),
    (lambda: F.warp_perspective(X, MAT, (3, 3, 3)), eg.OpTypeError, "out_shape must be an int"),
    (lambda: F.warp_perspective(X, MAT, 3, mat_idx=[0, 2]), eg.OpIndexError,
     r"mat_idx entry 2 is out of range for a batch of 2 images"),
    (lambda: F.warp_perspective(X, MAT, 3, mat_idx=[0, 1, 1]), eg.OpArgumentError,
     r"mat must have shape \(3, 3, 3\), one 3 x 3 matrix per entry of mat_idx"),
    (lambda: F.warp_perspective(X, MAT, 3, mat_idx=[[0, 1]]), eg.OpTypeError,
     "mat_idx must be a 1-d sequence of ints"),
    (lambda: F.warp_perspective(X, MAT, 3, format="CHWN"), eg.OpArgumentError,
     "format must be one of 'NCHW', 'NHWC'"),
    (lambda: F.warp_perspective(X, MAT, 3, interp_mode="nearest"), eg.OpArgumentError,
     "bilinearly only; 'nearest' needs an NHWC image of 1 to 3 channels"),
    (lambda: F.warp_perspective(NHWC, MAT, 3, format="NHWC", interp_mode="area"),
     eg.OpArgumentError, "interp_mode must be one of 'linear', 'nearest', 'cubic'"),
    (lambda: F.warp_affine(NHWC, MAT, 3), eg.OpArgumentError, r"mat must have shape \(2, 2, 3\)"),
    (lambda: F.warp_affine(NHWC, MAT[:, :2], 3, border_val=None), eg.OpTypeError,
     "border_val must be a number"),
    (lambda: F.cvt_color(NHWC, "YUV2RGB_NV21"), eg.OpArgumentError, "uint8 images only"),
    (lambda: F.cvt_color(NHWC), eg.OpArgumentError, "mode must be one of RGB2GRAY"),
    (lambda: F.cvt_color(NHWC, "GRAY2RGB"), eg.OpArgumentError,
     "'GRAY2RGB' reads NHWC images of 1 channel"),
    (lambda: F.cvt_color(NHWC[0], "RGB2GRAY"), eg.OpArgumentError, "4-d NHWC image batch"),
    (lambda: F.correlation(X, X[:, :2]), eg.OpArgumentError, "must have one shape"),
    (lambda: F.correlation(X, X, kernel_size=2), eg.OpArgumentError, "positive odd int"),
    (lambda: F.correlation(X, X, stride1=0), eg.OpArgumentError, "stride1 and stride2 must"),
    (lambda: F.correlation(X, X, max_displacement=2), eg.OpArgumentError,
     "give no output with these attributes.*Raise pad_size"),
]


@pytest.mark.parametrize("call, error, match", BAD)
def test_bad_arguments_raise_named_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()
