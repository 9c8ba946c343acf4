"""The int8 inference ops (`eager/core/ops/quantized.py`, through `eager.functional.quantized`)
and quantized tensors against an independent numpy integer reference: products summed in
int64 over explicit windows, the bias added, the accumulator times the float32 multiplier
rounded half away from zero, the activation, the zero point, saturation. Hypothesis draws the
shapes, strides, padding, dilation, groups and scales."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import eager as eg
import eager.functional as F
from eager.core.errors import OpTypeError
from eager.quantization.dtype import qint8, qint32, quint8
from partial import xla_trace
from tests.helpers import examples

COVERED = {"quantize", "dequantize", "requantize", "conv_bias_activation",
           "batch_conv_bias_activation", "quantized_conv_transpose2d", "quantized_linear"}


# ----- numpy references ------------------------------------------------------------------------
def _round(v):
    return np.sign(v) * np.floor(np.abs(v) + 0.5)  # half away from zero, MegEngine's


def _quant(x, scale):
    """MegEngine's quantization: x times the float32 reciprocal of the scale, rounded (measured
    against MegEngine 1.13: division rounds some ties the other way)."""
    return _round(np.asarray(x, np.float32) * (np.float32(1) / np.float32(scale)))


def _requant(acc, acc_scale, out_scale, relu=False, zp=0, lo=-128, hi=127):
    """MegEngine's requantization: dequantized, then quantized, each a float32 product."""
    v = (acc.astype(np.float32) * np.float32(acc_scale)) * (np.float32(1) /
                                                            np.float32(out_scale))
    q = _round(v)
    if relu:
        q = np.maximum(q, 0)
    return np.clip(q + zp, lo, hi).astype(np.int64)


def _conv_ref(x, w, stride, pad, dil, groups):
    """int64 cross-correlation over explicit windows; w (out, in/groups, kh, kw)."""
    x = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (pad[0], pad[0]), (pad[1], pad[1])))
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    ho = (h - dil[0] * (kh - 1) - 1) // stride[0] + 1
    wo = (wd - dil[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, o, ho, wo), np.int64)
    og = o // groups
    for i in range(ho):
        for j in range(wo):
            win = x[:, :, i * stride[0]:i * stride[0] + dil[0] * (kh - 1) + 1:dil[0],
                    j * stride[1]:j * stride[1] + dil[1] * (kw - 1) + 1:dil[1]]
            for g in range(groups):
                out[:, g * og:(g + 1) * og, i, j] = np.einsum(
                    "nchw,ochw->no", win[:, g * cg:(g + 1) * cg], w[g * og:(g + 1) * og])
    return out


def _ints(rng, shape, lo=-128, hi=127):
    return rng.integers(lo, hi + 1, shape).astype(np.int8)


def _q(storage, dtype):
    return eg.Parameter(np.asarray(storage).view(dtype))


def _storage(t):
    return t.numpy().view(np.dtype(t.numpy().dtype.str)).astype(np.int64)


# ----- quantize / dequantize / requantize ------------------------------------------------------
@given(scale=st.floats(1e-3, 2.0), seed=st.integers(0, 2 ** 16))
@examples(6)
def test_astype_rounds_half_away_and_saturates(scale, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(64) * 100).astype(np.float32)
    x[:4] = np.float32(scale) * np.float32([0.5, -0.5, 1.5, -2.5])  # ties
    q = eg.tensor(x).astype(qint8(scale))
    want = np.clip(_quant(x, scale), -128, 127)
    assert q.dtype.metadata["mgb_dtype"]["scale"] == scale
    np.testing.assert_array_equal(_storage(q), want)
    np.testing.assert_array_equal(q.astype("float32").numpy(),
                                  want.astype(np.float32) * np.float32(scale))
    u = eg.tensor(x).astype(quint8(scale, 100))
    np.testing.assert_array_equal(_storage(u), np.clip(_quant(x, scale) + 100, 0, 255))


def test_requantize_and_numpy_round_trip():
    x = eg.tensor(np.linspace(-3, 3, 25, dtype=np.float32))
    q = x.astype(qint8(0.05))
    r = q.astype(qint8(0.125))
    want = np.clip(_round(_storage(q) * np.float32(np.float32(0.05) / np.float32(0.125))),
                   -128, 127)
    np.testing.assert_array_equal(_storage(r), want)
    again = eg.tensor(q.numpy())  # the numpy array carries the quantized dtype
    assert again.dtype.metadata == q.dtype.metadata
    np.testing.assert_array_equal(_storage(again), _storage(q))


def test_ops_on_quantized_tensors_keep_or_refuse_the_dtype():
    q = eg.tensor(np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)).astype(qint8(0.5))
    for out in (q.reshape(1, 4, 4), q.transpose(0, 1, 3, 2), F.flatten(q, 1), q[:, :, 1:],
                F.concat([q, q], 1), F.max_pool2d(q, 2), F.avg_pool2d(q, 2)):
        assert out.dtype.metadata == q.dtype.metadata
    np.testing.assert_array_equal(F.avg_pool2d(q, 2).astype("float32").numpy(),
                                  F.avg_pool2d(q.astype("float32"), 2).numpy())
    with pytest.raises(OpTypeError, match="does not take quantized tensors"):
        q + q
    with pytest.raises(OpTypeError, match="different dtypes"):
        F.concat([q, q.astype(qint8(0.25))])


# ----- convolutions ------------------------------------------------------------------------------
@st.composite
def conv_cases(draw):
    groups = draw(st.sampled_from([1, 2, 3]))
    cin, cout = groups * draw(st.integers(1, 3)), groups * draw(st.integers(1, 3))
    k = draw(st.tuples(st.integers(1, 3), st.integers(1, 3)))
    stride = draw(st.tuples(st.integers(1, 2), st.integers(1, 2)))
    pad = draw(st.tuples(st.integers(0, 2), st.integers(0, 2)))
    dil = draw(st.tuples(st.integers(1, 2), st.integers(1, 2)))
    size = [draw(st.integers(d * (kk - 1) + 1, 7)) for d, kk in zip(dil, k)]
    scales = [draw(st.floats(1e-3, 0.5)) for _ in range(3)]
    return dict(groups=groups, cin=cin, cout=cout, k=k, stride=stride, pad=pad, dil=dil,
                size=size, scales=scales, relu=draw(st.booleans()), seed=draw(st.integers(0, 99)))


@given(case=conv_cases())
@examples(8)
def test_conv_bias_activation_against_numpy_integers(case):
    rng = np.random.default_rng(case["seed"])
    g, (si, sw, so) = case["groups"], case["scales"]
    x = _ints(rng, (2, case["cin"], *case["size"]))
    w = _ints(rng, (case["cout"], case["cin"] // g, *case["k"]), -127, 127)
    b = rng.integers(-5000, 5000, (1, case["cout"], 1, 1)).astype(np.int32)
    acc_scale = float(np.float32(si) * np.float32(sw))
    weight = w.reshape(g, case["cout"] // g, *w.shape[1:]) if g > 1 else w
    y = F.quantized.conv_bias_activation(
        _q(x, qint8(si)), _q(weight, qint8(sw)), _q(b, qint32(acc_scale)), qint8(so),
        case["stride"], case["pad"], case["dil"], g,
        nonlinear_mode="relu" if case["relu"] else "identity")
    acc = _conv_ref(x, w, case["stride"], case["pad"], case["dil"], g) + b
    assert y.dtype.metadata["mgb_dtype"]["scale"] == so
    np.testing.assert_array_equal(_storage(y), _requant(acc, acc_scale, so, case["relu"]))


@pytest.mark.parametrize("x, w, si, sw, so, want", [
    (-106, -111, 1.6421654224395752, 0.1951054483652115, 36.074378967285156, 105),
    (-37, -126, 1.6574851274490356, 1.8500088453292847, 129.36996459960938, 110)])
def test_requantization_rounds_ties_as_megengine(x, w, si, sw, so, want):
    """Products whose requantization lands within an ulp of a half: MegEngine 1.13's CPU kernel
    gives `want` (measured); the single multiplier acc_scale / out_scale rounds them the other
    way, and so would XLA if it folded the two float32 products into one."""
    acc_scale = float(np.float32(si) * np.float32(sw))
    args = (_q(np.full((1, 1, 1, 1), x, np.int8), qint8(si)),
            _q(np.full((1, 1, 1, 1), w, np.int8), qint8(sw)),
            _q(np.zeros((1, 1, 1, 1), np.int32), qint32(acc_scale)), qint8(so))
    eager = F.quantized.conv_bias_activation(*args)
    jitted = xla_trace(lambda: F.quantized.conv_bias_activation(*args))()
    assert _storage(eager).item() == _storage(jitted).item() == want


def test_convolution_mode_flips_and_quint8_input_shifts():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (1, 2, 5, 5)).astype(np.uint8)
    w = _ints(rng, (3, 2, 3, 3), -127, 127)
    y = F.quantized.conv_bias_activation(
        _q(x, quint8(0.1, 128)), _q(w, qint8(0.02)), None, qint8(0.05), padding=1,
        conv_mode="convolution")
    acc = _conv_ref(x.astype(np.int64) - 128, w[:, :, ::-1, ::-1], (1, 1), (1, 1), (1, 1), 1)
    np.testing.assert_array_equal(_storage(y), _requant(acc, np.float32(0.1) * np.float32(0.02),
                                                        0.05))


@given(stride=st.integers(1, 3), pad=st.integers(0, 2), out_pad=st.integers(0, 1),
       k=st.integers(1, 3), seed=st.integers(0, 99))
@examples(6)
def test_conv_transpose2d_against_numpy_integers(stride, pad, out_pad, k, seed):
    out_pad = min(out_pad, stride - 1)
    rng = np.random.default_rng(seed)
    x = _ints(rng, (2, 3, 4, 4))
    w = _ints(rng, (3, 2, k, k), -127, 127)  # (in, out, kh, kw)
    y = F.quantized.conv_transpose2d(_q(x, qint8(0.1)), _q(w, qint8(0.01)), None, qint8(0.2),
                                     stride, pad, out_pad)
    # the definition: every input pixel scatters its kernel times its value
    full = np.zeros((2, 2, (4 - 1) * stride + k + out_pad, (4 - 1) * stride + k + out_pad),
                    np.int64)
    for i in range(4):
        for j in range(4):
            full[:, :, i * stride:i * stride + k, j * stride:j * stride + k] += np.einsum(
                "ni,iohw->nohw", x[:, :, i, j].astype(np.int64), w.astype(np.int64))
    hi = full.shape[2] - pad
    acc = full[:, :, pad:hi, pad:hi]
    np.testing.assert_array_equal(_storage(y), _requant(acc, np.float32(0.1) * np.float32(0.01),
                                                        0.2))


def test_batch_conv_bias_activation_and_linear_against_numpy_integers():
    rng = np.random.default_rng(1)
    x, w = _ints(rng, (3, 4, 5, 1)), _ints(rng, (3, 6, 4, 1, 1), -127, 127)
    y = F.quantized.batch_conv_bias_activation(_q(x, qint8(0.1)), _q(w, qint8(0.02)),
                                               eg.zeros((1, 6, 1, 1)), qint8(0.03),
                                               nonlinear_mode="relu")
    acc = np.einsum("bin,boi->bon", x[..., 0].astype(np.int64), w[..., 0, 0].astype(np.int64))
    np.testing.assert_array_equal(_storage(y)[..., 0],
                                  _requant(acc, np.float32(0.1) * np.float32(0.02), 0.03, True))
    a, m = _ints(rng, (5, 7)), _ints(rng, (4, 7), -127, 127)
    bias = rng.integers(-300, 300, 4).astype(np.int32)
    acc_scale = float(np.float32(0.1) * np.float32(0.05))
    out = F.quantized.linear(_q(a, qint8(0.1)), _q(m, qint8(0.05)), _q(bias, qint32(acc_scale)),
                             qint8(0.07))
    ref = a.astype(np.int64) @ m.astype(np.int64).T + bias
    np.testing.assert_array_equal(_storage(out), _requant(ref, acc_scale, 0.07))
    raw = F.quantized.linear(_q(a, qint8(0.1)), _q(m, qint8(0.05)))  # dtype None: qint32
    np.testing.assert_array_equal(_storage(raw), a.astype(np.int64) @ m.astype(np.int64).T)
