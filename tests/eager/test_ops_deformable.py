"""The deformable ops (deformable_conv2d, deformable_psroi_pooling) against numpy references
written here from MegEngine 1.13's rules, one sample at a time: values, gradients (finite
differences of the reference in float64), hypothesis over small shapes, the compiled form in a
`partial_trace` region, the modules, and the errors bad arguments raise.

The parity cases (`tests/parity/cases_deformable.py`) compare with MegEngine itself.
"""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import eager as eg
import eager.functional as F
import eager.module as M
from eager.autodiff import GradManager
from partial import partial_trace
from tests.helpers import examples, normal

from .op_check import assert_close, check_fn

FAST = examples(3)
COVERED = {"deformable_conv2d", "deformable_psroi_pooling"}
F32 = np.float32


# ----- references ---------------------------------------------------------------------------------
def _bilinear_zero(img, y, x):
    """img (H, W) at (y, x): the four neighbours' weighted sum, a neighbour outside counting 0."""
    h, w = img.shape
    y0, x0 = math.floor(y), math.floor(x)
    total = 0.0
    for dy, wy in ((0, 1 - (y - y0)), (1, y - y0)):
        for dx, wx in ((0, 1 - (x - x0)), (1, x - x0)):
            if 0 <= y0 + dy < h and 0 <= x0 + dx < w:
                total += wy * wx * img[y0 + dy, x0 + dx]
    return total


def out_size(n, k, s, p, d):
    return (n + 2 * p - d * (k - 1) - 1) // s + 1


def deformable_conv_ref(x, weight, offset, mask, bias=None, stride=(1, 1), padding=(0, 0),
                        dilation=(1, 1), groups=1):
    """Output (n, o, i, j) sums, over the channels of o's group and the taps (a, b), the weight
    times the mask times the input sampled at the tap's place plus its offset."""
    n, c, h, w = x.shape
    o, cg, kh, kw = weight.shape
    oh, ow = offset.shape[2:]
    dg = mask.shape[1] // (kh * kw)
    y = np.zeros((n, o, oh, ow))
    for b in range(n):
        for ch in range(c):
            g, d = ch // cg, ch // (c // dg)
            for a in range(kh):
                for t in range(kw):
                    k = a * kw + t
                    for i in range(oh):
                        for j in range(ow):
                            py = i * stride[0] - padding[0] + a * dilation[0]
                            px = j * stride[1] - padding[1] + t * dilation[1]
                            py += offset[b, d * 2 * kh * kw + 2 * k, i, j]
                            px += offset[b, d * 2 * kh * kw + 2 * k + 1, i, j]
                            v = _bilinear_zero(x[b, ch], py, px) * mask[b, d * kh * kw + k, i, j]
                            for oc in range(g * (o // groups), (g + 1) * (o // groups)):
                                y[b, oc, i, j] += weight[oc, ch - g * cg, a, t] * v
    return y if bias is None else y + np.reshape(bias, (1, o, 1, 1))


def _bilinear_clamped(img, y, x):
    """img (H, W) at (y, x) inside it, between the floor and the ceil of each coordinate."""
    y0, y1, x0, x1 = math.floor(y), math.ceil(y), math.floor(x), math.ceil(x)
    fy, fx = y - y0, x - x0
    return ((1 - fy) * (1 - fx) * img[y0, x0] + (1 - fy) * fx * img[y0, x1]
            + fy * (1 - fx) * img[y1, x0] + fy * fx * img[y1, x1])


def psroi_ref(x, rois, trans, no_trans, part, ph, pw, samples, scale, trans_std):
    """Each bin of each RoI: the mean of its samples x samples points (shifted by the bin's
    part of `trans`) that lie within half a pixel of the image, clamped into it."""
    _, c, h, w = x.shape
    y = np.zeros((len(rois), c, ph, pw))
    for k, roi in enumerate(rois):
        x0, y0, x1, y1 = (math.copysign(math.floor(abs(float(v)) + 0.5), float(v))
                          for v in roi[1:])
        left, top = x0 * scale - 0.5, y0 * scale - 0.5
        width = max((x1 + 1) * scale - 0.5 - left, 0.1)
        height = max((y1 + 1) * scale - 0.5 - top, 0.1)
        for i in range(ph):
            for j in range(pw):
                dx = dy = 0.0
                if not no_trans:
                    pi, pj = math.floor(i / ph * part), math.floor(j / pw * part)
                    dx, dy = trans[k, 0, pi, pj] * trans_std, trans[k, 1, pi, pj] * trans_std
                points = [(top + (i + (si / samples)) * height / ph + dy * height,
                           left + (j + (sj / samples)) * width / pw + dx * width)
                          for si in range(samples) for sj in range(samples)]
                inside = [(min(max(py, 0), h - 1), min(max(px, 0), w - 1)) for py, px in points
                          if -0.5 <= py <= h - 0.5 and -0.5 <= px <= w - 0.5]
                for ch in range(c):
                    vals = [_bilinear_clamped(x[int(roi[0]), ch], py, px) for py, px in inside]
                    y[k, ch, i, j] = np.mean(vals) if vals else 0.0
    return y


# ----- inputs -------------------------------------------------------------------------------------
def conv_inputs(rng, n, c, h, w, o, kernel, stride=(1, 1), padding=(0, 0), dilation=(1, 1),
                groups=1, dg=1, spread=1.5):
    """x, weight, offset (some samples past the edges) and mask for one configuration."""
    kh, kw = kernel
    oh = out_size(h, kh, stride[0], padding[0], dilation[0])
    ow = out_size(w, kw, stride[1], padding[1], dilation[1])
    return (normal(rng, n, c, h, w), normal(rng, o, c // groups, kh, kw),
            normal(rng, n, 2 * dg * kh * kw, oh, ow, scale=spread),
            rng.uniform(0, 1, (n, dg * kh * kw, oh, ow)).astype(F32))


def random_rois(rng, k, n, extent, reach=6.0):
    corner = rng.uniform(-2, extent + 1, (k, 2))
    size = rng.uniform(-1, reach, (k, 2))
    index = rng.integers(0, n, (k, 1))
    return np.concatenate([index, corner, corner + size], 1).astype(F32)


# ----- deformable_conv2d --------------------------------------------------------------------------
@pytest.mark.parametrize("attrs", [{}, dict(stride=2, padding=1), dict(dilation=(2, 1), groups=2),
                                   dict(padding=(2, 0), groups=2)])
def test_zero_offsets_and_unit_mask_give_conv2d(rng, attrs):
    x, w, offset, mask = conv_inputs(rng, 2, 4, 6, 7, 4, (3, 2), **{
        k: (v, v) if isinstance(v, int) and k != "groups" else v for k, v in attrs.items()})
    got = F.deformable_conv2d(x, w, np.zeros_like(offset), np.ones_like(mask), **attrs)
    assert_close(got, F.conv2d(x, w, **attrs), 1e-5, 1e-5, "conv2d")


def test_deformable_conv2d(rng):
    x, w, offset, mask = conv_inputs(rng, 2, 4, 5, 6, 4, (3, 2), (2, 1), (1, 1), (1, 2), 2, 2)
    bias = normal(rng, 1, 4, 1, 1)
    attrs = dict(stride=(2, 1), padding=1, dilation=(1, 2), groups=2)
    check_fn(lambda *a: F.deformable_conv2d(*a, **attrs),
             lambda *a: deformable_conv_ref(*a, (2, 1), (1, 1), (1, 2), 2),
             [x, w, offset, mask, bias])


@FAST
@given(n=st.integers(1, 2), cg=st.integers(1, 2), og=st.integers(1, 2), groups=st.integers(1, 2),
       dg=st.integers(1, 2), h=st.integers(1, 5), w=st.integers(1, 5),
       kernel=st.tuples(st.integers(1, 3), st.integers(1, 3)),
       stride=st.tuples(st.integers(1, 2), st.integers(1, 2)),
       padding=st.tuples(st.integers(0, 1), st.integers(0, 1)),
       dilation=st.tuples(st.integers(1, 2), st.integers(1, 2)), seed=st.integers(0, 2**16))
def test_deformable_conv2d_shapes(n, cg, og, groups, dg, h, w, kernel, stride, padding, dilation,
                                  seed):
    c, o = cg * groups * dg, og * groups
    if min(out_size(h, kernel[0], stride[0], padding[0], dilation[0]),
           out_size(w, kernel[1], stride[1], padding[1], dilation[1])) < 1:
        return
    rng = np.random.default_rng(seed)
    inputs = conv_inputs(rng, n, c, h, w, o, kernel, stride, padding, dilation, groups, dg)
    attrs = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    check_fn(lambda *a: F.deformable_conv2d(*a, **attrs),
             lambda *a: deformable_conv_ref(*a, None, stride, padding, dilation, groups),
             list(inputs))


def test_far_and_nan_offsets_sample_zero_with_finite_gradients(rng):
    """Points outside (-1, H) x (-1, W), however far, and NaN offsets sample 0, as in
    MegEngine; nothing NaN reaches the other gradients."""
    x, w, offset, mask = conv_inputs(rng, 1, 2, 4, 4, 3, (2, 2))
    offset[0, 0, 0, 0], offset[0, 3, 1, 1], offset[0, 4, 2, 2] = 1e30, -7.0, np.nan
    clean = offset.copy()
    clean[0, 0, 0, 0], clean[0, 4, 2, 2] = 1e3, -1e3
    params = [eg.Parameter(a) for a in (x, w, offset, mask)]
    gm = GradManager().attach(params)
    with gm:
        y = F.deformable_conv2d(*params)
        gm.backward(y.sum())
    assert_close(y, deformable_conv_ref(x, w, clean, mask), 1e-5, 1e-5, "value")
    for p in params:
        assert np.isfinite(p.grad.numpy()).all()
    assert params[2].grad.numpy()[0, 0, 0, 0] == 0 and params[2].grad.numpy()[0, 4, 2, 2] == 0


def test_deformable_conv2d_takes_megengine_argument_forms(rng):
    x, w, offset, mask = conv_inputs(rng, 1, 4, 5, 5, 6, (3, 3), groups=2)
    want = deformable_conv_ref(x, w, offset, mask, groups=2)
    half = offset.astype(np.float16)
    got = F.nn.deformable_conv2d(x, w.reshape(2, 3, 2, 3, 3), half, mask, None, 1, 0, 1, 2,
                                 "CROSS_CORRELATION", "float32")
    assert_close(got, deformable_conv_ref(x, w, half.astype(F32), mask, groups=2), 1e-5, 1e-5,
                 "5-d weight, float16 offsets")
    bias = normal(rng, 6)
    assert_close(F.deformable_conv2d(x.astype(np.float16), w, offset, mask, bias, groups=2),
                 want + bias.reshape(1, 6, 1, 1), 1e-2, 1e-2, "float16 input, (O,) bias")
    assert F.deformable_conv2d(x.astype(np.float16), w, offset, mask, groups=2).dtype == F32


def test_empty_batches_and_roi_lists():
    """(MegEngine refuses both.)"""
    x = eg.Parameter(np.ones((0, 4, 5, 5), F32))
    rois, trans = np.zeros((0, 5), F32), eg.Parameter(np.zeros((0, 2, 2, 2), F32))
    gm = GradManager().attach([x, trans])
    with gm:
        y = F.deformable_conv2d(x, W, OFF[:0], MASK[:0])
        z = F.deformable_psroi_pooling(X, rois, trans, False, 2, 2, 2, 2, 1.0)
        gm.backward([y.sum(), z.sum()])
    assert y.shape == (0, 6, 3, 3) and z.shape == (0, 4, 2, 2)
    assert x.grad.shape == x.shape and trans.grad.shape == trans.shape


def test_deformable_conv2d_in_partial_trace_equals_eager(rng):
    arrays = conv_inputs(rng, 2, 4, 6, 6, 4, (3, 3), padding=(1, 1), groups=2, dg=2)

    def body(*a):
        return F.deformable_conv2d(*a, padding=1, groups=2) * 2

    _compare_eager_and_traced(body, arrays, rng)


def _compare_eager_and_traced(body, arrays, rng, attach=None):
    """Outputs and gradients of `body` eager, at its capture and at a replay: equal."""
    attach = range(len(arrays)) if attach is None else attach
    runs = []
    traced = partial_trace(body)
    cotangent = None
    for fn in (body, traced, traced):  # eager, the capture, a replay
        params = [eg.Parameter(a) if i in attach else eg.tensor(a) for i, a in enumerate(arrays)]
        gm = GradManager().attach([params[i] for i in attach])
        with gm:
            y = fn(*params)
            if cotangent is None:
                cotangent = eg.tensor(normal(rng, *y.shape))
            gm.backward((y * cotangent).sum())
        runs.append([y.numpy(), *(params[i].grad.numpy() for i in attach)])
    for run in runs[1:]:
        for got, want in zip(run, runs[0]):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# ----- deformable_psroi_pooling -------------------------------------------------------------------
PS_ROIS = np.array([[0, 1.2, 0.6, 5.5, 4.4], [1, -1, 2, 9, 8], [1, 3, 3, 3, 3],
                    [0, 2.5, 1.5, 6.5, 5.5], [1, 6, 5, 2, 1]], F32)


def test_deformable_psroi_pooling(rng):
    x, trans = normal(rng, 2, 3, 7, 8), normal(rng, 5, 2, 3, 4)
    args = (False, 2, 3, 4, 3, 0.8, 0.3)
    check_fn(lambda x, t: F.deformable_psroi_pooling(x, PS_ROIS, t, *args),
             lambda x, t: psroi_ref(x, PS_ROIS, t, *args), [x, trans])


@FAST
@given(n=st.integers(1, 2), c=st.integers(1, 2), h=st.integers(1, 6), w=st.integers(1, 6),
       k=st.integers(0, 3), ph=st.integers(1, 3), pw=st.integers(1, 3), part=st.integers(1, 3),
       samples=st.integers(1, 3), scale=st.sampled_from([1.0, 0.5]),
       no_trans=st.booleans(), seed=st.integers(0, 2**16))
def test_deformable_psroi_pooling_shapes(n, c, h, w, k, ph, pw, part, samples, scale, no_trans,
                                         seed):
    rng = np.random.default_rng(seed)
    part = min(part, ph, pw)
    x, trans = normal(rng, n, c, h, w), normal(rng, k, 2, ph, pw)
    rois = random_rois(rng, k, n, max(h, w) / scale)
    args = (no_trans, part, ph, pw, samples, scale, 0.2)
    if no_trans:  # trans gets no gradient
        check_fn(lambda x: F.deformable_psroi_pooling(x, rois, trans, *args),
                 lambda x: psroi_ref(x, rois, trans, *args), [x])
    else:
        check_fn(lambda x, t: F.deformable_psroi_pooling(x, rois, t, *args),
                 lambda x, t: psroi_ref(x, rois, t, *args), [x, trans])


def test_psroi_offsets_at_whole_pixels_get_megengine_gradient():
    """A sample at a whole pixel is interpolated between its floor and its ceil, the same
    pixel: its offset's gradient along that axis is 0 (MegEngine's backward), though the
    value changes on either side. Here every sample lies on whole pixels."""
    x = np.arange(36, dtype=F32).reshape(1, 1, 6, 6) ** 2
    rois = np.array([[0, 3, 3, 6, 6]], F32)  # scaled by 0.5: from 1.0, 2 pixels wide
    trans = eg.Parameter(np.zeros((1, 2, 1, 1), F32))
    gm = GradManager().attach([trans])
    with gm:
        gm.backward(F.deformable_psroi_pooling(x, rois, trans, False, 1, 1, 1, 2, 0.5, 0.25)
                    .sum())
    assert trans.grad.numpy().tolist() == [[[[0.0]], [[0.0]]]]


def test_no_trans_gives_trans_no_gradient(rng):
    x, trans = eg.Parameter(normal(rng, 1, 2, 5, 5)), eg.Parameter(normal(rng, 7, 1, 1, 1))
    gm = GradManager().attach([x, trans])
    with gm:
        gm.backward(F.deformable_psroi_pooling(x, PS_ROIS[:2] * 0, trans, True, 2, 2, 2, 2,
                                               1.0).sum())
    assert x.grad is not None and trans.grad is None


def test_deformable_psroi_pooling_in_partial_trace_equals_eager(rng):
    x, trans = normal(rng, 2, 3, 8, 9), normal(rng, 5, 2, 3, 3)

    def body(x, rois, trans):
        return F.deformable_psroi_pooling(x, rois, trans, False, 3, 3, 3, 2, 0.9) * 2

    _compare_eager_and_traced(body, (x, PS_ROIS, trans), rng, attach=(0, 2))


# ----- modules ------------------------------------------------------------------------------------
def test_deformable_conv2d_module(rng):
    m = M.DeformableConv2d(4, 6, (3, 2), stride=2, padding=1, groups=2)
    assert m.weight.shape == (2, 3, 2, 3, 2) and m.bias.shape == (1, 6, 1, 1)
    assert not m.bias.numpy().any()
    x, _, offset, mask = conv_inputs(rng, 2, 4, 6, 6, 6, (3, 2), (2, 2), (1, 1))
    want = deformable_conv_ref(x, m.weight.numpy().reshape(6, 2, 3, 2), offset, mask,
                               stride=(2, 2), padding=(1, 1), groups=2)
    assert_close(m(eg.tensor(x), eg.tensor(offset), eg.tensor(mask)), want, 1e-5, 1e-5, "y")
    assert M.DeformableConv2d(2, 3, 1, bias=False).bias is None


def test_deformable_conv2d_init_is_megengine_normal():
    """N(0, 1 / (in_channels * kh * kw)), all input channels counted even when grouped.
    (Many small layers of the module test's shape: nothing new to compile.)"""
    w = np.stack([M.DeformableConv2d(4, 6, (3, 2), groups=2).weight.numpy() for _ in range(80)])
    std = (4 * 3 * 2) ** -0.5
    assert abs(w.std() / std - 1) < 0.05 and abs(w.mean()) < 0.05 * std
    assert np.abs(w).max() > 2.5 * std  # tails past a uniform's bound


def test_deformable_psroi_pooling_module(rng):
    m = M.DeformablePSROIPooling(False, 2, 3, 4, 2, 0.5, trans_std=0.2)
    assert not list(m.parameters())
    x, trans = normal(rng, 2, 2, 6, 6), normal(rng, 5, 2, 3, 4)
    want = psroi_ref(x, PS_ROIS, trans, False, 2, 3, 4, 2, 0.5, 0.2)
    assert_close(m(x, PS_ROIS, trans), want, 1e-5, 1e-5, "y")


def test_megengine_namespaces():
    from eager.module.conv import DeformableConv2d
    from eager.module.deformable_psroi_pooling import DeformablePSROIPooling

    assert DeformableConv2d is M.DeformableConv2d
    assert DeformablePSROIPooling is M.DeformablePSROIPooling
    for name in ("deformable_conv2d", "deformable_psroi_pooling"):
        assert getattr(F.nn, name) is getattr(F, name)


# ----- bad arguments ------------------------------------------------------------------------------
X, W = np.zeros((1, 4, 5, 5), F32), np.zeros((6, 4, 3, 3), F32)
OFF, MASK = np.zeros((1, 18, 3, 3), F32), np.ones((1, 9, 3, 3), F32)
TRANS = np.zeros((5, 2, 3, 3), F32)


def _psroi(**kw):
    args = dict(inp=X, rois=PS_ROIS, trans=TRANS, no_trans=False, part_size=3, pooled_h=3,
                pooled_w=3, sample_per_part=2, spatial_scale=1.0)
    return F.deformable_psroi_pooling(**{**args, **kw})


BAD = [
    (lambda: F.deformable_conv2d(X[0], W, OFF, MASK), eg.OpArgumentError, r"NCHW \(4-d\)"),
    (lambda: F.deformable_conv2d(X.astype(np.int32), W, OFF, MASK), eg.OpTypeError,
     "must be a float"),
    (lambda: F.deformable_conv2d(X, W[:, :3], OFF, MASK), eg.OpArgumentError, "has 4 channels"),
    (lambda: F.deformable_conv2d(X, W, OFF, MASK, groups=2), eg.OpArgumentError,
     "groups=2 needs 8"),
    (lambda: F.deformable_conv2d(X, W.reshape(2, 3, 4, 3, 3), OFF, MASK, groups=3),
     eg.OpArgumentError, "holds 2 groups"),
    (lambda: F.deformable_conv2d(X, W, OFF, MASK, stride=0), eg.OpArgumentError,
     "stride and dilation must be >= 1"),
    (lambda: F.deformable_conv2d(X, np.zeros((6, 4, 7, 7), F32), OFF, MASK),
     eg.OpArgumentError, "no output position"),
    (lambda: F.deformable_conv2d(X, W, OFF[:, :17], MASK), eg.OpArgumentError,
     r"offset and mask must have shapes"),
    (lambda: F.deformable_conv2d(X, W, OFF, MASK[:, :, :2]), eg.OpArgumentError,
     r"got \(1, 18, 3, 3\) and \(1, 9, 2, 3\)"),
    (lambda: F.deformable_conv2d(X, W, np.zeros((1, 54, 3, 3), F32),
                                 np.ones((1, 27, 3, 3), F32)), eg.OpArgumentError,
     "dividing the 4 input channels"),
    (lambda: F.deformable_conv2d(X, W, OFF, MASK.astype(bool)), eg.OpTypeError,
     "mask has dtype bool"),
    (lambda: F.deformable_conv2d(X, W, OFF, MASK, bias=np.zeros(5, F32)), eg.OpArgumentError,
     r"bias must have shape \(1, 6, 1, 1\)"),
    (lambda: F.deformable_conv2d(X, W, OFF, MASK, conv_mode="convolution"),
     eg.OpArgumentError, "conv_mode must be 'cross_correlation'"),
    (lambda: F.deformable_conv2d(X, W, OFF, MASK, compute_mode="fast"), eg.OpArgumentError,
     "compute_mode must be one of"),
    (lambda: _psroi(inp=X[0]), eg.OpArgumentError, r"NCHW \(4-d\) input"),
    (lambda: _psroi(rois=PS_ROIS[:, :4]), eg.OpArgumentError, r"rois must have shape \(K, 5\)"),
    (lambda: _psroi(inp=X.astype(np.int32)), eg.OpTypeError, "must be a float"),
    (lambda: _psroi(trans=TRANS[0]), eg.OpArgumentError, "trans must be 4-d"),
    (lambda: _psroi(trans=TRANS[:4]), eg.OpArgumentError, r"= \(5, 2, 3, 3\) for 5 RoIs"),
    (lambda: _psroi(part_size=4), eg.OpArgumentError, "part_size must be between 1 and"),
    (lambda: _psroi(part_size=0), eg.OpArgumentError, "part_size must be between 1 and"),
    (lambda: _psroi(sample_per_part=0), eg.OpArgumentError, "must be >= 1"),
    (lambda: _psroi(pooled_h=0, no_trans=True), eg.OpArgumentError, "must be >= 1"),
    (lambda: _psroi(pooled_w=(2, 2)), eg.OpTypeError, "pooled_w must be an int"),
    (lambda: _psroi(no_trans="no"), eg.OpTypeError, "no_trans must be True or False"),
    (lambda: _psroi(trans_std=None), eg.OpTypeError, "trans_std must be a number"),
]


@pytest.mark.parametrize("call, error, match", BAD)
def test_bad_arguments_raise_named_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()
